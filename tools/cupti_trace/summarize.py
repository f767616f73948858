#!/usr/bin/env python3
"""Summarizes cupti_trace.cpp's CSV files: per training step, the compute stream's busy time, the
gaps between its kernels (the device waiting on the host or on its own front end), the time of
kernels on other streams (communication), and the kernels that take the most time.

  tools/cupti_trace/summarize.py --marker unscale_kernel trace-123.csv [trace-456.csv ...]

Steps run from one start of a kernel whose name contains --marker to the next (nabla's GradScaler
unscale kernel by default: once per fp16 step); the last --steps of them are summarized. Where the
marker's kernel runs several times a step (an optimizer over several tensor tables), --gap-ms
counts a marker as a new step only that long after the previous step's start. --categories adds
each step's time by kind of kernel (matrix products, attention, generated, ...), so that two
frameworks' steps compare by category: bench/pytorch/torch_llama.py --trace writes PyTorch's
kernels in this CSV format. --phases splits each step where kernels first match given patterns
(forward=check_indices,backward=cross_entropy.*backward for nabla's LLaMA step), so that the
forward and the backward compare on their own.
"""
import argparse
import collections
import csv
import functools
import pathlib
import re
import statistics

# Kinds of kernel, first match wins: (category, pattern of the kernel's name). Generated kernels
# come first: Triton's names list the ops they fused ("triton_per_fused__to_copy_add_mean_...").
CATEGORIES = [
    ("generated (fused pointwise)", r"^nabla_fused|^triton_"),
    ("attention", r"flash|fmha|sdpa|attention|attn"),
    ("convolution", r"conv(?!ert)|implicit|wgrad|dgrad|fprop"),
    ("matrix product", r"gemm|nvjet|cutlass|xmma|sm90_|sm80_|cublas|matmul|splitK|splitk"),
    ("optimizer", r"adam|sgd|multi_tensor|foreach|sum_of_squares|scale_kernel"),
    ("normalization", r"norm"),
    ("loss and softmax", r"cross_entropy|softmax|nll|log_softmax"),
    ("copy, cast and fill", r"copy|(?<!broad)(?<!multi)cast|convert|fill|memcpy|memset|cat_|CatArray"),
    ("embedding and indexing", r"embedding|index|gather|scatter"),
    ("reduction", r"reduce|sum|mean"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|binary|unary"),
]


# nabla's own kernels have plain names in anonymous namespaces (forward_kernel, apply_kernel), so
# their kind is the folder of ops/cuda/ that defines them, read from the source tree when this
# runs in the repository.
FOLDER_CATEGORIES = {
    "attention": "attention", "norm": "normalization", "batch_norm": "normalization",
    "loss": "loss and softmax", "rotary": "elementwise", "elementwise": "elementwise",
    "reduce": "reduction", "indexing": "embedding and indexing", "conv": "convolution",
    "linalg": "matrix product", "fusion": "generated (fused pointwise)",
}
KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)")


def nabla_kernels():
    kernels = {}
    root = pathlib.Path(__file__).resolve().parents[2] / "ops" / "cuda"
    for folder, label in FOLDER_CATEGORIES.items():
        for source in sorted((root / folder).glob("*.cu*")):
            for name in KERNEL.findall(source.read_text(errors="replace")):
                kernels.setdefault(name, label)
    return kernels


NABLA_KERNELS = nabla_kernels()


@functools.lru_cache(maxsize=None)  # a step repeats its kernels: each name is matched once
def category(name, kind="kernel"):
    if kind in ("memcpy", "memset", "gpu_memcpy", "gpu_memset"):
        return "copy, cast and fill"
    for label, pattern in CATEGORIES:
        if re.search(pattern, name, re.IGNORECASE):
            return label
    for kernel, label in NABLA_KERNELS.items():
        if f"{len(kernel)}{kernel}" in name or name == kernel:  # a mangled name, or a plain one
            return label
    return "other"


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append((r["kind"], int(r["stream"]), int(r["start_ns"]), int(r["end_ns"]), r["name"]))
    rows.sort(key=lambda r: r[2])
    return rows


def step_starts(rows, marker, gap_ns):
    starts = []
    for _, _, start, _, name in rows:
        if marker in name and (not starts or start - starts[-1] >= gap_ns):
            starts.append(start)
    return starts


def phase_of(phases):
    """A function from a step's kernels (in order) to each kernel's phase name. `phases` is a
    list of (name, regex): a phase begins at the first kernel after the previous phase's start
    whose name matches its regex; the kernels before the first are the step's "start"."""
    def label(names):
        out, current, k = [], "start", 0
        for name in names:
            if k < len(phases) and re.search(phases[k][1], name):
                current = phases[k][0]
                k += 1
            out.append(current)
        return out
    return label


def summarize(path, marker, steps, top, gap_ms=0.0, categories=False, phases=None):
    rows = load(path)
    by_stream = collections.Counter()
    for _, stream, start, end, _ in rows:
        by_stream[stream] += end - start
    if not by_stream:
        print(f"{path}: no records")
        return
    compute = by_stream.most_common(1)[0][0]
    marks = step_starts(rows, marker, int(gap_ms * 1e6))[-(steps + 1):]
    if len(marks) < 2:
        print(f"{path}: fewer than two '{marker}' kernels; pick another --marker")
        return
    n = len(marks) - 1
    periods, busy, gaps, other = [], 0, [], 0
    per_kernel = collections.Counter()
    by_category = collections.Counter()
    by_phase = collections.defaultdict(collections.Counter)  # phase -> category -> time
    label = phase_of(phases) if phases else None
    for lo, hi in zip(marks, marks[1:]):
        periods.append(hi - lo)
        mine = [r for r in rows if lo <= r[2] < hi and r[1] == compute]
        busy += sum(end - start for _, _, start, end, _ in mine)
        gaps += [b[2] - a[3] for a, b in zip(mine, mine[1:])]
        other += sum(r[3] - r[2] for r in rows if lo <= r[2] < hi and r[1] != compute)
        names = [name for *_, name in mine]
        for (kind, _, start, end, name), phase in zip(mine, label(names) if label else [None] * len(mine)):
            per_kernel[name[:110]] += end - start
            if categories:
                by_category[category(name, kind)] += end - start
            if phase is not None:
                by_phase[phase][category(name, kind)] += end - start
    print(f"{path}: {n} steps, compute stream {compute}")
    print(f"  step {statistics.median(periods) / 1e6:.3f} ms (median), compute busy {busy / n / 1e6:.3f} ms, "
          f"gaps {sum(gaps) / n / 1e6:.3f} ms (median gap {statistics.median(gaps) / 1e3:.2f} us), "
          f"other streams {other / n / 1e3:.1f} us")
    if categories:
        print("  by category (ms per step):")
        for label, t in by_category.most_common():
            print(f"  {t / n / 1e6:9.3f} ms  {label}")
    for phase in ["start"] + [name for name, _ in phases or []]:
        if phase not in by_phase:
            continue
        total = sum(by_phase[phase].values())
        print(f"  {phase}: {total / n / 1e6:.3f} ms per step")
        for label_, t in by_phase[phase].most_common():
            print(f"  {t / n / 1e6:9.3f} ms  {label_}")
    for name, t in per_kernel.most_common(top):
        print(f"  {t / n / 1e3:9.1f} us  {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--marker", default="unscale_kernel", help="a kernel name part that starts each step")
    parser.add_argument("--steps", type=int, default=10, help="summarize the last this many steps")
    parser.add_argument("--top", type=int, default=10, help="list this many of the most expensive kernels")
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="a marker kernel starts a new step only this long after the last step began")
    parser.add_argument("--categories", action="store_true", help="also each step's time by kind of kernel")
    parser.add_argument("--phases", default="",
                        help="NAME=REGEX,...: split each step where a kernel's name first matches each "
                             "REGEX in turn (the kernels before the first are 'start'), and give each "
                             "part's time by kind of kernel")
    args = parser.parse_args()
    phases = []
    for item in filter(None, args.phases.split(",")):
        name, sep, pattern = item.partition("=")
        if not sep or not name or not pattern:
            parser.error(f"--phases: expected NAME=REGEX items, got '{item}'")
        phases.append((name, pattern))
    for path in args.files:
        summarize(path, args.marker, args.steps, args.top, args.gap_ms, args.categories, phases)


if __name__ == "__main__":
    main()
