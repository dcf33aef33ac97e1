#!/usr/bin/env python3
"""Where a decode step's time goes, from the profiles that `generate.py --profile`
(or `generate_bench --profile`) writes: each kernel's and each idle gap's time per
step, with its count, for those that run every step. The profile holds the prompt's
prefill too: a kernel or gap that it also has (the norm's, at more calls than steps)
is overstated by the prefill's share.

  python3 scripts/bench/step_profile.py [--match TEXT] gen.json [more.json ...]

--match keeps the profiles whose name has TEXT (`persistent`: generate.py's
`--decode-kernels persistent` run, not its default one).

The steps are the profile's `decode_steps` (generate_bench records them); in older
profiles without them, the launches of the costliest kernel (the persistent one's).
"""
import argparse
import json


def profiles(rows):
    for row in rows if isinstance(rows, list) else rows.get("rows", []):
        for key, value in row.items():
            if key.endswith("profile_64_steps"):
                yield "batch %s %s" % (row.get("batch"), key[:-len("_profile_64_steps")] or "default"), value


def report(name, p):
    steps = p.get("decode_steps") or max(p["top"], key=lambda t: t["ms"])["calls"]
    every = lambda rows: [t for t in rows if t["calls"] >= steps - 1]
    kernels, idle = every(p["top"]), every(p["idle_between"])
    busy = sum(t["ms"] for t in kernels) * 1e3 / steps
    gaps = sum(t["ms"] for t in idle) * 1e3 / steps
    print("%s: %d steps; every step's kernels %.1f us, its idle gaps %.1f us" % (name, steps, busy, gaps))
    for t in kernels:
        print("  %8.2f us %5d  %s" % (t["ms"] * 1e3 / steps, t["calls"], t["name"][:110]))
    for t in idle:
        print("  %8.2f us %5d  idle: %s" % (t["ms"] * 1e3 / steps, t["calls"], t["name"][:110]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--match", default="")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    for path in args.paths:
        found = False
        for name, p in profiles(json.load(open(path))):
            if args.match in name:
                report("%s, %s" % (path, name), p)
                found = True
        if not found:
            print("%s: no profile%s (run generate.py with --profile)"
                  % (path, " matching " + args.match if args.match else ""))


if __name__ == "__main__":
    main()
