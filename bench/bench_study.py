"""Per-trial orchestration overhead of a study (issue: hp-tuning-jobs).

    python bench/bench_study.py [--trials 50] [--parallel 2]

50 trivial trials (a Python process that reports one metric through the hypertune file
format and exits), 2 in parallel, through vcli's real study controller and local process
executor (the same code path as `vcli hp-tuning-jobs create`). Overhead per trial =
(total wall time - sum of the trials' own run time / parallel) / trials, where a trial's own
run time is measured inside the trainer process (from interpreter start to exit).

For comparison, Ray Tune runs the same 50 trivial trials (a function trainable that reports
once), 2 concurrent, in the same run, if `ray[tune]` is installed; its per-trial overhead is
computed the same way. Goal: vcli < 100 ms per trial.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TRAINER = """
import json, os, sys, time
t0 = time.time()
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
x = float(args["x"])
path = os.environ["CLOUD_ML_HP_METRIC_FILE"]
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as f:
    f.write(json.dumps({"score": str(-(x - 0.3) ** 2), "global_step": "1", "timestamp": time.time(), "trial": "0"}) + "\\n")
with open(os.environ["BENCH_TIMES"] + "/" + os.environ["CLOUD_ML_TRIAL_ID"], "w") as f:
    f.write(repr(time.time() - t0))
"""


def python_startup() -> float:
    import statistics
    import subprocess

    times = []
    for _ in range(7):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_vcli(trials: int, parallel: int) -> tuple[float, float]:
    from vcli.control.study import StudyRun
    from vcli.executors.local import LocalExecutor
    from vcli.spec import (
        Algorithm,
        ContainerSpec,
        CustomJobSpec,
        DoubleValueSpec,
        Goal,
        HyperparameterTuningJobSpec,
        JobKind,
        JobState,
        MachineSpec,
        MetricSpec,
        ParameterSpec,
        ScaleType,
        StudySpec,
        WorkerPoolSpec,
    )
    from vcli.store import Store, new_id
    from vcli.tuning.suggesters import get_suggester

    tmp = Path(tempfile.mkdtemp())
    (tmp / "trainer.py").write_text(TRAINER)
    times = tmp / "times"
    times.mkdir()
    os.environ["BENCH_TIMES"] = str(times)
    study = StudySpec(
        metrics=(MetricSpec(metric_id="score", goal=Goal.MAXIMIZE),),
        parameters=(ParameterSpec(parameter_id="x", value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0),
                                  scale_type=ScaleType.UNIT_LINEAR_SCALE),),
        algorithm=Algorithm.RANDOM_SEARCH,
    )
    pool = WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1-standard-4"), replica_count=1,
                          container_spec=ContainerSpec(command=(sys.executable, str(tmp / "trainer.py"))))
    spec = HyperparameterTuningJobSpec(study_spec=study, trial_job_spec=CustomJobSpec(worker_pool_specs=(pool,)),
                                       max_trial_count=trials, parallel_trial_count=parallel)
    store = Store(tmp / "home")
    sid = new_id()
    store.create_job(kind=JobKind.HYPERPARAMETER_TUNING_JOB, display_name="bench", record={},
                     state=JobState.JOB_STATE_QUEUED, job_id=sid)
    run = StudyRun(store=store, executor=LocalExecutor(), spec=spec, study_id=sid, display_name="bench",
                   suggester=get_suggester(study, seed=0))
    t0 = time.perf_counter()
    state = run.run(interval=0.01)
    wall = time.perf_counter() - t0
    assert state.value == "JOB_STATE_SUCCEEDED", state
    own = sum(float(p.read_text()) for p in times.iterdir())
    return wall, own


def bench_ray(trials: int, parallel: int) -> tuple[float, float] | None:
    try:
        import ray
        from ray import tune
    except ImportError:
        return None
    ray.init(num_cpus=parallel, include_dashboard=False, log_to_driver=False, configure_logging=False)

    def trainable(config: dict) -> dict:
        t = time.time()
        score = -(config["x"] - 0.3) ** 2
        own = time.time() - t
        return {"score": score, "own": own}

    t0 = time.perf_counter()
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(num_samples=trials, max_concurrent_trials=parallel, metric="score", mode="max"),
        run_config=tune.RunConfig(verbose=0, storage_path=tempfile.mkdtemp()),
    )
    results = tuner.fit()
    wall = time.perf_counter() - t0
    own = sum(r.metrics.get("own", 0.0) for r in results)
    ray.shutdown()
    return wall, own


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--parallel", type=int, default=2)
    a = p.parse_args()
    start = python_startup()
    wall, own = bench_vcli(a.trials, a.parallel)
    # A vcli trial is a whole process: its own run time includes the interpreter start-up,
    # which the trainer cannot measure from inside, so add it to "the trial's own run time".
    own_total = own + a.trials * start
    print(f"## Study orchestration overhead: {a.trials} trivial trials, parallel {a.parallel}\n")
    print("| system | wall time | trials' own time / parallel | overhead per trial |\n| --- | --- | --- | --- |")
    vcli_over = (wall - own_total / a.parallel) / a.trials
    print(f"| vcli (local processes) | {wall:.2f} s | {own_total / a.parallel:.2f} s | {vcli_over * 1000:.0f} ms |")
    ray_res = bench_ray(a.trials, a.parallel)
    if ray_res is None:
        print("| Ray Tune | not installed (`pip install 'ray[tune]'`) | | |")
    else:
        rw, ro = ray_res
        ray_over = (rw - ro / a.parallel) / a.trials
        print(f"| Ray Tune (in-process function trainable) | {rw:.2f} s | {ro / a.parallel:.2f} s | {ray_over * 1000:.0f} ms |")
        print(f"\nvcli / Ray Tune overhead ratio: {vcli_over / ray_over:.2f}")
    print(f"\n(python start-up {start * 1000:.0f} ms counted as the trial's own time)")


if __name__ == "__main__":
    main()
