"""Multi-objective: hypervolume after 60 trials, vcli vs Optuna's NSGA-II and default sampler.

    nice -n 10 python bench/bench_multiobjective.py [--seeds 5] [--trials 60] [--quick]
        [--jobs 1] [--only vcli_gp,optuna_nsga2] [--problems zdt1] [--cache FILE]

Problems (two objectives each; the hypervolume is against a fixed reference point and is
reported as a fraction of the true front's hypervolume, so 1.0 is the best possible):
  zdt1      4 floats on [0,1]; f1 = x0, g = 1 + 3 (x1 + x2 + x3), f2 = g (1 - sqrt(f1 / g)),
            both minimised; front f2 = 1 - sqrt(f1); reference (1.1, 1.1); best HV 1.21 - 1/3.
  mlp_cost  a mixed space: lr log-uniform [1e-5, 1], momentum [0,1], layers int 1..8,
            optimizer in {sgd, adam, rmsprop, adagrad}. loss (MINIMIZE) is bench_suggesters'
            mixed5 without the inert parameter; throughput (MAXIMIZE) = 1 / (0.2 + 0.1 *
            layers * cost(optimizer)), cost = {sgd 1.0, adam 1.5, rmsprop 1.3, adagrad 1.1}:
            fewer layers and a cheaper optimizer are faster but less accurate. The true front
            is the non-dominated (layers, optimizer) pairs at their best lr and momentum, so
            its hypervolume is exact. Reference (loss 3.0, throughput 0.5).

Optimisers: vcli_gp = get_suggester(spec) (the default Bayesian backend: ParEGO on vcli's GP),
q = 1 and q = 4 (ask 4, evaluate, tell 4); vcli_skopt (bayesian_backend="skopt", ParEGO on
skopt's GP); vcli_random = RANDOM_SEARCH; optuna_nsga2 = NSGAIISampler(seed) (defaults:
population 50); optuna_default = TPESampler(seed), which is what
`optuna.create_study(directions=[...])` uses when given no sampler (checked at run time).
Every run is deterministic given its seed and runs in a worker process with one BLAS thread.
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

from vcli.tuning.pareto import hypervolume, non_dominated_sort  # noqa: E402

# ---------------------------------------------------------------------------- problems
# A parameter: (name, kind, lo, hi, log, choices); kind in float / int / cat.


def zdt1(p):
    x = [p[f"x{i}"] for i in range(4)]
    g = 1 + 9 * sum(x[1:]) / 3
    return {"f1": x[0], "f2": g * (1 - math.sqrt(x[0] / g))}


_OFFSET = {"sgd": 0.5, "adam": 0.0, "rmsprop": 0.3, "adagrad": 1.0}
_LR_OPT = {"sgd": -1.5, "adam": -3.0, "rmsprop": -3.5, "adagrad": -1.0}
_COST = {"sgd": 1.0, "adam": 1.5, "rmsprop": 1.3, "adagrad": 1.1}


def _throughput(layers, opt):
    return 1.0 / (0.2 + 0.1 * layers * _COST[opt])


def mlp_cost(p):
    c = p["optimizer"]
    u = math.log10(p["lr"]) - _LR_OPT[c]
    bowl = 0.45 * u * u + 0.15 * (1 - math.cos(2 * math.pi * u))
    m_opt = 0.5 + 0.05 * p["layers"]
    loss = _OFFSET[c] + bowl + 3.0 * (p["momentum"] - m_opt) ** 2 + 0.08 * (p["layers"] - 6) ** 2
    return {"loss": loss, "throughput": _throughput(p["layers"], c)}


def _mlp_cost_best_hv(reference, goals):
    pts = [(_OFFSET[c] + 0.08 * (n - 6) ** 2, _throughput(n, c)) for c in _OFFSET for n in range(1, 9)]
    return hypervolume(pts, reference, goals)


PROBLEMS = {
    # name: (function, space, ((metric id, goal), ...), reference point, best hypervolume)
    "zdt1": (
        zdt1,
        [(f"x{i}", "float", 0.0, 1.0, False, None) for i in range(4)],
        (("f1", "MINIMIZE"), ("f2", "MINIMIZE")),
        (1.1, 1.1),
        1.1 * 1.1 - 1 / 3,
    ),
    "mlp_cost": (
        mlp_cost,
        [
            ("lr", "float", 1e-5, 1.0, True, None),
            ("momentum", "float", 0.0, 1.0, False, None),
            ("layers", "int", 1, 8, False, None),
            ("optimizer", "cat", None, None, False, tuple(_OFFSET)),
        ],
        (("loss", "MINIMIZE"), ("throughput", "MAXIMIZE")),
        (3.0, 0.5),
        _mlp_cost_best_hv((3.0, 0.5), ("MINIMIZE", "MAXIMIZE")),
    ),
}

# ---------------------------------------------------------------------------- optimisers


def _vcli_spec(space, metrics, algorithm):
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
    ms = tuple(MetricSpec(metric_id=m, goal=Goal(g)) for m, g in metrics)
    return StudySpec(metrics=ms, parameters=tuple(params), algorithm=algorithm)


def run_vcli(kind, fn, space, metrics, n, q, seed):
    from vcli.spec import Algorithm, Measurement, Trial, TrialState
    from vcli.tuning.suggesters import get_suggester

    algo = Algorithm.RANDOM_SEARCH if kind == "random" else Algorithm.ALGORITHM_UNSPECIFIED
    backend = "skopt" if kind == "skopt" else "gp"
    s = get_suggester(_vcli_spec(space, metrics, algo), seed=seed, bayesian_backend=backend)
    ys, t_sugg = [], 0.0
    while len(ys) < n:
        t0 = time.process_time()
        batch = s.ask(min(q, n - len(ys)))
        t_sugg += time.process_time() - t0
        for sug in batch:
            v = fn(dict(sug.parameters))
            ys.append([v[m] for m, _ in metrics])
            t0 = time.process_time()
            s.tell(
                Trial(
                    id=str(len(ys)),
                    parameters=sug.parameters,
                    state=TrialState.SUCCEEDED,
                    final_measurement=Measurement(step_count=1, metrics=v),
                )
            )
            t_sugg += time.process_time() - t0
    return ys, t_sugg / n


def run_optuna(kind, fn, space, metrics, n, q, seed):
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    directions = [g.lower() for _, g in metrics]
    if kind == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(seed=seed)
    else:  # the default multi-objective sampler, seeded
        default = optuna.create_study(directions=directions).sampler
        sampler = type(default)(seed=seed)
    study = optuna.create_study(sampler=sampler, directions=directions)
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
            study.tell(t, [v[m] for m, _ in metrics])
            ys.append([v[m] for m, _ in metrics])
        t_sugg += time.process_time() - t0
    return ys, t_sugg / n


OPTIMIZERS = {
    # name: (runner, supports q=4)
    "vcli_gp": (lambda *a: run_vcli("gp", *a), True),
    "vcli_skopt": (lambda *a: run_vcli("skopt", *a), False),
    "vcli_random": (lambda *a: run_vcli("random", *a), False),
    "optuna_nsga2": (lambda *a: run_optuna("nsga2", *a), False),
    "optuna_default": (lambda *a: run_optuna("default", *a), True),
}

CHECKPOINTS = (30, 60)


def one_run(problem, opt, q, seed, n):
    fn, space, metrics, ref, best = PROBLEMS[problem]
    t0 = time.time()
    ys, cpu = OPTIMIZERS[opt][0](fn, space, metrics, n, q, seed)
    goals = [g for _, g in metrics]
    hv = {c: hypervolume(ys[:c], ref, goals) / best for c in CHECKPOINTS if c <= n}
    front = len(non_dominated_sort(ys, goals)[0])
    return {
        "problem": problem, "opt": opt, "q": q, "seed": seed, "n": n, "values": ys,
        "hv": {str(c): v for c, v in hv.items()}, "front": front,
        "cpu_s_per_suggestion": cpu, "wall_s": time.time() - t0,
    }


# ---------------------------------------------------------------------------- report


def _quantiles(v):
    v = sorted(v)

    def q(p):
        x = p * (len(v) - 1)
        lo = math.floor(x)
        return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (x - lo)

    return q(0.5), q(0.25), q(0.75)


def summarise(results, problems, opts, seeds, n):
    cps = [c for c in CHECKPOINTS if c <= n]
    idx = {(r["problem"], r["opt"], r["q"], r["seed"]): r for r in results}
    lines, med = [], {}
    for problem in problems:
        lines.append(f"\n#### {problem}\n")
        lines.append("| optimizer | q | seeds | " + " | ".join(f"HV@{c} median [Q1, Q3]" for c in cps)
                     + f" | front size@{n} | cpu ms/suggestion |")
        lines.append("|" + "---|" * (5 + len(cps)))
        for opt in opts:
            for q in (1, 4):
                runs = [r for s in seeds if (r := idx.get((problem, opt, q, s)))]
                if not runs:
                    continue
                cells = []
                for c in cps:
                    m, q1, q3 = _quantiles([r["hv"][str(c)] for r in runs])
                    med[(problem, opt, q, c)] = m
                    cells.append(f"{m:.3f} [{q1:.3f}, {q3:.3f}]")
                front = _quantiles([r["front"] for r in runs])[0]
                cpu = _quantiles([r["cpu_s_per_suggestion"] for r in runs])[0] * 1000
                lines.append(f"| {opt} | {q} | {len(runs)} | " + " | ".join(cells) + f" | {front:.0f} | {cpu:.1f} |")
    peers = [o for o in ("optuna_nsga2", "optuna_default", "vcli_random") if o in opts]
    if "vcli_gp" in opts and peers:
        lines.append("\n#### vcli_gp (q=1) hypervolume / peer's (median ratios; > 1 = vcli better)\n")
        cols = [(p, c) for p in peers for c in cps]
        lines.append("| problem | " + " | ".join(f"vs {p} @{c}" for p, c in cols) + " |")
        lines.append("|" + "---|" * (1 + len(cols)))
        for problem in problems:
            cells = []
            for p, c in cols:
                a, b = med.get((problem, "vcli_gp", 1, c)), med.get((problem, p, 1, c))
                cells.append("n/a" if a is None or b is None else ("inf" if b == 0 else f"{a / b:.2f}"))
            lines.append(f"| {problem} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _check_against_optuna(results):
    """vcli.tuning.pareto.hypervolume agrees with Optuna's on the benchmark's own fronts."""
    try:
        import numpy as np
        from optuna._hypervolume import compute_hypervolume
    except ImportError:
        return "optuna not installed: hypervolume not cross-checked"
    worst = 0.0
    for r in results[:20]:
        _, _, metrics, ref, _ = PROBLEMS[r["problem"]]
        signs = [-1.0 if g == "MAXIMIZE" else 1.0 for _, g in metrics]
        pts = np.array([[s * v for s, v in zip(signs, y)] for y in r["values"]])
        rp = np.array([s * v for s, v in zip(signs, ref)])
        pts = pts[np.all(pts < rp, axis=1)]
        theirs = compute_hypervolume(pts, rp) if len(pts) else 0.0
        ours = hypervolume(r["values"], ref, [g for _, g in metrics])
        worst = max(worst, abs(ours - theirs) / max(theirs, 1e-12))
    return f"hypervolume cross-checked against optuna._hypervolume on {min(20, len(results))} runs: max rel. diff {worst:.1e}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="2 seeds, 30 trials, no skopt, no q=4")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated optimisers")
    ap.add_argument("--problems", default="", help="comma-separated problems")
    ap.add_argument("--cache", default="", help="JSON-lines file of finished runs (read and appended)")
    args = ap.parse_args(argv)
    seeds = list(range(2 if args.quick else args.seeds))
    n = 30 if args.quick else args.trials
    opts = args.only.split(",") if args.only else list(OPTIMIZERS)
    if args.quick and not args.only:
        opts.remove("vcli_skopt")
    qs = (1,) if args.quick else (1, 4)
    problems = args.problems.split(",") if args.problems else list(PROBLEMS)

    results, have = [], set()
    if args.cache and Path(args.cache).exists():
        for line in Path(args.cache).read_text().splitlines():
            r = json.loads(line)
            if r["n"] == n:
                results.append(r)
                have.add((r["problem"], r["opt"], r["q"], r["seed"]))
    jobs = [
        (p, o, q, s)
        for p in problems
        for o in opts
        for q in qs
        if q == 1 or OPTIMIZERS[o][1]
        for s in seeds
        if (p, o, q, s) not in have
    ]
    t_start = time.time()
    print(f"# {len(jobs)} runs to do ({len(results)} cached), {args.jobs} workers", file=sys.stderr, flush=True)
    cache = open(args.cache, "a") if args.cache else None
    with ProcessPoolExecutor(max_workers=args.jobs) as ex:
        futs = {ex.submit(one_run, p, o, q, s, n): (p, o, q, s) for p, o, q, s in jobs}
        for i, fut in enumerate(as_completed(futs), 1):
            r = fut.result()
            results.append(r)
            if cache:
                cache.write(json.dumps(r) + "\n")
                cache.flush()
            print(f"# [{i}/{len(jobs)}] {futs[fut]} HV@{n}={r['hv'].get(str(n), float('nan')):.3f} "
                  f"wall {r['wall_s']:.1f}s", file=sys.stderr, flush=True)
    import platform

    print(f"## Multi-objective ({len(seeds)} seeds, {n} trials; HV as a fraction of the true front's)")
    print(f"wall {time.time() - t_start:.0f}s, load average {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}")
    print(summarise(results, problems, opts, seeds, n))
    print("\n" + _check_against_optuna(results))


if __name__ == "__main__":
    main()
