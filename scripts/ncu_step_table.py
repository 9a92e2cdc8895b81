#!/usr/bin/env python3
"""One decode step's kernels from an ncu CSV, summed by kernel (docs/performance.md, session 18).

Take the CSV on the GPU machine with PDL off (with PDL on, a kernel launched early is timed
from its launch, its wait included, so the small kernels read several times too long):

  HS_DEVGZ=... ncu --csv --metrics gpu__time_duration.sum --launch-count 1110 \\
    scripts/run_device_binaries.sh hyperstream bench --synthetic flash --layers 8 --quant q2 \\
    --pp 0 --tg 4 --depth 0 --seqs 1 --reps 1 --pdl off > step.csv

then here:  scripts/ncu_step_table.py step.csv

A step is the kernels after one launch of the output head (the only kernel over --big-us) up to
and including the next; the last complete step in the file is the one reported. ncu locks the
clocks unless told otherwise, so the durations are longer than in a graph replay: compare
shares and kernels, not the sum against the bench's tok/s.
"""
import argparse
import collections
import csv
import re
import sys


def read_kernels(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own log lines are not CSV
    if not lines:
        sys.exit(f"{path}: no CSV rows (was ncu run with --csv?)")
    rows = csv.reader(lines)
    header = next(rows)
    try:
        name_col, value_col = header.index("Kernel Name"), header.index("Metric Value")
    except ValueError:
        sys.exit(f"{path}: the header lacks 'Kernel Name' / 'Metric Value': {header}")
    kernels = []
    for row in rows:
        if len(row) <= max(name_col, value_col):
            continue
        try:
            ns = float(row[value_col].replace(",", ""))
        except ValueError:
            continue
        name = re.sub(r"\(.*", "", row[name_col])
        for noise in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::", "hs::cuda::"):
            name = name.replace(noise, "")
        kernels.append((name.strip(), ns))
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --csv --metrics gpu__time_duration.sum output")
    ap.add_argument("--big-us", type=float, default=150.0,
                    help="a kernel longer than this (us) marks a step boundary: the output head (default 150)")
    args = ap.parse_args()
    kernels = read_kernels(args.csv)
    marks = [i for i, (_, ns) in enumerate(kernels) if ns > args.big_us * 1e3]
    if len(marks) < 2:
        sys.exit(f"{args.csv}: {len(kernels)} kernels, {len(marks)} over {args.big_us} us: no complete step "
                 "(raise --launch-count or lower --big-us)")
    step = kernels[marks[-2] + 1:marks[-1] + 1]
    total = sum(ns for _, ns in step)
    by_name = collections.OrderedDict()
    for name, ns in step:
        calls, sum_ns = by_name.get(name, (0, 0.0))
        by_name[name] = (calls + 1, sum_ns + ns)
    print(f"{len(step)} kernels in the step, {total / 1e3:.1f} us")
    print("| kernel | calls | us | % | us/call |")
    print("|---|---:|---:|---:|---:|")
    for name, (calls, sum_ns) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {calls} | {sum_ns / 1e3:.1f} | {100 * sum_ns / total:.1f} | {sum_ns / calls / 1e3:.2f} |")


if __name__ == "__main__":
    main()
