"""Population Based Training on a toy problem with a time-varying optimum (issue #9).

    python bench/bench_pbt.py               # 10 seeds; Ray Tune's PBT on 3 of them if installed
    python bench/bench_pbt.py --ray-seeds 10 --quick
    nice -n 10 python bench/bench_pbt.py --real-only   # real studies: the vcli CLI vs Ray Tune (~4 min)

The toy is Ray Tune's PBT example (`pbt_function.py`): a "model" is its accuracy; one
training step at learning rate `lr` raises it by U(0,1) / q when lr is within a factor
q < 3 of the optimal rate, and lowers it when lr is too high. The optimal rate depends on
the accuracy reached so far (a triangle: 0.001 at 0, 0.01 at MIDPOINT, 0.001 again from
2 x MIDPOINT on), so no fixed learning rate is right for the whole run: a schedule is.
Noise: N(0, NOISE) per step, seeded by (seed, trial, step). The learning rate is searched
in [1e-4, 2e-2] on a log scale.

Arms, at an equal total budget of POPULATION x MAX_STEPS training steps per seed:

* vcli PBT: `vcli.tuning.pbt.PbtScheduler` driving a simulated population in-process (members step
  round-robin, `review` after every report, exploits restart from the donor's state at its
  step, as the study controller does with checkpoints);
* the same population without exploits (the initial draws trained to the end);
* vcli RANDOM_SEARCH and vcli's Bayesian default (ALGORITHM_UNSPECIFIED, the GP), each with
  POPULATION trials of MAX_STEPS steps, told one at a time;
* Ray Tune's `PopulationBasedTraining` on the same toy as a function trainable with JSON
  checkpoints, same population, interval, quantile, resample probability and factors
  (quality and wall time).

Score: the final accuracy of the study's best trial (best final measurement), median over
seeds. Wall time: vcli's figure is the scheduler's own decision time (all `review` and
`explore` calls, in-process).

`--real-only` times real studies instead (`real_runs`): `python -m vcli hp-tuning-jobs create`
(local executor, VCLI_HOME in a temporary directory; the toy as a trainer script that restores
`$AIP_CHECKPOINT_DIR/state.json` and prints `accuracy=V step=S` once per step) against Ray
Tune's PBT on the same toy, population 4, interval 4, 20 steps, at two step times: 0 (the bare
toy) and `--real-pause` seconds slept per step. Overhead = wall time - the trainers' critical
path (20 x step time; members train in parallel).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
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
    PbtLineage,
    PopulationBasedTrainingSpec,
    ScaleType,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.tuning.pbt import PbtScheduler

MIDPOINT = 10.0
TOLERANCE = 3.0
NOISE = 0.2
LR_MIN, LR_MAX = 1e-4, 2e-2


def toy_step(accuracy: float, lr: float, rng: random.Random) -> float:
    """One training step of Ray's PBT toy (scaled: MIDPOINT 10 instead of 100)."""
    if accuracy < MIDPOINT:
        optimal = 0.01 * accuracy / MIDPOINT
    else:
        optimal = 0.01 - 0.01 * (accuracy - MIDPOINT) / MIDPOINT
    optimal = min(0.01, max(0.001, optimal))
    q = max(lr, optimal) / min(lr, optimal)
    if q < TOLERANCE:
        accuracy += rng.random() / q
    elif lr > optimal:
        accuracy -= (q - TOLERANCE) * rng.random()
    accuracy += rng.gauss(0.0, NOISE)
    return max(0.0, accuracy)


def noise(seed: int, run: str, step: int) -> random.Random:
    return random.Random(f"toy:{seed}:{run}:{step}")


def study_spec(algorithm: Algorithm, population: int, interval: int, max_steps: int) -> StudySpec:
    pbt = None
    if algorithm == Algorithm.POPULATION_BASED_TRAINING:
        pbt = PopulationBasedTrainingSpec(population_size=population, perturbation_interval_steps=interval,
                                          quantile_fraction=0.25, resample_probability=0.25,
                                          perturbation_factors=(0.8, 1.2), max_step_count=max_steps)
    return StudySpec(
        metrics=(MetricSpec(metric_id="accuracy", goal=Goal.MAXIMIZE),),
        parameters=(ParameterSpec(parameter_id="lr", value_spec=DoubleValueSpec(min_value=LR_MIN, max_value=LR_MAX),
                                  scale_type=ScaleType.UNIT_LOG_SCALE),),
        algorithm=algorithm,
        population_based_training_spec=pbt,
    )


def simulate_pbt(seed: int, population: int, interval: int, max_steps: int, *, exploit: bool = True) -> dict:
    """A PBT study in-process: returns best final accuracy, steps trained, exploits, decision time.

    Training stops at POPULATION x MAX_STEPS steps in all, the other arms' budget: an exploit
    from a donor a few steps behind rewinds its member, so without the cap PBT would train
    a few per cent more steps than the others."""
    spec = study_spec(Algorithm.POPULATION_BASED_TRAINING, population, interval, max_steps)
    sched = PbtScheduler(spec, seed=seed)
    trials: list[Trial] = []
    state: dict[str, tuple[float, int]] = {}  # trial id -> (accuracy, step): its "checkpoint"
    current: dict[int, int] = {}  # member -> index in trials
    for m in range(population):
        t = Trial(id=str(len(trials) + 1), parameters=sched.initial_parameters(m), state=TrialState.ACTIVE,
                  lineage=PbtLineage(member=m))
        current[m] = len(trials)
        trials.append(t)
        state[t.id] = (0.0, 0)
    steps = exploits = 0
    decide = 0.0
    budget = population * max_steps  # an exploit may rewind a member to a donor behind it
    while steps < budget:
        moved = False
        for m in range(population):
            i = current[m]
            t = trials[i]
            acc, step = state[t.id]
            if step >= max_steps or steps >= budget:
                continue
            moved = True
            step += 1
            acc = toy_step(acc, float(t.parameters["lr"]), noise(seed, t.id, step))
            steps += 1
            state[t.id] = (acc, step)
            t = replace(t, measurements=t.measurements + (Measurement(step_count=step, metrics={"accuracy": acc}),))
            if step >= max_steps:
                t = replace(t, state=TrialState.SUCCEEDED, final_measurement=t.measurements[-1])
            trials[i] = t
            if not exploit:
                continue
            # As the controller does: every running member is reviewed when one reports (a
            # member ahead is judged at a boundary once the others have reported there).
            for j in [m, *(k for k in range(population) if k != m)]:
                t = trials[current[j]]
                if t.state != TrialState.ACTIVE:
                    continue
                t0 = time.perf_counter()
                decision = sched.review(t, trials)
                decide += time.perf_counter() - t0
                if decision is None:
                    continue
                exploits += 1
                trials[current[j]] = replace(t, state=TrialState.SUCCEEDED, final_measurement=t.measurements[-1],
                                             stop_reason=decision.reason)
                new = Trial(id=str(len(trials) + 1), parameters=decision.parameters, state=TrialState.ACTIVE,
                            lineage=PbtLineage(member=j, parent_trial_id=decision.donor.id,
                                               start_step=decision.start_step, inherited_parameters=decision.inherited))
                donor_acc, donor_step = state[decision.donor.id]
                assert donor_step == decision.start_step
                state[new.id] = (donor_acc, donor_step)
                current[j] = len(trials)
                trials.append(new)
        if not moved:
            break
    best = max(acc for acc, _ in state.values())  # the best final measurement of any trial
    return {"best": best, "steps": steps, "exploits": exploits, "decide": decide, "trials": len(trials)}


def run_suggester(algorithm: Algorithm, seed: int, n_trials: int, max_steps: int) -> float:
    """n_trials fixed-lr trials of max_steps each, one at a time; best final accuracy."""
    from vcli.tuning.suggesters import get_suggester

    spec = study_spec(algorithm, 0, 1, max_steps)
    sug = get_suggester(spec, seed=seed)
    best = 0.0
    for k in range(n_trials):
        (s,) = sug.ask(1)
        lr = float(s.parameters["lr"])
        acc = 0.0
        tid = str(k + 1)
        for step in range(1, max_steps + 1):
            acc = toy_step(acc, lr, noise(seed, tid, step))
        best = max(best, acc)
        sug.tell(Trial(id=tid, parameters=s.parameters, state=TrialState.SUCCEEDED,
                       final_measurement=Measurement(step_count=max_steps, metrics={"accuracy": acc})))
    return best


def ray_pbt(seed: int, population: int, interval: int, max_steps: int, cpus: int, pause: float = 0.0) -> dict | None:
    """Ray Tune's PBT on the same toy; None when ray[tune] is not installed. `pause`: seconds
    slept per step, as vcli's real-run trainer does. Returns best final accuracy, wall time
    (ray.init to results), `fit` (tuner.fit alone) and the scheduler's perturbation count."""
    try:
        import ray
        from ray import tune
        from ray.tune.schedulers import PopulationBasedTraining
    except ImportError:
        return None

    def trainable(config: dict) -> None:
        acc, step = 0.0, 0
        ckpt = tune.get_checkpoint()
        if ckpt is not None:
            with ckpt.as_directory() as d:
                acc, step = json.loads(Path(d, "state.json").read_text())
        run = f"{config['lr']!r}"
        while step < max_steps:
            time.sleep(pause)
            step += 1
            acc = toy_step(acc, config["lr"], noise(config["seed"], run, step))
            with tempfile.TemporaryDirectory() as d:
                Path(d, "state.json").write_text(json.dumps([acc, step]))
                tune.report({"accuracy": acc, "step": step}, checkpoint=tune.Checkpoint.from_directory(d))

    random.seed(seed)  # Ray's PBT draws from the global `random`
    storage = tempfile.mkdtemp(prefix="bench-pbt-ray-")
    t0 = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        scheduler = PopulationBasedTraining(
            time_attr="training_iteration", perturbation_interval=interval, quantile_fraction=0.25,
            resample_probability=0.25, perturbation_factors=(1.2, 0.8),
            hyperparam_mutations={"lr": tune.loguniform(LR_MIN, LR_MAX)},
        )
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),  # one trial per core, as vcli runs processes
            param_space={"lr": tune.loguniform(LR_MIN, LR_MAX), "seed": seed},
            tune_config=tune.TuneConfig(num_samples=population, scheduler=scheduler, metric="accuracy", mode="max",
                                        reuse_actors=True),
            run_config=tune.RunConfig(verbose=0, storage_path=storage,
                                      stop={"training_iteration": max_steps}),
        )
        t1 = time.perf_counter()
        results = tuner.fit()
        fit = time.perf_counter() - t1
        best = max(r.metrics["accuracy"] for r in results if r.metrics)
    finally:
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)
    return {"best": best, "wall": time.perf_counter() - t0, "fit": fit,
            "exploits": getattr(scheduler, "_num_perturbations", None)}


TRAINER = """
import json, os, random, sys, time
{toy}
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
lr, seed, steps, pause = float(args["lr"]), int(args["seed"]), int(args["steps"]), float(args["pause"])
path = os.path.join(os.environ["AIP_CHECKPOINT_DIR"], "state.json")
acc, step = json.load(open(path)) if os.path.exists(path) else (0.0, 0)
run = repr(lr)  # the noise stream, as in the Ray arm
while step < steps:
    time.sleep(pause)  # the stand-in for a training step's compute (0: the toy's own, microseconds)
    step += 1
    acc = toy_step(acc, lr, noise(seed, run, step))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump([acc, step], f)
    os.replace(path + ".tmp", path)  # a checkpoint is complete or absent
    print(f"accuracy={{acc!r}} step={{step}}", flush=True)
"""

STUDY_YAML = """
displayName: bench-pbt
maxTrialCount: {max_trials}
parallelTrialCount: {population}
studySpec:
  metrics: [{{metricId: accuracy, goal: MAXIMIZE}}]
  algorithm: POPULATION_BASED_TRAINING
  populationBasedTrainingSpec:
    populationSize: {population}
    perturbationIntervalSteps: {interval}
    quantileFraction: 0.25
    resampleProbability: 0.25
    perturbationFactors: [0.8, 1.2]
    maxStepCount: {max_steps}
  parameters:
  - parameterId: lr
    doubleValueSpec: {{minValue: {lr_min}, maxValue: {lr_max}}}
    scaleType: UNIT_LOG_SCALE
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {{machineType: n1-standard-4}}
    replicaCount: 1
    containerSpec:
      imageUri: bench-pbt-toy
      command: [{python}, {script}]
      args: [--seed={seed}, --steps={max_steps}, --pause={pause}]
"""


def trainer_source() -> str:
    """The toy as a standalone trainer script: the same `toy_step` and `noise` as this module."""
    import inspect

    consts = f"MIDPOINT, TOLERANCE, NOISE = {MIDPOINT!r}, {TOLERANCE!r}, {NOISE!r}\n"
    return TRAINER.format(toy=consts + inspect.getsource(toy_step) + inspect.getsource(noise))


def vcli_pbt_run(seed: int, population: int, interval: int, max_steps: int, pause: float) -> dict:
    """A real `vcli hp-tuning-jobs create` PBT study (local executor: one OS process per
    trial) on the toy; wall time from the CLI's start to its exit, best final accuracy."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="bench-pbt-vcli-") as d:
        script = Path(d, "toy.py")
        script.write_text(trainer_source())
        config = Path(d, "pbt.yaml")
        config.write_text(STUDY_YAML.format(
            max_trials=population * max_steps, population=population, interval=interval, max_steps=max_steps,
            lr_min=LR_MIN, lr_max=LR_MAX, python=sys.executable, script=script, seed=seed, pause=pause))
        repo = Path(__file__).resolve().parent.parent
        env = dict(os.environ, VCLI_HOME=str(Path(d, "home")), VCLI_CONFIG_DIR=str(Path(d, "home", "config")),
                   PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", f"--config={config}",
                            f"--seed={seed}", "--format=json"], env=env, cwd=repo, capture_output=True, text=True,
                           timeout=600)
        wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"vcli PBT study failed ({r.returncode}):\n{r.stderr[-3000:]}")
    study = json.loads(r.stdout)
    trials = study["trials"]
    best = next(t for t in trials if t["id"] == study["bestTrialId"])
    exploits = sum("parentTrialId" in t.get("populationBasedTraining", {}) for t in trials)
    return {"best": best["finalMeasurement"]["metrics"][0]["value"], "wall": wall, "trials": len(trials),
            "exploits": exploits}


REAL = {"population": 4, "interval": 4, "max_steps": 20}


def real_runs(n: int, pauses: tuple[float, ...]) -> None:
    """Real PBT studies, vcli (CLI, one process per trial) and Ray Tune (tuner.fit, actors
    reused), population 4, interval 4, 20 steps, on seeds 0..n-1 for each step time; prints
    medians. "Compute" is the critical path of the trainers' own work: members train in
    parallel, so it is max_steps x step time (the toy's arithmetic is microseconds)."""
    P, I, S = REAL["population"], REAL["interval"], REAL["max_steps"]
    print(f"## Real PBT runs: population {P}, interval {I}, {S} steps, seeds 0-{n - 1}, median of {n}\n")
    print("| step time | tool | wall s | compute s | overhead s | best final accuracy | exploits | trials |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    ratios = []
    for pause in pauses:
        compute = S * pause
        v = [vcli_pbt_run(seed, P, I, S, pause) for seed in range(n)]
        r = [ray_pbt(seed, P, I, S, P, pause) for seed in range(n)]  # P logical CPUs: all members at once, as vcli
        med = statistics.median
        print(f"| {pause:g} s | vcli | {med(x['wall'] for x in v):.2f} | {compute:.1f} | "
              f"{med(x['wall'] for x in v) - compute:.2f} | {med(x['best'] for x in v):.2f} | "
              f"{med(x['exploits'] for x in v)} | {med(x['trials'] for x in v)} |")
        if None in r:
            print(f"| {pause:g} s | Ray Tune | not installed (`pip install 'ray[tune]'`) | | | | | |")
            continue
        print(f"| {pause:g} s | Ray Tune (ray.init to results) | {med(x['wall'] for x in r):.2f} | {compute:.1f} | "
              f"{med(x['wall'] for x in r) - compute:.2f} | {med(x['best'] for x in r):.2f} | "
              f"{med(x['exploits'] for x in r)} | {P} |")
        print(f"| {pause:g} s | Ray Tune (tuner.fit only) | {med(x['fit'] for x in r):.2f} | {compute:.1f} | "
              f"{med(x['fit'] for x in r) - compute:.2f} | | | |")
        ratios.append((pause, med(x["wall"] for x in v) - compute, med(x["wall"] for x in r) - compute,
                       med(x["fit"] for x in r) - compute))
    for pause, ov, orw, orf in ratios:
        print(f"\nstep time {pause:g} s: overhead vcli / Ray = {ov / orw:.2f} (Ray from ray.init), "
              f"{ov / orf:.2f} (Ray's tuner.fit only)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--ray-seeds", type=int, default=3, help="seeds Ray Tune runs (about 35 s each on 2 busy cores)")
    p.add_argument("--population", type=int, default=16)
    p.add_argument("--interval", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    p.add_argument("--quick", action="store_true", help="3 seeds, no GP")
    p.add_argument("--real-only", action="store_true",
                   help="only the real-run comparison: `vcli hp-tuning-jobs create` vs Ray Tune, same toy")
    p.add_argument("--real-runs", type=int, default=3, help="real studies per tool and step time (seeds 0..N-1)")
    p.add_argument("--real-pause", type=float, default=0.5,
                   help="seconds per training step in the second real-run setting (the first is 0: the bare toy)")
    a = p.parse_args()
    if a.real_only:
        return real_runs(a.real_runs, (0.0, a.real_pause))
    seeds = range(3 if a.quick else a.seeds)
    P, I, S = a.population, a.interval, a.max_steps
    rows: dict[str, list[float]] = {}
    pbt_runs = []
    for seed in seeds:
        r = simulate_pbt(seed, P, I, S)
        pbt_runs.append(r)
        rows.setdefault("vcli PBT (scheduler, simulated population)", []).append(r["best"])
        rows.setdefault("same population, no exploits", []).append(simulate_pbt(seed, P, I, S, exploit=False)["best"])
        rows.setdefault("vcli RANDOM_SEARCH", []).append(run_suggester(Algorithm.RANDOM_SEARCH, seed, P, S))
        if not a.quick:
            rows.setdefault("vcli Bayesian default (GP)", []).append(
                run_suggester(Algorithm.ALGORITHM_UNSPECIFIED, seed, P, S))
    ray_rows = []
    for seed in list(seeds)[: a.ray_seeds]:
        res = ray_pbt(seed, P, I, S, a.cpus)
        if res is None:
            break
        ray_rows.append(res)
    print(f"## PBT toy: population {P}, interval {I}, {S} steps, budget {P * S} steps, {len(seeds)} seeds\n")
    print("| arm | median best final accuracy | min | max |\n| --- | --- | --- | --- |")
    for name, vals in rows.items():
        print(f"| {name} | {statistics.median(vals):.2f} | {min(vals):.2f} | {max(vals):.2f} |")
    if ray_rows:
        vals = [r["best"] for r in ray_rows]
        print(f"| Ray Tune PBT ({len(ray_rows)} seeds) | {statistics.median(vals):.2f} | {min(vals):.2f} | {max(vals):.2f} |")
        same = [rows["vcli PBT (scheduler, simulated population)"][i] for i in range(len(ray_rows))]
        print(f"| vcli PBT on the same {len(ray_rows)} seeds | {statistics.median(same):.2f} | {min(same):.2f} | "
              f"{max(same):.2f} |")
    elif a.ray_seeds > 0:
        print("| Ray Tune PBT | not installed (`pip install 'ray[tune]'`) | | |")
    pbt_wins = sum(a_ > b for a_, b in zip(rows["vcli PBT (scheduler, simulated population)"],
                                          rows["same population, no exploits"]))
    print(f"\nPBT better than no exploits on {pbt_wins}/{len(seeds)} seeds; "
          f"exploits per study: median {statistics.median(r['exploits'] for r in pbt_runs)}, "
          f"steps trained: median {statistics.median(r['steps'] for r in pbt_runs)} of {P * S}")
    decide = statistics.median(r["decide"] for r in pbt_runs)
    print(f"vcli scheduler decision time per study (all reviews): median {decide * 1000:.1f} ms")
    if ray_rows:
        print(f"Ray Tune PBT wall time per study (ray.init to results, {a.cpus} CPUs): "
              f"median {statistics.median(r['wall'] for r in ray_rows):.1f} s")


if __name__ == "__main__":
    main()
