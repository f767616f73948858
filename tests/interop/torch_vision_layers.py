#!/usr/bin/env python3
"""The PyTorch side of the vision-layer interop test (tests/interop/vision_layers_torch_test.cpp).

  torch_vision_layers.py OUT.safetensors SEED

In float64 on the CPU, for each case: random inputs (and a Conv1d's random weights), the
outputs, and the inputs' (and weights') gradients under a random output gradient. Writes
"<case>.<name>" tensors.
"""
import sys

import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
from torch_resnet import save_safetensors  # noqa: E402  (the same small writer)

torch.set_default_dtype(torch.float64)


def record(tensors, name, fn, inputs, gen):
    leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
    y = fn(**leaves)
    grad_out = torch.rand(y.shape, generator=gen) - 0.5
    y.backward(grad_out)
    for k, v in leaves.items():
        tensors[f"{name}.{k}"] = v.detach()
        tensors[f"{name}.grad_{k}"] = v.grad
    tensors[f"{name}.y"] = y.detach()
    tensors[f"{name}.grad_y"] = grad_out


def main(out, seed):
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.rand(*shape, generator=gen) - 0.5  # noqa: E731
    t = {}
    F = torch.nn.functional
    record(t, "pixel_shuffle", lambda x: F.pixel_shuffle(x, 3), {"x": rand(2, 18, 4, 5)}, gen)
    record(t, "pixel_shuffle_batch", lambda x: F.pixel_shuffle(x, 2), {"x": rand(2, 3, 8, 3, 2)}, gen)
    record(t, "pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 2), {"x": rand(2, 3, 6, 4)}, gen)
    record(t, "pixel_unshuffle_unbatched", lambda x: F.pixel_unshuffle(x, 3), {"x": rand(2, 9, 6)}, gen)
    conv = torch.nn.Conv1d(6, 4, 3, stride=2, padding=2, dilation=2, groups=2)
    record(t, "conv1d",
           lambda x, weight, bias: F.conv1d(x, weight, bias, stride=2, padding=2, dilation=2, groups=2),
           {"x": rand(3, 6, 17), "weight": conv.weight.detach(), "bias": conv.bias.detach()}, gen)
    record(t, "conv1d_unbatched", lambda x, weight: F.conv1d(x, weight),
           {"x": rand(5, 9), "weight": rand(7, 5, 4)}, gen)
    save_safetensors(out, t)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
