#!/usr/bin/env python3
"""The PyTorch side of the attention interop test (tests/interop/attention_torch_test.cpp).

  torch_attention.py OUT.safetensors SEED

Builds torch.nn.MultiheadAttention modules with random weights (and random non-zero biases), runs
each case's forward with its masks in float64, backpropagates a random output gradient, and
writes one safetensors file: per case "<case>.state.<param>" (the module's state dict, PyTorch's
names), "<case>.in.query|key|value|grad", "<case>.mask.attn" (float64 additive or uint8 with 1 =
hidden), "<case>.mask.padding" (uint8, 1 = padding) and "<case>.out", "<case>.grad.<input or
param>". The C++ test loads each state dict strictly into nabla's module and compares.
"""
import sys

import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
from torch_resnet import save_safetensors  # noqa: E402  (the same small writer)

torch.set_default_dtype(torch.float64)

E, H, L, S, N = 16, 4, 5, 7, 3

# name: (batch_first, self attention, causal attn_mask, boolean attn mask, additive attn mask, padding, bias)
CASES = {
    "self_causal": (True, True, True, False, False, False, True),
    "cross_padding": (False, False, False, False, False, True, True),
    "cross_bool_mask": (True, False, False, True, False, True, False),
    "self_additive": (False, True, False, False, True, False, True),
}


def main(out, seed):
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, (batch_first, self_attn, causal, bool_mask, add_mask, padding, bias) in CASES.items():
        m = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first)
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.rand(p.shape, generator=gen) - 0.5)
        for k, v in m.state_dict().items():
            tensors[f"{name}.state.{k}"] = v
        lq = L if not self_attn else S
        shape = (lambda t: (N, t, E)) if batch_first else (lambda t: (t, N, E))
        q = torch.randn(shape(lq), generator=gen, requires_grad=True)
        if self_attn:
            k = v = q
        else:
            k = torch.randn(shape(S), generator=gen, requires_grad=True)
            v = torch.randn(shape(S), generator=gen, requires_grad=True)
        attn_mask, pad = None, None
        if causal:
            attn_mask = torch.triu(torch.ones(lq, S, dtype=torch.bool), diagonal=1)  # nabla passes causal=true
        if bool_mask:
            attn_mask = torch.rand(lq, S, generator=gen) < 0.3
            attn_mask[:, 0] = False  # never a fully hidden row
            tensors[f"{name}.mask.attn"] = attn_mask.to(torch.uint8)
        if add_mask:
            attn_mask = torch.randn(lq, S, generator=gen)
            tensors[f"{name}.mask.attn"] = attn_mask
        if padding:
            pad = torch.zeros(N, S, dtype=torch.bool)
            pad[1, -2:] = True
            pad[2, -1] = True
            tensors[f"{name}.mask.padding"] = pad.to(torch.uint8)
        y, _ = m(q, k, v, key_padding_mask=pad, attn_mask=attn_mask, need_weights=False)
        g = torch.randn(y.shape, generator=gen)
        y.backward(g)
        tensors[f"{name}.in.query"] = q.detach()
        if not self_attn:
            tensors[f"{name}.in.key"] = k.detach()
            tensors[f"{name}.in.value"] = v.detach()
            tensors[f"{name}.grad.key"] = k.grad
            tensors[f"{name}.grad.value"] = v.grad
        tensors[f"{name}.in.grad"] = g
        tensors[f"{name}.out"] = y.detach()
        tensors[f"{name}.grad.query"] = q.grad
        for k_, p in m.named_parameters():
            tensors[f"{name}.grad.{k_}"] = p.grad
    save_safetensors(out, tensors)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
