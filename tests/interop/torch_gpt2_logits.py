#!/usr/bin/env python3
"""The PyTorch side of the GPT-2 interop test (tests/interop/gpt_torch_test.cpp).

  torch_gpt2_logits.py OUT.safetensors SEED

Builds the hand-written GPT-2 of torch_gpt2_model.py (Hugging Face's keys) at a small size,
draws every parameter at random (non-zero biases and LayerNorm gains included), and writes one
safetensors file: "state.<key>" (the state dict, with lm_head.weight tied to wte and the
attn.bias / attn.masked_bias buffers older files carry), "tokens" (int64) and "logits" (float32),
from the written-out attention formula in float32.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from torch_gpt2_model import GPT2  # noqa: E402
from torch_resnet import save_safetensors  # noqa: E402  (the same small writer)

CONFIG = dict(vocab=97, context=24, layers=2, heads=4, width=32)


def main(out, seed):
    gen = torch.Generator().manual_seed(seed)
    model = GPT2(**CONFIG)
    model.init_nanogpt(gen)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # biases and LayerNorm parameters: random, not 0 and 1
                p.copy_((1.0 if ".ln_" in name and name.endswith(".weight") else 0.0)
                        + 0.1 * torch.randn(p.shape, generator=gen))
    tokens = torch.randint(0, CONFIG["vocab"], (3, 19), generator=gen)
    with torch.no_grad():
        logits = model(tokens)
    tensors = {f"state.{k}": v for k, v in model.state_dict().items()}
    tensors["tokens"] = tokens
    tensors["logits"] = logits
    save_safetensors(out, tensors)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
