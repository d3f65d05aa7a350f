# SPDX-License-Identifier: GPL-2.0-or-later
"""The reference side of lora.sh: peft, transformers and PyTorch from PyPI.

  lora.py make DIR           for ARCH in llama, gpt2: a small random base in
                             DIR/ARCH/base (hf_models.py's), DIR/ARCH/tokens.bin,
                             and peft's adapter initialisation with a non-zero
                             B in DIR/ARCH/adapter0 (rank 4, alpha 8, every linear);
                             GPT-2: DIR/gpt2/adapter_other, of a narrower GPT-2
  lora.py check DIR STEPS B T LR WD
      for each ARCH, trains DIR/ARCH/base + adapter0 with peft and
      torch.optim.AdamW (the adapters only) as dtrain does and prints
      "ARCH NAME VALUE" lines (DIR below is DIR/ARCH):
        losses      the largest relative |dtrain - peft| over the STEPS losses
                    (DIR/metrics.jsonl)
        base        1 when DIR/base_out (dtrain's --save-hf without merging)
                    holds the base's tensors bit for bit, else 0
        adapters    the largest |dtrain - peft| of a trained adapter tensor
                    (DIR/adapter1, dtrain's --save-lora, loaded by peft)
        val         |peft with dtrain's adapters - dtrain| of the loss on
                    batch 0 (dtrain's validation after the last step)
        logits      the largest |peft with dtrain's adapters - transformers
                    with DIR/merged| of the logits of batch 0 (--merge-lora)
        load_issues missing + unexpected keys of DIR/merged
  lora.py layouts DIR STEPS B T LR WD SNAP LAYOUT...
      for each ARCH, the same peft training, and for each LAYOUT (e.g. 212)
      the lines "ARCH LAYOUT losses X" (the largest relative |dtrain - peft|
      of DIR/ARCH/LAYOUT.losses, lora_run's "loss STEP VALUE" lines) and
      "ARCH LAYOUT adapters Y" (the largest |dtrain - peft| of a trained
      adapter tensor of DIR/ARCH/LAYOUT.lora, that layout's --save-lora, when
      there, against peft's after SNAP steps); losses compared step by step (peft trains STEPS, a layout may
      hold fewer or later ones); LAYOUT "resume": DIR/ARCH/resume.jsonl,
      dtrain-train's metrics
"""
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import hf_models  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
RANK, ALPHA = 4, 8
TARGETS = {"llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
           "gpt2": ["c_attn", "c_proj", "c_fc"]}


def peft_model(base, adapter=None, arch=None):
    import peft
    model, _ = hf_models.load(base)
    if adapter is not None:
        return peft.PeftModel.from_pretrained(model, adapter, is_trainable=True)
    cfg = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS[arch],
                          task_type="CAUSAL_LM", fan_in_fan_out=arch == "gpt2")
    return peft.get_peft_model(model, cfg)


def make(arch, d):
    hf_models.make(arch, f"{d}/base", f"{d}/tokens.bin")
    torch.manual_seed(99)
    model = peft_model(f"{d}/base", arch=arch)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:  # peft starts B at 0: a test of B's gradient path alone
                p.copy_(torch.randn_like(p) * 0.05)
    model.save_pretrained(f"{d}/adapter0")
    if arch == "gpt2":  # an adapter of another base: a narrower GPT-2 (--init-lora refuses it)
        import peft
        import transformers
        other = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=hf_models.V, n_positions=64,
                                                                     n_embd=32, n_layer=2, n_head=4))
        cfg = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS[arch],
                              task_type="CAUSAL_LM", fan_in_fan_out=True)
        peft.get_peft_model(other, cfg).save_pretrained(f"{d}/adapter_other")


def tensors(path):
    from safetensors import safe_open
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def peft_train(d, steps, B, T, lr, wd, snap=None):
    """peft + torch.optim.AdamW on the adapters: the model and its losses
    (and the trained adapters after snap steps, by name)."""
    model = peft_model(f"{d}/base", f"{d}/adapter0")
    model.eval()
    batch = hf_models.batches(f"{d}/tokens.bin", B, T)
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
    losses, snapshot = [], None
    for k in range(steps):
        x, y = batch(k)
        loss = hf_models.loss_of(model, x, y)
        loss.backward()
        losses.append(loss.item())
        opt.step()
        opt.zero_grad()
        if k + 1 == snap:
            snapshot = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return model, losses, batch, snapshot


def worst_rel(got, want):
    if len(got) != len(want):
        return float("inf")
    return max(abs(a - b) / abs(b) for a, b in zip(got, want))


def adapter_diff(ref, d, folder):
    """The largest |folder's adapter - ref's| over the trained tensors (ref: by name)."""
    ours = peft_model(f"{d}/base", f"{d}/{folder}")
    worst, seen = 0.0, 0
    for n, p in ours.named_parameters():
        if n in ref:
            worst = max(worst, (p - ref[n]).abs().max().item())
            seen += 1
    return worst if seen == len(ref) and seen > 0 else float("inf"), ours


def layouts(arch, d, steps, B, T, lr, wd, names, snap):
    import os
    model, losses, _, snapshot = peft_train(d, steps, B, T, lr, wd, snap)
    for name in names:
        if name == "resume":
            got = {m["step"]: m["loss"] for m in map(json.loads, open(f"{d}/resume.jsonl")) if "loss" in m}
        else:
            got = {int(w[1]): float(w[2]) for w in map(str.split, open(f"{d}/{name}.losses")) if w[0] == "loss"}
        rel = max((abs(v - losses[k]) / abs(losses[k]) for k, v in got.items()), default=float("inf"))
        sys.stdout.write(f"{arch} {name} losses {rel if len(got) > 0 else float('inf')}\n")
        if os.path.isdir(f"{d}/{name}.lora"):
            sys.stdout.write(f"{arch} {name} adapters {adapter_diff(snapshot, d, name + '.lora')[0]}\n")


def check(arch, d, steps, B, T, lr, wd):
    def print(name, value):
        sys.stdout.write(f"{arch} {name} {value}\n")
    model, losses, batch, _ = peft_train(d, steps, B, T, lr, wd)
    mine = [json.loads(line) for line in open(f"{d}/metrics.jsonl")]
    print("losses", worst_rel([m["loss"] for m in mine if "loss" in m], losses))
    base = tensors(f"{d}/base/model.safetensors")
    out = tensors(f"{d}/base_out/model.safetensors")
    same = all(k in out and torch.equal(base[k], out[k]) for k in base if k != "lm_head.weight" or k in out)
    print("base", int(same))
    ref = {n: p for n, p in model.named_parameters() if p.requires_grad}
    worst, ours = adapter_diff(ref, d, "adapter1")
    ours.eval()
    print("adapters", worst)
    x, y = batch(0)
    with torch.no_grad():
        val = [m["val_loss"] for m in mine if "val_loss" in m][-1]
        print("val", abs(hf_models.loss_of(ours, x, y).item() - val))
        merged, info = hf_models.load(f"{d}/merged")
        print("logits", (ours(input_ids=x).logits - merged(input_ids=x).logits).abs().max().item())
        print("load_issues", len(info["missing_keys"]) + len(info["unexpected_keys"]))


if __name__ == "__main__":
    for a in ("llama", "gpt2"):
        if sys.argv[1] == "make":
            make(a, f"{sys.argv[2]}/{a}")
        elif sys.argv[1] == "layouts":
            layouts(a, f"{sys.argv[2]}/{a}", int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                    float(sys.argv[6]), float(sys.argv[7]), sys.argv[9:], int(sys.argv[8]))
        else:
            check(a, f"{sys.argv[2]}/{a}", int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                  float(sys.argv[6]), float(sys.argv[7]))
