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
    deconv = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    record(t, "conv_transpose2d",
           lambda x, weight, bias: F.conv_transpose2d(x, weight, bias, stride=2, padding=1, output_padding=1,
                                                      groups=2),
           {"x": rand(2, 4, 5, 4), "weight": deconv.weight.detach(), "bias": deconv.bias.detach()}, gen)
    record(t, "conv_transpose2d_dilated",
           lambda x, weight: F.conv_transpose2d(x, weight, stride=(3, 2), padding=(2, 0), output_padding=(2, 1),
                                                dilation=(1, 2)),
           {"x": rand(2, 3, 4, 5), "weight": rand(3, 5, 4, 2)}, gen)
    gn = torch.nn.GroupNorm(3, 12)
    with torch.no_grad():
        gn.weight.copy_(rand(12) + 1)
        gn.bias.copy_(rand(12))
    record(t, "group_norm", lambda x, weight, bias: F.group_norm(x, 3, weight, bias, 1e-5),
           {"x": rand(2, 12, 5, 3) * 4 + 1, "weight": gn.weight.detach(), "bias": gn.bias.detach()}, gen)
    record(t, "group_norm_3d", lambda x: F.group_norm(x, 2, eps=1e-3), {"x": rand(3, 4, 7)}, gen)
    # interpolate: every mode, size and scale factor, align_corners both ways, up and down.
    cases = {
        "nearest_size": dict(size=(7, 5), mode="nearest"),
        "nearest_scale": dict(scale_factor=2.5, mode="nearest"),
        "nearest_down": dict(size=(3, 2), mode="nearest"),
        "bilinear_size": dict(size=(9, 4), mode="bilinear", align_corners=False),
        "bilinear_corners": dict(size=(9, 7), mode="bilinear", align_corners=True),
        "bilinear_scale": dict(scale_factor=1.7, mode="bilinear", align_corners=False),
        "bilinear_down": dict(size=(2, 3), mode="bilinear", align_corners=False),
        "bicubic_size": dict(size=(8, 11), mode="bicubic", align_corners=False),
        "bicubic_corners": dict(size=(8, 3), mode="bicubic", align_corners=True),
        "bicubic_scale": dict(scale_factor=2.0, mode="bicubic", align_corners=False),
    }
    for name, kwargs in cases.items():
        record(t, "interpolate_" + name, lambda x, kw=kwargs: F.interpolate(x, **kw), {"x": rand(2, 3, 5, 4)}, gen)
    record(t, "adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (5, 3)), {"x": rand(2, 3, 11, 7)}, gen)
    record(t, "adaptive_max_pool2d_global", lambda x: F.adaptive_max_pool2d(x, 1), {"x": rand(2, 4, 6, 5)}, gen)
    import torchvision
    se = torchvision.ops.SqueezeExcitation(8, 4, scale_activation=torch.nn.Hardsigmoid)
    record(t, "squeeze_excitation",
           lambda x, fc1_w, fc1_b, fc2_w, fc2_b: x * F.hardsigmoid(
               F.conv2d(F.relu(F.conv2d(F.adaptive_avg_pool2d(x, 1), fc1_w, fc1_b)), fc2_w, fc2_b)),
           {"x": rand(2, 8, 5, 4), "fc1_w": se.fc1.weight.detach(), "fc1_b": se.fc1.bias.detach(),
            "fc2_w": se.fc2.weight.detach(), "fc2_b": se.fc2.bias.detach()}, gen)
    t["squeeze_excitation.module_y"] = se(t["squeeze_excitation.x"]).detach()
    save_safetensors(out, t)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
