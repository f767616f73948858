"""PyTorch twin of bench/conv_shapes.cpp: every distinct ResNet-50 convolution, float16 (or
bfloat16) channels_last, torch.backends.cudnn.benchmark = True, forward + backward (input and
weight require grad, no bias), median of CUDA-event-timed runs after 3 warm-ups, same table
format. The fwd / data / filter columns time aten's convolution and convolution_backward (one
output each) on their own.

    python3 bench/torch_conv_shapes.py [batch, default 256] [runs, default 20] [fp16|bf16]
"""
import math
import sys

import torch
import torch.nn.functional as F

# Same table, same order as bench/conv_shapes.cpp: name, C, H, O, k, stride, padding, uses.
SHAPES = [
    ("stem 7x7/2", 3, 224, 64, 7, 2, 3, 1),
    ("l1 1x1 64>64", 64, 56, 64, 1, 1, 0, 1),
    ("l1 3x3 64", 64, 56, 64, 3, 1, 1, 3),
    ("l1 1x1 64>256 (+down)", 64, 56, 256, 1, 1, 0, 4),
    ("l1 1x1 256>64", 256, 56, 64, 1, 1, 0, 2),
    ("l2 1x1 256>128", 256, 56, 128, 1, 1, 0, 1),
    ("l2 3x3/2 128", 128, 56, 128, 3, 2, 1, 1),
    ("l2 1x1 128>512", 128, 28, 512, 1, 1, 0, 4),
    ("l2 down 1x1/2 256>512", 256, 56, 512, 1, 2, 0, 1),
    ("l2 1x1 512>128", 512, 28, 128, 1, 1, 0, 3),
    ("l2 3x3 128", 128, 28, 128, 3, 1, 1, 3),
    ("l3 1x1 512>256", 512, 28, 256, 1, 1, 0, 1),
    ("l3 3x3/2 256", 256, 28, 256, 3, 2, 1, 1),
    ("l3 1x1 256>1024", 256, 14, 1024, 1, 1, 0, 6),
    ("l3 down 1x1/2 512>1024", 512, 28, 1024, 1, 2, 0, 1),
    ("l3 1x1 1024>256", 1024, 14, 256, 1, 1, 0, 5),
    ("l3 3x3 256", 256, 14, 256, 3, 1, 1, 5),
    ("l4 1x1 1024>512", 1024, 14, 512, 1, 1, 0, 1),
    ("l4 3x3/2 512", 512, 14, 512, 3, 2, 1, 1),
    ("l4 1x1 512>2048", 512, 7, 2048, 1, 1, 0, 3),
    ("l4 down 1x1/2 1024>2048", 1024, 14, 2048, 1, 2, 0, 1),
    ("l4 1x1 2048>512", 2048, 7, 512, 1, 1, 0, 2),
    ("l4 3x3 512", 512, 7, 512, 3, 1, 1, 2),
]


def median_ms(fn, runs, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    stream = torch.cuda.current_stream()
    for _ in range(runs):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    runs = max(10, int(sys.argv[2])) if len(sys.argv) > 2 else 20
    dtype = torch.bfloat16 if len(sys.argv) > 3 and sys.argv[3] == "bf16" else torch.half
    torch.backends.cudnn.benchmark = True
    cl = torch.channels_last
    print(f"torch {torch.__version__} conv2d, ResNet-50 shapes, batch {batch}, {dtype} channels_last, "
          f"cudnn benchmark, fwd+bwd, median of {runs} runs")
    print(f"{'conv':<24} {'input -> output':<26} {'uses':>5} {'ms':>10} {'TFLOP/s':>9} "
          f"{'fwd':>8} {'data':>8} {'filter':>8}")
    total = network = 0.0
    columns = [0.0, 0.0, 0.0]
    for name, c, h, o, k, stride, padding, count in SHAPES:
        out = (h + 2 * padding - k) // stride + 1
        x = torch.randn(batch, c, h, h, device="cuda", dtype=dtype).to(memory_format=cl).requires_grad_()
        w = (torch.randn(o, c, k, k, device="cuda", dtype=dtype) / math.sqrt(c * k * k))
        w = w.to(memory_format=cl).requires_grad_()
        gy = torch.randn(batch, o, out, out, device="cuda", dtype=dtype).to(memory_format=cl)

        def step():
            x.grad = None
            w.grad = None
            y = F.conv2d(x, w, None, stride, padding)
            y.backward(gy)

        ms = median_ms(step, runs)
        xd, wd = x.detach(), w.detach()
        conv = torch.ops.aten.convolution
        backward = torch.ops.aten.convolution_backward
        args = ([stride] * 2, [padding] * 2, [1, 1], False, [0, 0], 1)
        with torch.no_grad():
            parts = [median_ms(lambda: conv(xd, wd, None, *args), runs),
                     median_ms(lambda: backward(gy, xd, wd, None, *args, [True, False, False]), runs),
                     median_ms(lambda: backward(gy, xd, wd, None, *args, [False, True, False]), runs)]
        for i, t in enumerate(parts):
            columns[i] += t * count
        flops = 3.0 * 2.0 * batch * o * c * k * k * out * out
        shape = f"{h}x{h} {c} -> {o} k{k}/{stride}"
        print(f"{name:<24} {shape:<26} {count:>5} {ms:>10.3f} {flops / (ms * 1e9):>9.1f} "
              + " ".join(f"{t:>8.3f}" for t in parts), flush=True)
        total += ms
        network += ms * count
    print(f"sum over the {len(SHAPES)} shapes: {total:.3f} ms; "
          f"ResNet-50 convolutions (weighted by use): {network:.3f} ms")
    print(f"weighted by use, ms: fwd {columns[0]:.3f} data {columns[1]:.3f} filter {columns[2]:.3f}")


if __name__ == "__main__":
    main()
