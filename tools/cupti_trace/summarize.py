#!/usr/bin/env python3
"""Summarizes cupti_trace.cpp's CSV files: per training step, the compute stream's busy time, the
gaps between its kernels (the device waiting on the host or on its own front end), the time of
kernels on other streams (communication), and the kernels that take the most time.

  tools/cupti_trace/summarize.py --marker unscale_kernel trace-123.csv [trace-456.csv ...]

Steps run from one start of a kernel whose name contains --marker to the next (nabla's GradScaler
unscale kernel by default: once per fp16 step); the last --steps of them are summarized.
"""
import argparse
import collections
import csv
import statistics


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append((r["kind"], int(r["stream"]), int(r["start_ns"]), int(r["end_ns"]), r["name"]))
    rows.sort(key=lambda r: r[2])
    return rows


def summarize(path, marker, steps, top):
    rows = load(path)
    by_stream = collections.Counter()
    for _, stream, start, end, _ in rows:
        by_stream[stream] += end - start
    if not by_stream:
        print(f"{path}: no records")
        return
    compute = by_stream.most_common(1)[0][0]
    marks = [start for _, _, start, _, name in rows if marker in name][-(steps + 1):]
    if len(marks) < 2:
        print(f"{path}: fewer than two '{marker}' kernels; pick another --marker")
        return
    n = len(marks) - 1
    periods, busy, gaps, other = [], 0, [], 0
    per_kernel = collections.Counter()
    for lo, hi in zip(marks, marks[1:]):
        periods.append(hi - lo)
        mine = [r for r in rows if lo <= r[2] < hi and r[1] == compute]
        busy += sum(end - start for _, _, start, end, _ in mine)
        gaps += [b[2] - a[3] for a, b in zip(mine, mine[1:])]
        other += sum(r[3] - r[2] for r in rows if lo <= r[2] < hi and r[1] != compute)
        for _, _, start, end, name in mine:
            per_kernel[name[:110]] += end - start
    print(f"{path}: {n} steps, compute stream {compute}")
    print(f"  step {statistics.median(periods) / 1e6:.3f} ms (median), compute busy {busy / n / 1e6:.3f} ms, "
          f"gaps {sum(gaps) / n / 1e6:.3f} ms (median gap {statistics.median(gaps) / 1e3:.2f} us), "
          f"other streams {other / n / 1e3:.1f} us")
    for name, t in per_kernel.most_common(top):
        print(f"  {t / n / 1e3:9.1f} us  {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--marker", default="unscale_kernel", help="a kernel name part that starts each step")
    parser.add_argument("--steps", type=int, default=10, help="summarize the last this many steps")
    parser.add_argument("--top", type=int, default=10, help="list this many of the most expensive kernels")
    args = parser.parse_args()
    for path in args.files:
        summarize(path, args.marker, args.steps, args.top)


if __name__ == "__main__":
    main()
