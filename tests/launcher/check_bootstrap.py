#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Checks of dtrain-launch's bootstrap for tests/launcher/bootstrap.sh.

  check_bootstrap.py report T P D K PLACED_BY BACKEND FILE...
      The FILEs hold the `dtrain-launch --json` lines of every task of a step
      of T*P*D tasks, K per node (one file per task, srun -o FILE.%t: srun
      cuts lines longer than 1 KiB and interleaves them with other tasks').
      Prints one line per failed check, exit 1 if any.
  check_bootstrap.py child
      Run as dtrain-launch's PROGRAM: prints this task's DTRAIN_* / RANK /
      PMI_* variables and, for each DTRAIN_COMM_*_FD, whether it is a
      listening socket on the id's port, as one JSON line.  Then WORLD
      proves its id works across tasks: the leader accepts size-1
      connections on the inherited socket and reads the secret each member
      sends; members connect to the address in the id.  (Only WORLD's id
      travels through PMI2: a member's id of another group is empty, its
      leader sends it over WORLD when the communicators are built.)
  check_bootstrap.py children FILE... T P D
      Checks the `child` lines (one file per task, srun -o FILE.%t).
"""
import json
import os
import socket
import sys

KINDS = ["world", "tp", "pp", "dp", "pp_next", "pp_prev"]


def coords(rank, T, D):
    return rank % T, (rank // T) % D, rank // (T * D)


def expected_group(kind, rank, T, P, D):
    """(key, first, stride, size) of rank's group, or None: the contract of
    runtime/comm/bootstrap/dtrain_bootstrap.h written out independently."""
    tp, dp, pp = coords(rank, T, D)
    if kind == "world":
        return ("dt.w", 0, 1, T * P * D)
    if kind == "tp":
        return ("dt.tp.%d" % (dp + D * pp), rank - tp, 1, T)
    if kind == "pp":
        return ("dt.pp.%d" % (tp + T * dp), tp + T * dp, T * D, P)
    if kind == "dp":
        return ("dt.dp.%d" % (tp + T * pp), tp + T * D * pp, T, D)
    if kind == "pp_next":
        return ("dt.pn.%d" % rank, rank, T * D, 2) if pp + 1 < P else None
    if kind == "pp_prev":
        return ("dt.pn.%d" % (rank - T * D), rank - T * D, T * D, 2) if pp > 0 else None
    raise ValueError(kind)


def read_lines(paths, rank_field, errors):
    """The JSON lines of the files, by rank; other lines are messages."""
    by_rank = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    r = json.loads(line)
                    if r[rank_field] in by_rank:
                        errors.append("rank %d printed twice" % r[rank_field])
                    by_rank[r[rank_field]] = r
    return by_rank


def check_report(paths, T, P, D, K, placed_by, backend):
    errors = []
    world = T * P * D
    tasks = read_lines(paths, "rank", errors)
    if sorted(tasks) != list(range(world)):
        errors.append("ranks %s, expected 0..%d" % (sorted(tasks), world - 1))
        return errors
    ids_by_key = {}
    leaders_by_key = {}
    for rank, r in sorted(tasks.items()):
        tp, dp, pp = coords(rank, T, D)
        want = {"size": world, "T": T, "P": P, "D": D, "tp_rank": tp, "dp_rank": dp, "pp_rank": pp,
                "node": rank // K, "local_rank": rank % K, "local_size": K, "fences": 1,
                "placed_by": placed_by, "backend": backend}
        for name, value in want.items():
            if r.get(name) != value:
                errors.append("rank %d: %s=%r, expected %r" % (rank, name, r.get(name), value))
        for kind in KINDS:
            exp = expected_group(kind, rank, T, P, D)
            got = r["groups"].get(kind)
            if exp is None:
                if got is not None:
                    errors.append("rank %d has a %s group, expected none" % (rank, kind))
                continue
            if got is None:
                errors.append("rank %d: no %s group" % (rank, kind))
                continue
            key, first, stride, size = exp
            if (got["key"], got["first"], got["stride"], got["size"]) != exp:
                errors.append("rank %d %s: %s, expected %s" % (rank, kind, got, exp))
            if first + got["rank"] * stride != rank:
                errors.append("rank %d %s: group rank %d is not this task" % (rank, kind, got["rank"]))
            # WORLD's id reaches every task through PMI2; another group's id
            # only its leader holds (none for the groups nccl splits off WORLD)
            split = backend == "nccl" and kind in ("tp", "pp", "dp")
            if kind == "world" or (got["rank"] == 0 and not split):
                if not got["id"].startswith(backend + ":") or len(got["id"]) >= 1024:
                    errors.append("rank %d %s: id %r is not a %s id under 1024 bytes" % (rank, kind, got["id"], backend))
                ids_by_key.setdefault(key, set()).add(got["id"])
            elif got["id"] != "":
                errors.append("rank %d %s: id %r, expected none (%s)" % (rank, kind, got["id"],
                              "split off WORLD" if split else "it comes over WORLD"))
            if kind == "world" or got["rank"] == 0:
                leaders_by_key.setdefault(key, set()).add(rank)
    for key, ids in ids_by_key.items():
        if len(ids) != 1:
            errors.append("group %s: its members hold %d different ids" % (key, len(ids)))
    all_ids = [next(iter(ids)) for ids in ids_by_key.values()]
    if len(set(all_ids)) != len(all_ids):
        errors.append("two groups share an id")
    if len(ids_by_key.get("dt.w", ())) != 1 or len(leaders_by_key.get("dt.w", ())) != world:
        errors.append("dt.w: %d tasks hold %d ids" % (len(leaders_by_key.get("dt.w", ())), len(ids_by_key.get("dt.w", ()))))
    expected_groups = 1 + P * D + T * D + T * P + T * D * (P - 1)
    if len(leaders_by_key) != expected_groups:
        errors.append("%d groups seen, expected %d" % (len(leaders_by_key), expected_groups))
    expected_ids = 1 + (T * D * (P - 1) if backend == "nccl" else expected_groups - 1)
    if len(ids_by_key) != expected_ids:
        errors.append("%d groups with an id, expected %d" % (len(ids_by_key), expected_ids))
    return errors


def fd_listens_on(fd, port):
    try:
        s = socket.socket(fileno=fd)
    except OSError as e:
        return "fd %d: %s" % (fd, e)
    try:
        if not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            return "fd %d is not listening" % fd
        if s.getsockname()[1] != port:
            return "fd %d listens on port %d, the id says %d" % (fd, s.getsockname()[1], port)
        return "ok"
    finally:
        s.detach()


def child():
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("DTRAIN_", "PMI_")) or k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    out = {"procid": int(os.environ.get("SLURM_PROCID", "-1")), "env": env, "fds": {}, "world_connect": "not tried"}
    for kind in ["WORLD", "TP", "PP", "DP", "PP_NEXT", "PP_PREV"]:
        fd = env.get("DTRAIN_COMM_%s_FD" % kind)
        if fd is not None:
            port = int(env["DTRAIN_COMM_%s_ID" % kind].split(":")[2])
            out["fds"][kind] = fd_listens_on(int(fd), port)
    # WORLD uses its id for real: members connect and send the secret.
    world_id = env.get("DTRAIN_COMM_WORLD_ID", "")
    if world_id.startswith("cpu:"):
        _, addr, port, secret = world_id.split(":")
        size, my_rank = int(env["DTRAIN_COMM_WORLD_SIZE"]), int(env["DTRAIN_COMM_WORLD_RANK"])
        try:
            if my_rank == 0:
                listener = socket.socket(fileno=int(env["DTRAIN_COMM_WORLD_FD"]))
                listener.settimeout(30)
                got = []
                for _ in range(size - 1):
                    conn, _ = listener.accept()
                    with conn:
                        conn.settimeout(30)
                        got.append(conn.recv(64).decode())
                out["world_connect"] = "ok" if got == [secret] * (size - 1) else "wrong secrets %r" % got
            else:
                with socket.create_connection((addr, int(port)), timeout=30) as c:
                    c.sendall(secret.encode())
                out["world_connect"] = "ok"
        except OSError as e:
            out["world_connect"] = "error: %s" % e
    print(json.dumps(out, sort_keys=True))


def check_children(paths, T, P, D):
    errors = []
    world = T * P * D
    by_rank = read_lines(paths, "procid", errors)
    if sorted(by_rank) != list(range(world)):
        return ["children of ranks %s, expected 0..%d" % (sorted(by_rank), world - 1)]
    world_ids = set()
    for rank, c in sorted(by_rank.items()):
        env = c["env"]
        tp, dp, pp = coords(rank, T, D)
        want = {"RANK": str(rank), "WORLD_SIZE": str(world), "DTRAIN_RANK": str(rank), "DTRAIN_TP": str(T),
                "DTRAIN_PP": str(P), "DTRAIN_DP": str(D), "DTRAIN_TP_RANK": str(tp), "DTRAIN_DP_RANK": str(dp),
                "DTRAIN_PP_RANK": str(pp), "DTRAIN_COMM_BACKEND": "cpu"}
        for name, value in want.items():
            if env.get(name) != value:
                errors.append("rank %d: %s=%r, expected %r" % (rank, name, env.get(name), value))
        for kind in KINDS:
            exp = expected_group(kind, rank, T, P, D)
            var = "DTRAIN_COMM_%s_" % kind.upper()
            if exp is None:
                if var + "ID" in env:
                    errors.append("rank %d: %sID set for a group it does not have" % (rank, var))
                continue
            key, first, stride, size = exp
            got = tuple(env.get(var + f) for f in ("FIRST", "STRIDE", "SIZE", "RANK"))
            if got != (str(first), str(stride), str(size), str((rank - first) // stride)) or var + "ID" not in env:
                errors.append("rank %d: %s{FIRST,STRIDE,SIZE,RANK} = %s" % (rank, var, got))
            leader = rank == first
            if leader != (var + "FD" in env):
                errors.append("rank %d: %sFD %s" % (rank, var, "missing" if leader else "set on a member"))
            if kind != "world" and (env.get(var + "ID") != "") == (not leader):
                errors.append("rank %d: %sID=%r (a leader's id, a member's empty: it comes over WORLD)"
                              % (rank, var, env.get(var + "ID")))
        world_ids.add(env.get("DTRAIN_COMM_WORLD_ID"))
        if [k for k in env if k.startswith("PMI_")]:
            errors.append("rank %d: PMI_* variables reached the child" % rank)
        for kind, state in c["fds"].items():
            if state != "ok":
                errors.append("rank %d: DTRAIN_COMM_%s_FD: %s" % (rank, kind, state))
        if c["world_connect"] != "ok":
            errors.append("rank %d: WORLD connection: %s" % (rank, c["world_connect"]))
    if len(world_ids) != 1:
        errors.append("children see %d WORLD ids" % len(world_ids))
    return errors


def main(argv):
    if len(argv) >= 2 and argv[1] == "child":
        child()
        return 0
    if len(argv) >= 9 and argv[1] == "report":
        errors = check_report(argv[8:], *map(int, argv[2:6]), argv[6], argv[7])
    elif len(argv) >= 6 and argv[1] == "children":
        errors = check_children(argv[2:-3], *map(int, argv[-3:]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for e in errors[:20]:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
