#!/usr/bin/env python3
"""Where a kernel's warps stall, per instruction, from Nsight Compute's source page.

    ncu --kernel-name regex:DecodeLayersKernel --launch-skip 3 --launch-count 1 \\
        --section SourceCounters --section WarpStateStats -o prof <program>
    ncu -i prof.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 scripts/bench/ncu_source_summary.py sass.csv

Prints the sampled stall reasons over the whole kernel, then per code region
(the kernel's own code, and each function it calls out of line, found by the
targets of its CALL instructions), then the instructions with the most
samples. Instructions executed are warp-level counts over the launch.
"""
import argparse
import csv
import re


def number(text):
    try:
        return float(text)
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=25, help="instructions to list")
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv)))
    header_at = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    header = rows[header_at]
    col = {name: i for i, name in enumerate(header)}
    data = [r for r in rows[header_at + 1:] if len(r) == len(header)]
    samples = col["Warp Stall Sampling (All Samples)"]
    executed = col["Instructions Executed"]
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(number(r[samples]) for r in data) or 1.0

    def breakdown(part):
        sums = {h: sum(number(r[col[h]]) for r in part) for h in reasons}
        top = sorted(sums.items(), key=lambda kv: -kv[1])[:5]
        return ", ".join("%s %.1f%%" % (h[len("stall_"):], 100 * v / total) for h, v in top if v > 0)

    print("%d instructions, %.0f samples, %.3g warp-instructions executed" %
          (len(data), total, sum(number(r[executed]) for r in data)))
    print("stalls:", breakdown(data))

    # Regions: the kernel's code up to the first out-of-line function, then each function.
    address = [int(r[col["Address"]], 16) for r in data]
    targets = set()
    for r in data:
        m = re.search(r"CALL\.\S+\s+(0x[0-9a-f]+)", r[col["Source"]])
        if m:
            targets.add(int(m.group(1), 16))
    starts = [0] + sorted(i for i, a in enumerate(address) if a in targets)
    print("\nregion (first instruction)                 samples  instructions executed  stalls")
    for n, begin in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(data)
        part = data[begin:end]
        if not part:
            continue
        name = "kernel" if n == 0 else "call 0x%x" % address[begin]
        s = sum(number(r[samples]) for r in part)
        e = sum(number(r[executed]) for r in part)
        print("%-40s %6.1f%%  %22.3g  %s" % (name, 100 * s / total, e, breakdown(part)))

    print("\ntop instructions: address, source, samples, executed, main stall")
    for r in sorted(data, key=lambda r: -number(r[samples]))[:args.top]:
        main_reason = max(reasons, key=lambda h: number(r[col[h]]))
        print("%s  %-52s %6.0f %10.0f  %s" % (r[col["Address"]][-6:], r[col["Source"]].strip()[:52],
                                             number(r[samples]), number(r[executed]), main_reason[len("stall_"):]))


if __name__ == "__main__":
    main()
