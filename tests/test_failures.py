"""Failure classes (issue 49), end to end through the real CLI and the local executor: a
trainer that runs out of GPU memory above a batch size is RESOURCE and steers the search; a
Python exception is USER, and the same one in the first trials stops the study; a trainer
killed by a SIGKILL vcli did not send is INFRASTRUCTURE and runs again; the kernel's OOM
killer (a real one, in a memory cgroup) is RESOURCE. The classification itself is checked
on the signatures `vcli.control.failures` lists."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import FakeClock, FakeWorld
from tests.helpers import REPO, describe, vcli, vcli_env, wait_for
from tests.kit import study
from vcli.control import failures
from vcli.control.outcomes import StudyFailures
from vcli.enums import FailureClass
from vcli.errors import ExecutorError
from vcli.executors import ReplicaStatus
from vcli.spec import (
    Algorithm,
    DoubleValueSpec,
    Goal,
    IntegerValueSpec,
    JobState,
    Measurement,
    MeasurementSelectionType,
    MetricSpec,
    ParameterSpec,
    ScaleType,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.store import Store
from vcli.tuning.suggesters import get_suggester

#: What PyTorch prints when a CUDA allocation fails (2.x), as the last lines of a traceback.
CUDA_OOM = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 42, in <module>\n'
    "    loss = model(batch).sum()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in use. "
    "Of the allocated memory 75.52 GiB is allocated by PyTorch, and 1.98 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
)

#: A trainer: score = log2(batch) - (log10(lr) + 2)^2, best at the largest batch that fits;
#: above batch 256 it runs out of GPU memory (CUDA's words on stderr, exit 1). mode=user
#: raises a Python exception; mode=killable waits, its pid in PIDS/<trial>, to be killed from
#: outside the first `kills` times; mode=hog fills host memory.
TRAINER = f"""
import math, os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
mode = args.get("mode", "oom")
batch, lr = int(float(args.get("batch", 8))), float(args.get("lr", 0.01))
if mode == "user":
    print("loading the data", flush=True)
    raise FileNotFoundError("[Errno 2] No such file or directory: '/data/train.tfrecord'")
if mode == "killable":
    pids = os.environ["PIDS"]
    done = len(os.listdir(pids))
    if done < int(args["kills"]):
        with open(os.path.join(pids, str(done)), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
if mode == "hog":
    hog = bytearray(1536 * 1024 * 1024)
if batch > 256:
    sys.stderr.write({CUDA_OOM!r})
    sys.exit(1)
print(f"score={{math.log2(batch) - (math.log10(lr) + 2) ** 2:.6f}}", flush=True)
"""

BATCH_LR = ("--parameter-spec=parameter-id=batch,type=integer,min=8,max=1024,scale=log",
            "--parameter-spec=parameter-id=lr,min=0.0001,max=0.1,scale=log")


def _study(home: Path, root: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    pkg = root / "pkg"
    if not pkg.exists():
        pkg.mkdir(parents=True)
        (pkg / "t.py").write_text(TRAINER)
    return vcli(home, "hp-tuning-jobs", "create", f"--display-name={home.name}", "--metric=metric-id=score,goal=maximize",
                f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=t.py",
                "--format=json", *flags, timeout=600, **env)


def _ooms(study: dict) -> list[str]:
    return [t["id"] for t in study["trials"] if t.get("failureClass") == "RESOURCE"]


def test_out_of_memory_is_resource_and_the_search_avoids_it(tmp_path: Path) -> None:
    """Over the same 3 seeds, the GP and TPE run out of memory less often than random search:
    each RESOURCE trial is a bad observation of its region. None of them counts against the
    failure budget (3 here, the default for 30 trials; random search has more failures)."""
    counts: dict[str, list[int]] = {}
    for algorithm in ("random-search", "tpe", "gaussian-process"):
        for seed in (0, 1, 2):
            home = tmp_path / f"{algorithm}-{seed}"
            assert vcli(home, "config", "set", "tuning/suggestion-wait", "600").returncode == 0  # the model's own answers
            flags = [] if algorithm == "gaussian-process" else [f"--algorithm={algorithm}"]
            r = _study(home, tmp_path, *BATCH_LR, *flags, f"--seed={seed}", "--max-trial-count=30",
                       "--parallel-trial-count=1")
            assert r.returncode == 0, r.stderr[-3000:]
            study = json.loads(r.stdout)
            assert study["state"] == "JOB_STATE_SUCCEEDED"
            for t in study["trials"]:
                batch = next(p["value"] for p in t["parameters"] if p["parameterId"] == "batch")
                assert (t["state"], t.get("failureClass")) == (("INFEASIBLE", "RESOURCE") if batch > 256 else ("SUCCEEDED", None)), t
            counts.setdefault(algorithm, []).append(len(_ooms(study)))
    print("out-of-memory trials of 30, seeds 0-2:", counts)
    assert sum(counts["random-search"]) > 3  # more than the failure budget: RESOURCE is not counted
    assert sum(counts["gaussian-process"]) < sum(counts["random-search"])
    assert sum(counts["tpe"]) < sum(counts["random-search"])


def test_resource_in_describe_filters_table_and_export(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = _study(home, tmp_path, "--parameter-spec=parameter-id=batch,type=discrete,values=64;128;300;400",
               "--algorithm=grid-search", "--max-trial-count=4", "--parallel-trial-count=2", "--max-failed-trial-count=1")
    assert r.returncode == 0, r.stderr  # two RESOURCE failures, budget 1: not counted
    study = json.loads(r.stdout)
    study_id = study["name"].rsplit("/", 1)[1]
    oom = {t["id"]: t for t in study["trials"] if t.get("failureClass")}
    assert sorted(json.dumps(t["parameters"]) for t in oom.values()) == sorted(
        json.dumps([{"parameterId": "batch", "value": v}]) for v in (300.0, 400.0))
    for t in oom.values():
        assert t["state"] == "INFEASIBLE"
        assert t["infeasibleReason"].endswith("The trainer's last error line: torch.OutOfMemoryError: CUDA out of memory. "
                                              "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
                                              "1.06 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB "
                                              "memory in use. Of the allocated memory 75.52 GiB is allocated by PyTorch, and "
                                              "1.98 GiB is reserved by Py (RESOURCE: out of GPU memory)")
        job = describe(home, "custom-jobs", t["customJob"])
        assert job["failureClass"] == "RESOURCE" and job["failureCause"].startswith("out of GPU memory: torch.OutOfMemoryError")
    described = describe(home, "hp-tuning-jobs", study_id)
    assert {t["id"]: t.get("failureClass") for t in described["trials"]} == {t["id"]: t.get("failureClass") for t in study["trials"]}
    r = vcli(home, "hp-tuning-jobs", "trials", study_id, "--filter=failureClass=RESOURCE", "--format=value(id)")
    assert r.returncode == 0 and sorted(r.stdout.split()) == sorted(oom), r.stderr
    r = vcli(home, "custom-jobs", "list", "--include-trial-jobs", "--filter=failureClass=RESOURCE", "--format=value(name.basename())")
    assert r.returncode == 0 and sorted(r.stdout.split()) == sorted(t["customJob"].rsplit("/", 1)[1] for t in oom.values())
    r = vcli(home, "hp-tuning-jobs", "trials", study_id)  # the live table's rows: the class and the cause
    assert r.returncode == 0 and r.stdout.count("RESOURCE: out of GPU memory") == 2, r.stdout
    out = tmp_path / "trials.csv"
    r = vcli(home, "hp-tuning-jobs", "export", study_id, f"--to={out}")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0])[-2:] == ["failure_class", "retry_of"]
    assert {row["trial_id"]: row["failure_class"] for row in rows} == {t["id"]: t.get("failureClass", "") for t in study["trials"]}


def test_a_custom_job_records_its_failure_class(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "t.py").write_text(TRAINER)
    for args, cls in (("--batch=512", "RESOURCE"), ("--mode=user", "USER")):
        r = vcli(home, "custom-jobs", "create", "--display-name=job", "--format=json", f"--args={args}",
                 f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=t.py", timeout=120)
        assert r.returncode == 6, r.stderr
        job = json.loads(r.stdout)
        assert job["state"] == "JOB_STATE_FAILED" and job["failureClass"] == cls, job
    assert job["failureCause"] == "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.tfrecord'"
    r = vcli(home, "custom-jobs", "list", "--filter=failureClass=USER", "--format=value(displayName,failureClass)")
    assert r.stdout.split() == ["job", "USER"], r.stderr


def test_the_same_user_error_in_the_first_trials_stops_the_study(tmp_path: Path) -> None:
    r = _study(tmp_path / "home", tmp_path, "--parameter-spec=parameter-id=mode,values=user", *BATCH_LR,
               "--algorithm=random-search", "--max-trial-count=20", "--parallel-trial-count=1", "--max-failed-trial-count=10")
    assert r.returncode == 6, r.stderr
    study = json.loads(r.stdout)
    line = "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.tfrecord'"
    assert study["error"]["message"] == (f"The first 3 trials (1, 2, 3) all failed with the same error, so the study stops: {line}")
    assert [(t["state"], t["failureClass"]) for t in study["trials"]] == [("INFEASIBLE", "USER")] * 3
    assert all(t["infeasibleReason"].endswith(f"The trainer's last error line: {line}") for t in study["trials"])
    assert "trial 1 INFEASIBLE USER" in r.stderr  # the plain lines name the class


def test_a_sigkill_from_outside_is_infrastructure_and_the_trial_runs_again(tmp_path: Path) -> None:
    """The trainer is killed twice with SIGKILL by someone else: each time the study says so
    in one line and runs the parameters again; the third run succeeds. With a failure budget
    of 1, the two failures would have failed the study had they counted."""
    pids = tmp_path / "pids"
    pids.mkdir()
    home = tmp_path / "home"
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "t.py").write_text(TRAINER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", "--display-name=killed", "--metric=metric-id=score,goal=maximize",
         f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=t.py", "--format=json",
         "--parameter-spec=parameter-id=mode,values=killable", "--parameter-spec=parameter-id=kills,values=2", *BATCH_LR,
         "--max-trial-count=1", "--max-failed-trial-count=1", "--seed=4"],
        env=vcli_env(home, PIDS=str(pids)), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        for n in range(2):
            marker = pids / str(n)
            pid = int(wait_for(lambda m=marker: m.exists() and m.read_text(), 60, f"trainer run {n + 1}"))
            with open(f"/proc/{pid}/environ", "rb") as f:  # the trainer of a replica of this study
                assert b"VCLI_JOB_ID=" in f.read()
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    study = json.loads(out)
    trials = study["trials"]
    assert [(t["id"], t["state"], t.get("failureClass"), t.get("retryOf")) for t in trials] == [
        ("1", "INFEASIBLE", "INFRASTRUCTURE", None), ("2", "INFEASIBLE", "INFRASTRUCTURE", "1"), ("3", "SUCCEEDED", None, "2")]
    assert trials[0]["parameters"] == trials[1]["parameters"] == trials[2]["parameters"]
    assert "(INFRASTRUCTURE: killed by signal SIGKILL, which vcli did not send)" in trials[0]["infeasibleReason"]
    lines = [ln for ln in err.splitlines() if "its parameters run again" in ln]
    assert lines == [f"Trial {i} failed INFRASTRUCTURE (killed by signal SIGKILL, which vcli did not send): its parameters run "
                     f"again as a new trial (retry {i} of 3); it does not count against the failure budget." for i in (1, 2)]
    assert "trial 2 ACTIVE" in err and "(retry of trial 1)" in err
    assert study["bestTrialId"] == "3"


def _memory_cgroup(tmp_path: Path) -> Path | None:
    """A new cgroup v1 memory cgroup limited to 512 MiB, or None where none can be made."""
    root = Path("/sys/fs/cgroup/memory")
    if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
        return None
    cg = root / f"vcli-test-{os.getpid()}-{tmp_path.name}"
    try:
        cg.mkdir()
        (cg / "memory.limit_in_bytes").write_text(str(512 * 1024 * 1024))
    except OSError:
        return None
    return cg


def test_the_kernels_oom_killer_is_resource(tmp_path: Path) -> None:
    """A real out-of-memory kill: the study runs in a memory cgroup of 512 MiB and its trainer
    fills 1.5 GiB; the kernel kills it with SIGKILL and the cgroup's oom_kill counter grows."""
    cg = _memory_cgroup(tmp_path)
    if cg is None:
        pytest.skip("no cgroup v1 memory hierarchy to make a limited cgroup in (root needed)")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "t.py").write_text(TRAINER)
    try:
        r = subprocess.run(
            ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$0" "$@"', sys.executable, "-m", "vcli", "hp-tuning-jobs",
             "create", "--display-name=hog", "--metric=metric-id=score,goal=maximize",
             f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=t.py", "--format=json",
             "--parameter-spec=parameter-id=mode,values=hog", "--max-trial-count=1"],
            env=vcli_env(tmp_path / "home"), cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        for pid in (cg / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        wait_for(lambda: not (cg / "cgroup.procs").read_text().strip(), 10, "the cgroup empty")
        cg.rmdir()
    assert r.returncode == 6, r.stderr[-3000:]
    trial = json.loads(r.stdout)["trials"][0]
    assert trial["failureClass"] == "RESOURCE", trial
    assert "killed by the kernel's OOM killer" in trial["infeasibleReason"]


# ---------------------------------------------------------------------- the signatures


@pytest.mark.parametrize("line, what", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "out of GPU memory"),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory.", "out of GPU memory"),
    ("RuntimeError: CUDA error: out of memory", "out of GPU memory"),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[4096,4096]",
     "out of memory (TensorFlow/XLA)"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB.",
     "out of memory (JAX/XLA)"),
    ("MemoryError", "out of host memory"),
    ("  what():  std::bad_alloc", "out of host memory"),
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
     "out of shared memory (/dev/shm)"),
    ("OSError: [Errno 28] No space left on device: '/ckpt/model.pt'", "out of disk space"),
])
def test_resource_signatures(line: str, what: str) -> None:
    lines = [("stderr", ln) for ln in ("Traceback (most recent call last):", '  File "t.py", line 1, in <module>', line)]
    f = failures.classify_replica(ReplicaStatus(running=False, exit_code=1), failures.error_lines(lines))
    assert f.cls == FailureClass.RESOURCE and f.cause.startswith(what + ": "), f


def test_a_tensorflow_oom_whose_last_line_is_not_the_error() -> None:
    """TF's message spans lines and ends with the op; the traceback as a whole is read."""
    tail = ["Traceback (most recent call last):", "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph "
            "execution error:", "OOM when allocating tensor with shape[64,1024,1024] and type float on /device:GPU:0",
            "Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom",
            " [Op:__inference_train_function_1234]"]
    f = failures.classify_replica(ReplicaStatus(running=False, exit_code=1), [("stderr", ln) for ln in tail])
    assert f.cls == FailureClass.RESOURCE and f.last_error == "[Op:__inference_train_function_1234]"


def test_an_oom_survived_before_the_last_traceback_is_not_the_cause() -> None:
    records = [("stderr", "torch.OutOfMemoryError: CUDA out of memory."), ("stdout", "retrying with a smaller batch"),
               ("stderr", "Traceback (most recent call last):"), ("stderr", "KeyError: 'labels'")]
    f = failures.classify_replica(ReplicaStatus(running=False, exit_code=1), failures.error_lines(records))
    assert (f.cls, f.cause) == (FailureClass.USER, "KeyError: 'labels'")


@pytest.mark.parametrize("status, cls, cause", [
    (ReplicaStatus(running=False, exit_code=137, message="killed by signal SIGKILL"), FailureClass.INFRASTRUCTURE,
     "killed by signal SIGKILL, which vcli did not send"),
    (ReplicaStatus(running=False, exit_code=139, message="killed by signal SIGSEGV"), FailureClass.USER, "crashed (SIGSEGV)"),
    (ReplicaStatus(running=False, exit_code=None, message="the replica is gone (exit code unknown)"),
     FailureClass.INFRASTRUCTURE, "the replica is gone (exit code unknown)"),
    (ReplicaStatus(running=False, exit_code=255, message="host gpu2: Connection reset by peer"), FailureClass.INFRASTRUCTURE,
     "host gpu2: Connection reset by peer"),
    (ReplicaStatus(running=False, exit_code=255, message="lost contact with host h2 (10.0.0.2): no answer over SSH for 11s; "
                   "the replica's state there is unknown and the host is marked unhealthy"), FailureClass.INFRASTRUCTURE,
     "lost contact with host h2"),
    (ReplicaStatus(running=False, message="the Ray cluster at 10.0.0.1:6379 is gone: its GCS has refused connections for "
                   "31 s (Connection refused)"), FailureClass.INFRASTRUCTURE, "the Ray cluster at"),
    (ReplicaStatus(running=False, message="its Ray actor died (node n1 lost)"), FailureClass.INFRASTRUCTURE, "its Ray actor died"),
    (ReplicaStatus(running=False, exit_code=137, message="replica workerpool0-0 was killed: out of memory (OOMKilled, exit 137)"),
     FailureClass.RESOURCE, "out of memory (Docker's OOMKilled): "),
    (ReplicaStatus(running=False, exit_code=137, message="Slurm killed its step 12.0: OUT_OF_MEMORY (Detected 1 oom-kill "
                   "event(s)): it ran out of memory"), FailureClass.RESOURCE, "out of memory (Slurm's OUT_OF_MEMORY): "),
    (ReplicaStatus(running=False, message="Slurm ended job 12: NODE_FAIL: a node of the allocation failed"),
     FailureClass.INFRASTRUCTURE, "Slurm ended job 12: NODE_FAIL"),
    (ReplicaStatus(running=False, message="Slurm ended job 12: TIMEOUT: its time limit (--time, from scheduling.timeout) "
                   "ran out"), FailureClass.TIMEOUT, "Slurm ended job 12: TIMEOUT"),
    (ReplicaStatus(running=False, exit_code=None, message="replica workerpool0-0: lost the Docker engine (EOF)"),
     FailureClass.INFRASTRUCTURE, "replica workerpool0-0: lost the Docker engine"),
    (ReplicaStatus(running=False, exit_code=3), FailureClass.USER, "exited with status 3"),
])
def test_executor_endings(status: ReplicaStatus, cls: FailureClass, cause: str) -> None:
    f = failures.classify_replica(status, [])
    assert f.cls == cls and f.cause.startswith(cause), f


def test_a_sigkill_while_the_oom_counter_grew_is_the_oom_killer() -> None:
    status = ReplicaStatus(running=False, exit_code=137, message="killed by signal SIGKILL")
    assert failures.classify_replica(status, [], oom_grew=True).cls == FailureClass.RESOURCE
    stopped = ReplicaStatus(running=False, exit_code=137, message="killed by signal SIGKILL", stopped=True)
    assert failures.classify_replica(stopped, [], oom_grew=True).cls == FailureClass.INFRASTRUCTURE


def test_startup_errors() -> None:

    assert failures.classify_startup(ExecutorError("Host gpu1: cannot connect: Connection refused")).cls == FailureClass.INFRASTRUCTURE
    assert failures.classify_startup(ExecutorError("Building the custom container image [x] failed: COPY failed")).cls == FailureClass.USER
    assert failures.classify_startup(OSError(28, "No space left on device")).cls == FailureClass.RESOURCE


# ---------------------------------------------------------------------- the study's rules, in-process


def test_retries_chain_at_most_three_times_then_the_failure_counts(tmp_path: Path) -> None:
    """Replicas that always end with status 137 and no word (a SIGKILL from outside): each
    trial runs 4 times (3 retries); only the last failure of each counts."""

    store, world = Store(tmp_path / "home"), FakeWorld(FakeClock())
    run, _ = study(store, world, "sleep:1", "exit:137", max_trials=2, parallel=1, failures=2)
    lines: list[str] = []
    run.listener.progress = lines.append  # type: ignore[method-assign]
    assert run.run() == JobState.JOB_STATE_FAILED
    assert "No trial reported" in run.error["message"]  # the budget of 2 held: 2 counted failures
    trials = [run.trials[str(i)] for i in range(1, 9)]
    assert [(t.failure_class, t.retry_of) for t in trials] == [
        (FailureClass.INFRASTRUCTURE, r) for r in (None, "1", "2", "3", None, "5", "6", "7")]
    assert trials[0].parameters == trials[3].parameters != trials[4].parameters
    assert run.failures.failed == 2
    assert [ln.split(":")[0] for ln in lines if "run again" in ln] == [
        f"Trial {i} failed INFRASTRUCTURE (killed by signal SIGKILL, which vcli did not send)" for i in (1, 2, 3, 5, 6, 7)]
    store.close()


def test_the_first_ten_trials_out_of_memory_stop_the_study(tmp_path: Path) -> None:

    store, world = Store(tmp_path / "home"), FakeWorld(FakeClock())
    run, _ = study(store, world, "sleep:1", "err:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB",
                   "exit:1", max_trials=30, parallel=1, failures=1)
    assert run.run() == JobState.JOB_STATE_FAILED
    assert len(run.trials) == 10 and run.failures.failed == 0
    assert run.error["message"] == (
        "The first 10 trials all failed RESOURCE (out of GPU memory: torch.OutOfMemoryError: CUDA out of memory. Tried "
        "to allocate 8.00 GiB), so the study stops: no configuration tried fits. Make the search space's memory-hungry "
        "parameters (batch size, model width) smaller, or give the trials bigger machines.")
    store.close()


def test_a_resumed_study_counts_its_failures_and_starts_the_retries_it_owed() -> None:

    def failed(tid: str, cls: FailureClass | None, retry_of: str | None = None, reason: str = "x") -> Trial:
        return Trial(id=tid, parameters={"x": float(tid)}, state=TrialState.INFEASIBLE, failure_class=cls,
                     retry_of=retry_of, infeasible_reason=reason)

    trials = {t.id: t for t in (
        failed("1", FailureClass.USER), failed("2", FailureClass.RESOURCE), failed("3", FailureClass.INFRASTRUCTURE),
        failed("4", FailureClass.INFRASTRUCTURE), failed("5", FailureClass.INFRASTRUCTURE, "4"),
        failed("6", FailureClass.INFRASTRUCTURE, "5"), failed("7", FailureClass.INFRASTRUCTURE, "6"),
        failed("8", FailureClass.TIMEOUT), failed("9", None, reason="Stopped before reporting a measurement: x."),
        failed("10", None), Trial(id="11", parameters={"x": 11.0}, state=TrialState.ACTIVE, retry_of="3"))}
    book = StudyFailures(MetricSpec(metric_id="m", goal=Goal.MAXIMIZE), ("m",),
                         MeasurementSelectionType.LAST_MEASUREMENT, 20, ())
    owed = book.resumed(trials)
    # counted: 1 USER, 7 (its chain used up), 8 TIMEOUT, 10 (a failure recorded without a class)
    assert book.failed == 4
    assert owed == []  # 3's retry runs (trial 11); 4, 5 and 6 have theirs
    del trials["11"]
    assert [(p.retry_of, p.parameters) for p in book.resumed(trials)] == [("3", {"x": 3.0})]


@pytest.mark.parametrize("algorithm", ["gp", "tpe", "skopt"])
def test_a_suggester_rebuilt_from_resource_failures_proposes_the_same(algorithm: str) -> None:
    """Replay holds with RESOURCE trials: a suggester told the same trials in the same order
    proposes the same points; and the RESOURCE trials change what it proposes (they are told)."""


    if algorithm == "skopt":
        pytest.importorskip("skopt")
    params = (ParameterSpec(parameter_id="batch", value_spec=IntegerValueSpec(min_value=8, max_value=1024),
                            scale_type=ScaleType.UNIT_LOG_SCALE),
              ParameterSpec(parameter_id="lr", value_spec=DoubleValueSpec(min_value=1e-4, max_value=0.1),
                            scale_type=ScaleType.UNIT_LOG_SCALE))
    spec = StudySpec(metrics=(MetricSpec(metric_id="score", goal=Goal.MAXIMIZE),), parameters=params,
                     algorithm=Algorithm.TPE if algorithm == "tpe" else Algorithm.ALGORITHM_UNSPECIFIED)

    def told_to(trials: list) -> object:
        s = get_suggester(spec, seed=3, bayesian_backend="skopt" if algorithm == "skopt" else "gp")
        for t in trials:
            s.tell(t)
        return s

    first, told = told_to([]), []
    for i in range(14):
        p = first.ask(1)[0].parameters  # type: ignore[attr-defined]
        oom = p["batch"] > 256
        t = Trial(id=str(i + 1), parameters=p, state=TrialState.INFEASIBLE if oom else TrialState.SUCCEEDED,
                  failure_class=FailureClass.RESOURCE if oom else None,
                  final_measurement=None if oom else Measurement(step_count=1, metrics={"score": math.log2(p["batch"])}))
        first.tell(t)  # type: ignore[attr-defined]
        told.append(t)
    assert any(t.failure_class for t in told) and any(not t.failure_class for t in told)
    proposed = [s.parameters for s in first.ask(3)]  # type: ignore[attr-defined]
    assert proposed == [s.parameters for s in told_to(told).ask(3)]  # type: ignore[attr-defined]
    plain = told_to([Trial(id=t.id, parameters=t.parameters, state=t.state, final_measurement=t.final_measurement)
                     for t in told])
    assert [s.parameters for s in plain.ask(3)] != proposed  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- a real executor's loss


@pytest.mark.docker
def test_a_container_killed_from_outside_is_infrastructure_and_runs_again(tmp_path: Path) -> None:
    """`docker kill` of a trial's container (SIGKILL from the engine, not from vcli): the trial
    is INFRASTRUCTURE and its parameters run again in a new container, which succeeds."""
    from tests.harness.docker_env import PYBASE_IMAGE, ensure_docker
    from tests.helpers import reap, spawn
    from vcli.spec import JobKind

    client = ensure_docker([PYBASE_IMAGE])
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "t.py").write_text("import os, time\nif os.environ.get('CLOUD_ML_TRIAL_ID') == '1':\n"
                              "    print('ready', flush=True)\n    time.sleep(300)\nprint('score=1.0', flush=True)\n")
    home = tmp_path / "home"
    proc = spawn(home, "hp-tuning-jobs", "create", "--executor=docker", "--display-name=killed-container",
                 "--metric=metric-id=score,goal=maximize", "--parameter-spec=parameter-id=x,type=discrete,values=1",
                 f"--worker-pool-spec=machine-type=n1-standard-4,executor-image-uri={PYBASE_IMAGE},local-package-path={pkg},"
                 "script=t.py", "--max-trial-count=1", "--format=json")

    def ready() -> object:
        if not (home / "vcli.db").exists():
            return None
        store = Store(home)
        try:
            jobs = [j for j in store.list_jobs(JobKind.CUSTOM_JOB, include_trial_jobs=True) if j.trial_id == "1"]
        finally:
            store.close()
        for job in jobs:
            for c in client.containers.list(filters={"label": f"vcli.job={job.id}"}):
                if b"ready" in c.logs():
                    return c
        return None

    try:
        container = wait_for(ready, 300, "trial 1's container")
        container.kill()  # SIGKILL, as the engine sends it
        out, err = proc.communicate(timeout=300)
    finally:
        reap(proc)
    assert proc.returncode == 0, err[-3000:]
    trials = json.loads(out)["trials"]
    assert [(t["state"], t.get("failureClass"), t.get("retryOf")) for t in trials] == [
        ("INFEASIBLE", "INFRASTRUCTURE", None), ("SUCCEEDED", None, "1")]
    assert "(INFRASTRUCTURE: killed by signal SIGKILL, which vcli did not send)" in trials[0]["infeasibleReason"]
    assert "Trial 1 failed INFRASTRUCTURE (killed by signal SIGKILL, which vcli did not send)" in err
