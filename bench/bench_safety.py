"""Safe search (`studySpec.metrics[].safetyConfig`): how many trials of a study are unsafe, and
how good the best safe one is, for the GP with the safety metric told (`safetyConfig`), the
same GP without it (the safety metric only recorded), TPE with it, and random search.

The problem, on the unit square: maximise
    score = exp(-|p - (0.75, 0.75)|^2 / 0.05) + 0.6 exp(-|p - (0.25, 0.3)|^2 / 0.08)
under the safety metric temperature = 1.5 exp(-|p - (0.75, 0.75)|^2 / 0.1) + 0.2 x, MINIMIZE,
safetyThreshold 0.6: the global optimum (score 1.0 at (0.75, 0.75)) lies in an unsafe disc of
radius about 0.35; the safe region (about 70 % of the square) has its best score, 0.600, at the
second bump (0.25, 0.3). One trial at a time, 40 trials, seeds 0..N-1, in-process suggesters
(what a study's worker runs).

    nice -n 10 python bench/bench_safety.py [--seeds 10] [--trials 40]

Prints one table: mean unsafe trials per study (all trials, and after the 10 random ones), the
median best safe score and its median regret against the best safe score of a 801 x 801 grid.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vcli.spec import (
    Algorithm,
    DoubleValueSpec,
    Goal,
    Measurement,
    MetricSpec,
    ParameterSpec,
    SafetyMetricConfig,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.tuning.result import is_safe
from vcli.tuning.suggesters import get_suggester

PARAMS = tuple(ParameterSpec(parameter_id=k, value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0)) for k in ("x", "y"))
THRESHOLD = 0.6


def _bump(x: float, y: float, cx: float, cy: float, w: float) -> float:
    return math.exp(-((x - cx) ** 2 + (y - cy) ** 2) / w)


def score(x: float, y: float) -> float:
    return _bump(x, y, 0.75, 0.75, 0.05) + 0.6 * _bump(x, y, 0.25, 0.3, 0.08)


def temperature(x: float, y: float) -> float:
    return 1.5 * _bump(x, y, 0.75, 0.75, 0.1) + 0.2 * x


def spec(algorithm: Algorithm, safety: bool, fraction: float | None = None) -> StudySpec:
    metric = MetricSpec(metric_id="temperature", goal=Goal.MINIMIZE,
                        safety_config=SafetyMetricConfig(safety_threshold=THRESHOLD, desired_min_safe_trials_fraction=fraction))
    return StudySpec(metrics=(MetricSpec(metric_id="score", goal=Goal.MAXIMIZE),), parameters=PARAMS,
                     algorithm=algorithm, safety_metrics=(metric,) if safety else ())


SAFETY = spec(Algorithm.RANDOM_SEARCH, True).safety_metrics


def best_safe_on_grid(n: int = 801) -> float:
    best = -math.inf
    for i in range(n):
        for j in range(n):
            x, y = i / (n - 1), j / (n - 1)
            if temperature(x, y) <= THRESHOLD:
                best = max(best, score(x, y))
    return best


def run(study: StudySpec, seed: int, trials: int) -> tuple[int, int, float]:
    """(unsafe trials, unsafe after the first 10, best safe score) of one study."""
    sug = get_suggester(study, seed=seed)
    unsafe = late = 0
    best = -math.inf
    for i in range(trials):
        p = sug.ask(1)[0].parameters
        x, y = float(p["x"]), float(p["y"])
        t = Trial(id=str(i + 1), parameters=p, state=TrialState.SUCCEEDED,
                  final_measurement=Measurement(step_count=1, metrics={"score": score(x, y), "temperature": temperature(x, y)}))
        t = replace(t, safe=is_safe(t, SAFETY))  # what the controller marks, safety told or not
        if t.safe:
            best = max(best, score(x, y))
        else:
            unsafe += 1
            late += i >= 10
        sug.tell(t)
    return unsafe, late, best


CONFIGS = {
    "random search": spec(Algorithm.RANDOM_SEARCH, False),
    "GP, no safetyConfig": spec(Algorithm.ALGORITHM_UNSPECIFIED, False),
    "GP, safetyConfig": spec(Algorithm.ALGORITHM_UNSPECIFIED, True),
    "GP, safetyConfig, desiredMinSafeTrialsFraction 0.9": spec(Algorithm.ALGORITHM_UNSPECIFIED, True, 0.9),
    "TPE, no safetyConfig": spec(Algorithm.TPE, False),
    "TPE, safetyConfig": spec(Algorithm.TPE, True),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=40)
    args = ap.parse_args()
    top = best_safe_on_grid()
    print(f"best safe score on the grid: {top:.4f}; unconstrained optimum 1.0 (unsafe)")
    print(f"| suggester | unsafe trials of {args.trials} (mean) | unsafe after the 10 random (mean) "
          "| median best safe score | median regret | seconds |")
    print("|---|---|---|---|---|---|")
    for name, study in CONFIGS.items():
        t0 = time.process_time()
        rows = [run(study, seed, args.trials) for seed in range(args.seeds)]
        cpu = time.process_time() - t0
        best = statistics.median(b for _, _, b in rows)
        print(f"| {name} | {statistics.mean(u for u, _, _ in rows):.1f} | {statistics.mean(v for _, v, _ in rows):.1f} "
              f"| {best:.4f} | {top - best:.2e} | {cpu:.0f} |", flush=True)


if __name__ == "__main__":
    main()
