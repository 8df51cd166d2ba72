"""Out of memory as a learned constraint: how many trials of a study run out of memory, and how
good the best one that fits is, when RESOURCE failures are told to the suggester as such
(`vcli.control.failures`, `SuggesterBase.resource_failed`) against the same failures told as
plain INFEASIBLE trials (valueless points) and against random search.

The problem: batch size (INTEGER 8..1024, log scale) x learning rate (1e-4..0.1, log scale);
score = log2(batch) - (log10(lr) + 2)^2, maximised, best (8.0) at the largest batch that fits;
a batch above 256 runs out of memory (about 29 % of the box, in its log scale). One trial at a
time, 30 trials, seeds 0..N-1, in-process suggesters (what a study's worker runs).

    nice -n 10 python bench/bench_oom.py [--seeds 20] [--trials 30]

Prints one table: mean out-of-memory trials per study, the median best score, and the
Mann-Whitney U p (two-sided) of the out-of-memory counts against random search.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vcli.spec import (
    Algorithm,
    DoubleValueSpec,
    FailureClass,
    Goal,
    IntegerValueSpec,
    Measurement,
    MetricSpec,
    ParameterSpec,
    ScaleType,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.tuning.suggesters import get_suggester

PARAMS = (ParameterSpec(parameter_id="batch", value_spec=IntegerValueSpec(min_value=8, max_value=1024),
                        scale_type=ScaleType.UNIT_LOG_SCALE),
          ParameterSpec(parameter_id="lr", value_spec=DoubleValueSpec(min_value=1e-4, max_value=0.1),
                        scale_type=ScaleType.UNIT_LOG_SCALE))
FITS = 256


def score(p) -> float | None:
    """The trial's value, or None when it runs out of memory."""
    return None if p["batch"] > FITS else math.log2(p["batch"]) - (math.log10(p["lr"]) + 2) ** 2


def study(algorithm: Algorithm, seed: int, trials: int, classified: bool) -> tuple[int, float]:
    """(out-of-memory trials, best score) of one study."""
    spec = StudySpec(metrics=(MetricSpec(metric_id="score", goal=Goal.MAXIMIZE),), parameters=PARAMS, algorithm=algorithm)
    s = get_suggester(spec, seed=seed)
    ooms, best = 0, -math.inf
    for i in range(trials):
        p = s.ask(1)[0].parameters
        s.tell(Trial(id=str(i + 1), parameters=p, state=TrialState.ACTIVE))
        v = score(p)
        if v is None:
            ooms += 1
            s.tell(Trial(id=str(i + 1), parameters=p, state=TrialState.INFEASIBLE,
                         failure_class=FailureClass.RESOURCE if classified else None))
        else:
            best = max(best, v)
            s.tell(Trial(id=str(i + 1), parameters=p, state=TrialState.SUCCEEDED,
                         final_measurement=Measurement(step_count=1, metrics={"score": v})))
    return ooms, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=30)
    args = ap.parse_args()
    from scipy.stats import mannwhitneyu

    rows = [("random search", Algorithm.RANDOM_SEARCH, True),
            ("TPE, RESOURCE told", Algorithm.TPE, True), ("TPE, plain INFEASIBLE", Algorithm.TPE, False),
            ("GP, RESOURCE told", Algorithm.ALGORITHM_UNSPECIFIED, True),
            ("GP, plain INFEASIBLE", Algorithm.ALGORITHM_UNSPECIFIED, False)]
    print(f"{args.seeds} seeds x {args.trials} trials, out of memory above batch {FITS}")
    print("| suggester | out-of-memory trials (mean) | median best score (8.0 is the optimum) | p vs random |")
    print("|---|---|---|---|")
    random_ooms: list[int] = []
    for name, algorithm, classified in rows:
        runs = [study(algorithm, seed, args.trials, classified) for seed in range(args.seeds)]
        ooms = [o for o, _ in runs]
        random_ooms = random_ooms or ooms
        p = "" if ooms is random_ooms else f"{mannwhitneyu(ooms, random_ooms).pvalue:.2g}"
        print(f"| {name} | {statistics.mean(ooms):.2f} | {statistics.median(b for _, b in runs):.3f} | {p} |", flush=True)


if __name__ == "__main__":
    main()
