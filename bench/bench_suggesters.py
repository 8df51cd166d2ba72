"""Benchmark vcli's suggesters against Optuna, Hyperopt and scikit-optimize, side by side.

    nice -n 10 python bench/bench_suggesters.py [--seeds 10] [--trials 60] [--quick]
        [--jobs 2] [--only vcli_gp,optuna_gp] [--problems branin,mixed5] [--cache FILE]

Problems (all minimised, known optimum f*; simple regret = best observed - f*):
  branin     2-D on [-5,10]x[0,15], f* = 0.397887
  hartmann6  6-D on [0,1]^6,         f* = -3.322368
  mixed5     lr log-uniform [1e-5,1], momentum [0,1], an inert float [0,1], layers int 1..8,
             optimizer in {sgd, adam, rmsprop, adagrad}; see `mixed5()`; f* = 0 at
             (adam, lr=1e-3, momentum=0.8, layers=6). Re-created from the description in
             /work/shared/reference/perf-anchors.md (same structure and scale: random-search
             median f = 2.6, 1st percentile 0.42), not the identical function.

Optimisers: vcli_gp (default Bayesian), vcli_random, vcli_skopt (bayesian_backend="skopt"),
vcli_tpe (algorithm TPE), optuna_tpe (TPESampler defaults), optuna_gp (GPSampler), hyperopt_tpe (fmin + tpe.suggest),
skopt_gp_minimize (gp_minimize defaults). q=4 means: ask 4 points, evaluate, tell 4
(vcli: ask(4); Optuna: 4 study.ask() before the tells, i.e. its running-trial handling;
hyperopt and gp_minimize have no batch mode here: n/a).

Every run is deterministic given its seed and runs in a worker process with one BLAS thread.
Results are cached as JSON lines (--cache) so re-runs only compute what is missing.
Also measures vcli_gp's and vcli_tpe's suggestion latency after 50/200/500 completed trials
(a history of random points on Hartmann6 and on mixed5), median of 3 asks; `--no-latency`
skips both, `--no-latency --tpe-latency` measures only vcli_tpe's.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor, as_completed  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# ---------------------------------------------------------------------------- problems
# A parameter: (name, kind, lo, hi, log, choices); kind in float / int / cat.

_HART_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
_HART_P = [
    [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
    [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
    [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
    [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
]
_HART_ALPHA = [1.0, 1.2, 3.0, 3.2]


def branin(p):
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def hartmann6(p):
    x = [p[f"x{i}"] for i in range(6)]
    total = 0.0
    for a, pp, al in zip(_HART_A, _HART_P, _HART_ALPHA):
        total -= al * math.exp(-sum(a[j] * (x[j] - pp[j]) ** 2 for j in range(6)))
    return total


_M5_OFFSET = {"sgd": 0.5, "adam": 0.0, "rmsprop": 0.3, "adagrad": 1.0}
_M5_LR_OPT = {"sgd": -1.5, "adam": -3.0, "rmsprop": -3.5, "adagrad": -1.0}


def mixed5(p):
    c = p["optimizer"]
    u = math.log10(p["lr"]) - _M5_LR_OPT[c]
    bowl = 0.45 * u * u + 0.15 * (1 - math.cos(2 * math.pi * u))  # quadratic with ripples
    m_opt = 0.5 + 0.05 * p["layers"]  # momentum optimum depends on layers (0.8 at 6)
    return _M5_OFFSET[c] + bowl + 3.0 * (p["momentum"] - m_opt) ** 2 + 0.08 * (p["layers"] - 6) ** 2


# ---- quantised (piecewise-constant) problems: plateaus with steps, as real objectives often are


def branin_step(p):
    """Branin floored to a multiple of 0.01: f* = 0.39 on the three plateaus where branin is
    within 0.0021 of its minimum; every other level is a step of 0.01."""
    return math.floor(branin(p) * 100.0) / 100.0


def hartmann6_step(p):
    """Hartmann6 rounded up to a multiple of 0.1: f* = -3.3 (where hartmann6 < -3.3, i.e. within
    0.022 of the optimum; the local minima at regret 0.119 and 0.18 sit at -3.2 and -3.1)."""
    return math.ceil(hartmann6(p) * 10.0 - 1e-12) / 10.0


def mixed5_int(p):
    """An integer-valued loss: round(10 * mixed5), f* = 0 (mixed5 < 0.05)."""
    return float(round(10.0 * mixed5(p)))


_SVM_DATA = None


def svm_digits(p):
    """1 - validation accuracy of an RBF SVC(C, gamma) on scikit-learn's bundled digits: 300
    training and 250 validation images (a fixed split), so the loss moves in steps of 1/250.
    f* = 0.032 is the best of a 121 x 121 log grid over the box (8 errors in 250; 289 of the
    14,641 grid points reach it, around C = 0.9..1e4, gamma = 0.02..0.2 in log space; the median
    grid point is 0.096, 207 distinct values); a run that finds a better point gets regret 0."""
    global _SVM_DATA
    import numpy as np
    from sklearn.svm import SVC

    if _SVM_DATA is None:
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        idx = np.random.default_rng(0).permutation(len(y))
        tr, va = idx[:300], idx[300:550]
        _SVM_DATA = (X[tr] / 16.0, y[tr], X[va] / 16.0, y[va])
    Xt, yt, Xv, yv = _SVM_DATA
    m = SVC(C=p["C"], gamma=p["gamma"], tol=1e-3).fit(Xt, yt)
    return float(np.mean(m.predict(Xv) != yv))


PROBLEMS = {
    "branin": (branin, 0.397887, [("x1", "float", -5.0, 10.0, False, None), ("x2", "float", 0.0, 15.0, False, None)]),
    "hartmann6": (hartmann6, -3.322368, [(f"x{i}", "float", 0.0, 1.0, False, None) for i in range(6)]),
    "mixed5": (
        mixed5,
        0.0,
        [
            ("lr", "float", 1e-5, 1.0, True, None),
            ("momentum", "float", 0.0, 1.0, False, None),
            ("inert", "float", 0.0, 1.0, False, None),
            ("layers", "int", 1, 8, False, None),
            ("optimizer", "cat", None, None, False, ("sgd", "adam", "rmsprop", "adagrad")),
        ],
    ),
}
PROBLEMS["branin_step"] = (branin_step, 0.39, PROBLEMS["branin"][2])
PROBLEMS["hartmann6_step"] = (hartmann6_step, -3.3, PROBLEMS["hartmann6"][2])
PROBLEMS["mixed5_int"] = (mixed5_int, 0.0, PROBLEMS["mixed5"][2])
PROBLEMS["svm_digits"] = (
    svm_digits,
    0.032,
    [("C", "float", 1e-2, 1e4, True, None), ("gamma", "float", 1e-5, 1.0, True, None)],
)
QUANTISED = ("branin_step", "hartmann6_step", "mixed5_int", "svm_digits")

# ---------------------------------------------------------------------------- optimisers


def _vcli_spec(space, algorithm):
    from vcli.spec import (
        CategoricalValueSpec,
        DoubleValueSpec,
        Goal,
        IntegerValueSpec,
        MetricSpec,
        ParameterSpec,
        ScaleType,
        StudySpec,
    )

    params = []
    for name, kind, lo, hi, log, choices in space:
        scale = ScaleType.UNIT_LOG_SCALE if log else ScaleType.UNIT_LINEAR_SCALE
        if kind == "float":
            vs = DoubleValueSpec(min_value=lo, max_value=hi)
        elif kind == "int":
            vs = IntegerValueSpec(min_value=lo, max_value=hi)
        else:
            vs = CategoricalValueSpec(values=choices)
        params.append(ParameterSpec(parameter_id=name, value_spec=vs, scale_type=scale))
    return StudySpec(metrics=(MetricSpec(metric_id="f", goal=Goal.MINIMIZE),), parameters=tuple(params), algorithm=algorithm)


def run_vcli(kind, fn, space, n, q, seed):
    from vcli.spec import Algorithm, Measurement, Trial, TrialState
    from vcli.tuning.suggesters import get_suggester

    algo = {"random": Algorithm.RANDOM_SEARCH, "tpe": Algorithm.TPE}.get(kind, Algorithm.ALGORITHM_UNSPECIFIED)
    backend = "skopt" if kind == "skopt" else "gp"
    s = get_suggester(_vcli_spec(space, algo), seed=seed, bayesian_backend=backend)
    # --vcli-attrs '{"quantised_noise": false}': set attributes of the suggester (A/B runs)
    for k, v in json.loads(os.environ.get("BENCH_VCLI_ATTRS", "{}")).items():
        setattr(s, k, v)
    ys, t_sugg = [], 0.0
    while len(ys) < n:
        t0 = time.process_time()
        batch = s.ask(min(q, n - len(ys)))
        t_sugg += time.process_time() - t0
        for sug in batch:
            v = fn(dict(sug.parameters))
            ys.append(v)
            t0 = time.process_time()
            s.tell(
                Trial(
                    id=str(len(ys)),
                    parameters=sug.parameters,
                    state=TrialState.SUCCEEDED,
                    final_measurement=Measurement(step_count=1, metrics={"f": v}),
                )
            )
            t_sugg += time.process_time() - t0
    return ys, t_sugg / n


def run_optuna(kind, fn, space, n, q, seed):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    sampler = optuna.samplers.GPSampler(seed=seed) if kind == "gp" else optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(sampler=sampler, direction="minimize")
    ys, t_sugg = [], 0.0
    while len(ys) < n:
        t0 = time.process_time()
        trials, params = [], []
        for _ in range(min(q, n - len(ys))):
            t = study.ask()
            p = {}
            for name, k, lo, hi, log, choices in space:
                if k == "float":
                    p[name] = t.suggest_float(name, lo, hi, log=log)
                elif k == "int":
                    p[name] = t.suggest_int(name, lo, hi, log=log)
                else:
                    p[name] = t.suggest_categorical(name, list(choices))
            trials.append(t)
            params.append(p)
        t_sugg += time.process_time() - t0
        vals = [fn(p) for p in params]
        t0 = time.process_time()
        for t, v in zip(trials, vals):
            study.tell(t, v)
            ys.append(v)
        t_sugg += time.process_time() - t0
    return ys, t_sugg / n


def _optuna(kind, fn, space, n, q, seed):
    import importlib.util

    if importlib.util.find_spec("torch") and importlib.util.find_spec("optuna"):
        return run_optuna(kind, fn, space, n, q, seed)
    return run_worker(f"optuna_{kind}", fn, space, n, q, seed)


def run_hyperopt(fn, space, n, seed):
    import logging

    import numpy as np
    from hyperopt import Trials, fmin, hp, tpe

    logging.getLogger("hyperopt").setLevel(logging.ERROR)
    hspace = {}
    for name, k, lo, hi, log, choices in space:
        if k == "float":
            hspace[name] = hp.loguniform(name, math.log(lo), math.log(hi)) if log else hp.uniform(name, lo, hi)
        elif k == "int":
            hspace[name] = hp.uniformint(name, lo, hi)
        else:
            hspace[name] = hp.choice(name, list(choices))
    ys = []
    int_names = {name for name, k, *_ in space if k == "int"}

    def obj(p):
        p = {k: (int(round(v)) if k in int_names else v) for k, v in p.items()}
        v = fn(p)
        ys.append(v)
        return v

    t0 = time.process_time()
    fmin(obj, hspace, algo=tpe.suggest, max_evals=n, trials=Trials(), rstate=np.random.default_rng(seed), show_progressbar=False)
    return ys, (time.process_time() - t0) / n


def run_gp_minimize(fn, space, n, seed):
    import warnings

    from skopt import gp_minimize
    from skopt.space import Categorical, Integer, Real

    warnings.filterwarnings("ignore")
    dims, names = [], []
    for name, k, lo, hi, log, choices in space:
        names.append(name)
        if k == "float":
            dims.append(Real(lo, hi, prior="log-uniform" if log else "uniform"))
        elif k == "int":
            dims.append(Integer(lo, hi))
        else:
            dims.append(Categorical(list(choices)))
    ys = []

    def obj(x):
        p = {nm: (v.item() if hasattr(v, "item") else v) for nm, v in zip(names, x)}
        v = fn(p)
        ys.append(v)
        return v

    t0 = time.process_time()
    gp_minimize(obj, dims, n_calls=n, random_state=seed)
    return ys, (time.process_time() - t0) / n


# ---------------------------------------------------------------------------- anchors
# Optimisers that live in their own venv (bench/anchors/make_envs.sh creates them under
# $BENCH_ENVS, default /work/bench-envs): the bench starts bench/anchors/worker.py there for
# each run and talks ask/tell over a pipe; the objective is evaluated here.

BENCH_ENVS = Path(os.environ.get("BENCH_ENVS", "/work/bench-envs"))
ANCHOR_ENV = {"optuna_gp": "torch", "optuna_tpe": "torch", "ax": "torch", "smac": "smac", "hebo": "hebo", "vizier": "vizier"}


def run_worker(opt, fn, space, n, q, seed):
    import subprocess
    import tempfile

    py = BENCH_ENVS / ANCHOR_ENV[opt] / "bin" / "python"
    if not py.exists():
        raise RuntimeError(f"{py} missing: run bench/anchors/make_envs.sh {ANCHOR_ENV[opt]}")
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([str(py), str(ROOT / "bench" / "anchors" / "worker.py"), opt], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=err, text=True)

    def call(msg):
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            err.seek(0)
            raise RuntimeError(f"{opt} worker died (rc {proc.returncode}): " + err.read()[-2000:])
        return json.loads(line)

    try:
        call({"cmd": "init", "space": [list(x) for x in space], "seed": seed, "n": n})
        ys, cpu, asks = [], 0.0, []
        while len(ys) < n:
            r = call({"cmd": "ask", "q": min(q, n - len(ys))})
            asks.append(r["cpu"])
            vals = [fn(pt) for pt in r["points"]]
            cpu += r["cpu"] + call({"cmd": "tell", "values": vals})["cpu"]
            ys += vals
        return ys[:n], cpu / len(ys)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def _anchor(opt):
    return lambda fn, sp, n, q, s: run_worker(opt, fn, sp, n, q, s)


OPTIMIZERS = {
    # name: (runner, supports q=4)
    "vcli_gp": (lambda fn, sp, n, q, s: run_vcli("gp", fn, sp, n, q, s), True),
    "vcli_random": (lambda fn, sp, n, q, s: run_vcli("random", fn, sp, n, q, s), False),
    "vcli_skopt": (lambda fn, sp, n, q, s: run_vcli("skopt", fn, sp, n, q, s), True),
    "vcli_tpe": (lambda fn, sp, n, q, s: run_vcli("tpe", fn, sp, n, q, s), True),
    # Optuna in this interpreter if it has torch, else in the anchors' torch venv (same versions)
    "optuna_tpe": (lambda fn, sp, n, q, s: _optuna("tpe", fn, sp, n, q, s), True),
    "optuna_gp": (lambda fn, sp, n, q, s: _optuna("gp", fn, sp, n, q, s), True),
    "ax": (_anchor("ax"), True),
    "smac": (_anchor("smac"), True),
    "hebo": (_anchor("hebo"), True),
    "vizier": (_anchor("vizier"), True),
    "hyperopt_tpe": (lambda fn, sp, n, q, s: run_hyperopt(fn, sp, n, s), False),
    "skopt_gp_minimize": (lambda fn, sp, n, q, s: run_gp_minimize(fn, sp, n, s), False),
}


def regret_curve(ys, fstar):
    """Simple regret after each trial: the best value so far less f*, clipped at 0."""
    best, curve = math.inf, []
    for v in ys:
        best = min(best, v)
        curve.append(max(0.0, best - fstar))
    return curve


def one_run(problem, opt, q, seed, n):
    fn, fstar, space = PROBLEMS[problem]
    t0 = time.time()
    ys, cpu_per_sugg = OPTIMIZERS[opt][0](fn, space, n, q, seed)
    curve = regret_curve(ys, fstar)
    return {
        "problem": problem, "opt": opt, "q": q, "seed": seed, "n": n,
        "regret": curve, "ys": ys, "cpu_s_per_suggestion": cpu_per_sugg, "wall_s": time.time() - t0,
    }


# ---------------------------------------------------------------------------- latency


def latency(n_hist_list=(50, 200, 500), reps=3, algorithm="ALGORITHM_UNSPECIFIED"):
    """Wall seconds of ask(1) and ask(4) of `algorithm` (vcli's default: the GP) after
    n_hist completed trials, median of `reps` suggesters (seeds 0..reps-1)."""
    import numpy as np

    from vcli.spec import Algorithm, Measurement, Trial, TrialState
    from vcli.tuning.suggesters import get_suggester

    rows = []
    for problem in ("hartmann6", "mixed5"):
        fn, _, space = PROBLEMS[problem]
        spec = _vcli_spec(space, Algorithm.RANDOM_SEARCH)
        rnd = get_suggester(spec, seed=123)
        hist = [dict(s.parameters) for s in rnd.ask(max(n_hist_list))]
        warm = get_suggester(_vcli_spec(space, Algorithm(algorithm)), seed=reps)
        for i, p in enumerate(hist[:20]):  # an untimed ask first: the first one pays scipy's imports
            warm.tell(Trial(id=str(i), parameters=p, state=TrialState.SUCCEEDED,
                            final_measurement=Measurement(step_count=1, metrics={"f": fn(p)})))
        warm.ask(4)
        for n_hist in n_hist_list:
            times = {1: [], 4: []}
            for rep in range(reps):
                s = get_suggester(_vcli_spec(space, Algorithm(algorithm)), seed=rep)
                for i, p in enumerate(hist[:n_hist]):
                    s.tell(Trial(id=str(i), parameters=p, state=TrialState.SUCCEEDED,
                                 final_measurement=Measurement(step_count=1, metrics={"f": fn(p)})))
                for q in (1, 4):
                    t0 = time.perf_counter()
                    s.ask(q)
                    times[q].append(time.perf_counter() - t0)
            rows.append((problem, n_hist, float(np.median(times[1])), float(np.median(times[4]))))
    return rows


# ---------------------------------------------------------------------------- report


def _fmt(x):
    if x == 0:
        return "0"
    if abs(x) >= 0.01:
        return f"{x:.3f}"
    return f"{x:.1e}"


def summarise(results, problems, opts, seeds, n):
    import numpy as np

    checkpoints = [c for c in (30, 60) if c <= n] or [n]
    idx = {(r["problem"], r["opt"], r["q"], r["seed"]): r for r in results}
    lines = []
    med = {}
    for problem in problems:
        lines.append(f"\n#### {problem}\n")
        hdr = "| optimizer | q | seeds | " + " | ".join(f"regret@{c} median [Q1, Q3]" for c in checkpoints)
        hdr += f" | solved@{checkpoints[-1]} (regret < 1e-3) | cpu ms/suggestion |"
        lines.append(hdr)
        lines.append("|" + "---|" * (5 + len(checkpoints)))
        for opt in opts:
            for q in (1, 4):
                runs = [idx.get((problem, opt, q, s)) for s in seeds]
                runs = [r for r in runs if r]
                if not runs:
                    if q == 4 and not OPTIMIZERS[opt][1]:
                        lines.append(f"| {opt} | 4 | n/a | " + " | ".join("n/a" for _ in checkpoints) + " | n/a | n/a |")
                    continue
                cells = []
                for c in checkpoints:
                    v = np.array([r["regret"][c - 1] for r in runs])
                    m, q1, q3 = np.median(v), np.percentile(v, 25), np.percentile(v, 75)
                    med[(problem, opt, q, c)] = m
                    cells.append(f"{_fmt(m)} [{_fmt(q1)}, {_fmt(q3)}]")
                cpu = np.median([r["cpu_s_per_suggestion"] for r in runs]) * 1000
                solved = sum(r["regret"][checkpoints[-1] - 1] < 1e-3 for r in runs)
                lines.append(
                    f"| {opt} | {q} | {len(runs)} | " + " | ".join(cells) + f" | {solved}/{len(runs)} | {cpu:.1f} |"
                )
    # ratios
    lines.append("\n#### vcli_gp vs Optuna GPSampler, and q=4 vs q=1 (median regret ratios; < 1 = vcli better)\n")
    lines.append("| problem | " + " | ".join(f"vcli/GPSampler q=1 @{c}" for c in checkpoints) + " | "
                 + " | ".join(f"vcli/GPSampler q=4 @{c}" for c in checkpoints) + " | "
                 + " | ".join(f"vcli q4/q1 @{c}" for c in checkpoints) + " | "
                 + " | ".join(f"GPSampler q4/q1 @{c}" for c in checkpoints) + " |")
    lines.append("|" + "---|" * (1 + 4 * len(checkpoints)))

    def ratio(a, b):
        if a is None or b is None:
            return "n/a"
        if b == 0:
            return "inf" if a > 0 else "1 (both 0)"
        return f"{a / b:.2f}"

    for problem in problems:
        cells = []
        for q in (1, 4):
            for c in checkpoints:
                cells.append(ratio(med.get((problem, "vcli_gp", q, c)), med.get((problem, "optuna_gp", q, c))))
        for opt in ("vcli_gp", "optuna_gp"):
            for c in checkpoints:
                cells.append(ratio(med.get((problem, opt, 4, c)), med.get((problem, opt, 1, c))))
        lines.append(f"| {problem} | " + " | ".join(cells) + " |")
    lines.append(significance(results, problems, opts, seeds, checkpoints))
    lines.append(standing(results, problems, opts, seeds, checkpoints))
    if "vcli_tpe" in opts:
        lines.append("\n#### vcli_tpe vs Optuna TPE and Hyperopt TPE (median regret ratios; < 1 = vcli better)\n")
        cols = [(ref, q, c) for ref, qs in (("optuna_tpe", (1, 4)), ("hyperopt_tpe", (1,))) for q in qs for c in checkpoints]
        lines.append("| problem | " + " | ".join(f"vcli/{ref} q={q} @{c}" for ref, q, c in cols) + " |")
        lines.append("|" + "---|" * (1 + len(cols)))
        for problem in problems:
            cells = [ratio(med.get((problem, "vcli_tpe", q, c)), med.get((problem, ref, q, c))) for ref, q, c in cols]
            lines.append(f"| {problem} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mwu(a, b):
    """(median ratio text, two-sided Mann-Whitney U p, "better" / "behind" / "tied" for a at
    p < 0.05) of two samples of regrets."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma, mb = float(np.median(a)), float(np.median(b))
    ratio = "1 (both 0)" if ma == mb == 0 else ("inf" if mb == 0 else f"{ma / mb:.2f}")
    if np.all(a == a[0]) and np.all(b == a[0]):
        return ratio, 1.0, "tied"
    res = mannwhitneyu(a, b)
    pv, u = float(res.pvalue), float(res.statistic)
    if pv >= 0.05:
        return ratio, pv, "tied"
    # U < n_a n_b / 2: a's regrets tend to be the smaller
    return ratio, pv, "better" if u < 0.5 * len(a) * len(b) else "behind"


def _runs(idx, problem, opt, q, seeds):
    return [r for r in (idx.get((problem, opt, q, s)) for s in seeds) if r]


def significance(results, problems, opts, seeds, checkpoints, ref="vcli_gp"):
    """`ref` against every other optimiser: median-regret ratio and the two-sided Mann-Whitney
    U p-value of the two samples of regrets (same seeds), per problem, q and checkpoint.
    Verdict: better / behind at p < 0.05, else tied."""
    idx = {(r["problem"], r["opt"], r["q"], r["seed"]): r for r in results}
    peers = [o for o in opts if o != ref and o not in ("vcli_random",)]
    if ref not in opts or not peers:
        return ""
    out = [f"\n#### {ref} against each peer (ratio of median regrets, < 1 = {ref} better; "
           "Mann-Whitney U two-sided p; verdict at p < 0.05)\n",
           "| problem | q | peer | " + " | ".join(f"ratio @{c} | p @{c}" for c in checkpoints) + " | verdict |",
           "|" + "---|" * (4 + 2 * len(checkpoints))]
    for problem in problems:
        for q in (1, 4):
            a_runs = _runs(idx, problem, ref, q, seeds)
            if not a_runs:
                continue
            for peer in peers:
                b_runs = _runs(idx, problem, peer, q, seeds)
                if not b_runs:
                    continue
                cells, verdicts = [], []
                for c in checkpoints:
                    ratio, pv, verdict = _mwu([r["regret"][c - 1] for r in a_runs], [r["regret"][c - 1] for r in b_runs])
                    cells.append(f"{ratio} | {pv:.3g}")
                    verdicts.append(f"{verdict} @{c}")
                out.append(f"| {problem} | {q} | {peer} ({len(a_runs)}/{len(b_runs)} seeds) | " + " | ".join(cells)
                           + " | " + ", ".join(verdicts) + " |")
    return "\n".join(out)


def standing(results, problems, opts, seeds, checkpoints, ref="vcli_gp", min_seeds=20):
    """Where `ref` stands among the model-based peers, per problem, q and checkpoint:
    **best** (better than every peer, p < 0.05), **tied** (no peer better; the peers it does
    not beat are named), **behind** (the peers better than it, with p). Only peers with at
    least `min_seeds` runs take part; the ones with fewer are listed as left out."""
    idx = {(r["problem"], r["opt"], r["q"], r["seed"]): r for r in results}
    peers = [o for o in opts if o != ref and o not in ("vcli_random", "vcli_skopt", "vcli_tpe")]
    out = [f"\n#### Where {ref} stands (Mann-Whitney U two-sided, p < 0.05; peers with >= {min_seeds} seeds)\n",
           "| problem | q | " + " | ".join(f"@{c}" for c in checkpoints) + " | peers (seeds) |",
           "|" + "---|" * (3 + len(checkpoints))]
    for problem in problems:
        for q in (1, 4):
            a_runs = _runs(idx, problem, ref, q, seeds)
            if not a_runs:
                continue
            have = {p: _runs(idx, problem, p, q, seeds) for p in peers}
            used = [p for p in peers if len(have[p]) >= min_seeds]
            if not used:
                continue
            cells = []
            for c in checkpoints:
                a = [r["regret"][c - 1] for r in a_runs]
                res = {p: _mwu(a, [r["regret"][c - 1] for r in have[p]]) for p in used}
                behind = [f"{p} (p {res[p][1]:.2g})" for p in used if res[p][2] == "behind"]
                level = [p for p in used if res[p][2] == "tied"]
                if behind:
                    cells.append("**behind** " + ", ".join(behind))
                elif level:
                    cells.append("tied with " + ", ".join(level))
                else:
                    cells.append("**best**")
            left = [f"{p} ({len(have[p])})" for p in peers if 0 < len(have[p]) < min_seeds]
            note = ", ".join(f"{p} ({len(have[p])})" for p in used) + ("; left out: " + ", ".join(left) if left else "")
            out.append(f"| {problem} | {q} | " + " | ".join(cells) + f" | {note} |")
    return "\n".join(out)


def _open_cache(path, mode):
    """The --cache file; a .gz one is read and appended to as gzip members."""
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, mode, encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed-from", type=int, default=0, help="first seed (seeds run from it to --seeds - 1)")
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="3 seeds, 30 trials, cheap optimisers only, no latency")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated optimisers")
    ap.add_argument("--problems", default="", help="comma-separated problems")
    ap.add_argument("--qs", default="1,4")
    ap.add_argument("--cache", default="", help="JSON-lines file of finished runs (read and appended)")
    ap.add_argument("--report-only", action="store_true", help="no new runs: the tables of what --cache holds")
    ap.add_argument("--recompute", default="", help="comma-separated optimisers whose cached runs are ignored")
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--tpe-latency", action="store_true", help="measure vcli_tpe's latency even with --no-latency")
    ap.add_argument("--latency-n", default="50,200,500", help="completed trials before the timed asks")
    ap.add_argument("--latency-only", action="store_true", help="only vcli_gp's latency table")
    ap.add_argument("--vcli-attrs", default="", help="JSON object of attributes set on vcli's suggesters "
                    "(an A/B run of a setting; use its own --cache)")
    args = ap.parse_args(argv)
    if args.vcli_attrs:
        os.environ["BENCH_VCLI_ATTRS"] = args.vcli_attrs
    seeds = list(range(0 if args.quick else args.seed_from, 3 if args.quick else args.seeds))
    n = 30 if args.quick else args.trials
    opts = [o for o in (args.only.split(",") if args.only else OPTIMIZERS)]
    if args.quick and not args.only:
        opts = ["vcli_gp", "vcli_random", "optuna_tpe", "optuna_gp"]
    problems = args.problems.split(",") if args.problems else list(PROBLEMS)
    qs = [int(x) for x in args.qs.split(",")]

    lat_n = tuple(int(x) for x in args.latency_n.split(","))
    if args.latency_only:
        print(f"#### vcli_gp suggestion latency (wall s, median of 3; history = random points; load avg {os.getloadavg()[0]:.1f})\n")
        print("| problem | completed trials | ask(1) | ask(4) |")
        print("|---|---|---|---|")
        for problem, nh, t1, t4 in latency(lat_n):
            print(f"| {problem} | {nh} | {t1:.3f} | {t4:.3f} |", flush=True)
        return
    results, have = [], set()
    if args.cache and Path(args.cache).exists():
        with _open_cache(args.cache, "rt") as f:
            lines = f.read().splitlines()
        for line in lines:
            r = json.loads(line)
            if r["n"] >= n and r["opt"] not in args.recompute.split(","):
                r["regret"] = r["regret"][:n]
                results.append(r)
                have.add((r["problem"], r["opt"], r["q"], r["seed"]))
    jobs = [
        (p, o, q, s)
        for p in problems
        for o in opts
        for q in qs
        if q == 1 or OPTIMIZERS[o][1]
        for s in seeds
        if (p, o, q, s) not in have and not args.report_only
    ]
    t_start = time.time()
    print(f"# {len(jobs)} runs to do ({len(results)} cached), {args.jobs} workers", file=sys.stderr, flush=True)
    cache = _open_cache(args.cache, "at") if args.cache and jobs else None
    with ProcessPoolExecutor(max_workers=args.jobs) as ex:
        futs = {ex.submit(one_run, p, o, q, s, n): (p, o, q, s) for p, o, q, s in jobs}
        for i, fut in enumerate(as_completed(futs), 1):
            key = futs[fut]
            try:
                r = fut.result()
            except Exception as e:  # report and go on
                print(f"# FAILED {key}: {e!r}", file=sys.stderr, flush=True)
                continue
            results.append(r)
            if cache:
                cache.write(json.dumps(r) + "\n")
                cache.flush()
            print(f"# [{i}/{len(jobs)}] {key} regret@{n}={r['regret'][-1]:.3g} wall {r['wall_s']:.1f}s", file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(f"## Suggester benchmark: {len(seeds)} seeds, {n} trials "
          f"(wall {time.time() - t_start:.0f} s, load avg {load[0]:.1f})")
    print(summarise(results, problems, opts, seeds, n))
    if not (args.quick or args.no_latency):
        print("\n#### vcli_gp suggestion latency (wall s, median of 3; history = random points)\n")
        print("| problem | completed trials | ask(1) | ask(4) |")
        print("|---|---|---|---|")
        for problem, nh, t1, t4 in latency(lat_n):
            print(f"| {problem} | {nh} | {t1:.3f} | {t4:.3f} |")
    if not args.quick and (args.tpe_latency or not args.no_latency):
        print("\n#### vcli_tpe suggestion latency (wall s, median of 3; history = random points)\n")
        print("| problem | completed trials | ask(1) | ask(4) |")
        print("|---|---|---|---|")
        for problem, nh, t1, t4 in latency(algorithm="TPE"):
            print(f"| {problem} | {nh} | {t1:.3f} | {t4:.3f} |")


if __name__ == "__main__":
    main()
