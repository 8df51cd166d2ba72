"""The slurm executor (issue #22) on a real Slurm: munged, slurmctld and two slurmd, started here.

The cluster (tests/harness/slurm_cluster.py) is started once for this module: slurmctld in a
controller network namespace, and nodes `h1` and `h2` in namespaces of their own (their own
UTS hostnames and addresses 10.214.0.11 and .12), 4 CPUs and 2 plain-file GPUs each. vcli runs
through its real CLI in the controller namespace (`--executor=slurm` via VCLI_EXECUTOR,
SLURM_CONF naming the cluster); the machine's one filesystem is the cluster's shared
filesystem. Besides the default partition `main` (both nodes), partition `other` has h1 only.
The node-loss test kills h2's slurmd, so it runs last (zz). The memory test starts a cluster of
its own (one node on loopback, memory enforced by jobacct_gather: no cgroups here).
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
    reap,
    vcli_env,
    wait_for,
    write_package,
)

SMALL = "machine-type=n1-standard-1,replica-count=1"
WHOLE = "machine-type=n1-standard-4,replica-count=1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    why = available()
    if why:
        pytest.fail(why)
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"), [Node("h1", cpus=4, gpus=2), Node("h2", cpus=4, gpus=2)],
                     netns=True, partitions={"other": ["h1"]}).start()
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


#: A trial that records where it ran (Slurm node, job, GPUs) and when, then reports accuracy.
TRIAL = """
    import json, os, sys, time
    lr = float(sys.argv[1].split("=", 1)[1])
    rec = {"node": os.environ.get("SLURMD_NODENAME"), "job": os.environ.get("SLURM_JOB_ID"),
           "partition": os.environ.get("SLURM_JOB_PARTITION"),
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


def _kill_controller(cluster: SlurmCluster, proc: subprocess.Popen, home: Path, replicas: int, what: str) -> list[str]:
    """Once `replicas` replica logs say "up on", kill -9 the controller `proc` (and only it)
    and reap it; Slurm's job ids as they were just before the kill."""
    try:
        wait_for(lambda: _logs_saying(home, "up on", replicas), 120, what)
        before = sorted(cluster.jobs())
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        reap(proc)
    return before


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
    pkg = write_package(tmp_path, {"trial.py": TRIAL})
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


def test_two_vcli_homes_share_one_cluster_and_never_share_a_gpu(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Two users (two vcli homes) run a study each on the cluster at once, 3 trials in parallel
    each against 4 GPUs in all: Slurm queues what does not fit, every trial succeeds, and no
    GPU ever runs two trials, across both studies."""
    pkg = write_package(tmp_path, {"trial.py": TRIAL})
    homes = [tmp_path / "alice", tmp_path / "bob"]
    with QueueWatch(cluster) as watch:
        procs = [spawn(cluster, home, "hp-tuning-jobs", "create", f"--display-name=shared-{i}", "--max-trial-count=5",
                       "--parallel-trial-count=3", *STUDY,
                       f"--worker-pool-spec={SMALL},accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1,"
                       f"local-package-path={pkg},script=trial.py", TRIAL_SLEEP="3")
                 for i, home in enumerate(homes)]
        outs = []
        try:
            for proc in procs:
                outs.append(proc.communicate(timeout=600))
        finally:
            for proc in procs:
                reap(proc)
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
        assert [t["state"] for t in json.loads(out)["trials"]] == ["SUCCEEDED"] * 5
    assert watch.most <= 6, f"{watch.most} Slurm jobs at once"
    records = [rec for home in homes for rec in _records(home)]
    assert len(records) == 10 and len({rec["job"] for rec in records}) == 10
    for key in {(rec["node"], rec["cuda"]) for rec in records}:  # one GPU, one trial at a time
        spans = sorted((rec["start"], rec["end"]) for rec in records if (rec["node"], rec["cuda"]) == key)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (key, spans)
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")


def test_a_pbt_study_on_slurm_copies_a_running_donors_checkpoint(cluster: SlurmCluster, tmp_path: Path) -> None:
    """PBT through the Slurm executor: members are Slurm jobs, a bottom member is replaced by a
    trial that starts from a copy of a running donor's checkpoint (held still on its node for
    the copy) and goes on from the donor's step."""
    from tests.kit import PBT_STUDY, PBT_TOY

    home = tmp_path / "home"
    script = tmp_path / "toy.py"
    script.write_text(PBT_TOY)
    config = tmp_path / "pbt.yaml"
    config.write_text(PBT_STUDY.format(max_trials=6, population=2, python=sys.executable, script=script,
                                       extra=", --pause=1.0")
                      .replace("quantileFraction: 0.25", "quantileFraction: 0.5")
                      .replace("parallelTrialCount: 4", "parallelTrialCount: 2")
                      .replace("machineType: n1-standard-4", "machineType: n1-standard-1"))
    r = run(cluster, home, "hp-tuning-jobs", "create", f"--config={config}", "--seed=1", "--format=json", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    children = [t for t in study["trials"] if "parentTrialId" in t["populationBasedTraining"]]
    assert children, r.stderr[-3000:]
    for child in children:
        start = int(child["populationBasedTraining"]["startStep"])
        assert int(child["measurements"][0]["stepCount"]) == start + 1, child
    logs = [p.read_text() for p in home.rglob("replica.log")]
    assert sum("restored step=" in text for text in logs) == len(children)  # each child began from its copy
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")


SLOW = """
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    print("sleeping", flush=True)
    time.sleep(600)
"""


def test_cancel_from_another_terminal_empties_the_queue_and_leaves_no_process(cluster: SlurmCluster,
                                                                               tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"slow.py": SLOW})
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
        reap(proc)
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", job_id), 20, "no process of the job on any node")


def test_kill_9_of_the_controller_then_resume_keeps_the_slurm_jobs(cluster: SlurmCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"trial.py": TRIAL})
    proc = spawn(cluster, home, "hp-tuning-jobs", "create", "--display-name=crash", "--max-trial-count=4",
                 "--parallel-trial-count=2", *STUDY, f"--worker-pool-spec={SMALL},local-package-path={pkg},script=trial.py",
                 TRIAL_SLEEP="8")
    before = _kill_controller(cluster, proc, home, 2, "two trials running")
    assert len(before) == 2
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
    pkg = write_package(tmp_path, {"slow.py": SLOW})
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
    assert report["partitions"] == [{"name": "main", "default": True, "state": "up", "nodes": ["h1", "h2"]},
                                    {"name": "other", "default": False, "state": "up", "nodes": ["h1"]}]
    assert [(n["name"], n["cpus"], n["gpus"]) for n in report["nodes"]] == [("h1", 4, 2), ("h2", 4, 2)]
    assert report["sharedDirectory"]["visibleOnNodes"] is True


#: Records where it runs and what Slurm gave it, prints its CLUSTER_SPEC (as the trainer does),
#: and runs long enough for the controller to poll its step many times.
HET = """
    import json, os, time
    spec = json.loads(os.environ["CLUSTER_SPEC"])
    print(f"cluster={json.dumps(spec['cluster'])} task={spec['task']['type']}", flush=True)
    rec = {"node": os.environ.get("SLURMD_NODENAME"), "cpus": os.environ.get("SLURM_CPUS_ON_NODE"),
           "task": spec["task"]["type"]}
    time.sleep(10)  # longer than the 5 s in which a step squeue does not list yet counts as starting
    out = os.path.join(os.environ["AIP_MODEL_DIR"], f"het-{rec['task']}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(rec, open(out, "w"))
"""


def test_a_heterogeneous_two_pool_job_succeeds_with_its_labels_in_the_slurm_comment(cluster: SlurmCluster,
                                                                                   tmp_path: Path) -> None:
    """Pools of 1 and 4 CPUs: one heterogeneous Slurm job (two components, two job ids); the
    second component's steps are COMPONENT.STEP in squeue, which vcli must poll by."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"het.py": HET})
    proc = spawn(cluster, home, "custom-jobs", "create", "--display-name=het", "--labels=team=vision,run=het1",
                 f"--worker-pool-spec={SMALL},local-package-path={pkg},script=het.py", f"--worker-pool-spec={WHOLE}")
    seen: dict[str, Any] = {"steps": set(), "queue": []}

    def both_steps() -> bool:  # every step seen so far: one may end before the other shows (CI, loaded)
        seen["steps"] |= set(cluster.run("squeue", "-h", "-s", "-o", "%i").stdout.split())
        queue = cluster.run("squeue", "-h", "-o", "%i|%k").stdout.split("\n")
        if len([line for line in queue if line]) == 2:
            seen["queue"] = queue
        return len({st.split(".")[0] for st in seen["steps"]}) >= 2 and bool(seen["queue"])

    try:
        wait_for(both_steps, 120, "both replicas' steps")
        queue, steps = seen["queue"], sorted(seen["steps"])
        out, err = proc.communicate(timeout=180)
    finally:
        reap(proc)
    assert proc.returncode == 0, err[-3000:]
    comps = [line.split("|", 1) for line in queue if line]
    assert sorted(c[0].split("+")[1] for c in comps) == ["0", "1"], comps  # one job, two components
    assert all("team=vision" in c[1] and "run=het1" in c[1] for c in comps), comps  # labels -> --comment
    job = describe(home, "custom-jobs", job_id_from_stderr(err))
    assert job["state"] == "JOB_STATE_SUCCEEDED", job.get("error")
    replicas = {x["taskName"]: x for x in job["replicas"]}
    hosts = [replicas[t]["host"] for t in ("workerpool0-0", "workerpool1-0")]
    assert sorted(hosts) == ["h1", "h2"]
    clusters = clusters_from_stdout(out)
    assert clusters["workerpool0-0"] == clusters["workerpool1-0"] == {
        "workerpool0": [replicas["workerpool0-0"]["address"]], "workerpool1": [replicas["workerpool1-0"]["address"]]}
    recs = {r["task"]: r for r in (json.loads(p.read_text()) for p in home.rglob("het-*.json"))}
    assert (recs["workerpool0"]["cpus"], recs["workerpool1"]["cpus"]) == ("1", "4")
    # The second component is a job of its own: its step was polled under that id, not the leader's.
    leader = min(int(c[0].split("+")[0]) for c in comps)
    assert any(st.startswith(f"{leader + 1}.") for st in steps), steps
    assert "Note: on Slurm the job (each trial of a study) is a heterogeneous Slurm job of 2 components" in err
    wait_for(lambda: not cluster.jobs(), 20, "the allocation to leave the queue")


#: Records the GPUs Slurm gave its replica and where, then outlives a controller's kill -9.
HETGPU = """
    import json, os, time
    spec = json.loads(os.environ["CLUSTER_SPEC"])
    task = spec["task"]["type"]
    print("up on", os.environ.get("SLURMD_NODENAME"), flush=True)
    rec = {"node": os.environ.get("SLURMD_NODENAME"), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "job": os.environ.get("SLURM_JOB_ID"), "task": task, "cluster": spec["cluster"]}
    time.sleep(12)
    out = os.path.join(os.environ["AIP_MODEL_DIR"], f"hetgpu-{task}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(rec, open(out, "w"))
"""


def test_a_heterogeneous_job_of_pools_with_different_gpus_is_resumed_after_kill_9(cluster: SlurmCluster,
                                                                                   tmp_path: Path) -> None:
    """Pools of 1 GPU (1 CPU) and 2 GPUs (4 CPUs): one heterogeneous Slurm job whose components
    ask for different gres. The controller is killed (-9) while both run; `resume` re-attaches
    to both components' steps (same Slurm job, each replica started once) and the job SUCCEEDS."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"hetgpu.py": HETGPU})
    gpu = "accelerator-type=NVIDIA_TESLA_T4"
    proc = spawn(cluster, home, "custom-jobs", "create", "--display-name=hetgpu",
                 f"--worker-pool-spec={SMALL},{gpu},accelerator-count=1,local-package-path={pkg},script=hetgpu.py",
                 f"--worker-pool-spec={WHOLE},{gpu},accelerator-count=2")
    before = _kill_controller(cluster, proc, home, 2, "both replicas running")
    assert len(before) == 2 and len({j.split("+")[0] for j in before}) == 1, before  # one job, two components
    assert sorted(cluster.jobs()) == before  # the replicas go on without their controller
    [job_id] = list_ids(home, "custom-jobs")
    r = run(cluster, home, "custom-jobs", "resume", job_id, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED", job.get("error")
    recs = {rec["task"]: rec for rec in (json.loads(p.read_text()) for p in home.rglob("hetgpu-*.json"))}
    assert sorted(recs) == ["workerpool0", "workerpool1"]
    assert len(recs["workerpool0"]["cuda"].split(",")) == 1 and len(recs["workerpool1"]["cuda"].split(",")) == 2, recs
    assert recs["workerpool0"]["node"] != recs["workerpool1"]["node"]  # 4 CPUs and 2 GPUs: a node of its own
    assert {recs[t]["job"] for t in recs} == {before[0].split("+")[0]}  # re-attached, not resubmitted
    logs = [p for p in home.rglob("replica.log") if "up on" in p.read_text()]
    assert len(logs) == 2 and all(p.read_text().count("up on") == 1 for p in logs)  # each started once
    wait_for(lambda: not cluster.jobs(), 20, "the allocation to leave the queue")


def test_a_study_trial_carries_the_labels_and_pends_no_longer_than_its_max_wait(cluster: SlurmCluster,
                                                                               tmp_path: Path) -> None:
    """Study trials as custom jobs: the study's labels in each trial's Slurm --comment, and a
    trial whose Slurm job pends past trialJobSpec.scheduling.maxWaitDuration is cancelled with
    Slurm's pending reason."""
    home = tmp_path / "home"
    blocker = cluster.run("sbatch", "--parsable", "--exclusive", "-N2", "--job-name=blocker", "--output=/dev/null",
                          "--wrap=sleep 300").stdout.strip()
    config = tmp_path / "study.yaml"
    config.write_text(textwrap.dedent(f"""
        displayName: waits
        maxTrialCount: 2
        parallelTrialCount: 1
        studySpec:
          metrics: [{{metricId: accuracy, goal: MAXIMIZE}}]
          parameters: [{{parameterId: lr, doubleValueSpec: {{minValue: 0.01, maxValue: 1}}}}]
          algorithm: RANDOM_SEARCH
        trialJobSpec:
          workerPoolSpecs:
            - machineSpec: {{machineType: n1-standard-1}}
              replicaCount: 1
              containerSpec: {{imageUri: python, command: ["{sys.executable}", "-c", "print('accuracy=0.5')"]}}
          scheduling:
            maxWaitDuration: 8s
    """))
    try:
        wait_for(lambda: "RUNNING" in cluster.run("squeue", "-h", "-j", blocker, "-o", "%T").stdout, 60, "the blocker")
        proc = spawn(cluster, home, "hp-tuning-jobs", "create", f"--config={config}", "--labels=team=vision,sweep=s1",
                     "--format=json")
        try:
            wait_for(lambda: len(cluster.jobs()) == 2, 60, "the first trial's Slurm job pending")
            queue = dict(line.split("|", 1) for line in cluster.run("squeue", "-h", "-o", "%i|%k").stdout.split("\n")
                         if line)
            out, err = proc.communicate(timeout=120)
        finally:
            reap(proc)
        trial_job = next(comment for job, comment in queue.items() if job != blocker)
        assert "team=vision" in trial_job and "sweep=s1" in trial_job, queue
        assert proc.returncode != 0, out
        assert "pended longer than scheduling.maxWaitDuration (8s; Slurm's pending reason: Resources) and was cancelled" \
            in err, err[-3000:]
        assert cluster.jobs() == [blocker]  # the trial's pending job is gone
    finally:
        cluster.run("scancel", blocker, check=False)
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")


def test_resume_keeps_the_jobs_partition_when_the_shell_names_another(cluster: SlurmCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"trial.py": TRIAL})
    proc = spawn(cluster, home, "hp-tuning-jobs", "create", "--display-name=part", "--max-trial-count=3",
                 "--parallel-trial-count=1", *STUDY, f"--worker-pool-spec={SMALL},local-package-path={pkg},script=trial.py",
                 "--slurm-partition=other", TRIAL_SLEEP="4")
    _kill_controller(cluster, proc, home, 1, "the first trial running")
    [study_id] = list_ids(home, "hp-tuning-jobs")
    # The resuming shell names the other partition: the study keeps its own.
    r = run(cluster, home, "hp-tuning-jobs", "resume", study_id, timeout=300, VCLI_SLURM_PARTITION="main")
    assert r.returncode == 0, r.stderr[-3000:]
    assert describe(home, "hp-tuning-jobs", study_id)["state"] == "JOB_STATE_SUCCEEDED"
    records = _records(home)
    assert len(records) == 3 and {(rec["partition"], rec["node"]) for rec in records} == {("other", "h1")}, records
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")


def test_a_job_pending_past_max_wait_duration_is_cancelled_with_slurms_reason(cluster: SlurmCluster,
                                                                             tmp_path: Path) -> None:
    home = tmp_path / "home"
    blocker = cluster.run("sbatch", "--parsable", "--exclusive", "-N2", "--job-name=blocker", "--output=/dev/null",
                          "--wrap=sleep 300").stdout.strip()
    try:
        wait_for(lambda: "RUNNING" in cluster.run("squeue", "-h", "-j", blocker, "-o", "%T").stdout, 60, "the blocker")
        config = tmp_path / "job.yaml"
        config.write_text(textwrap.dedent(f"""
            workerPoolSpecs:
              - machineSpec: {{machineType: n1-standard-1}}
                replicaCount: 1
                containerSpec:
                  imageUri: python
                  command: ["{sys.executable}", "-c", "print('ran')"]
            scheduling:
              maxWaitDuration: 6s
        """))
        began = time.monotonic()
        r = run(cluster, home, "custom-jobs", "create", "--display-name=waits", f"--config={config}", timeout=120)
        took = time.monotonic() - began
        assert r.returncode != 0, r.stderr
        assert "pended longer than scheduling.maxWaitDuration (6s; Slurm's pending reason: Resources) and was cancelled" \
            in r.stderr, r.stderr
        assert took < 30, took
        assert cluster.jobs() == [blocker]  # vcli's pending job is gone
    finally:
        cluster.run("scancel", blocker, check=False)
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")


def _queue(cluster: SlurmCluster) -> dict[str, list[str]]:
    """Slurm job name -> states of the jobs of that name squeue lists (a job once)."""
    out: dict[str, list[str]] = {}
    for line in cluster.run("squeue", "-h", "-o", "%F|%j|%T").stdout.splitlines():
        slurm_id, name, state = line.split("|")
        out.setdefault(name, []).append(state)
    return out


def _pending_then_killed(cluster: SlurmCluster, home: Path, pkg: Path, name: str, known: list[str]) -> str:
    """Create a job while the cluster is full; once its allocation pends, kill -9 its
    controller; the job's id (`known`: the ids of the home's other jobs)."""
    proc = spawn(cluster, home, "custom-jobs", "create", f"--display-name={name}",
                 f"--worker-pool-spec={SMALL},local-package-path={pkg},script=trial.py", "--args=--lr=0.3")
    try:
        [job_id] = wait_for(lambda: [i for i in list_ids(home, "custom-jobs") if i not in known], 60, "the job")
        wait_for(lambda: _queue(cluster).get(f"vcli-{job_id}") == ["PENDING"], 60, "its allocation pending")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        reap(proc)
    return job_id


def test_a_controller_killed_while_its_allocation_pends_leaves_nothing_queued(cluster: SlurmCluster,
                                                                             tmp_path: Path) -> None:
    """kill -9 while Slurm kept the job pending: only the dead controller knew that Slurm job;
    `cancel` left it queued (to run later for a CANCELLED job) and `resume` queued a second one
    behind it. Now both find it by its name."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"trial.py": TRIAL})
    blocker = cluster.run("sbatch", "--parsable", "--exclusive", "-N2", "--job-name=blocker", "--output=/dev/null",
                          "--wrap=sleep 300").stdout.strip()
    resumed_err = tmp_path / "resume.err"
    resumed = None
    try:
        try:
            wait_for(lambda: _queue(cluster).get("blocker") == ["RUNNING"], 60, "the blocker")
            cancelled = _pending_then_killed(cluster, home, pkg, "cancelled", [])
            kept = _pending_then_killed(cluster, home, pkg, "kept", [cancelled])
            time.sleep(1)
            assert _queue(cluster) == {"blocker": ["RUNNING"], f"vcli-{cancelled}": ["PENDING"],
                                       f"vcli-{kept}": ["PENDING"]}
            r = run(cluster, home, "custom-jobs", "cancel", cancelled, timeout=120)
            assert r.returncode == 0, r.stderr
            assert f"vcli-{cancelled}" not in _queue(cluster)
            resumed = subprocess.Popen(cluster.client([sys.executable, "-m", "vcli", "custom-jobs", "resume", kept]),
                                       env=vcli_env(home, **_env(cluster)), cwd=REPO, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=resumed_err.open("w"), start_new_session=True)
            wait_for(lambda: "Waiting for capacity: Slurm job" in resumed_err.read_text(), 60, "the resumed job waiting")
            time.sleep(4)  # the resumed controller asks Slurm again every few seconds: still one job
            assert _queue(cluster) == {"blocker": ["RUNNING"], f"vcli-{kept}": ["PENDING"]}
        finally:
            cluster.run("scancel", blocker, check=False)
        if resumed is not None:
            resumed.wait(timeout=180)
    finally:
        if resumed is not None:
            reap(resumed)
    assert resumed.returncode == 0, resumed_err.read_text()[-3000:]
    assert describe(home, "custom-jobs", kept)["state"] == "JOB_STATE_SUCCEEDED"
    assert describe(home, "custom-jobs", cancelled)["state"] == "JOB_STATE_CANCELLED"
    wait_for(lambda: not cluster.jobs(), 20, "squeue to be empty")
    assert not list((home / "slurm" / "leases").iterdir())  # the cancelled holders' leases too


def test_a_job_whose_cpus_never_fit_and_a_bad_orphan_timeout_are_one_line_at_once(cluster: SlurmCluster,
                                                                                      tmp_path: Path) -> None:
    """Three 4-CPU replicas on two 4-CPU nodes pended for ever ("Waiting ...", Slurm's reason
    Resources); VCLI_SLURM_ORPHAN_TIMEOUT=abc was a traceback, and 0 ended live jobs after 5 s."""
    home = tmp_path / "home"
    began = time.monotonic()
    r = run(cluster, home, "custom-jobs", "create", "--display-name=never", f"--worker-pool-spec={WHOLE},container-image-uri=python",
            "--worker-pool-spec=machine-type=n1-standard-4,replica-count=2,container-image-uri=python",
            "--command=python3,-c,print(1)", timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert ("workerpool0+workerpool1: 3 replica(s) of 4 CPU(s) each do not fit the Slurm cluster (2 node(s), 4, 4 CPUs): "
            "room for 2; use fewer replicas or a smaller machine type.") in r.stderr, r.stderr
    assert time.monotonic() - began < 30 and not cluster.jobs()
    for bad in ("abc", "nan", "0", "29"):
        r = run(cluster, home, "custom-jobs", "create", "--display-name=o", f"--worker-pool-spec={SMALL},container-image-uri=python",
                "--command=python3,-c,print(1)", timeout=60, VCLI_SLURM_ORPHAN_TIMEOUT=bad)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert (f"VCLI_SLURM_ORPHAN_TIMEOUT must be a number of seconds from 30 (vcli renews a job's lease every 10 s) "
                f"to 1e9, not [{bad}]") in r.stderr
    assert not cluster.jobs()


def test_a_running_job_outlives_a_slurmctld_restart(cluster: SlurmCluster,
                                                                             tmp_path: Path) -> None:
    """One squeue unanswered (a slurmctld restarting, a failover, 30 s of no answer) ended the
    job's controller with exit 3 and left the job RUNNING, its allocation running, nobody
    driving it."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"nap.py": """
        import time
        print("up", flush=True)
        time.sleep(40)
        print("done", flush=True)
    """})
    proc = spawn(cluster, home, "custom-jobs", "create", "--display-name=outage",
                 f"--worker-pool-spec={SMALL},local-package-path={pkg},script=nap.py")
    try:
        wait_for(lambda: _logs_saying(home, "up", 1), 120, "the replica up")
        cluster.restart_slurmctld(down_seconds=15)
        out, err = proc.communicate(timeout=240)
    finally:
        reap(proc)
    assert proc.returncode == 0, err[-3000:]
    assert err.count("WARNING: Slurm does not answer") == 1, err
    [job_id] = list_ids(home, "custom-jobs")
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    # describe names the replica's Slurm job and step (the README said so; only SSH's were shown)
    [replica] = job["replicas"]
    slurm = replica["slurm"]
    assert slurm["step"].startswith(slurm["slurmJob"] + ".") and slurm["node"] == replica["host"], replica
    assert slurm["partition"] == "(default)"
    wait_for(lambda: not cluster.jobs(), 30, "squeue to be empty")


def test_a_job_sbatch_refuses_leaves_no_lease_and_names_what_was_given(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Each refused job left its lease file in the shared directory, and the error named no flag."""
    home = tmp_path / "home"
    account = "p" * 5000  # "Pathname of a file, directory or other parameter too long"
    r = run(cluster, home, "custom-jobs", "create", "--display-name=refused", f"--slurm-account={account}",
            f"--worker-pool-spec={SMALL},container-image-uri=python", "--command=python3,-c,print(1)", timeout=60)
    assert r.returncode == 3 and r.stderr.count("\n") == 1, r.stderr
    assert "`sbatch --parsable` failed: " in r.stderr and "(given: --slurm-account=ppp" in r.stderr, r.stderr
    assert not list((home / "slurm" / "leases").iterdir()) and not cluster.jobs()


def test_a_slurm_conf_that_does_not_exist_is_said_at_once(tmp_path: Path) -> None:
    """Slurm's clients retry a missing config for 60 s: `slurm check` took 2.5 minutes and
    `create` 30 s, both blaming slurmctld."""
    from tests.helpers import vcli

    env = {"SLURM_CONF": str(tmp_path / "nowhere.conf")}
    said = f"SLURM_CONF names {tmp_path / 'nowhere.conf'}, which does not exist"
    began = time.monotonic()
    check = vcli(tmp_path / "home", "slurm", "check", "--format=json", timeout=60, **env)
    create = vcli(tmp_path / "home", "custom-jobs", "create", "--executor=slurm", "--display-name=x",
                  f"--worker-pool-spec={SMALL},container-image-uri=python", "--command=python3,-c,print(1)",
                  timeout=60, **env)
    assert time.monotonic() - began < 20
    assert check.returncode == 3 and all(said in c["detail"] for c in json.loads(check.stdout)["commands"])
    assert create.returncode == 3 and create.stderr.count("\n") == 1 and said in create.stderr, create.stderr


def test_a_timeout_beyond_what_slurm_counts_is_no_time_limit() -> None:
    """8,166 years became --time=4294967298 minutes, which Slurm kept modulo 2^32: 2 minutes."""
    from vcli.executors.slurm.allocation import time_option

    assert time_option(None) == [] and time_option(90) == ["--time=2"]
    assert time_option((2**31 - 1) * 60) == [f"--time={2**31 - 1}"]
    assert time_option(257698037880) == ["--time=UNLIMITED"] == time_option(315576000000)


def test_validate_only_and_print_env_show_the_slurm_plan_and_submit_nothing(cluster: SlurmCluster,
                                                                            tmp_path: Path) -> None:
    home = tmp_path / "home"
    pools = [f"--worker-pool-spec={SMALL},container-image-uri=python,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1",
             "--worker-pool-spec=machine-type=n1-standard-2,replica-count=2,container-image-uri=python"]
    with QueueWatch(cluster) as watch:
        v = run(cluster, home, "custom-jobs", "create", "--display-name=plan", "--validate-only", *pools,
                "--command=python3,-c,print(1)", "--format=json", timeout=60, VCLI_SLURM_PARTITION="main")
        p = run(cluster, home, "custom-jobs", "print-env", *pools, "--command=python3,-c,print(1)", "--format=json",
                timeout=60)
    assert v.returncode == 0, v.stderr
    assert ("Note: on Slurm the job (each trial of a study) is a heterogeneous Slurm job of 2 components "
            "(workerpool0: --ntasks=1 --nodes=1 --cpus-per-task=1 --mem-per-cpu=1000M --gpus-per-task=1; "
            "workerpool1: --ntasks=2 --nodes=2 --cpus-per-task=2 --mem-per-cpu=1000M) --partition=main") in v.stderr, v.stderr
    assert json.loads(v.stdout)["executor"] == "slurm"
    assert p.returncode == 0, p.stderr
    replicas = json.loads(p.stdout)
    assert [x["taskName"] for x in replicas] == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    assert all(x["address"].startswith("<slurm node") for x in replicas), replicas
    assert replicas[1]["env"]["CLUSTER_SPEC"]["cluster"]["workerpool1"] == [x["address"] for x in replicas[1:]]
    assert watch.seen == set()  # nothing submitted


TICKS = """
    import time
    for i in range(8):
        print(f"tick {i}", flush=True)
        time.sleep(0.5)
"""


def test_stream_logs_follows_a_slurm_job_to_its_end(cluster: SlurmCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"ticks.py": TICKS})
    r = run(cluster, home, "custom-jobs", "create", "--async", "--display-name=ticks",
            f"--worker-pool-spec={SMALL},local-package-path={pkg},script=ticks.py", timeout=60)
    assert r.returncode == 0, r.stderr
    job_id = job_id_from_stderr(r.stderr)
    wait_for(lambda: _logs_saying(home, "tick 0", 1), 120, "the replica running")
    s = run(cluster, home, "custom-jobs", "stream-logs", job_id, timeout=120)
    assert s.returncode == 0, s.stderr
    assert [f"tick {i}" in s.stdout for i in range(8)] == [True] * 8, s.stdout
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_SUCCEEDED"
    wait_for(lambda: not cluster.jobs(), 30, "squeue to be empty")


HOG = """
    import time
    held = bytearray(600 << 20)
    held[::4096] = b"x" * (len(held) // 4096)  # 600 MB resident
    print("holding", flush=True)
    time.sleep(60)
"""


def test_a_replica_over_its_memory_fails_with_slurms_out_of_memory_reason(tmp_path: Path) -> None:
    """A cluster of its own: memory as a consumable resource, enforced without cgroups
    (jobacct_gather/linux with OverMemoryKill: the step's processes sampled every second)."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"hog.py": HOG})
    with SlurmCluster(tmp_path / "mem", [Node("m1", cpus=4, memory_mb=1000)], enforce_memory=True) as mem:
        began = time.monotonic()
        r = run(mem, home, "custom-jobs", "create", "--display-name=hog",
                f"--worker-pool-spec={SMALL},local-package-path={pkg},script=hog.py", timeout=120)
        took = time.monotonic() - began
        assert r.returncode == 6, r.stderr[-3000:]
        job = describe(home, "custom-jobs", job_id_from_stderr(r.stderr))
        assert job["state"] == "JOB_STATE_FAILED"
        message = job["error"]["message"]
        assert "OUT_OF_MEMORY" in message and "exceeded memory limit" in message and "> 262144000" in message, message
        assert job["failureClass"] == "RESOURCE", job  # vcli.control.failures: Slurm's OUT_OF_MEMORY
        assert took < 60, took
        wait_for(lambda: not mem.jobs(), 20, "squeue to be empty")
    assert mem.leftovers() == []


def test_the_chosen_interpreters_console_scripts_run_by_name_in_a_step(cluster: SlurmCluster, tmp_path: Path) -> None:
    """VCLI_PYTHON names a virtual environment's python: a console script of it (as `torchrun`
    is of PyTorch's) runs by its bare name in the replica's Slurm step, as in an image."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    tool = venv / "bin" / "mytorchrun"
    tool.write_text(f"#!{venv}/bin/python\nimport sys\nprint('launched by', sys.prefix, flush=True)\n")
    tool.chmod(0o755)
    r = run(cluster, tmp_path / "home", "custom-jobs", "create", "--display-name=console-script",
            "--worker-pool-spec=machine-type=n1-standard-1,replica-count=1,container-image-uri=python",
            "--command=mytorchrun", VCLI_PYTHON=str(venv / "bin" / "python"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"launched by {venv}" in r.stdout, r.stdout[-3000:]


def test_zz_a_node_whose_slurmd_dies_fails_its_trial_and_the_study_goes_on(cluster: SlurmCluster,
                                                                          tmp_path: Path) -> None:
    """Runs last (zz): h2's slurmd is killed for good."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"trial.py": TRIAL.replace(
        'float(os.environ.get("TRIAL_SLEEP", "1"))', '600 if rec["node"] == "h2" else 1')})
    proc = spawn(cluster, home, "hp-tuning-jobs", "create", "--display-name=loss", "--max-trial-count=4",
                 "--parallel-trial-count=2", "--max-failed-trial-count=1", *STUDY,
                 f"--worker-pool-spec={WHOLE},local-package-path={pkg},script=trial.py")
    try:
        wait_for(lambda: any("up on h2" in p.read_text() for p in home.rglob("replica.log")), 180, "a trial on h2")
        cluster.kill_slurmd("h2")
        out, err = proc.communicate(timeout=300)
    finally:
        reap(proc)
        cluster.kill_node_processes("h2")  # the stranded trial: a real dead node takes it with it
    assert proc.returncode == 0, err[-3000:]
    study = json.loads(out)
    states = [t["state"] for t in study["trials"]]
    # The trial lost with h2 is INFRASTRUCTURE and runs again: the study still gets 4 trials' values.
    assert states.count("INFEASIBLE") == 1 and states.count("SUCCEEDED") == 4, study["trials"]
    failed = next(t for t in study["trials"] if t["state"] == "INFEASIBLE")
    assert "NODE_FAIL" in failed["infeasibleReason"], failed["infeasibleReason"]
    assert failed["failureClass"] == "INFRASTRUCTURE", failed
    assert [t["retryOf"] for t in study["trials"] if t.get("retryOf")] == [failed["id"]], study["trials"]


def test_a_job_slurm_has_forgotten_is_read_from_its_job_completion_log(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """No slurmdbd: JobCompType=jobcomp/filetxt, read back with `sacct --completion`. A replica
    with no status file whose job scontrol no longer knows gets the job's final state from it."""
    from vcli.executors import ReplicaHandle
    from vcli.executors.slurm import SlurmExecutor

    with SlurmCluster(tmp_path / "comp", [Node("c1", cpus=2)], jobcomp=True, min_job_age=2) as comp:
        monkeypatch.setenv("SLURM_CONF", str(comp.conf))
        job = comp.run("sbatch", "--parsable", "--output=/dev/null", "--wrap=exit 3").stdout.strip()
        began = time.monotonic()
        wait_for(lambda: "Invalid job id" in comp.run("scontrol", "show", "job", job, check=False).stderr, 150,
                 "slurmctld to forget the job")
        forgotten = time.monotonic() - began
        status = tmp_path / "replica" / "replica.status"  # never written: the replica left no exit status
        handle = ReplicaHandle(executor="slurm", host="c1", ref=f"{job}.0@{status}", task_name="workerpool0-0",
                               details={"slurmJob": job, "step": f"{job}.0"})
        got = SlurmExecutor(home=tmp_path / "home").poll(handle)
        assert not got.running
        assert got.message == f"Slurm ended job {job}: FAILED (from Slurm's job completion log: ExitCode=3:0)", got.message
        print(f"scontrol forgot the job {forgotten:.0f}s after it was submitted (MinJobAge=2)")
    assert comp.leftovers() == []
