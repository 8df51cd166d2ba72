"""A controller that dies (`kill -9`) loses nothing: the real CLI, real processes.

Replicas outlive their controller; `resume` re-attaches to the ones still running (their pids
do not change), collects the ones that ended meanwhile, and carries the job or study on to
its end with no trial lost or run twice. `cancel` of an orphaned job stops everything.
The precise crash points (during a suggestion, between a trial's exit and its record) are
covered in-process in test_controllers.py.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import textwrap
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.helpers import (
    describe,
    job_id_from_stderr,
    processes_with_env,
    read_stderr_until,
    running_replicas,
    spawn,
    vcli,
    wait_for,
)

POOL = "machine-type=n1-standard-4,replica-count"

TRAINER = """
    import os, sys, time
    print("pid", os.getpid(), os.environ["VCLI_TASK_NAME"], flush=True)
    hold, deadline = os.environ.get("HOLD_FILE"), time.time() + 120
    while hold and not os.path.exists(hold) and time.time() < deadline:
        time.sleep(0.05)  # held at the start until the test has seen every replica alive
    x = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--x=")]
    for step in (1, 2):
        time.sleep(float(os.environ.get("STEP_SECONDS", "1.5")))
        if x:
            print(f"acc={x[0]} step={step}", flush=True)
    print("done", flush=True)
"""


def _trainer(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAINER))
    return script


def _suggester_workers(controller: int) -> list[int]:
    """Pids of the suggester worker processes (`vcli.control.suggesting`) `controller` started."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == controller and b"vcli.control.suggesting" in cmd:
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    """Not a zombie (an ended worker whose parent, killed, left it to init to reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _kill_controller(proc) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the controller dies without any cleanup
    proc.wait(timeout=10)


def _orphaned_one_replica_job(tmp_path: Path, name: str, step_seconds: str):
    """A one-replica job whose controller is killed (SIGKILL) once its replica runs: (home,
    the dead controller's process, the job id)."""
    home = tmp_path / "home"
    script = _trainer(tmp_path)
    proc = spawn(home, "custom-jobs", "create", f"--display-name={name}",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--command=python3,{script}",
                 STEP_SECONDS=step_seconds)
    job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
    wait_for(lambda: len(running_replicas(job_id)) == 1, 30, "the replica running")
    # and recorded so: on a loaded machine the kill came between the replica's start and that write
    wait_for(lambda: describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_RUNNING", 60, "the job recorded RUNNING")
    _kill_controller(proc)
    return home, proc, job_id


def _orphaned_two_replica_job(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A job of a chief and a worker, each stepping for 300 s, whose controller is killed
    (SIGKILL) once both run: (home, the job id)."""
    home = tmp_path / "home"
    script = _trainer(tmp_path)
    proc = spawn(home, "custom-jobs", "create", f"--display-name={name}",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--worker-pool-spec={POOL}=1,container-image-uri=x",
                 f"--command=python3,{script}", STEP_SECONDS="300")
    job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
    wait_for(lambda: len(running_replicas(job_id)) == 2, 30, "both replicas running")
    _kill_controller(proc)
    return home, job_id


def _pids(text: str) -> dict[str, str]:
    """Task name -> the pid each trainer printed when it started (all starts, in order)."""
    out: dict[str, str] = {}
    for pid, task in re.findall(r"pid (\d+) (workerpool\d+-\d+)", text):
        assert task not in out, f"{task} started twice:\n{text}"
        out[task] = pid
    return out


def test_a_custom_job_survives_its_controller_and_resumes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = _trainer(tmp_path)
    proc = spawn(home, "custom-jobs", "create", "--display-name=resume-me",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--worker-pool-spec={POOL}=2,container-image-uri=x",
                 f"--command=python3,{script}", STEP_SECONDS="4", HOLD_FILE=str(tmp_path / "go"))
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        # CI (loaded) saw the first replica end its 8 s before the third had started: the
        # trainers wait at their start until every replica has been seen alive
        wait_for(lambda: len(running_replicas(job_id)) == 3, 60, "three replicas running")
        # PENDING becomes RUNNING at the controller's first poll after the last launch: CI
        # (loaded, session 16) killed it in between once: the job stays PENDING until resumed
        wait_for(lambda: describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_RUNNING", 30, "the job RUNNING")
        _kill_controller(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = set(processes_with_env("VCLI_JOB_ID", job_id))
    assert len(running_replicas(job_id)) == 3, "replicas must outlive their controller"
    (tmp_path / "go").touch()
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_RUNNING" and job["controller"]["alive"] is False, job
    listed = vcli(home, "custom-jobs", "list", "--format=value(name)")
    assert f"`vcli custom-jobs resume {job_id}` takes it over" in listed.stderr

    r = vcli(home, "custom-jobs", "resume", job_id, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "re-attached" in r.stderr
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_SUCCEEDED"
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60).stdout
    pids = _pids(logs)
    assert sorted(pids) == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    assert {int(p) for p in pids.values()} <= before  # the same processes, not new ones
    assert logs.count("\tdone") == 3
    assert not processes_with_env("VCLI_JOB_ID", job_id)
    again = vcli(home, "custom-jobs", "resume", job_id, timeout=60)
    assert again.returncode == 0 and "already ended" in again.stderr


def test_cancel_of_an_orphaned_job_stops_everything(tmp_path: Path) -> None:
    home, job_id = _orphaned_two_replica_job(tmp_path, "orphan")
    r = vcli(home, "custom-jobs", "cancel", job_id, timeout=60)
    assert r.returncode == 0, r.stderr
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_CANCELLED"
    assert {x["state"] for x in job["replicas"]} <= {"STOPPED", "SUCCEEDED", "FAILED"}, job["replicas"]
    assert not processes_with_env("VCLI_JOB_ID", job_id)


def test_stream_logs_of_an_orphaned_job_prints_the_logs_then_says_so(tmp_path: Path) -> None:
    """`stream-logs` of a job whose controller died followed it forever, silently: nothing can
    end it but `resume` or `cancel`. It prints the logs so far and the WARNING `list` gives,
    and returns; the replicas are left for `resume` to adopt."""
    import time

    home, proc, job_id = _orphaned_one_replica_job(tmp_path, "orphan", "300")
    try:
        # running is not printing yet (a loaded machine): the trainer's first line is in the log
        wait_for(lambda: any("\tpid " in p.read_text() for p in home.rglob("replica.log")), 30, "the trainer's first line")
        start = time.monotonic()
        r = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60)
        assert time.monotonic() - start < 30, "stream-logs followed an orphaned job"
        assert r.returncode == 0, r.stderr
        assert re.search(r"workerpool0-0\tpid \d+ workerpool0-0", r.stdout), r.stdout
        (warning,) = [l for l in r.stderr.splitlines() if l.startswith("WARNING:")]
        assert f"[{job_id}] is JOB_STATE_RUNNING but the vcli process that ran it (pid {proc.pid}) is gone" in warning
        assert running_replicas(job_id), "stream-logs must not stop what resume can adopt"
    finally:
        vcli(home, "custom-jobs", "cancel", job_id, timeout=60)
    assert not processes_with_env("VCLI_JOB_ID", job_id)


def test_two_controllers_never_drive_one_job(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = _trainer(tmp_path)
    proc = spawn(home, "custom-jobs", "create", "--display-name=busy",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--command=python3,{script}", STEP_SECONDS="300")
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        r = vcli(home, "custom-jobs", "resume", job_id, timeout=60)
        assert r.returncode == 8, r.stderr
        assert f"is being run by vcli process {proc.pid}" in r.stderr
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)


@pytest.mark.parametrize("algorithm", ["random-search", "algorithm-unspecified"])
def test_a_study_survives_its_controller_and_resumes(tmp_path: Path, algorithm: str) -> None:
    """kill -9 of a study's controller with two trials running (vcli's GP: while its worker
    process holds prepared points): the worker ends with it, and `resume` runs the rest, no
    trial lost and none run twice."""
    home = tmp_path / "home"
    script = _trainer(tmp_path)
    proc = spawn(home, "hp-tuning-jobs", "create", "--display-name=resume-study", "--max-trial-count=8",
                 "--parallel-trial-count=2", f"--algorithm={algorithm}", "--seed=3",
                 "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=acc,goal=maximize",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--command=python3,{script}")
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        # Kill it in the middle: some trials done, two running.
        wait_for(lambda: len([t for t in describe(home, "hp-tuning-jobs", study_id).get("trials", [])
                              if t["state"] == "SUCCEEDED"]) >= 3, 120, "three trials done")
        wait_for(lambda: sum(1 for t in describe(home, "hp-tuning-jobs", study_id)["trials"]
                             if t["state"] == "ACTIVE") == 2, 30, "two trials running")
        workers = _suggester_workers(proc.pid)
        assert bool(workers) == (algorithm == "algorithm-unspecified"), workers
        os.kill(proc.pid, signal.SIGKILL)  # the controller alone: its worker must notice
        proc.wait(timeout=10)
        wait_for(lambda: not any(os.path.exists(f"/proc/{w}") and _alive(w) for w in workers), 30, "the worker ended")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = describe(home, "hp-tuning-jobs", study_id)
    active = [t["id"] for t in before["trials"] if t["state"] == "ACTIVE"]
    done = {t["id"]: t for t in before["trials"] if t["state"] == "SUCCEEDED"}
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, timeout=300)
    assert r.returncode == 0, r.stderr
    after = describe(home, "hp-tuning-jobs", study_id)
    assert after["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["id"] for t in after["trials"]] == [str(i) for i in range(1, 9)]
    assert {t["state"] for t in after["trials"]} == {"SUCCEEDED"}
    for tid, t in done.items():  # finished trials keep their measurements
        assert next(x for x in after["trials"] if x["id"] == tid)["measurements"] == t["measurements"]
    logs = vcli(home, "hp-tuning-jobs", "stream-logs", study_id, timeout=60).stdout
    for tid in active:  # re-attached, not restarted: one start each
        assert logs.count(f"trial-{tid}/workerpool0-0\tpid ") == 1, logs
    assert logs.count("\tdone") == 8


def test_reports_and_ends_made_while_no_controller_watched_keep_their_own_times(tmp_path: Path) -> None:
    """A report made while the controller was dead got the time `resume` read it as its
    elapsedDuration, and a trial that ended meanwhile the resume's time as its endTime
    ("SUCCEEDED after 0.0s"): a stretched curve for rules that read elapsed time."""
    home = tmp_path / "home"
    script = _trainer(tmp_path)
    proc = spawn(home, "hp-tuning-jobs", "create", "--display-name=late-reports", "--max-trial-count=1",
                 "--parallel-trial-count=1", "--algorithm=random-search", "--seed=3",
                 "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=acc,goal=maximize",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--command=python3,{script}",
                 STEP_SECONDS="1.0")
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: any(t.get("measurements") for t in describe(home, "hp-tuning-jobs", study_id).get("trials", [])),
                 60, "step 1 recorded")
        _kill_controller(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    [trial_job] = [t["customJob"].rsplit("/", 1)[-1] for t in describe(home, "hp-tuning-jobs", study_id)["trials"]]
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", trial_job), 30, "the trainer to finish on its own")
    ended = time.time()
    time.sleep(4)
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, timeout=120)
    assert r.returncode == 0, r.stderr
    [trial] = describe(home, "hp-tuning-jobs", study_id)["trials"]
    assert trial["state"] == "SUCCEEDED" and [m["stepCount"] for m in trial["measurements"]] == ["1", "2"]
    start = datetime.fromisoformat(trial["startTime"].replace("Z", "+00:00")).timestamp()
    end = datetime.fromisoformat(trial["endTime"].replace("Z", "+00:00")).timestamp()
    assert end < ended + 0.5, (trial["endTime"], ended)
    late = float(trial["measurements"][1]["elapsedDuration"].rstrip("s"))
    assert late < ended - start + 0.5, (trial["measurements"], ended - start)
    assert "SUCCEEDED after 0.0s" not in r.stdout
    # the study's own duration, not the time since the resume (it printed "in 0.4s")
    took = float(re.search(r"finished: JOB_STATE_SUCCEEDED in ([\d.]+)s", r.stderr).group(1))
    assert took > 4, r.stderr


SECRET_TRAINER = """
    import os, sys, time
    if os.environ.get("API_TOKEN") != "s3cret-value":
        print("bad token", flush=True)
        sys.exit(3)
    x = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--x=")][0]
    time.sleep(float(os.environ.get("SLEEP_SECONDS", "1.5")))
    print(f"acc={x} step=1", flush=True)
"""


def _secret_study(tmp_path: Path, name: str, trials: int, parallel: int) -> Path:
    """A random-search study of SECRET_TRAINER whose pool's env holds API_TOKEN: its config."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SECRET_TRAINER))
    config = tmp_path / "study.yaml"
    config.write_text(textwrap.dedent(f"""
        displayName: {name}
        maxTrialCount: {trials}
        parallelTrialCount: {parallel}
        studySpec:
          algorithm: RANDOM_SEARCH
          metrics: [{{metricId: acc, goal: MAXIMIZE}}]
          parameters: [{{parameterId: x, doubleValueSpec: {{minValue: 0, maxValue: 1}}}}]
        trialJobSpec:
          workerPoolSpecs:
          - machineSpec: {{machineType: n1-standard-4}}
            replicaCount: 1
            containerSpec:
              imageUri: x
              command: [python3, {script}]
              env: [{{name: API_TOKEN, value: s3cret-value}}]
        """))
    return config


def test_a_resumed_study_takes_secret_values_from_the_shell_never_the_redacted_ones(tmp_path: Path) -> None:
    # The store holds secrets redacted, so trials started after `resume` need the values from
    # the resuming shell: without them resume is one error line (and can be run again), with
    # them every later trial gets the real token.
    home = tmp_path / "home"
    config = _secret_study(tmp_path, "secret-study", 6, 2)
    proc = spawn(home, "hp-tuning-jobs", "create", f"--config={config}", "--seed=3")
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: sum(t["state"] == "SUCCEEDED" for t in describe(home, "hp-tuning-jobs", study_id).get("trials", []))
                 >= 2, 120, "two trials done")
        _kill_controller(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stored = [f for f in home.rglob("*") if f.is_file() and b"s3cret-value" in f.read_bytes()]
    assert stored == [], stored  # never written anywhere under the vcli home
    before = describe(home, "hp-tuning-jobs", study_id)["controller"]
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "[API_TOKEN]" in r.stderr and "export API_TOKEN=" in r.stderr
    # The refused resume ran nothing: the record names the controller that died, not it.
    assert describe(home, "hp-tuning-jobs", study_id)["controller"] == before == {**before, "pid": proc.pid}
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, timeout=300, API_TOKEN="s3cret-value")
    assert r.returncode == 0, r.stderr[-3000:]
    after = describe(home, "hp-tuning-jobs", study_id)
    assert after["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in after["trials"]] == ["SUCCEEDED"] * 6, after["trials"]


@pytest.mark.parametrize("row", ["pending", "none"])
def test_a_running_trial_whose_replica_never_started_gets_the_secret_from_the_resuming_shell(tmp_path: Path,
                                                                                            row: str) -> None:
    """A controller killed after recording a trial's job, before starting its replica: the
    resumed controller starts that replica with the token from its own shell (it started it
    with the stored `<redacted>`: the trial failed), and asks for the token although no
    trial is left to start. Killed before the replica's row was written too (in the wait for
    the trial's MLflow run, found by a probe): the row's insert lacked the replica's host and
    the study FAILED, exit 7, "Cannot use vcli's home"."""
    from vcli.store import Store, parse_job_ref

    home = tmp_path / "home"
    config = _secret_study(tmp_path, "secret-window", 1, 1)
    proc = spawn(home, "hp-tuning-jobs", "create", f"--config={config}", SLEEP_SECONDS="600")
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        child = {}
        wait_for(lambda: child.update(job=parse_job_ref(describe(home, "hp-tuning-jobs", study_id)["trials"][0]
                                                        .get("customJob", ""))) or running_replicas(child["job"]),
                 60, "the trial's replica running")
        _kill_controller(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    pids = processes_with_env("VCLI_JOB_ID", child["job"])
    for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: the supervisor records no exit
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:  # a short-lived helper of the replica that ended meanwhile (raced in CI)
                pass
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", child["job"]), 30, "the replica gone")
    store = Store(home)  # as if the controller had died before starting the replica
    store.upsert_replica(child["job"], "workerpool0-0", handle=None, state="PENDING", start_time=None)
    store.close()
    if row == "none":  # ... or before recording it
        with sqlite3.connect(home / "vcli.db") as db:
            db.execute("DELETE FROM replicas WHERE job_id = ?", (child["job"],))
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, timeout=60)
    assert r.returncode == 2 and "[API_TOKEN]" in r.stderr, r.stderr
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, timeout=120, API_TOKEN="s3cret-value", SLEEP_SECONDS="0.2")
    assert r.returncode == 0, r.stderr[-3000:]
    after = describe(home, "hp-tuning-jobs", study_id)
    assert [t["state"] for t in after["trials"]] == ["SUCCEEDED"], after["trials"]


def _unrecord(home: Path, job_id: str) -> None:
    """The store as a controller killed between starting the replica and recording it leaves it."""
    from vcli.store import Store

    store = Store(home)
    store.upsert_replica(job_id, "workerpool0-0", handle=None, state="PENDING", start_time=None)
    store.close()


def test_resume_adopts_a_replica_whose_start_no_handle_recorded(tmp_path: Path) -> None:
    """Killed while it started the job's first replica, before recording any handle (found by a
    probe): resume planned the job afresh and started that replica a second time beside the
    first. It is found by its tag and adopted."""
    home, _, job_id = _orphaned_one_replica_job(tmp_path, "first-start", "2")
    _unrecord(home, job_id)
    r = vcli(home, "custom-jobs", "resume", job_id, timeout=120)
    assert r.returncode == 0, r.stderr
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED" and job["replicas"][0]["state"] == "SUCCEEDED"
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60).stdout
    assert len(re.findall(r"\tpid \d+ workerpool0-0", logs)) == 1, logs  # started once


def test_cancel_stops_a_replica_whose_start_no_handle_recorded(tmp_path: Path) -> None:
    """`cancel` of such a job stopped nothing: the replica ran on, the job CANCELLED and the
    replica NOT_STARTED (found by a probe)."""
    home, _, job_id = _orphaned_one_replica_job(tmp_path, "first-start", "300")
    assert processes_with_env("VCLI_JOB_ID", job_id)
    _unrecord(home, job_id)
    r = vcli(home, "custom-jobs", "cancel", job_id, timeout=60)
    assert r.returncode == 0, r.stderr
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_CANCELLED" and job["replicas"][0]["state"] == "STOPPED", job["replicas"]
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", job_id), 10, "the replica stopped")


def test_a_replica_a_killed_cancel_had_stopped_is_recorded_stopped(tmp_path: Path) -> None:
    """A `cancel` killed after its stop had ended the replica (found by a probe): the next
    `cancel` recorded the replica FAILED, "killed by signal SIGKILL", as if it had failed on its
    own. Its supervisor's record now says vcli stopped it."""
    from vcli.store import Store

    home, _, job_id = _orphaned_one_replica_job(tmp_path, "stopped-once", "300")
    store = Store(home)
    [replica] = store.replicas(job_id)
    store.close()
    supervisor = int(replica.handle["ref"].split("@", 1)[0])
    os.kill(supervisor, signal.SIGTERM)  # what the killed cancel's stop did
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", job_id), 30, "the replica stopped")
    r = vcli(home, "custom-jobs", "cancel", job_id, timeout=60)
    assert r.returncode == 0, r.stderr
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_CANCELLED" and job["replicas"][0]["state"] == "STOPPED", job["replicas"]


def test_a_killed_controller_that_nobody_reaps_is_not_alive(tmp_path: Path) -> None:
    """`kill -9` of a controller whose parent never reaps it (PID 1 of a container without an
    init): the zombie controls nothing, so `describe` says it is not alive and `resume` takes
    the job over at once (it used to exit 8, "stop it first", for ever)."""
    import subprocess
    import sys

    from tests.helpers import vcli_env

    home = tmp_path / "home"
    script = _trainer(tmp_path)
    err = tmp_path / "create.err"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-m", "vcli", "custom-jobs", "create", "--display-name=zombie",
                                  "--worker-pool-spec={POOL}=1,container-image-uri=x",
                                  "--command=python3,{script}"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open({str(err)!r}, "w"))
        print(child.pid, flush=True)
        time.sleep(120)  # never waits for the child: once killed, it stays a zombie
    """)], env=vcli_env(home, STEP_SECONDS="2"), stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert parent.stdout is not None
        controller = int(parent.stdout.readline())
        wait_for(lambda: "submitted successfully" in err.read_text(), 60, "the job's submission")
        job_id = job_id_from_stderr(err.read_text())
        wait_for(lambda: len(running_replicas(job_id)) == 1, 30, "the replica running")
        os.kill(controller, signal.SIGKILL)
        wait_for(lambda: Path(f"/proc/{controller}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", 10,
                 "the controller to be a zombie")
        assert describe(home, "custom-jobs", job_id)["controller"]["alive"] is False
        r = vcli(home, "custom-jobs", "resume", job_id, timeout=120)
        assert r.returncode == 0, r.stderr
        assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_SUCCEEDED"
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_a_study_resumed_from_another_directory_runs_what_create_ran(tmp_path: Path) -> None:
    """The trials' module was found in the directory `create` ran in (an executor image's module
    with no package: the current directory is on PYTHONPATH). `resume` from elsewhere works in
    the recorded directory, so the trials it starts still find it (they used to go INFEASIBLE
    with `No module named ...` while the study SUCCEEDED)."""
    import subprocess
    import sys

    from tests.helpers import vcli_env

    home = tmp_path / "home"
    project = tmp_path / "project"
    project.mkdir()
    (project / "mytrainer.py").write_text(textwrap.dedent("""
        import sys, time
        x = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--x=")][0]
        time.sleep(1.0)
        print(f"acc={x} step=1", flush=True)
    """))
    proc = subprocess.Popen(
        [sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", "--display-name=moved", "--max-trial-count=3",
         "--parallel-trial-count=1", "--algorithm=random-search", "--seed=5",
         "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=acc,goal=maximize",
         f"--worker-pool-spec={POOL}=1,executor-image-uri=x,python-module=mytrainer"],
        env=vcli_env(home), cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: any(t["state"] == "SUCCEEDED" for t in describe(home, "hp-tuning-jobs", study_id)
                             .get("trials", [])), 60, "the first trial done")
        _kill_controller(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, timeout=300)  # from the repository, not `project`
    assert r.returncode == 0, r.stderr
    after = describe(home, "hp-tuning-jobs", study_id)
    assert after["state"] == "JOB_STATE_SUCCEEDED"
    assert [(t["id"], t["state"]) for t in after["trials"]] == [("1", "SUCCEEDED"), ("2", "SUCCEEDED"),
                                                                ("3", "SUCCEEDED")], after["trials"]


def test_cancel_of_an_orphaned_job_whose_replicas_all_succeeded_records_success(tmp_path: Path) -> None:
    """Every replica finished (exit 0) after the controller died: `cancel` collects them first
    and records what `resume` would have, SUCCEEDED, not CANCELLED."""
    home, proc, job_id = _orphaned_one_replica_job(tmp_path, "done-orphan", "0.5")
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", job_id), 30, "the replica to finish on its own")
    r = vcli(home, "custom-jobs", "cancel", job_id, timeout=60)
    assert r.returncode == 0, r.stderr
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED", (job, r.stderr)
    assert [x["state"] for x in job["replicas"]] == ["SUCCEEDED"]
    assert "is now JOB_STATE_SUCCEEDED (its replicas had all ended on their own)" in r.stderr


def test_resume_records_when_replicas_ended_while_no_controller_watched(tmp_path: Path) -> None:
    """The replica's endTime was the moment `resume` (or `cancel`) polled it, minutes or days
    after it ended."""
    home, proc, job_id = _orphaned_one_replica_job(tmp_path, "ended-orphan", "0.5")
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", job_id), 30, "the replica to finish on its own")
    gone = time.time()
    time.sleep(3)
    r = vcli(home, "custom-jobs", "resume", job_id, timeout=60)
    assert r.returncode == 0, r.stderr
    [replica] = describe(home, "custom-jobs", job_id)["replicas"]
    ended = datetime.fromisoformat(replica["endTime"].replace("Z", "+00:00")).timestamp()
    started = datetime.fromisoformat(replica["startTime"].replace("Z", "+00:00")).timestamp()
    assert started < ended < gone + 0.5, (replica, gone)


def test_cancel_of_an_orphaned_study_ends_its_trials(tmp_path: Path) -> None:
    """A study whose controller died: cancel stops its trials' replicas and ends each open trial
    as Vertex would (SUCCEEDED with its last measurement if it reported one, else INFEASIBLE).
    A trial replica whose start was never recorded is stopped too (it ran on: found by a probe)."""
    home = tmp_path / "home"
    script = tmp_path / "reports_or_not.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        if "--kind=reports" in sys.argv:
            print("acc=0.25 step=1", flush=True)
        time.sleep(300)
    """))
    proc = spawn(home, "hp-tuning-jobs", "create", "--display-name=orphan-study", "--max-trial-count=2",
                 "--parallel-trial-count=2", "--algorithm=grid-search",
                 "--parameter-spec=parameter-id=kind,type=categorical,values=reports;silent",
                 "--metric=metric-id=acc,goal=maximize",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--command=python3,{script}")
    study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
    wait_for(lambda: any(t.get("measurements") for t in describe(home, "hp-tuning-jobs", study_id).get("trials", [])),
             60, "a measurement recorded")
    trial_jobs = [t["customJob"].rsplit("/", 1)[-1] for t in describe(home, "hp-tuning-jobs", study_id)["trials"]]
    assert len(trial_jobs) == 2
    wait_for(lambda: all(processes_with_env("VCLI_JOB_ID", j) for j in trial_jobs), 30, "both trials running")
    _kill_controller(proc)
    _unrecord(home, trial_jobs[1])  # and one trial's replica as if killed before its handle was written
    r = vcli(home, "hp-tuning-jobs", "cancel", study_id, timeout=120)
    assert r.returncode == 0, r.stderr
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["state"] == "JOB_STATE_CANCELLED"
    trials = {t["parameters"][0]["value"]: t for t in study["trials"]}
    assert trials["reports"]["state"] == "SUCCEEDED"
    assert trials["reports"]["finalMeasurement"]["metrics"] == [{"metricId": "acc", "value": 0.25}]
    assert trials["silent"]["state"] == "INFEASIBLE"
    assert "cancelled after its controller had died" in trials["silent"]["infeasibleReason"]
    assert all(t["endTime"] for t in study["trials"])
    for job_id in trial_jobs:
        assert not processes_with_env("VCLI_JOB_ID", job_id)


STUBBORN = """
    import signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as TensorFlow's multi-worker runtime does
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("acc=0.5 step=1", flush=True)
    time.sleep(300)
"""


def _killed_while_cancelling(home: Path, proc, job_id: str) -> None:
    """Ctrl-C the controller, then kill -9 it inside the stop's grace period (3 s, in which the
    stubborn trainer ignores SIGTERM): the job is left CANCELLING with nobody to finish it. The
    store is read in-process every 10 ms, so the kill lands well inside the grace period."""
    from vcli.store import Store

    store = Store(home)
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: store.get_job(job_id).state == "JOB_STATE_CANCELLING", 30, "the job CANCELLING", interval=0.01)
    _kill_controller(proc)
    store.close()


def test_resume_of_a_job_killed_while_cancelling_finishes_the_cancel(tmp_path: Path) -> None:
    # Before: resume put it back to RUNNING and the trainer the user had stopped ran on.
    home = tmp_path / "home"
    script = tmp_path / "stubborn.py"
    script.write_text(textwrap.dedent(STUBBORN))
    proc = spawn(home, "custom-jobs", "create", "--display-name=stubborn",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--command=python3,{script}")
    job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
    wait_for(lambda: len(running_replicas(job_id)) == 1, 30, "the replica running")
    _killed_while_cancelling(home, proc, job_id)
    # (the stubborn trainer outlives its dead controller; under load the stop's grace may
    # have run out first: either way the job ends CANCELLED, as the user asked)
    r = vcli(home, "custom-jobs", "resume", job_id, timeout=60)
    assert r.returncode == 5, r.stderr
    assert "was being cancelled when its vcli process died: finishing the cancel, not resuming it." in r.stderr
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
    assert not processes_with_env("VCLI_JOB_ID", job_id)


def test_resume_of_a_study_killed_while_cancelling_starts_no_trial(tmp_path: Path) -> None:
    # Before: resume ended the running trial "because the study was cancelled", then started new ones.
    home = tmp_path / "home"
    script = tmp_path / "stubborn.py"
    script.write_text(textwrap.dedent(STUBBORN))
    proc = spawn(home, "hp-tuning-jobs", "create", "--display-name=stubborn-study", "--max-trial-count=3",
                 "--algorithm=random-search", "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
                 "--metric=metric-id=acc,goal=maximize",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--command=python3,{script}")
    study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
    wait_for(lambda: any(t.get("measurements") for t in describe(home, "hp-tuning-jobs", study_id).get("trials", [])),
             60, "a measurement recorded")
    [trial_job] = [t["customJob"].rsplit("/", 1)[-1] for t in describe(home, "hp-tuning-jobs", study_id)["trials"]]
    _killed_while_cancelling(home, proc, study_id)
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, timeout=60)
    assert r.returncode == 5, r.stderr
    assert "finishing the cancel, not resuming it" in r.stderr and "ACTIVE" not in r.stdout + r.stderr
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["state"] == "JOB_STATE_CANCELLED"
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"]  # it had reported; no second trial
    assert not processes_with_env("VCLI_JOB_ID", trial_job)


def test_cancel_of_a_job_whose_controller_is_stopped_says_so_at_once(tmp_path: Path) -> None:
    # It waited 2 minutes, stopped nothing and exited 0 ("still stopping").
    home = tmp_path / "home"
    script = _trainer(tmp_path)
    proc = spawn(home, "custom-jobs", "create", "--display-name=suspended",
                 f"--worker-pool-spec={POOL}=1,container-image-uri=x", f"--command=python3,{script}", STEP_SECONDS="300")
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: len(running_replicas(job_id)) == 1, 30, "the replica running")
        os.kill(proc.pid, signal.SIGSTOP)
        r = vcli(home, "custom-jobs", "cancel", job_id, timeout=30)
        assert r.returncode == 8, r.stderr
        assert f"(pid {proc.pid}) is stopped (Ctrl-Z or SIGSTOP): the cancel takes effect when it continues" in r.stderr
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=60) == 5  # it continued, saw the cancel, and ended the job
        assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
        assert not processes_with_env("VCLI_JOB_ID", job_id)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGKILL)


ALWAYS_FAILING_WORKER = """
    import json, os, sys, time
    print("token", "ok" if os.environ.get("API_TOKEN") == "s3cret-value" else "wrong", flush=True)
    if json.loads(os.environ["CLUSTER_SPEC"])["task"]["type"] == "workerpool0":
        time.sleep(300)
    time.sleep(2)
    sys.exit(1)
"""


def test_resume_counts_the_restarts_an_earlier_controller_made(tmp_path: Path) -> None:
    # restartJobOnWorkerRestart allows 3 restarts; a resumed job got 3 more (5 runs, not 4).
    # The restarts a resumed controller makes start every replica again: with the secret from
    # its shell (they got the stored `<redacted>`), so resume asks for it.
    home = tmp_path / "home"
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(ALWAYS_FAILING_WORKER))
    cfg = tmp_path / "job.yaml"
    pool = ("  - machineSpec: {machineType: n1-standard-4}\n    replicaCount: 1\n"
            f"    containerSpec: {{imageUri: x, command: [python3, {script}], env: [{{name: API_TOKEN, value: s3cret-value}}]}}\n")
    cfg.write_text(f"workerPoolSpecs:\n{pool}{pool}scheduling:\n  restartJobOnWorkerRestart: true\n")
    proc = spawn(home, "custom-jobs", "create", "--display-name=restarts", f"--config={cfg}")
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        read_stderr_until(proc, "restart 2 of at most 3", 120)
        _kill_controller(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = describe(home, "custom-jobs", job_id)["controller"]
    r = vcli(home, "custom-jobs", "resume", job_id, timeout=60)
    assert r.returncode == 2 and "[API_TOKEN]" in r.stderr, r.stderr
    assert describe(home, "custom-jobs", job_id)["controller"] == before  # it names the one that died
    r = vcli(home, "custom-jobs", "resume", job_id, timeout=120, API_TOKEN="s3cret-value")
    assert r.returncode == 6, r.stderr
    restarts = [line for line in r.stderr.splitlines() if line.startswith("Restarting job")]
    assert len(restarts) == 1 and "restart 3 of at most 3" in restarts[0], r.stderr
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60).stdout
    assert logs.count("token ok") >= 4 and "token wrong" not in logs, logs
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_FAILED"
    assert not processes_with_env("VCLI_JOB_ID", job_id)
    again = vcli(home, "custom-jobs", "resume", job_id, timeout=60)  # exited 0, "succeeded", for a FAILED job
    assert again.returncode == 6 and "has already ended (JOB_STATE_FAILED)" in again.stderr, again.stderr


def test_resume_acts_on_a_replica_its_dead_controller_recorded_failed(tmp_path: Path) -> None:
    # A controller killed after recording a worker FAILED but before failing (or restarting)
    # the job: resume waited for the chief for ever (CI: a restart interrupted this way hung
    # `resume` past its 120 s). Now the failure is acted on: the job FAILS, the chief is stopped.
    from vcli.store import Store

    home, job_id = _orphaned_two_replica_job(tmp_path, "failed-row")
    for pid in set(processes_with_env("VCLI_JOB_ID", job_id)) & set(processes_with_env("VCLI_TASK_NAME", "workerpool1-0")):
        os.kill(pid, signal.SIGKILL)  # the worker ended, and (below) its dead controller had recorded it FAILED
    wait_for(lambda: not set(processes_with_env("VCLI_JOB_ID", job_id)) & set(processes_with_env("VCLI_TASK_NAME", "workerpool1-0")),
             30, "the worker gone")
    store = Store(home)
    store.upsert_replica(job_id, "workerpool1-0", state="FAILED", exit_code=1)  # what the dead controller recorded
    store.close()
    r = vcli(home, "custom-jobs", "resume", job_id, timeout=60)
    assert r.returncode == 6, r.stderr
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_FAILED", job
    assert not processes_with_env("VCLI_JOB_ID", job_id)


def test_the_closing_line_gives_the_recorded_run_not_this_process_time() -> None:
    """`finished ... in 15.0s` of a study recorded as 6.9 s (a tracker slow to answer after the
    end; found by a probe), and before that the time since a resume."""
    from types import SimpleNamespace

    from vcli.cli.output import ran_seconds

    row = SimpleNamespace(start_time="2026-11-28T22:08:13.110000Z", create_time="2026-11-28T22:08:12.000000Z",
                          end_time="2026-11-28T22:08:20.005000Z")
    assert abs(ran_seconds(row, 15.0) - 6.895) < 1e-6
    assert abs(ran_seconds(row, 0.4) - 6.895) < 1e-6
    assert ran_seconds(SimpleNamespace(start_time=None, create_time=None, end_time=None), 3.5) == 3.5


def test_reports_repeated_before_a_resume_keep_their_own_times_in_order() -> None:
    """A report repeated with the same step and value got the later one's time for both after
    `resume`: elapsed times went 3.143, 1.643, 3.143 (found by a probe)."""
    from vcli.control.active import ActiveTrial, _recorded_times
    from vcli.metrics import MetricReader
    from vcli.spec import Measurement, Trial, TrialState

    stored = (Measurement(step_count=1, metrics={"score": 0.5}, elapsed_seconds=0.143),
              Measurement(step_count=2, metrics={"score": 0.6}, elapsed_seconds=1.643),
              Measurement(step_count=1, metrics={"score": 0.5}, elapsed_seconds=3.143))
    reader = MetricReader("score")
    for line in ("score=0.5 step=1", "score=0.6 step=2", "score=0.5 step=1"):
        reader.feed_stdout_line(line, 1.0 + len(reader.measurements))
    active = ActiveTrial(trial=Trial(id="1", parameters={}, state=TrialState.ACTIVE), run=None, reader=reader,
                         follower=None, chief_log="", started=0.0, recorded=_recorded_times(stored))  # type: ignore[arg-type]
    trial = active.with_measurements(now=10.0)
    assert [m.elapsed_seconds for m in trial.measurements] == [0.143, 1.643, 3.143]
