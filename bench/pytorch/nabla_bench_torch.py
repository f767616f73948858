#!/usr/bin/env python3
"""PyTorch's side of `nabla-bench train|infer --compare-pytorch`.

Measures the same workloads as nabla-bench, with the same flags, and prints one JSON object per
line for every configuration (nabla-bench reads them and prints nabla / PyTorch):

  train: torchvision ResNet on one random batch reused every step; SGD lr 0.1 momentum 0.9
         weight decay 1e-4; cuDNN benchmark on; autocast (+ GradScaler for fp16) for --amp;
         `--warmup` untimed steps, then `--steps` timed between two synchronizations. Peak
         memory is counted from the end of warm-up, as nabla-bench does. --compile runs the
         forward and loss through torch.compile (default mode), as ../shared/bench/
         torch_compile_rn50.py does; its rows carry "mode": "compile" (else "eager").
  infer: eval mode under inference_mode, one autocast scope per iteration for --amp (the model
         stays float32, as in nabla; --amp half instead runs model.half() on a float16 batch, as
         ../shared/bench/torch_infer_latency.py does), each iteration timed on its own (CUDA events; wall clock
         on the CPU); median, p90 (linear interpolation, as nabla's percentile) and img/s from
         the median. --compile-mode runs torch.compile(model, mode=...) instead
         (reduce-overhead is PyTorch's CUDA graphs); its rows carry that "mode".

Runs on PyTorch 1.13 and 2.x. `--device cpu` exists for testing on a machine without a GPU.
If torch cannot be imported it prints {"skipped": reason} and exits with status 3.
"""
import argparse
import contextlib
import gc
import json
import statistics
import sys
import time

ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "mobilenet_v2",
         "mobilenet_v3_large", "mobilenet_v3_small", "efficientnet_b0", "vit_b_16")
AMPS = ("off", "fp16", "bf16")
INFER_AMPS = AMPS + ("half",)  # half: the model and the batch in float16 (model.half()), no autocast
LAYOUTS = ("nchw", "channels-last")


def emit(row):
    print(json.dumps(row), flush=True)


def choices(text, flag, allowed):
    items = [item.strip() for item in text.split(",")]
    for item in items:
        if item not in allowed:
            sys.exit(f"{flag}: '{item}' is not one of {', '.join(allowed)} (got '{text}')")
    if len(set(items)) != len(items):
        sys.exit(f"{flag}: an item is listed twice in '{text}'")
    return items


def positive_ints(text, flag):
    try:
        values = [int(item) for item in text.split(",")]
    except ValueError:
        sys.exit(f"{flag}: expected a comma-separated list of positive integers, got '{text}'")
    if any(v <= 0 for v in values) or len(set(values)) != len(values):
        sys.exit(f"{flag}: expected distinct positive integers, got '{text}'")
    return values


def percentile(samples, q):
    """Linear interpolation between closest ranks, as nabla-bench's percentile()."""
    s = sorted(samples)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class Runner:
    def __init__(self, torch, torchvision, args):
        self.torch, self.tv, self.args = torch, torchvision, args
        self.dev = torch.device(args.device)
        self.cuda = self.dev.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def reset_memory(self):
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()

    def peaks(self):
        if not self.cuda:
            return None, None
        gib = 1024.0 ** 3
        return self.torch.cuda.max_memory_allocated() / gib, self.torch.cuda.max_memory_reserved() / gib

    def model(self, layout):
        self.torch.manual_seed(0)
        m = getattr(self.tv.models, self.args.arch)(num_classes=1000).to(self.dev)
        if layout == "channels-last":
            m = m.to(memory_format=self.torch.channels_last)
        return m

    def autocast(self, amp):
        if amp in ("off", "half"):  # (torch 1.13's CPU autocast rejects a float32 dtype even when disabled)
            return contextlib.nullcontext()
        dtype = {"fp16": self.torch.float16, "bf16": self.torch.bfloat16}[amp]
        return self.torch.autocast(device_type=self.dev.type, dtype=dtype)

    def input(self, batch, layout):
        x = self.torch.randn(batch, 3, 224, 224, device=self.dev)
        if layout == "channels-last":
            x = x.contiguous(memory_format=self.torch.channels_last)
        return x

    def scaler(self, enabled):
        amp_mod = getattr(self.torch, "amp", None)
        if amp_mod is not None and hasattr(amp_mod, "GradScaler"):  # torch >= 2.3
            return amp_mod.GradScaler(self.dev.type, enabled=enabled)
        return self.torch.cuda.amp.GradScaler(enabled=enabled)

    def base_row(self, bench, batch, amp, layout):
        return {"bench": bench, "framework": "torch", "torch": self.torch.__version__, "device": self.args.device,
                "arch": self.args.arch, "batch": batch, "amp": amp, "layout": layout,
                "channels_last": layout == "channels-last", "warmup": self.args.warmup}

    def oom_types(self):
        oom = getattr(self.torch.cuda, "OutOfMemoryError", None)
        return (oom,) if oom is not None else (RuntimeError,)

    def train(self, amp, layout):
        a, torch = self.args, self.torch
        row = self.base_row("train", a.batch_size, amp, layout)
        row["steps"] = a.steps
        row["mode"] = "compile" if a.compile else "eager"
        if a.compile and not hasattr(torch, "compile"):
            row["error"] = f"torch.compile needs PyTorch 2 (this is {torch.__version__})"
            emit(row)
            return
        self.reset_memory()
        try:
            m = self.model(layout).train()
            opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
            x = self.input(a.batch_size, layout)
            y = torch.randint(0, 1000, (a.batch_size,), device=self.dev)
            crit = torch.nn.CrossEntropyLoss()
            scaler = self.scaler(amp == "fp16")

            def forward(x, y):
                with self.autocast(amp):
                    return crit(m(x), y)

            if a.compile:
                forward = torch.compile(forward)

            def step():
                opt.zero_grad(set_to_none=True)
                loss = forward(x, y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                return loss

            for _ in range(a.warmup):
                step()
            self.sync()
            if self.cuda:
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            for _ in range(a.steps):
                loss = step()
            self.sync()
            seconds = time.perf_counter() - start
        except self.oom_types() as e:
            row["error"] = f"out of memory (memory fraction {a.memory_fraction}): {str(e).splitlines()[0]}"
            emit(row)
            return
        alloc, reserved = self.peaks()
        row.update({"ms_per_step": seconds * 1000.0 / a.steps, "img_s": a.batch_size * a.steps / seconds,
                    "peak_alloc_GiB": alloc, "peak_reserved_GiB": reserved, "loss": float(loss)})
        emit(row)

    def infer(self, batch, amp, layout):
        a, torch = self.args, self.torch
        row = self.base_row("infer", batch, amp, layout)
        row["iters"] = a.iters
        row["mode"] = a.compile_mode or "eager"
        if a.compile_mode and not hasattr(torch, "compile"):
            row["error"] = f"torch.compile needs PyTorch 2 (this is {torch.__version__})"
            emit(row)
            return
        self.reset_memory()
        try:
            m = self.model(layout).eval()
            x = self.input(batch, layout)
            if amp == "half":
                m, x = m.half(), x.half()
            if a.compile_mode:
                m = torch.compile(m, mode=a.compile_mode)
            times = []
            with torch.inference_mode():
                for _ in range(a.warmup):
                    with self.autocast(amp):
                        m(x)
                self.sync()
                if self.cuda:
                    torch.cuda.reset_peak_memory_stats()
                for _ in range(a.iters):
                    if self.cuda:
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        with self.autocast(amp):
                            m(x)
                        e.record()
                        e.synchronize()
                        times.append(s.elapsed_time(e))
                    else:
                        t0 = time.perf_counter()
                        with self.autocast(amp):
                            m(x)
                        times.append((time.perf_counter() - t0) * 1000.0)
        except self.oom_types() as e:
            row["error"] = f"out of memory (memory fraction {a.memory_fraction}): {str(e).splitlines()[0]}"
            emit(row)
            return
        median = statistics.median(times)
        alloc, reserved = self.peaks()
        row.update({"median_ms": median, "p90_ms": percentile(times, 90), "mean_ms": statistics.fmean(times),
                    "img_s": batch * 1000.0 / median, "peak_alloc_GiB": alloc, "peak_reserved_GiB": reserved})
        emit(row)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("train", "infer"):
        s = sub.add_parser(name)
        s.add_argument("--arch", default="resnet50", choices=ARCHS)
        s.add_argument("--amp", default="off",
                       help="comma list of off, fp16, bf16" + (", half" if name == "infer" else ""))
        s.add_argument("--layout", default=None, help="comma list of nchw, channels-last")
        s.add_argument("--channels-last", action="store_true", help="same as --layout channels-last")
        s.add_argument("--warmup", type=int, default=15 if name == "train" else 10)
        s.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
        s.add_argument("--memory-fraction", type=float, default=None)
        if name == "train":
            s.add_argument("--batch-size", type=int, default=256)
            s.add_argument("--steps", type=int, default=40)
            s.add_argument("--compile", action="store_true", help="torch.compile the forward and loss")
        else:
            s.add_argument("--batch-sizes", default="16,32,64,256")
            s.add_argument("--iters", type=int, default=50)
            s.add_argument("--compile-mode", default=None,
                           help="torch.compile the model in this mode (reduce-overhead: CUDA graphs)")
    a = p.parse_args(argv)
    a.amps = choices(a.amp, "--amp", INFER_AMPS if a.command == "infer" else AMPS)
    if a.layout and a.channels_last:
        sys.exit("give --layout or --channels-last, not both")
    a.layouts = choices(a.layout, "--layout", LAYOUTS) if a.layout else (
        ["channels-last"] if a.channels_last else ["nchw"])
    if a.command == "infer":
        a.batches = positive_ints(a.batch_sizes, "--batch-sizes")
        if a.iters < 1:
            sys.exit("--iters must be at least 1")
    elif a.steps < 1 or a.batch_size < 1:
        sys.exit("--steps and --batch-size must be at least 1")
    if a.memory_fraction is not None and not 0 < a.memory_fraction <= 1:
        sys.exit(f"--memory-fraction must be in (0, 1], got {a.memory_fraction}")
    return a


def main(argv):
    a = parse_args(argv)
    try:
        import torch
        import torchvision
    except Exception as e:  # ImportError, or a broken install
        emit({"skipped": f"{sys.executable} cannot import torch and torchvision ({e})"})
        return 3
    if a.device == "cuda" and not torch.cuda.is_available():
        emit({"skipped": f"PyTorch {torch.__version__} under {sys.executable} sees no CUDA device"})
        return 3
    if a.device == "cpu" and ("fp16" in a.amps or "half" in a.amps):
        sys.exit("--amp fp16 and half need --device cuda (autocast on the CPU takes bf16 only)")
    torch.backends.cudnn.benchmark = True
    if a.memory_fraction is not None and a.device == "cuda":
        torch.cuda.set_per_process_memory_fraction(a.memory_fraction)
    r = Runner(torch, torchvision, a)
    for amp in a.amps:
        for layout in a.layouts:
            if a.command == "train":
                r.train(amp, layout)
            else:
                for batch in a.batches:
                    r.infer(batch, amp, layout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
