# SPDX-License-Identifier: GPL-2.0-or-later
"""The reference side of hf_models.sh: PyTorch and transformers from PyPI.

  hf_models.py make ARCH DIR TOKENS      a small random ARCH (llama, gpt2)
                                         saved by save_pretrained, and a
                                         token file in llm.c's layout
  hf_models.py losses DIR TOKENS STEPS B T LR WD
      PyTorch's losses of that training, one a line
  hf_models.py check DIR TOKENS OUT STEPS B T LR WD [LOSSES...]
      trains DIR's model as dtrain does (sequential batches, AdamW of
      dtrain's defaults, constant LR, no clipping) and prints one line per
      figure: "NAME VALUE" (the shell compares), with
        first_loss  |dtrain - torch| of step 0's loss (OUT/hf_train.out)
        grad        the largest relative error of a tensor's gradient
                    (OUT/grads: dtrain's, by Hugging Face name)
        losses      the largest |dtrain - torch| over the STEPS losses
        load_issues missing + unexpected + mismatched keys of OUT/final
        final_loss  |dtrain - transformers| of OUT/final's loss on batch 0
        FILE        for each extra metrics FILE: the largest |loss - torch|
"""
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
V = 200


def make(arch, out, tokens):
    import transformers
    torch.manual_seed(1234)
    if arch == "llama":
        # GQA (4 heads, 2 kv heads), untied head, an MLP width that is not a
        # multiple of 64, Llama 3's RoPE frequency scaling
        cfg = transformers.LlamaConfig(
            vocab_size=V, hidden_size=64, intermediate_size=90, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.GPT2Config(vocab_size=V, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(cfg)
    model.save_pretrained(out)
    rng = np.random.default_rng(7)
    toks = rng.integers(0, V, 4000).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(toks)]
    with open(tokens, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())


def load(path):
    import transformers
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager", dtype=torch.float32, output_loading_info=True)
    model.eval()  # no dropout; gradients still flow
    return model, info


def batches(tokens, B, T):
    toks = torch.from_numpy(np.fromfile(tokens, dtype=np.uint16, offset=1024).astype(np.int64))
    nb = (len(toks) - 1) // (B * T)

    def batch(k):
        s = (k % nb) * B * T
        return toks[s:s + B * T].view(B, T), toks[s + 1:s + B * T + 1].view(B, T)
    return batch


def loss_of(model, x, y):
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def dtrain_out(path):
    losses, val = {}, None
    for line in open(path):
        w = line.split()
        if w[0] == "loss":
            losses[int(w[1])] = float(w[2])
        elif w[0] == "val":
            val = float(w[1])
    return [losses[k] for k in sorted(losses)], val


def metrics_losses(path):
    return [json.loads(line)["loss"] for line in open(path) if '"loss"' in line]


def reference(model_dir, tokens, steps, B, T, lr, wd):
    """PyTorch's training of the folder's model as dtrain trains it: the
    losses, and the first step's gradients by name."""
    model, _ = load(model_dir)
    batch = batches(tokens, B, T)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
    losses, grads = [], None
    for k in range(steps):
        x, y = batch(k)
        loss = loss_of(model, x, y)
        loss.backward()
        losses.append(loss.item())
        if k == 0:
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        opt.zero_grad()
    return losses, grads, batch


def check(model_dir, tokens, out, steps, B, T, lr, wd, extra):
    from safetensors import safe_open
    losses, grads, batch = reference(model_dir, tokens, steps, B, T, lr, wd)
    mine, val = dtrain_out(f"{out}/hf_train.out")
    print("first_loss", abs(mine[0] - losses[0]))
    worst = 0.0
    with safe_open(f"{out}/grads/model.safetensors", "pt") as f:
        names = set(f.keys())
        for n, g in grads.items():
            if n not in names:
                print("grad_missing", n)
                worst = float("inf")
                continue
            d = f.get_tensor(n)
            worst = max(worst, ((d - g).abs().max() / g.abs().max().clamp_min(1e-30)).item())
    print("grad", worst)
    print("losses", max(abs(a - b) for a, b in zip(mine, losses)) if len(mine) == steps else float("inf"))
    final, info = load(f"{out}/final")
    issues = sum(len(info.get(k, [])) for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    print("load_issues", issues)
    with torch.no_grad():
        x, y = batch(0)
        print("final_loss", abs(loss_of(final, x, y).item() - val) if val is not None else float("inf"))
    for path in extra:
        got = metrics_losses(path)
        print(path, max(abs(a - b) for a, b in zip(got, losses)) if len(got) == steps else float("inf"))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "losses":
        a = sys.argv[2:]
        for v in reference(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), float(a[5]), float(a[6]))[0]:
            print(repr(v))
    else:
        a = sys.argv[2:]
        check(a[0], a[1], a[2], int(a[3]), int(a[4]), int(a[5]), float(a[6]), float(a[7]), a[8:])
