#!/usr/bin/env python3
"""The PyTorch side of the MobileNetV2 interop test (tests/interop/mobilenet_torch_test.cpp).

  torch_mobilenet.py OUT.safetensors SEED ARCH

torchvision's ARCH (mobilenet_v2, mobilenet_v3_large, mobilenet_v3_small or efficientnet_b0;
dropout and stochastic depth 0, so a training step is deterministic) with every batch
norm moved off its defaults, in float64: its state dict ("state.<name>"), an input, the eval
logits, and from one train-mode forward + cross-entropy backward the loss, every parameter's
gradient ("grad.<name>") and the updated running statistics ("train.<name>").
"""
import sys

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, __import__("os").path.dirname(__file__))
from torch_resnet import save_safetensors  # noqa: E402  (the same small writer)


def main(out, seed, arch):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    if arch == "vit_tiny":
        # torchvision's VisionTransformer at a size a float64 CPU test can run; every parameter
        # drawn afresh (its head and class token start at zero).
        model = torchvision.models.vision_transformer.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10)
        with torch.no_grad():
            for name, p in model.named_parameters():
                base = 1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith(
                    "ln.weight") else 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen))
    elif arch.startswith("efficientnet"):
        # Its dropout is fixed at build time: set to 0 below, with the stochastic depth.
        model = getattr(torchvision.models, arch)(weights=None, num_classes=10, stochastic_depth_prob=0.0)
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    else:
        model = getattr(torchvision.models, arch)(weights=None, num_classes=10, dropout=0.0)
    model = model.double()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=gen))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=gen))
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))
        for fc in getattr(model, "classifier", []):
            if isinstance(fc, torch.nn.Linear):
                fc.weight.copy_(0.05 * torch.randn(fc.weight.shape, generator=gen))
                fc.bias.copy_(0.05 * torch.randn(fc.bias.shape, generator=gen))
    t = {"state." + k: v.clone() for k, v in model.state_dict().items()}
    side = 32 if arch == "vit_tiny" else 48
    x = torch.randn(2, 3, side, side, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 10, (2,), generator=gen)
    model.eval()
    with torch.no_grad():
        t["eval.output"] = model(x)
    model.train()
    loss = F.cross_entropy(model(x), labels)
    loss.backward()
    t["input"], t["labels"], t["train.loss"] = x, labels, loss.detach()
    for k, p in model.named_parameters():
        t["grad." + k] = p.grad
    for k, b in model.named_buffers():
        t["train." + k] = b.clone()
    save_safetensors(out, t)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
