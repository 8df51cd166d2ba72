"""vcli's default suggester the way a study with parallelTrialCount = K uses it: K trials in flight,
one asked for each that ends (`vcli.control.study`: ask(K) at the start, then ask(1) with K - 1
still running), against ask(K)-evaluate-tell(K) batches and one at a time, on the problems of
`bench_suggesters.py`.

    nice -n 10 python bench/bench_async.py [--seeds 100] [--trials 60] [--parallel 4]
        [--problems hartmann6,mixed5] [--cache bench/results/async.jsonl.gz] [--report-only]

Trials end in the order they started (first in, first out: every trial takes as long as the
others), so a run is deterministic given its seed. The synchronous rows (q = 1 and q = K) come
from `bench/results/suggesters.jsonl.gz` (same seeds). Reported: median simple regret at 30 and
60 trials, runs below 1e-3, Mann-Whitney p of the medians and Fisher's exact p of the solved
counts against one at a time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_suggesters as bs

SOLVED = 1e-3


def run_async(problem: str, n: int, parallel: int, seed: int) -> tuple[list[float], float]:
    """Regret after each completed trial, and CPU seconds per suggestion."""
    from vcli.spec import Algorithm, Measurement, Trial, TrialState
    from vcli.tuning.suggesters import get_suggester

    fn, f_star, space = bs.PROBLEMS[problem]
    s = get_suggester(bs._vcli_spec(space, Algorithm.ALGORITHM_UNSPECIFIED), seed=seed)
    cpu = time.process_time()
    flight = list(s.ask(min(parallel, n)))
    asked, ys = len(flight), []
    while flight:
        sug = flight.pop(0)
        v = fn(dict(sug.parameters))
        ys.append(v)
        s.tell(Trial(id=str(len(ys)), parameters=sug.parameters,
                     state=TrialState.SUCCEEDED, final_measurement=Measurement(step_count=1, metrics={"f": v})))
        if asked < n:
            flight += s.ask(1)
            asked += 1
    cpu = (time.process_time() - cpu) / n
    return bs.regret_curve(ys, f_star), cpu


def _load(path: str) -> dict:
    out = {}
    if os.path.exists(path):
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            for line in f:
                r = json.loads(line)
                out[(r["problem"], r["opt"], r["q"], r["seed"])] = r["regret"]
    return out


def report(cache: dict, sync: dict, problems: list[str], seeds: list[int], parallel: int) -> None:
    import numpy as np
    from scipy.stats import fisher_exact, mannwhitneyu

    print("| problem | mode | seeds | regret@30 median | regret@60 median | solved@60 | p @60 vs one at a time (median / solved) |")
    print("|---|---|---|---|---|---|---|")
    for p in problems:
        rows = [("one at a time", sync, (p, "vcli_gp", 1)), (f"batches of {parallel}", sync, (p, "vcli_gp", parallel)),
                (f"{parallel} in flight", cache, (p, "vcli_gp_async", parallel))]
        have = [s for s in seeds if all((*k, s) in src for _, src, k in rows)]
        base = np.array([sync[(p, "vcli_gp", 1, s)][59] for s in have])
        for name, src, k in rows:
            r60 = np.array([src[(*k, s)][59] for s in have])
            r30 = np.array([src[(*k, s)][29] for s in have])
            solved, b_solved = int((r60 < SOLVED).sum()), int((base < SOLVED).sum())
            test = "" if k[2] == 1 else (f"{mannwhitneyu(r60, base).pvalue:.2g} / "
                                         f"{fisher_exact([[solved, len(have) - solved], [b_solved, len(have) - b_solved]])[1]:.2g}")
            print(f"| {p} | {name} | {len(have)} | {np.median(r30):.2g} | {np.median(r60):.2g} | {solved}/{len(have)} | {test} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--seed-from", type=int, default=0)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--problems", default="hartmann6,mixed5")
    ap.add_argument("--cache", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "async.jsonl.gz"))
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    problems = args.problems.split(",")
    seeds = list(range(args.seed_from, args.seeds))
    cache = _load(args.cache)
    if not args.report_only:
        todo = [(p, s) for p in problems for s in seeds if (p, "vcli_gp_async", args.parallel, s) not in cache]
        print(f"# {len(todo)} runs to do", file=sys.stderr)
        for i, (p, s) in enumerate(todo):
            regret, cpu = run_async(p, args.trials, args.parallel, s)
            rec = {"problem": p, "opt": "vcli_gp_async", "q": args.parallel, "seed": s, "n": args.trials,
                   "regret": [float(f"{x:.6g}") for x in regret], "cpu_s_per_suggestion": float(f"{cpu:.4g}")}
            cache[(p, rec["opt"], rec["q"], s)] = rec["regret"]
            with (gzip.open(args.cache, "at") if args.cache.endswith(".gz") else open(args.cache, "a")) as f:
                f.write(json.dumps(rec) + "\n")
            print(f"# [{i + 1}/{len(todo)}] {p} seed {s} regret@{args.trials}={regret[-1]:.3g}", file=sys.stderr)
    sync = _load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "suggesters.jsonl.gz"))
    report(cache, sync, problems, seeds, args.parallel)


if __name__ == "__main__":
    main()
