#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""PyTorch on dtrain's placement, with nothing written by hand.

Run as every task of a step placed by the dtrain plugin (plain srun, or
srun --mpi=pmi2 dtrain-launch -- python torch_ddp.py):

  init_process_group(init_method="env://")   MASTER_ADDR/PORT, RANK, WORLD_SIZE
  a world all_reduce                         every rank adds its rank
  TP, PP and DP groups from DTRAIN_TP/PP/DP  rank = tp + T*(dp + D*pp)
  DistributedDataParallel over the DP group  a few SGD steps
  its own checkpoint (--ckpt DIR)            a requeued job resumes from it

Each rank prints one line "torch_ddp: rank=R ok=1 ..." at the end; rank 0
prints the loss of every step.  --kill-rank R --kill-step S: rank R kills
itself (SIGKILL) at step S in the job's first run (TORCHELASTIC_RESTART_COUNT
= 0, which dtrain sets from SLURM_RESTART_COUNT).  Uses gloo (CPU); with
GPUs pass --backend nccl: the task's GPU is cuda:LOCAL_RANK."""
import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def env_int(name):
    value = os.environ.get(name)
    if value is None:
        sys.exit(f"torch_ddp: {name} is not set: run under srun with a --dtrain-* option")
    return int(value)


def groups(T, P, D, rank):
    """This rank's TP, DP and PP groups (rank = t + T*(d + D*p)); every
    rank creates every group, in the same order."""
    def at(t, d, p):
        return t + T * (d + D * p)
    every = (
        [[at(t, d, p) for t in range(T)] for p in range(P) for d in range(D)],   # TP
        [[at(t, d, p) for d in range(D)] for p in range(P) for t in range(T)],   # DP
        [[at(t, d, p) for p in range(P)] for d in range(D) for t in range(T)],   # PP
    )
    mine = []
    for kind in every:
        for ranks in kind:
            g = dist.new_group(ranks)
            if rank in ranks:
                mine.append((g, ranks))
    return mine


def newest_complete(ckpt, world):
    """The newest step every rank wrote its file for, or -1."""
    best = -1
    if not os.path.isdir(ckpt):
        return best
    for name in os.listdir(ckpt):
        if name.startswith("step-"):
            step = int(name[5:])
            folder = os.path.join(ckpt, name)
            if step > best and all(os.path.exists(os.path.join(folder, f"rank-{r}.pt")) for r in range(world)):
                best = step
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--kill-rank", type=int, default=-1)
    ap.add_argument("--kill-step", type=int, default=-1)
    args = ap.parse_args()

    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    local_rank = env_int("LOCAL_RANK")
    T, P, D = env_int("DTRAIN_TP"), env_int("DTRAIN_PP"), env_int("DTRAIN_DP")
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", local_rank)   # dtrain's GPU for this task
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, init_method="env://")
    assert dist.get_rank() == rank and dist.get_world_size() == world == T * P * D

    # A world all_reduce: the sum of all ranks.
    x = torch.tensor([float(rank)], device=device)
    dist.all_reduce(x)
    world_ok = x.item() == world * (world - 1) / 2

    (tp_g, tp_ranks), (dp_g, dp_ranks), (pp_g, pp_ranks) = groups(T, P, D, rank)
    coords = (env_int("DTRAIN_TP_RANK"), env_int("DTRAIN_DP_RANK"), env_int("DTRAIN_PP_RANK"))
    groups_ok = (tp_ranks.index(rank), dp_ranks.index(rank), pp_ranks.index(rank)) == coords
    for g, ranks in ((tp_g, tp_ranks), (dp_g, dp_ranks), (pp_g, pp_ranks)):
        y = torch.tensor([1.0], device=device)
        dist.all_reduce(y, group=g)
        groups_ok &= y.item() == len(ranks)

    # DDP over the DP group: replicas of one (tp, pp) cell train together.
    torch.manual_seed(1234 + coords[0] + 100 * coords[2])
    model = DDP(torch.nn.Linear(16, 4).to(device), process_group=dp_g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = 0
    if args.ckpt:
        step = newest_complete(args.ckpt, world)
        if step >= 0:
            state = torch.load(os.path.join(args.ckpt, f"step-{step}", f"rank-{rank}.pt"))
            model.module.load_state_dict(state["model"])
            start = step + 1
            if rank == 0:
                print(f"torch_ddp: run {restart}: resumed from {args.ckpt}/step-{step}", flush=True)
    dist.barrier()
    loss = torch.tensor(0.0)
    for step in range(start, args.steps):
        if rank == args.kill_rank and step == args.kill_step and restart == 0:
            print(f"torch_ddp: rank {rank} kills itself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        g = torch.Generator().manual_seed(step * 1000 + rank)
        inp = torch.randn(8, 16, generator=g).to(device)
        target = torch.randn(8, 4, generator=g).to(device)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inp), target)
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)              # every step needs every rank
        if rank == 0:
            print(f"torch_ddp: step {step} loss {total.item() / world:.6f}", flush=True)
        if args.ckpt:
            folder = os.path.join(args.ckpt, f"step-{step}")
            os.makedirs(folder, exist_ok=True)
            tmp = os.path.join(folder, f".rank-{rank}.pt.tmp")
            torch.save({"model": model.module.state_dict()}, tmp)
            os.replace(tmp, os.path.join(folder, f"rank-{rank}.pt"))

    # The DP replicas must hold the same parameters.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in dp_ranks]
    dist.all_gather(gathered, flat, group=dp_g)
    dp_ok = all(torch.equal(gathered[0], t) for t in gathered)
    ok = world_ok and groups_ok and dp_ok
    print(f"torch_ddp: rank={rank} ok={int(ok)} world_sum={int(world_ok)} groups={int(groups_ok)} "
          f"dp_equal={int(dp_ok)} params={flat.double().sum().item():.9f} torch={torch.__version__} "
          f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
