"""Before/after significance test between cached runs of bench_suggesters.py.

    python bench/compare_runs.py AFTER.jsonl BEFORE.jsonl [PEER.jsonl ...] [--opt vcli_gp] [--trials 60]

Every file is a --cache of bench_suggesters.py. Runs of --opt in the first file are the
reference ("after"); runs of --opt in each other file are relabelled FILE-STEM:opt, and the
other optimisers' runs in them are kept as they are. Prints bench_suggesters.significance():
ratio of median regrets and the two-sided Mann-Whitney U p-value at 30 and 60 trials.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_suggesters as bs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--opt", default="vcli_gp")
    ap.add_argument("--trials", type=int, default=60)
    args = ap.parse_args(argv)
    results, opts, problems, seeds = [], [], [], set()
    for i, f in enumerate(args.files):
        for line in Path(f).read_text().splitlines():
            r = json.loads(line)
            if r["n"] < args.trials:
                continue
            r["regret"] = r["regret"][: args.trials]
            if i > 0 and r["opt"] == args.opt:
                r["opt"] = f"{Path(f).stem}:{args.opt}"
            results.append(r)
            seeds.add(r["seed"])
            if r["opt"] not in opts:
                opts.append(r["opt"])
            if r["problem"] not in problems:
                problems.append(r["problem"])
    checkpoints = [c for c in (30, 60) if c <= args.trials] or [args.trials]
    print(bs.significance(results, problems, opts, sorted(seeds), checkpoints, ref=args.opt))


if __name__ == "__main__":
    main()
