"""PyTorch twin of bench/cuda/depthwise_shapes.cpp: every depthwise convolution of MobileNetV2
and EfficientNet-B0, float16 channels_last, torch.backends.cudnn.benchmark = True, forward +
backward (input and weight require grad, no bias), median of CUDA-event-timed runs after 3
warm-ups, same table.

    python3 bench/torch_depthwise_shapes.py [batch, default 256] [runs, default 20]
"""
import sys

import torch
import torch.nn.functional as F

from torch_conv_shapes import median_ms

# Same table, same order as bench/cuda/depthwise_shapes.cpp: net, C, H, k, stride, uses.
SHAPES = [
    ("mobilenet_v2", 32, 112, 3, 1, 1), ("mobilenet_v2", 96, 112, 3, 2, 1),
    ("mobilenet_v2", 144, 56, 3, 1, 1), ("mobilenet_v2", 144, 56, 3, 2, 1),
    ("mobilenet_v2", 192, 28, 3, 1, 2), ("mobilenet_v2", 192, 28, 3, 2, 1),
    ("mobilenet_v2", 384, 14, 3, 1, 4), ("mobilenet_v2", 576, 14, 3, 1, 2),
    ("mobilenet_v2", 576, 14, 3, 2, 1), ("mobilenet_v2", 960, 7, 3, 1, 3),
    ("efficientnet_b0", 32, 112, 3, 1, 1), ("efficientnet_b0", 96, 112, 3, 2, 1),
    ("efficientnet_b0", 144, 56, 3, 1, 1), ("efficientnet_b0", 144, 56, 5, 2, 1),
    ("efficientnet_b0", 240, 28, 5, 1, 1), ("efficientnet_b0", 240, 28, 3, 2, 1),
    ("efficientnet_b0", 480, 14, 3, 1, 2), ("efficientnet_b0", 480, 14, 5, 1, 1),
    ("efficientnet_b0", 672, 14, 5, 1, 2), ("efficientnet_b0", 672, 14, 5, 2, 1),
    ("efficientnet_b0", 1152, 7, 5, 1, 3), ("efficientnet_b0", 1152, 7, 3, 1, 1),
]


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    runs = max(10, int(sys.argv[2])) if len(sys.argv) > 2 else 20
    torch.backends.cudnn.benchmark = True
    cl = torch.channels_last
    print(f"torch {torch.__version__} depthwise conv2d, batch {batch}, float16 channels_last, fwd+bwd, "
          f"median of {runs} runs")
    print(f"{'net':<16} {'shape':<18} {'uses':>4} {'ms':>9}")
    totals = {}
    for net, c, h, k, stride, count in SHAPES:
        pad = k // 2
        out = (h + 2 * pad - k) // stride + 1
        x = torch.randn(batch, c, h, h, device="cuda", dtype=torch.half).to(memory_format=cl).requires_grad_()
        w = (torch.randn(c, 1, k, k, device="cuda", dtype=torch.half) / k).to(memory_format=cl).requires_grad_()
        gy = torch.randn(batch, c, out, out, device="cuda", dtype=torch.half).to(memory_format=cl)

        def step():
            x.grad = None
            w.grad = None
            F.conv2d(x, w, None, stride, pad, 1, c).backward(gy)

        ms = median_ms(step, runs)
        print(f"{net:<16} {f'{h}x{h} {c} k{k}/{stride}':<18} {count:>4} {ms:>9.3f}")
        totals[net] = totals.get(net, 0.0) + ms * count
    for net, ms in totals.items():
        print(f"{net:<16} weighted by use: {ms:.3f} ms")


if __name__ == "__main__":
    main()
