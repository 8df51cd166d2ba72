"""The ray executor (issue #11): per-trial orchestration overhead and placement latency.

    python bench/bench_ray.py [--trials 50] [--parallel 2] [--queued 1000] [--quick]

One run starts a real 3-raylet Ray cluster on loopback (tests/harness/ray_cluster.py: a head
and two workers, 2 CPUs and 1 fake GPU each) and measures, on that cluster:

1. **Orchestration overhead**: `--trials` trivial trials (a script that prints `score=...` and
   exits), `--parallel` at a time, three ways, each timed from outside as a user would see it:
   * `python -m vcli hp-tuning-jobs create --executor=ray --ray-address=<cluster>
     --algorithm=random-search ...` with a fresh VCLI_HOME;
   * the same command with `--executor=local` (one OS process per trial, no Ray);
   * Ray Tune itself: a driver process (RAY_ADDRESS=<cluster>) running `tune.Tuner` with a
     function trainable, `num_samples=--trials`, `max_concurrent_trials=--parallel`, 1 CPU
     per trial (Ray's defaults otherwise, so actors are reused).
   Nothing is subtracted: wall / trials includes the interpreter and import start-up of the
   CLI or driver, connecting to the cluster, and per trial (vcli) a Python process for the
   trainer, its placement group and (ray executor) a Ray actor supervising it.

2. **Placement with `--queued` trials waiting**, through `RayExecutor.placer()` exactly as the
   study controller calls it (`vcli/control/study.py`: the controller keeps its queue itself,
   each tick tries only the queue's head, under a fresh job id per attempt, and a failed
   attempt raises NoCapacityError, which leaves the trial queued). With the cluster full:
   the cost of one failed attempt; then a controller-shaped loop (poll, release ended
   trials, try the head, sleep 0.1 s) with `--queued` trials waiting, trials that hold their
   group for 0.5 s, measuring the gap between a trial's end and the next queued trial's
   placement; then the whole queue placed one by one (place + release) for the latency of a
   successful `place` and whether it grows over 1,000 groups. Leftover placement groups (a
   pending one per failed attempt would be a leak) are counted at the end.

Everything started here (the cluster, vcli and Ray Tune processes) is killed before exit.
About 5-7 minutes on a busy 2-core machine; `--quick` (4 trials, 40 queued) about 2 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import deque
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.harness.ray_cluster import AUTH_ENV, RayCluster  # noqa: E402

#: The trivial trial: one metric line on stdout, then exit.
TRIAL = """
import sys
x = float(sys.argv[1].split("=", 1)[1])
print(f"score={-(x - 0.3) ** 2:.6f}", flush=True)
"""

#: Ray Tune's side: the same 50 trials as a function trainable, driven against the cluster.
TUNE_DRIVER = """
import json, os, sys, tempfile, time
t0 = time.perf_counter()
import ray
from ray import tune
ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False, logging_level="ERROR", configure_logging=False)
t1 = time.perf_counter()

def trainable(config):
    tune.report({"score": -(config["x"] - 0.3) ** 2})

trials, parallel = int(sys.argv[1]), int(sys.argv[2])
tuner = tune.Tuner(
    tune.with_resources(trainable, {"cpu": 1}),
    param_space={"x": tune.uniform(0.0, 1.0)},
    tune_config=tune.TuneConfig(num_samples=trials, max_concurrent_trials=parallel, metric="score", mode="max"),
    run_config=tune.RunConfig(verbose=0, storage_path=tempfile.mkdtemp()),
)
results = tuner.fit()
t2 = time.perf_counter()
assert results.num_errors == 0 and len(results) == trials, (results.num_errors, len(results))
ray.shutdown()
print(json.dumps({"init": t1 - t0, "fit": t2 - t1}))
"""

POOL = "machine-type=n1-standard-1,replica-count=1"


def _run(argv: list[str], env: dict[str, str], timeout: float) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run to completion in a session of its own (killed whole on timeout); (wall s, result)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    wall = time.perf_counter() - t0
    return wall, subprocess.CompletedProcess(argv, proc.returncode, out, err)


def bench_vcli(cluster: RayCluster, executor: str, trials: int, parallel: int, tmp: Path) -> dict[str, float]:
    """`vcli hp-tuning-jobs create` with `trials` trivial trials: its wall seconds, the seconds
    from the command's start to the first trial's start, and the trials' median start-to-end
    span (as the study records them: placement, actor and process start, the poll that sees
    the end)."""
    pkg = tmp / f"pkg-{executor}"
    pkg.mkdir()
    (pkg / "trial.py").write_text(textwrap.dedent(TRIAL))
    home = tmp / f"home-{executor}"
    env = cluster.driver_env()
    env.update(VCLI_HOME=str(home), VCLI_CONFIG_DIR=str(home / "config"),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p))
    argv = [sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", f"--display-name=bench-{executor}",
            f"--executor={executor}", f"--max-trial-count={trials}", f"--parallel-trial-count={parallel}",
            "--algorithm=random-search", "--seed=0", "--metric=metric-id=score,goal=maximize",
            "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
            f"--worker-pool-spec={POOL},local-package-path={pkg},script=trial.py", "--format=json"]
    if executor == "ray":
        argv.append(f"--ray-address={cluster.address}")
    launched = time.time()
    wall, r = _run(argv, env, timeout=max(300, 20 * trials))
    if r.returncode != 0:
        raise RuntimeError(f"vcli --executor={executor} exited {r.returncode}:\n{r.stderr[-3000:]}")
    got = json.loads(r.stdout)["trials"]
    if [t["state"] for t in got] != ["SUCCEEDED"] * trials:
        raise RuntimeError(f"vcli --executor={executor}: trial states {[t['state'] for t in got]}")
    starts = [_epoch(t["startTime"]) for t in got]
    spans = [_epoch(t["endTime"]) - start for t, start in zip(got, starts)]
    return {"wall": wall, "first": min(starts) - launched, "span": statistics.median(spans)}


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def bench_tune(cluster: RayCluster, trials: int, parallel: int) -> dict[str, float]:
    """Ray Tune on the same cluster: wall of the driver process, its ray.init and tuner.fit."""
    env = {**cluster.driver_env(), "RAY_ADDRESS": cluster.address}
    wall, r = _run([sys.executable, "-c", TUNE_DRIVER, str(trials), str(parallel)], env, timeout=max(300, 20 * trials))
    if r.returncode != 0:
        raise RuntimeError(f"Ray Tune driver exited {r.returncode}:\n{r.stderr[-3000:]}")
    return {"wall": wall, **json.loads(r.stdout.strip().splitlines()[-1])}


# ---------------------------------------------------------------------- placement


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def bench_placement(cluster: RayCluster, queued: int, loop_trials: int, hold: float) -> dict[str, Any]:
    """Drive `RayExecutor.placer()` as the study controller does; see the module docstring."""
    from vcli import cluster as replicas_of
    from vcli.executors.ray.executor import PLACE_WAIT_SECONDS, RayExecutor
    from vcli.placement import NoCapacityError
    from vcli.spec import ContainerSpec, CustomJobSpec, MachineSpec, WorkerPoolSpec
    from vcli.store import new_id

    spec = CustomJobSpec(worker_pool_specs=(WorkerPoolSpec(
        machine_spec=MachineSpec(machine_type="n1-standard-1"), replica_count=1,
        container_spec=ContainerSpec(command=(sys.executable, "-c", "pass"))),))
    replicas = replicas_of.replica_ids(spec)
    executor = RayExecutor(cluster.address)
    placer = executor.placer()
    out: dict[str, Any] = {"wait": PLACE_WAIT_SECONDS}

    def attempt() -> tuple[str | None, float]:
        """One controller attempt at the queue's head: (job id or None if no room, seconds)."""
        job_id = new_id()  # the controller makes a fresh job id per attempt
        t = time.perf_counter()
        try:
            placer(replicas, spec=spec, job_id=job_id)
        except NoCapacityError:
            return None, time.perf_counter() - t
        return job_id, time.perf_counter() - t

    try:
        # Fill the cluster: the trials already running.
        holding: list[str] = []
        while True:
            job, _ = attempt()
            if job is None:
                break
            holding.append(job)
        out["slots"] = len(holding)

        # (a) A failed attempt with the cluster full and `queued` trials waiting.
        queue = deque(range(queued))
        fails = [attempt() for _ in range(10)]
        assert all(j is None for j, _ in fails)
        out["fail"] = [s for _, s in fails]
        states = cluster.placement_groups()
        out["pending_after_fails"] = sum(1 for s in states.values() if s == "PENDING")

        # (b) The controller's loop: poll, release what ended, try the head, sleep 0.1 s.
        # Trials hold their group `hold` seconds. Gap = a slot's freeing -> the next placement.
        running = {job: time.perf_counter() + hold for job in holding}
        freed: deque[float] = deque()
        gaps, place_ok, blocked = [], [], []
        placed = 0
        while placed < loop_trials:
            now = time.perf_counter()
            for job, end in sorted(running.items(), key=lambda kv: kv[1]):
                if end <= now:
                    placer.release(job)
                    del running[job]
                    freed.append(end)
            while queue:
                job, took = attempt()
                if job is None:
                    blocked.append(took)
                    break
                queue.popleft()
                placed += 1
                place_ok.append(took)
                running[job] = time.perf_counter() + hold
                if freed:
                    gaps.append(time.perf_counter() - freed.popleft())
            time.sleep(0.1)
        out.update(gaps=gaps, loop_place=place_ok, blocked=blocked, loop_trials=placed)
        for job in list(running):
            placer.release(job)
        holding = []

        # (c) The rest of the queue, one by one: place, then release (a zero-length trial).
        seq = []
        while queue:
            job, took = attempt()
            assert job is not None, "the cluster is empty: a placement must succeed"
            queue.popleft()
            seq.append(took)
            placer.release(job)
        out["seq"] = seq

        # (d) Ray's own floor: the same place + release cycle with bare placement groups.
        ray = executor._ray()
        from ray.util.placement_group import placement_group, remove_placement_group

        bare = []
        bundle = executor._bundle(replicas[0], spec, {"CPU": 1e9, "memory": 1e9 * 2**30})
        for i in range(min(200, len(seq))):
            t = time.perf_counter()
            pg = placement_group([bundle], strategy="SPREAD", name=f"bench-bare-{i}")
            ready, _ = ray.wait([pg.ready()], timeout=10)
            bare.append(time.perf_counter() - t)
            remove_placement_group(pg)
            assert ready, "a bare placement group on an empty cluster was not ready in 10 s"
        out["bare"] = bare
        states = cluster.placement_groups()
        out["groups_known"] = len(states)
        out["groups_left"] = sum(1 for s in states.values() if s != "REMOVED")
    finally:
        executor.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--queued", type=int, default=1000)
    p.add_argument("--loop-trials", type=int, default=60, help="trials started by the controller-shaped loop")
    p.add_argument("--quick", action="store_true", help="smoke test: 4 trials, 40 queued, 12 in the loop")
    a = p.parse_args()
    if a.quick:
        a.trials, a.queued, a.loop_trials = 4, 40, 12
    # SIGTERM (e.g. `timeout`) unwinds through the finally below, which kills the cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.pop("RAY_ADDRESS", None)
    os.environ.update(AUTH_ENV)  # this process connects to the cluster in part 2
    import ray

    began = time.perf_counter()
    cluster = RayCluster(workers=2, gpus_per_node=1, cpus_per_node=2)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    try:
        cluster.start()
        print(f"Ray {ray.__version__}, CPython {sys.version.split()[0]}, {os.cpu_count()} CPUs; cluster of 3 raylets "
              f"(2 CPUs, 1 fake GPU each) up in {cluster.startup_seconds:.1f} s\n")
        runs = {"ray": bench_vcli(cluster, "ray", a.trials, a.parallel, tmp),
                "local": bench_vcli(cluster, "local", a.trials, a.parallel, tmp)}
        tune = bench_tune(cluster, a.trials, a.parallel)
        walls = {"ray": runs["ray"]["wall"], "local": runs["local"]["wall"], "tune": tune["wall"]}
        n = a.trials
        print(f"## Orchestration: {n} trivial trials, {a.parallel} in parallel\n")
        print("| system | wall s | wall per trial | / vcli local | / Ray Tune |\n| --- | --- | --- | --- | --- |")
        rows = [("vcli --executor=ray (CLI)", walls["ray"]), ("vcli --executor=local (CLI)", walls["local"]),
                ("Ray Tune (driver process: start, ray.init, fit)", walls["tune"]),
                ("Ray Tune, `tuner.fit` alone", tune["fit"])]
        for name, wall in rows:
            print(f"| {name} | {wall:.1f} | {wall / n * 1000:.0f} ms | {wall / walls['local']:.2f} | "
                  f"{wall / walls['tune']:.2f} |")
        print(f"\nRay Tune's `ray.init` (connecting to the running cluster): {tune['init']:.1f} s")
        for name in ("ray", "local"):
            print(f"vcli --executor={name}: command start -> first trial started {runs[name]['first']:.2f} s; "
                  f"a trial's start -> end (median) {runs[name]['span'] * 1000:.0f} ms")
        print()

        pl = bench_placement(cluster, a.queued, a.loop_trials, hold=0.5)
        seq = pl["seq"]
        print(f"## Placement with {a.queued} queued trials (n1-standard-1 bundles: {pl['slots']} fit at once)\n")
        print("| what | n | p50 | p95 | max |\n| --- | --- | --- | --- | --- |")
        for name, xs in [
            (f"failed `place` (cluster full, NoCapacityError; waits up to {pl['wait']:g} s)", pl["fail"]),
            ("controller loop: a trial's end -> next queued trial placed", pl["gaps"]),
            ("controller loop: failed attempts (each blocks the tick)", pl["blocked"]),
            ("controller loop: successful `place`", pl["loop_place"]),
            (f"queue drained one by one: successful `place` (all {len(seq)})", seq),
            ("  first 100 of those", seq[:100]),
            ("  last 100 of those", seq[-100:]),
            ("bare Ray: `placement_group` + ready, then remove (no vcli)", pl["bare"]),
        ]:
            if xs:
                print(f"| {name} | {len(xs)} | {_ms(_pct(xs, 0.5))} | {_ms(_pct(xs, 0.95))} | {_ms(max(xs))} |")
        print(f"\nPending placement groups after the failed attempts: {pl['pending_after_fails']}; "
              f"groups not REMOVED at the end: {pl['groups_left']} (of {pl['groups_known']} the GCS still lists)")
    finally:
        cluster.stop()
        left = cluster.processes()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nCluster stopped, {len(left)} of its processes left; total {time.perf_counter() - began:.0f} s")
    if left:
        sys.exit(f"processes left: {left}")


if __name__ == "__main__":
    main()
