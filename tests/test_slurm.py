"""The slurm executor (issue #22) on a real Slurm: munged, slurmctld and two slurmd, started here.

The cluster (tests/harness/slurm_cluster.py) is started once for this module: slurmctld in a
controller network namespace, and nodes `h1` and `h2` in namespaces of their own (their own
UTS hostnames and addresses 10.214.0.11 and .12), 4 CPUs and 2 plain-file GPUs each. vcli runs
through its real CLI in the controller namespace (`--executor=slurm` via VCLI_EXECUTOR,
SLURM_CONF naming the cluster); the machine's one filesystem is the cluster's shared
filesystem. The node-loss test kills h2's slurmd, so it runs last (zz).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.harness.slurm_cluster import Node, SlurmCluster, available
from tests.helpers import (
    REPO,
    clusters_from_stdout,
    describe,
    job_id_from_stderr,
    list_ids,
    processes_with_env,
    vcli_env,
    wait_for,
)

SMALL = "machine-type=n1-standard-1,replica-count=1"
WHOLE = "machine-type=n1-standard-4,replica-count=1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    why = available()
    if why:
        pytest.fail(why)
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"), [Node("h1", cpus=4, gpus=2), Node("h2", cpus=4, gpus=2)],
                     netns=True).start()
    try:
        yield c
    finally:
        c.stop()
        assert c.leftovers() == []


def _env(cluster: SlurmCluster, **extra: str) -> dict[str, str]:
    return {"VCLI_EXECUTOR": "slurm", **cluster.env(), **extra}


def spawn(cluster: SlurmCluster, home: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    """`python -m vcli ARGS` in the controller namespace, in the background (its own session)."""
    return subprocess.Popen(cluster.client([sys.executable, "-m", "vcli", *args]), env=vcli_env(home, **_env(cluster, **env)),
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def run(cluster: SlurmCluster, home: Path, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    proc = spawn(cluster, home, *args, **env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"vcli {' '.join(args)} timed out after {timeout}s\n{out}\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    pkg.mkdir(parents=True)
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    return pkg


#: A trial that records where it ran (Slurm node, job, GPUs) and when, then reports accuracy.
TRIAL = """
    import json, os, sys, time
    lr = float(sys.argv[1].split("=", 1)[1])
    rec = {"node": os.environ.get("SLURMD_NODENAME"), "job": os.environ.get("SLURM_JOB_ID"),
           "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "trial": os.environ.get("CLOUD_ML_TRIAL_ID"),
           "start": time.time()}
    print("up on", rec["node"], flush=True)
    time.sleep(float(os.environ.get("TRIAL_SLEEP", "1")))
    rec["end"] = time.time()
    out = os.path.join(os.environ["AIP_MODEL_DIR"], "trial.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(rec, open(out, "w"))
    print(f"accuracy={1 - abs(lr - 0.3):.4f}", flush=True)
"""
STUDY = ["--algorithm=random-search", "--seed=1", "--metric=metric-id=accuracy,goal=maximize",
         "--parameter-spec=parameter-id=lr,type=double,min=0.01,max=1", "--format=json"]


def _records(home: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in home.rglob("trial.json")]


def _logs_saying(home: Path, text: str, count: int) -> list[Path] | None:
    """The replica logs holding `text`, once there are `count` of them."""
    found = [p for p in home.rglob("replica.log") if text in p.read_text()]
    return found if len(found) == count else None


class QueueWatch:
    """Samples squeue every 0.1 s in the background: the most jobs it ever listed."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.most = 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            jobs = self.cluster.jobs()
            self.most = max(self.most, len(jobs))
            self.seen.update(jobs)
            time.sleep(0.1)


def test_two_replica_multiworker_job_runs_on_two_slurm_nodes(cluster: SlurmCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = run(cluster, home, "custom-jobs", "create", "--display-name=digits",
            f"--worker-pool-spec={WHOLE},local-package-path=.,python-module=trainer.task",
            f"--worker-pool-spec={WHOLE}", "--args=--epochs=1", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    job = describe(home, "custom-jobs", job_id_from_stderr(r.stderr))
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    replicas = {x["taskName"]: x for x in job["replicas"]}
    hosts = [replicas[t]["host"] for t in ("workerpool0-0", "workerpool1-0")]
    assert sorted(hosts) == ["h1", "h2"]  # one Slurm job, gang-scheduled on both nodes
    addresses = {"h1": "10.214.0.11", "h2": "10.214.0.12"}
    for task, host in zip(("workerpool0-0", "workerpool1-0"), hosts):
        assert replicas[task]["address"].startswith(addresses[host] + ":")
    clusters = clusters_from_stdout(r.stdout)
    assert clusters["workerpool0-0"] == clusters["workerpool1-0"] == {
        "chief": [replicas["workerpool0-0"]["address"]], "worker": [replicas["workerpool1-0"]["address"]]}
    assert "final val_accuracy=" in Path(replicas["workerpool0-0"]["logPath"]).read_text()
    wait_for(lambda: not cluster.jobs(), 20, "the allocation to leave the queue")


def test_a_study_on_gpu_nodes_keeps_parallel_allocations_and_never_shares_a_gpu(cluster: SlurmCluster,
                                                                                 tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = _package(tmp_path, {"trial.py": TRIAL})
    with QueueWatch(cluster) as watch:
        r = run(cluster, home, "hp-tuning-jobs", "create", "--display-name=gpu-study", "--max-trial-count=8",
                "--parallel-trial-count=2", *STUDY,
                f"--worker-pool-spec={SMALL},accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1,"
                f"local-package-path={pkg},script=trial.py", timeout=600, TRIAL_SLEEP="2")
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr[-3000:]}"
    study = json.loads(r.stdout)
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 8
    assert all(t["finalMeasurement"]["metrics"][0]["metricId"] == "accuracy" for t in study["trials"])
    assert watch.most <= 2, f"{watch.most} Slurm jobs at once"
    assert len(watch.seen) == 8  # one Slurm job per trial
    records = _records(home)
    assert len(records) == 8 and all(rec["cuda"] in ("0", "1") for rec in records), records
    assert len({rec["job"] for rec in records}) == 8
    for key in {(rec["node"], rec["cuda"]) for rec in records}:  # one GPU, one trial at a time
        spans = sorted((rec["start"], rec["end"]) for rec in records if (rec["node"], rec["cuda"]) == key)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (key, spans)


SLOW = """
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    print("sleeping", flush=True)
    time.sleep(600)
"""


def test_cancel_from_another_terminal_empties_the_queue_and_leaves_no_process(cluster: SlurmCluster,
                                                                               tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = _package(tmp_path, {"slow.py": SLOW})
    proc = spawn(cluster, home, "custom-jobs", "create", "--display-name=slow",
                 f"--worker-pool-spec={SMALL},local-package-path={pkg},script=slow.py", f"--worker-pool-spec={SMALL}")
    try:
        logs = wait_for(lambda: _logs_saying(home, "sleeping", 2), 120, "both replicas sleeping")
        job_id = logs[0].parts[logs[0].parts.index("jobs") + 1]
        wait_for(lambda: len(processes_with_env("VCLI_JOB_ID", job_id)) >= 4, 60, "trainers and their helpers")
        assert len(cluster.jobs()) == 1
        r = run(cluster, home, "custom-jobs", "cancel", job_id, timeout=120)
        assert r.returncode == 0, r.stderr
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", job_id), 20, "no process of the job on any node")


def test_kill_9_of_the_controller_then_resume_keeps_the_slurm_jobs(cluster: SlurmCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = _package(tmp_path, {"trial.py": TRIAL})
    proc = spawn(cluster, home, "hp-tuning-jobs", "create", "--display-name=crash", "--max-trial-count=4",
                 "--parallel-trial-count=2", *STUDY, f"--worker-pool-spec={SMALL},local-package-path={pkg},script=trial.py",
                 TRIAL_SLEEP="8")
    try:
        wait_for(lambda: _logs_saying(home, "up on", 2), 120, "two trials running")
        before = sorted(cluster.jobs())
        assert len(before) == 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    time.sleep(1)
    assert sorted(cluster.jobs()) == before  # the allocations and their replicas go on
    [study_id] = list_ids(home, "hp-tuning-jobs")
    r = run(cluster, home, "hp-tuning-jobs", "resume", study_id, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 4
    records = sorted(_records(home), key=lambda rec: int(rec["trial"]))
    assert [rec["trial"] for rec in records] == ["1", "2", "3", "4"]  # each trial ran once
    assert sorted(rec["job"] for rec in records[:2]) == before  # re-attached, not resubmitted
    starts = [p for p in home.rglob("replica.log") if "up on" in p.read_text()]
    assert all(p.read_text().count("up on") == 1 for p in starts) and len(starts) == 4
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")


def test_a_job_slurm_kills_for_its_time_limit_reports_slurms_reason(cluster: SlurmCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = _package(tmp_path, {"slow.py": SLOW})
    config = tmp_path / "job.yaml"
    config.write_text(textwrap.dedent(f"""
        workerPoolSpecs:
          - machineSpec: {{machineType: n1-standard-1}}
            replicaCount: 1
            containerSpec:
              imageUri: python
              command: ["{sys.executable}", "{pkg / 'slow.py'}"]
        scheduling:
          timeout: 30s
    """))
    began = time.monotonic()
    r = run(cluster, home, "custom-jobs", "create", "--display-name=late", f"--config={config}", timeout=400)
    assert r.returncode == 6, r.stderr[-3000:]
    job = describe(home, "custom-jobs", job_id_from_stderr(r.stderr))
    assert job["state"] == "JOB_STATE_FAILED"
    assert "TIMEOUT" in job["error"]["message"] and "time limit" in job["error"]["message"], job["error"]
    assert time.monotonic() - began < 200  # --time=1 (minutes): Slurm checks limits every 30 s
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")


def test_slurm_check_reports_commands_partitions_and_gpus(cluster: SlurmCluster, tmp_path: Path) -> None:
    r = run(cluster, tmp_path / "home", "slurm", "check", "--format=json", timeout=60)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert {c["command"]: c["ok"] for c in report["commands"]} == {
        "sinfo": True, "squeue": True, "sbatch": True, "srun": True, "scancel": True, "scontrol": True,
        "sacct": False}  # no accounting storage here: sacct cannot answer, and says so
    assert report["partitions"] == [{"name": "main", "default": True, "state": "up", "nodes": ["h1", "h2"]}]
    assert [(n["name"], n["cpus"], n["gpus"]) for n in report["nodes"]] == [("h1", 4, 2), ("h2", 4, 2)]
    assert report["sharedDirectory"]["visibleOnNodes"] is True


def test_zz_a_node_whose_slurmd_dies_fails_its_trial_and_the_study_goes_on(cluster: SlurmCluster,
                                                                          tmp_path: Path) -> None:
    """Runs last (zz): h2's slurmd is killed for good."""
    home = tmp_path / "home"
    pkg = _package(tmp_path, {"trial.py": TRIAL.replace(
        'float(os.environ.get("TRIAL_SLEEP", "1"))', '600 if rec["node"] == "h2" else 1')})
    proc = spawn(cluster, home, "hp-tuning-jobs", "create", "--display-name=loss", "--max-trial-count=4",
                 "--parallel-trial-count=2", "--max-failed-trial-count=1", *STUDY,
                 f"--worker-pool-spec={WHOLE},local-package-path={pkg},script=trial.py")
    try:
        wait_for(lambda: any("up on h2" in p.read_text() for p in home.rglob("replica.log")), 180, "a trial on h2")
        cluster.kill_slurmd("h2")
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        cluster.kill_node_processes("h2")  # the stranded trial: a real dead node takes it with it
    assert proc.returncode == 0, err[-3000:]
    study = json.loads(out)
    states = [t["state"] for t in study["trials"]]
    assert states.count("INFEASIBLE") == 1 and states.count("SUCCEEDED") == 3, study["trials"]
    failed = next(t for t in study["trials"] if t["state"] == "INFEASIBLE")
    assert "NODE_FAIL" in failed["infeasibleReason"], failed["infeasibleReason"]
