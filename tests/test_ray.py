"""The ray executor (issue #11) on a real Ray cluster: a head and two worker raylets on loopback.

The cluster (tests/harness/ray_cluster.py) is started once for this module (about 20 s on the
2-core CI machine) and killed at its end; every node declares one fake GPU and a custom
resource naming it. Jobs and studies run through the real CLI (`--executor=ray`, the cluster's
address in RAY_ADDRESS). The node-loss test kills a worker raylet, so it runs last.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.harness.ray_cluster import AUTH_ENV, RayCluster, marked_json
from tests.helpers import (
    REPO,
    clusters_from_stdout,
    describe,
    job_id_from_stderr,
    processes_with_env,
    read_stderr_until,
    reap,
    vcli,
    vcli_env,
    wait_for,
    write_package,
)

POOL = "machine-type=n1-standard-4,replica-count=1"
GPU_POOL = f"{POOL},accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    c = RayCluster(workers=2, gpus_per_node=1, cpus_per_node=4).start()  # 4: a GPU, not CPUs, limits half-GPU trials
    try:
        yield c
    finally:
        c.stop()
        assert c.processes() == []


def _env(cluster: RayCluster) -> dict[str, str]:
    return {"VCLI_EXECUTOR": "ray", "RAY_ADDRESS": cluster.address, **AUTH_ENV}


#: A trial that records where it ran (Ray node, GPUs) and when, then reports accuracy.
TRIAL = """
    import json, os, sys, time
    lr = float(sys.argv[1].split("=", 1)[1])
    rec = {"node": os.environ["VCLI_RAY_NODE_ID"], "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": time.time()}
    print("up on", rec["node"], flush=True)
    time.sleep(float(os.environ.get("TRIAL_SLEEP", "2")))
    rec["end"] = time.time()
    out = os.path.join(os.environ["AIP_MODEL_DIR"], "trial.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(rec, open(out, "w"))
    print(f"accuracy={1 - abs(lr - 0.3):.4f}", flush=True)
"""


def test_two_replica_multiworker_job_lands_on_two_nodes_and_trains(cluster: RayCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = vcli(home, "custom-jobs", "create", "--display-name=digits",
             f"--worker-pool-spec={POOL},local-package-path=.,python-module=trainer.task",
             f"--worker-pool-spec={POOL}", "--args=--epochs=1", timeout=400, **_env(cluster))
    assert r.returncode == 0, r.stderr[-3000:]
    job = describe(home, "custom-jobs", job_id_from_stderr(r.stderr))
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    replicas = {x["taskName"]: x for x in job["replicas"]}
    assert all(x["exitCode"] == 0 for x in replicas.values())
    nodes = set(cluster.node_ids().values())
    hosts = [replicas[t]["host"] for t in ("workerpool0-0", "workerpool1-0")]
    assert hosts[0] != hosts[1] and set(hosts) <= nodes  # gang-placed on two different Ray nodes
    clusters = clusters_from_stdout(r.stdout)
    assert clusters["workerpool0-0"] == clusters["workerpool1-0"] == {
        "chief": [replicas["workerpool0-0"]["address"]], "worker": [replicas["workerpool1-0"]["address"]]}
    log = Path(replicas["workerpool0-0"]["logPath"]).read_text()
    assert "final val_accuracy=" in log
    job_id = job["name"].rsplit("/", 1)[1]
    assert not processes_with_env("VCLI_JOB_ID", job_id)
    assert cluster.placement_groups()[f"vcli-{job_id}"] == "REMOVED"


def test_a_job_that_can_never_fit_fails_at_once(cluster: RayCluster, tmp_path: Path) -> None:
    began = time.monotonic()
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=too-big",
             f"--worker-pool-spec={POOL},accelerator-type=NVIDIA_TESLA_T4,accelerator-count=2,"
             f"local-package-path={write_package(tmp_path, {'t.py': 'print(1)'})},script=t.py", timeout=120, **_env(cluster))
    assert r.returncode != 0
    assert "can never fit on the Ray cluster" in r.stderr and "2 GPU" in r.stderr, r.stderr[-2000:]
    assert time.monotonic() - began < 60  # no waiting for room that will never come


#: A driver that fills every GPU with a group of its own, asks the executor to place a one-GPU
#: job (no room), frees the GPUs and asks again (room). Prints what happened as JSON.
FULL_CLUSTER_DRIVER = """
import json, sys, time
from types import SimpleNamespace as NS
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from vcli.executors.ray.executor import RayExecutor
from vcli.placement import NoCapacityError

ex = RayExecutor(sys.argv[1])
ray_ = ex._ray()
filler = placement_group([{"GPU": 1.0}] * 3, strategy="STRICT_SPREAD", name="filler")
ray_.get(filler.ready(), timeout=60)
spec = NS(worker_pool_specs=[NS(machine_spec=NS(machine_type="n1-standard-4", accelerator_count=1))])
replicas = [NS(task_name="workerpool0-0", pool_index=0)]
out = {}
time.sleep(2)  # the GCS's view of free resources follows the raylets' reports
began = time.monotonic()
try:
    ex.place(replicas, spec, "full")
    out["full"] = "placed"
except NoCapacityError as e:
    out["full"] = str(e)
out["full_seconds"] = time.monotonic() - began
remove_placement_group(filler)
deadline = time.monotonic() + 30
while True:
    try:
        out["free"] = [p.host for p in ex.place(replicas, spec, "free")]
        break
    except NoCapacityError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.5)
ex.release_group("free")
print("VCLI_TEST_JSON", json.dumps(out))
"""


def test_a_full_cluster_is_answered_without_creating_a_placement_group(cluster: RayCluster, tmp_path: Path) -> None:
    # A queued trial asks on every controller tick; on a cluster whose free GPUs fall short
    # the answer must come from the GCS's view, not from creating a group and waiting for it
    # (which cost a second per tick).
    got = subprocess.run([sys.executable, "-c", FULL_CLUSTER_DRIVER, cluster.address], capture_output=True, text=True,
                         env={**cluster.driver_env(), "PYTHONPATH": str(REPO)}, timeout=180)
    assert got.returncode == 0, got.stderr[-3000:]
    out = marked_json(got.stdout)
    assert out["full"].startswith("The Ray cluster has no room for job full now (workerpool0-0: 4 CPU, "), out
    assert "1 GPU" in out["full"]
    groups = cluster.placement_groups()
    assert "vcli-full" not in groups, groups  # not even created and removed
    assert groups["vcli-free"] == "REMOVED" and groups["filler"] == "REMOVED"
    assert len(out["free"]) == 1
    print(f"no-room answer in {out['full_seconds'] * 1000:.0f} ms")


def test_container_images_are_refused(cluster: RayCluster, tmp_path: Path) -> None:
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=image", "--validate-only",
             f"--worker-pool-spec={POOL},container-image-uri=python:3.11", "--command=python,-c,print(1)",
             timeout=120, **_env(cluster))
    assert r.returncode != 0
    assert "the ray executor runs processes; run images with --executor=docker" in r.stderr, r.stderr[-2000:]


def test_parallel_trials_never_share_a_one_gpu_node(cluster: RayCluster, tmp_path: Path) -> None:
    pkg = write_package(tmp_path, {"trial.py": TRIAL})
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=gpu-study",
             "--max-trial-count=6", "--parallel-trial-count=3", "--algorithm=random-search", "--seed=1",
             "--metric=metric-id=accuracy,goal=maximize", "--parameter-spec=parameter-id=lr,type=double,min=0.01,max=1",
             f"--worker-pool-spec={GPU_POOL},local-package-path={pkg},script=trial.py", "--format=json",
             timeout=600, **_env(cluster))
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr[-3000:]}"
    study = json.loads(r.stdout)
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 6
    records = [json.loads(p.read_text()) for p in (tmp_path / "home").rglob("trial.json")]
    assert len(records) == 6
    assert all(rec["cuda"] == "0" for rec in records)  # each node's one GPU, as Ray assigned it
    assert len({rec["node"] for rec in records}) >= 2
    for node in {rec["node"] for rec in records}:  # never two trials at once on one node's only GPU
        spans = sorted((rec["start"], rec["end"]) for rec in records if rec["node"] == node)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])  # an end before a start at a tie
    most = now = 0
    for _, delta in events:
        now += delta
        most = max(most, now)
    return most


def test_half_gpu_trials_share_one_gpu_two_at_a_time_never_three(cluster: RayCluster, tmp_path: Path) -> None:
    """accelerator-count=0.5: Ray packs two trials onto each node's one fake GPU, never three; each
    trial sees that GPU in CUDA_VISIBLE_DEVICES."""
    pkg = write_package(tmp_path, {"trial.py": TRIAL})
    half = "machine-type=n1-standard-1,replica-count=1,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=0.5"
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=half-gpu",
             "--max-trial-count=9", "--parallel-trial-count=9", "--algorithm=random-search", "--seed=3",
             "--metric=metric-id=accuracy,goal=maximize", "--parameter-spec=parameter-id=lr,type=double,min=0.01,max=1",
             f"--worker-pool-spec={half},local-package-path={pkg},script=trial.py", "--format=json",
             timeout=600, **_env(cluster), TRIAL_SLEEP="4")
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr[-3000:]}"
    study = json.loads(r.stdout)
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 9
    pool = study["trialJobSpec"]["workerPoolSpecs"][0]
    assert pool["machineSpec"]["acceleratorCount"] == 0.5
    records = [json.loads(p.read_text()) for p in (tmp_path / "home").rglob("trial.json")]
    assert len(records) == 9 and all(rec["cuda"] == "0" for rec in records)
    most = {node: _most_at_once([(rec["start"], rec["end"]) for rec in records if rec["node"] == node])
            for node in {rec["node"] for rec in records}}
    assert max(most.values()) == 2, most  # two trials shared one GPU ...
    assert all(n <= 2 for n in most.values()), most  # ... and never three
    # Each trial's bundle: n1-standard-1's 1 CPU and 3.75 GiB, and half a GPU.
    bundles = cluster.bundles()
    for t in study["trials"]:
        assert bundles[f"vcli-{t['customJob'].rsplit('/', 1)[1]}"] == [{"CPU": 1.0, "GPU": 0.5, "memory": 3.75 * 2**30}]


def test_a_fraction_of_a_gpu_needs_an_executor_that_shares_gpus(tmp_path: Path) -> None:
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=x", "--executor=slurm", "--validate-only",
             "--worker-pool-spec=machine-type=n1-standard-4,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=0.25,"
             "executor-image-uri=python:3.11,python-module=m")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "ERROR: (vcli.custom-jobs.create) argument --worker-pool-spec: workerpool0 asks for accelerator-count=0.25: "
        "a fraction of a GPU needs --executor=docker, local, ray or ssh (the slurm executor gives each replica whole GPUs)"]


@pytest.mark.parametrize("count", ["0.00001", "1e-9", "0.33333"])
def test_a_gpu_share_finer_than_rays_is_one_line_before_anything_runs(tmp_path: Path, count: str) -> None:
    """It passed --validate-only; `create` then recorded the job and FAILED it with Ray's
    ValueError ("The precision of the fractional quantity of resource num_gpus ...")."""
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=x", "--executor=ray", "--validate-only",
             "--ray-address=127.0.0.1:1",
             f"--worker-pool-spec=machine-type=n1-standard-4,accelerator-type=NVIDIA_TESLA_T4,accelerator-count={count},"
             "executor-image-uri=python:3.11,python-module=m")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"ERROR: (vcli.custom-jobs.create) argument --worker-pool-spec: workerpool0 asks for accelerator-count="
        f"{float(count):g}: the ray executor counts a GPU in steps of 0.0001 (such as 0.25 or 0.0005)"]


def test_cancel_from_another_terminal_leaves_no_process(cluster: RayCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"slow.py": """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        print("sleeping", flush=True)
        time.sleep(600)
    """})
    proc = subprocess.Popen([sys.executable, "-m", "vcli", "custom-jobs", "create", "--display-name=slow",
                             f"--worker-pool-spec={POOL},local-package-path={pkg},script=slow.py",
                             f"--worker-pool-spec={POOL}"],
                            env=vcli_env(home, **_env(cluster)), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        logs = wait_for(lambda: [p for p in home.rglob("replica.log") if "sleeping" in p.read_text()],
                        120, "both replicas sleeping")
        job_id = logs[0].parts[logs[0].parts.index("jobs") + 1]
        wait_for(lambda: len(processes_with_env("VCLI_JOB_ID", job_id)) >= 4, 60, "trainers and their helpers")
        r = vcli(home, "custom-jobs", "cancel", job_id, timeout=120, **_env(cluster))
        assert r.returncode == 0, r.stderr
        proc.communicate(timeout=120)
    finally:
        reap(proc)
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", job_id), 15, "no process of the job left")
    assert cluster.placement_groups()[f"vcli-{job_id}"] == "REMOVED"  # its resources are free again


@pytest.mark.parametrize("then", ["resume", "cancel"])
def test_a_replica_whose_start_was_never_recorded_is_adopted_or_stopped(cluster: RayCluster, tmp_path: Path,
                                                                        then: str) -> None:
    """A controller killed after its replica's actor started the trainer, before the handle was
    recorded: `resume` finds the actor by its name and adopts it (the trainer runs once), and
    `cancel` finds it to stop it (the ray executor found nothing: a resume started the trainer
    a second time, a cancel left it running)."""
    import os
    import signal

    from vcli.store import Store

    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"nap.py": """
        import sys, time
        print("up", flush=True)
        time.sleep(float(sys.argv[1]))
    """})
    proc = subprocess.Popen([sys.executable, "-m", "vcli", "custom-jobs", "create", "--display-name=unrecorded",
                             f"--worker-pool-spec={POOL},local-package-path={pkg},script=nap.py",
                             "--args=" + ("5" if then == "resume" else "600")],
                            env=vcli_env(home, **_env(cluster)), cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        logs = wait_for(lambda: [p for p in home.rglob("replica.log") if "\tup" in p.read_text()], 120, "the replica up")
        job_id = logs[0].parts[logs[0].parts.index("jobs") + 1]
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        reap(proc)
    store = Store(home)
    store.upsert_replica(job_id, "workerpool0-0", handle=None, state="PENDING", start_time=None)
    store.close()
    r = vcli(home, "custom-jobs", then, job_id, timeout=180, **_env(cluster))
    assert r.returncode == 0, r.stderr[-3000:]
    job = describe(home, "custom-jobs", job_id)
    if then == "resume":
        assert job["state"] == "JOB_STATE_SUCCEEDED" and job["replicas"][0]["state"] == "SUCCEEDED", job
        assert logs[0].read_text().count("\tup") == 1  # adopted, not started again
    else:
        assert job["state"] == "JOB_STATE_CANCELLED" and job["replicas"][0]["state"] == "STOPPED", job
        wait_for(lambda: not processes_with_env("VCLI_JOB_ID", job_id), 15, "no process of the job left")
    assert cluster.placement_groups()[f"vcli-{job_id}"] == "REMOVED"


def test_logs_stream_back_from_a_node_that_cannot_write_here(cluster: RayCluster, tmp_path: Path) -> None:
    """VCLI_RAY_STREAM_LOGS=1 treats every node as another machine: the actor keeps the log on
    its node and vcli copies its lines into the replica's log file while the job runs."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"talk.py": """
        import time
        for i in range(5):
            print(f"line {i}", flush=True)
            time.sleep(0.3)
    """})
    r = vcli(home, "custom-jobs", "create", "--display-name=talk",
             f"--worker-pool-spec={POOL},local-package-path={pkg},script=talk.py", timeout=300,
             VCLI_RAY_STREAM_LOGS="1", **_env(cluster))
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = job_id_from_stderr(r.stderr)
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60)
    lines = [line.split("\t")[3] for line in logs.stdout.splitlines() if line.count("\t") >= 3]
    assert [x for x in lines if x.startswith("line ")] == [f"line {i}" for i in range(5)], logs.stdout
    assert "Task completed" in lines[-1]


def test_the_cluster_watch_waits_out_a_brief_refusal_and_calls_a_long_one_lost() -> None:
    """`ClusterWatch` (no cluster needed: a port that refuses, then a listener, then none): a
    GCS that refuses for a moment is not lost (a release then waits for it, rather than leave
    a placement group reserved); one that refuses for LOST_AFTER_SECONDS is, for good, and a
    call blocked in Ray is then left behind."""
    import socket
    import threading

    from vcli.executors.ray import reach

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    watch = reach.ClusterWatch(f"127.0.0.1:{port}")
    assert not watch.answering() and watch.lost() is None
    listener = socket.create_server(("127.0.0.1", port))
    try:
        wait_for(watch.answering, 10, "the watch to see the GCS answer again")
        assert watch.lost() is None
    finally:
        listener.close()
    refused_from = time.monotonic()
    wait_for(lambda: watch.lost() is not None, 30, "the cluster counted lost")
    assert time.monotonic() - refused_from >= reach.LOST_AFTER_SECONDS - reach.RECHECK_SECONDS
    assert f"the Ray cluster at 127.0.0.1:{port} is gone" in watch.lost()
    listener = socket.create_server(("127.0.0.1", port))  # lost stays lost: Ray's driver is done for
    try:
        assert not watch.answering()
    finally:
        listener.close()
    blocked = threading.Event()
    started = time.monotonic()
    with pytest.raises(reach.ClusterLost, match="is gone"):
        reach.bounded(watch, blocked.wait, 60)  # a call that would block in Ray
    assert time.monotonic() - started < 5
    blocked.set()


@pytest.mark.parametrize("kind", ["custom-jobs", "hp-tuning-jobs", "waiting"])
def test_a_cluster_that_goes_away_fails_the_job_within_seconds_and_vcli_ends(kind: str, tmp_path: Path) -> None:
    """The whole cluster stopped mid-run (its own, not the module's): a call into Ray then
    blocked until Ray's core ended vcli 60 s later ("Failed to connect to GCS within 60
    seconds ... The program will terminate", exit 1), the job or study left RUNNING (or
    PENDING) with nobody driving it. Now the end is recorded within seconds, FAILED, naming
    the lost cluster, and vcli exits with the job's code (also a job that waited for the
    cluster's only GPU: it exited 3, recorded FAILED; found by a probe)."""
    own = RayCluster(workers=0, gpus_per_node=1, cpus_per_node=4).start()
    home = tmp_path / "home"
    env = vcli_env(home, VCLI_EXECUTOR="ray", RAY_ADDRESS=own.address, **AUTH_ENV)
    pkg = write_package(tmp_path, {"t.py": "import time; print('up', flush=True); time.sleep(600)"})
    pool = f"{POOL},local-package-path={pkg},script=t.py"
    argv = ["--worker-pool-spec=" + pool, f"--worker-pool-spec={POOL}"] if kind == "custom-jobs" else [
        "--max-trial-count=4", "--parallel-trial-count=2", "--metric=metric-id=a,goal=maximize",
        "--parameter-spec=parameter-id=lr,type=double,min=0.01,max=1", "--worker-pool-spec=" + pool]
    if kind == "waiting":  # the GPU held by a job running --async
        gpu = f"--worker-pool-spec={GPU_POOL},local-package-path={pkg},script=t.py"
        r = vcli(home, "custom-jobs", "create", "--display-name=holder", gpu, "--async", **env)
        assert r.returncode == 0, r.stderr
        kind, argv = "custom-jobs", [gpu]
    proc = subprocess.Popen([sys.executable, "-m", "vcli", kind, "create", "--display-name=gone", *argv], env=env,
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        wait_for(lambda: any("up" in p.read_text() for p in home.rglob("replica.log")), 180, "a replica running")
        if argv[0].startswith(f"--worker-pool-spec={GPU_POOL}"):
            read_stderr_until(proc, "is queued until then", 60)
        stopped_at = time.monotonic()
        own.stop()
        out, err = proc.communicate(timeout=120)
    finally:
        reap(proc)
        own.stop()
    took = time.monotonic() - stopped_at
    assert proc.returncode == 6, err[-3000:]
    assert took < 40, (took, err[-3000:])  # Ray's own end comes at 60 s
    assert f"the ray cluster at {own.address} is gone" in err.lower(), err[-3000:]
    [job] = [j for j in json.loads(vcli(home, kind, "list", "--format=json").stdout) if j["displayName"] == "gone"]
    assert job["state"] == "JOB_STATE_FAILED", job
    wait_for(lambda: all(j["state"] == "JOB_STATE_FAILED" for j in json.loads(vcli(home, "custom-jobs", "list",
                                                                                  "--format=json").stdout)),
             60, "the --async job FAILED too")  # its controller gone with it, before the test ends
    assert own.processes() == []


def test_zz_a_lost_node_fails_its_trial_within_seconds_and_the_study_completes(cluster: RayCluster,
                                                                                tmp_path: Path) -> None:
    """Runs last (zz): it kills worker node_c for good."""
    home = tmp_path / "home"
    victim = cluster.node_ids()["node_c"]
    pkg = write_package(tmp_path, {"trial.py": TRIAL.replace(
        'float(os.environ.get("TRIAL_SLEEP", "2"))', f'600 if rec["node"] == "{victim}" else 1')})
    proc = subprocess.Popen([sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", "--display-name=loss",
                             "--max-trial-count=4", "--parallel-trial-count=3", "--max-failed-trial-count=1",
                             "--algorithm=random-search", "--seed=1", "--metric=metric-id=accuracy,goal=maximize",
                             "--parameter-spec=parameter-id=lr,type=double,min=0.01,max=1",
                             f"--worker-pool-spec={GPU_POOL},local-package-path={pkg},script=trial.py", "--format=json"],
                            env=vcli_env(home, **_env(cluster)), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: any(f"up on {victim}" in p.read_text() for p in home.rglob("replica.log")),
                 180, "a trial running on node_c")
        stranded = processes_with_env("VCLI_RAY_NODE_ID", victim)
        assert stranded
        killed_at = time.monotonic()
        cluster.kill_node("node_c")
        out, err = proc.communicate(timeout=300)
    finally:
        reap(proc)
    assert proc.returncode == 0, f"{out}\n{err[-3000:]}"
    study = json.loads(out)
    states = [t["state"] for t in study["trials"]]
    # The trial lost with node_c is INFRASTRUCTURE and runs again on another node.
    assert len(states) == 5 and states.count("SUCCEEDED") == 4, f"{states}\n{err[-3000:]}"
    lost = next(t for t in study["trials"] if t["state"] != "SUCCEEDED")
    assert "Ray actor" in json.dumps(lost) and lost["failureClass"] == "INFRASTRUCTURE", lost
    assert [t["retryOf"] for t in study["trials"] if t.get("retryOf")] == [lost["id"]], study["trials"]
    # The whole study (the lost trial's end included) took seconds after the kill, not a timeout.
    assert time.monotonic() - killed_at < 60
    assert not processes_with_env("VCLI_RAY_NODE_ID", victim)


def test_a_job_larger_than_the_cluster_shares_its_cpus_and_memory_out(cluster: RayCluster, tmp_path: Path) -> None:
    """Like the README's demo on a one-node `ray start --head`: machine types that ask for more
    CPUs and memory than the whole cluster has (4 replicas of n1-standard-4: 16 CPUs, 60 GB
    against 12 CPUs here) run anyway, as with the local executor, each replica asking for an
    equal share that fits a node, and one Note line says so."""
    pkg = write_package(tmp_path, {"t.py": "import os; print('ran', os.environ['VCLI_RAY_NODE_ID'][:8], flush=True)"})
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=shared",
             f"--worker-pool-spec={POOL},local-package-path={pkg},script=t.py",
             "--worker-pool-spec=machine-type=n1-standard-4,replica-count=3", timeout=300, **_env(cluster))
    assert r.returncode == 0, r.stderr[-3000:]
    notes = [line for line in r.stderr.splitlines() if line.startswith("Note: the machine types ask for")]
    assert len(notes) == 1 and "16 CPU" in notes[0] and "12 CPU" in notes[0], r.stderr[-3000:]
    job_id = job_id_from_stderr(r.stderr)
    bundles = cluster.bundles()[f"vcli-{job_id}"]
    assert len(bundles) == 4 and sum(b["CPU"] for b in bundles) <= 12 and all(b["CPU"] <= 2 for b in bundles)
    assert describe(tmp_path / "home", "custom-jobs", job_id)["state"] == "JOB_STATE_SUCCEEDED"
