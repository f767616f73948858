#!/usr/bin/env python3
"""nabla's GPT-2 loss curve against PyTorch's, from the same initial weights on the same batches.

  gpt2_curve.py --nabla build/cuda/examples/train_gpt --text /usr/share/games/fortunes \\
                [--steps 200] [--batch 8] [--seq 1024] [--device cuda] [--tiny] [--tolerance 0.02]

1. The text's bytes (the files of a directory in name order, fortune's *.dat and *.u8 left out,
   as train_gpt --text reads them) become a raw uint16 token file.
2. PyTorch builds the hand-written Hugging Face GPT-2 of tests/interop/torch_gpt2_model.py
   (GPT-2 124M with nanoGPT's vocabulary of 50304; --tiny: 2 layers, width 64, context 64),
   initializes it as nanoGPT does, writes that state dict to a safetensors file and trains it in
   float32 with TF32 off: AdamW (0.9, 0.95, eps 1e-8, weight decay 0.1 on matrices only), the
   learning rate of train_gpt (linear warm-up over 5% of the steps, then cosine to a tenth),
   gradient-norm clipping at 1.0, step i's rows from consecutive windows of the file.
3. train_gpt --init FILE --sequential --no-amp trains nabla's model the same way.
4. Both curves are printed side by side; the script fails if nabla's loss differs from
   PyTorch's by more than --tolerance (relative) at any step.

Runs on Debian's torch 1.13 (CPU; written-out attention) and PyTorch 2.11 (CUDA; SDPA).
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "interop"))
from torch_gpt2_model import GPT2  # noqa: E402
from torch_resnet import save_safetensors  # noqa: E402

TINY = dict(vocab=256, context=64, layers=2, heads=2, width=64)
FULL = dict(vocab=50304, context=1024, layers=12, heads=12, width=768)


def text_tokens(path):
    files = [path]
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if os.path.isfile(os.path.join(path, f)) and os.path.splitext(f)[1] not in (".dat", ".u8"))
    data = b"".join(open(f, "rb").read() for f in files)
    return torch.tensor(list(data), dtype=torch.int64)


def lr_at(i, steps, peak):  # train_gpt's set_lr
    warm = max(1, steps // 20)
    if i < warm:
        return peak * (i + 1) / warm
    progress = min(max((i - warm) / max(1, steps - warm), 0.0), 1.0)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_at(tokens, i, batch, seq):  # train_gpt --sequential
    room = tokens.numel() - seq - 1
    rows = [tokens[((i * batch + r) * seq) % room:][:seq + 1] for r in range(batch)]
    w = torch.stack(rows)
    return w[:, :-1], w[:, 1:]


def torch_curve(a, config, tokens, init_path):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = GPT2(**config, sdpa=hasattr(torch.nn.functional, "scaled_dot_product_attention"))
    model.init_nanogpt(torch.Generator().manual_seed(a.seed))
    save_safetensors(init_path, model.state_dict())
    model.to(a.device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for i in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(i, a.steps, a.lr)
        x, y = (t.to(a.device) for t in batch_at(tokens, i, a.batch, a.seq))
        loss = model.loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    return losses


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("--nabla", required=True, help="the train_gpt binary")
    p.add_argument("--text", required=True, help="a text file or a directory of them")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="a 2-layer model (for the CPU)")
    p.add_argument("--tolerance", type=float, default=0.02)
    p.add_argument("--out", default=None, help="a folder for the curves (default: a temporary one)")
    a = p.parse_args()
    config = dict(TINY if a.tiny else FULL)
    config["context"] = max(config["context"], a.seq)
    tokens = text_tokens(a.text)
    work = a.out or tempfile.mkdtemp(prefix="gpt2_curve_")
    os.makedirs(work, exist_ok=True)
    data, init = os.path.join(work, "tokens.bin"), os.path.join(work, "init.safetensors")
    tokens.to(torch.int16).numpy().tofile(data)  # bytes < 256: the uint16 bit pattern

    t0 = time.time()
    reference = torch_curve(a, config, tokens, init)
    t_torch = time.time() - t0
    nabla_log = os.path.join(work, "nabla_losses.txt")
    command = [a.nabla, "--data", data, "--init", init, "--sequential", "--no-amp", "--log", nabla_log,
               "--steps", str(a.steps), "--batch", str(a.batch), "--seq", str(a.seq), "--lr", str(a.lr),
               "--layers", str(config["layers"]), "--heads", str(config["heads"]), "--context", str(config["context"]),
               "--width", str(config["width"]), "--vocab", str(config["vocab"])]
    t0 = time.time()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    t_nabla = time.time() - t0
    ours = [float(line) for line in open(nabla_log)]
    if len(ours) != len(reference):
        sys.exit(f"train_gpt logged {len(ours)} losses for {len(reference)} steps")
    gaps = [abs(n - r) / abs(r) for n, r in zip(ours, reference)]
    every = max(1, a.steps // 10)
    print(f"{'step':>5} {'pytorch':>10} {'nabla':>10} {'gap':>8}")
    for i in list(range(0, a.steps, every)) + [a.steps - 1]:
        print(f"{i:5d} {reference[i]:10.4f} {ours[i]:10.4f} {100 * gaps[i]:7.3f}%")
    worst = max(range(a.steps), key=lambda i: gaps[i])
    print(f"torch {torch.__version__} on {a.device}: {t_torch:.1f} s; nabla: {t_nabla:.1f} s; "
          f"largest gap {100 * gaps[worst]:.3f}% at step {worst} (allowed {100 * a.tolerance:.1f}%)")
    with open(os.path.join(work, "torch_losses.txt"), "w") as f:
        f.writelines(f"{x:.9g}\n" for x in reference)
    if gaps[worst] > a.tolerance:
        sys.exit(1)


if __name__ == "__main__":
    main()
