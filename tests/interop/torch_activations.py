#!/usr/bin/env python3
"""The PyTorch side of the activation interop test (tests/interop/activations_torch_test.cpp).

  torch_activations.py OUT.safetensors SEED

For each activation module with its PyTorch parameters, in float64 on the CPU: a random input
spread over every branch of the function (both sides of 0, of -3 and 3, of softplus's threshold),
the module's output, and the input's gradient under a random output gradient. Writes
"<case>.x", "<case>.grad_out", "<case>.y" and "<case>.grad_x".
"""
import sys

import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
from torch_resnet import save_safetensors  # noqa: E402  (the same small writer)

torch.set_default_dtype(torch.float64)

CASES = {
    "leaky_relu": torch.nn.LeakyReLU(0.2),
    "leaky_relu_default": torch.nn.LeakyReLU(),
    "elu": torch.nn.ELU(1.3),
    "hardswish": torch.nn.Hardswish(),
    "hardsigmoid": torch.nn.Hardsigmoid(),
    "softplus": torch.nn.Softplus(beta=2.0, threshold=3.0),
    "softplus_default": torch.nn.Softplus(),
    "mish": torch.nn.Mish(),
}


def main(out, seed):
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, module in CASES.items():
        x = ((torch.rand(4, 3, 5, 5, generator=gen) - 0.5) * 16).requires_grad_()  # [-8, 8)
        grad_out = torch.rand(x.shape, generator=gen) - 0.5
        y = module(x)
        y.backward(grad_out)
        tensors[f"{name}.x"] = x.detach()
        tensors[f"{name}.grad_out"] = grad_out
        tensors[f"{name}.y"] = y.detach()
        tensors[f"{name}.grad_x"] = x.grad
    save_safetensors(out, tensors)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
