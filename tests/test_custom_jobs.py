"""End-to-end custom jobs through the real CLI on the local process executor.

Real processes, real TensorFlow: a two-replica MultiWorkerMirroredStrategy job on digits,
a failing worker, cancel from a second process, Ctrl-C, a scheduling timeout, and a
controller killed outright. After each, no process of the job may survive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import (
    REPO,
    clusters_from_stdout,
    describe,
    job_id_from_stderr,
    list_ids,
    processes_with_env,
    read_stderr_until,
    running_replicas,
    spawn,
    vcli,
    vcli_env,
    wait_for,
    write_package,
)

POOL = "machine-type=n1-standard-4,replica-count=1"


def test_two_replica_multiworker_job_trains_digits(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = vcli(
        home,
        "custom-jobs", "create", "--display-name=digits",
        f"--worker-pool-spec={POOL},local-package-path=.,python-module=trainer.task",
        f"--worker-pool-spec={POOL}",
        "--args=--epochs=3",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = job_id_from_stderr(r.stderr)
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert job["name"].endswith(f"/customJobs/{job_id}")
    assert [x["taskName"] for x in job["replicas"]] == ["workerpool0-0", "workerpool1-0"]
    assert all(x["exitCode"] == 0 for x in job["replicas"])

    # Both replicas saw the same cluster: chief + worker at the reserved addresses.
    clusters = clusters_from_stdout(r.stdout)
    assert set(clusters) == {"workerpool0-0", "workerpool1-0"}
    assert clusters["workerpool0-0"] == clusters["workerpool1-0"]
    addresses = {x["taskName"]: x["address"] for x in job["replicas"]}
    assert clusters["workerpool0-0"] == {"chief": [addresses["workerpool0-0"]], "worker": [addresses["workerpool1-0"]]}

    # The chief saved the model under AIP_MODEL_DIR and reported accuracy > 0.8.
    out = Path(job["outputDirectory"])
    assert (out / "model" / "saved_model.pb").exists() or any((out / "model").iterdir())
    metric_file = home / "jobs" / job_id / "replicas" / "workerpool0-0" / "hypertune" / "output.metrics"
    reports = [json.loads(line) for line in metric_file.read_text().splitlines()]
    assert [x["global_step"] for x in reports] == ["1", "2", "3"]
    assert float(reports[-1]["accuracy"]) > 0.8
    # The worker has its own metric file and wrote no report.
    assert not (home / "jobs" / job_id / "replicas" / "workerpool1-0" / "hypertune" / "output.metrics").exists()
    assert not processes_with_env("VCLI_JOB_ID", job_id)

    # list and stream-logs from "another terminal" see the job.
    assert job_id in list_ids(home, "custom-jobs")
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, "--task-name=workerpool0-0", timeout=60)
    assert logs.returncode == 0
    lines = [l.split("\t") for l in logs.stdout.splitlines()]
    assert all(len(l) == 4 and l[2] == "workerpool0-0" for l in lines)
    assert any("final val_accuracy=" in l[3] for l in lines)


REDUCTION_SERVER = "us-docker.pkg.dev/vertex-ai-training/reductionserver:latest"


def test_reduction_server_job_trains_with_its_workers_alone(tmp_path: Path) -> None:
    # The three-pool shape of Vertex's Reduction Server docs: chief, GPU workers, and a pool of
    # reduction servers (Google's image, no command). Locally the third pool is not started:
    # the workers all-reduce among themselves, and the cluster leaves that pool out.
    home = tmp_path / "home"
    trainer = {"imageUri": "vcli-trainer:latest", "command": [sys.executable, "-m", "trainer.task"], "args": ["--epochs=1"]}
    gpu = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
    config = tmp_path / "rs.yaml"
    config.write_text(json.dumps({"workerPoolSpecs": [
        {"machineSpec": gpu, "replicaCount": 1, "containerSpec": trainer},
        {"machineSpec": gpu, "replicaCount": 1, "containerSpec": trainer},
        {"machineSpec": {"machineType": "n1-highcpu-16"}, "replicaCount": 2, "containerSpec": {"imageUri": REDUCTION_SERVER}},
    ]}))
    note = "Note: workerpool2 is Vertex's Reduction Server"
    # The trainer's command is this machine's interpreter: the local executor, named (with no
    # executor chosen, an image and a command run in the image, as on Vertex).
    check = vcli(home, "custom-jobs", "create", "--display-name=rs", f"--config={config}", "--validate-only",
                 "--format=json", "--executor=local")
    assert check.returncode == 0, check.stderr
    assert note in check.stderr and json.loads(check.stdout)["executor"] == "local"
    r = vcli(home, "custom-jobs", "create", "--display-name=rs", f"--config={config}", "--executor=local", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count(note) == 1
    job = describe(home, "custom-jobs", job_id_from_stderr(r.stderr))
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert [x["taskName"] for x in job["replicas"]] == ["workerpool0-0", "workerpool1-0"]
    # The job as given is kept (three pools), and TF_CONFIG names only the replicas that run.
    assert job["jobSpec"]["workerPoolSpecs"][2]["containerSpec"]["imageUri"] == REDUCTION_SERVER
    clusters = clusters_from_stdout(r.stdout)
    assert set(clusters["workerpool0-0"]) == {"chief", "worker"}


STUBBORN = """
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # like TF's multi-worker runtime
    if "--say-sigterm" in sys.argv:  # ignored all the same, and said in the log
        signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM ignored", flush=True))
    print("started", os.environ["VCLI_TASK_NAME"], flush=True)
    role = os.environ["VCLI_TASK_NAME"]
    if role.startswith("workerpool1") and "--fail" in sys.argv:
        time.sleep(1.5)
        print("worker failing now", flush=True)
        sys.exit(1)
    while True:
        time.sleep(0.1)
"""


def test_failing_worker_fails_job_and_stops_chief(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"stubborn.py": STUBBORN})
    started = time.monotonic()
    r = vcli(
        home,
        "custom-jobs", "create", "--display-name=fails",
        f"--worker-pool-spec={POOL},local-package-path={pkg},script=stubborn.py",
        "--worker-pool-spec=machine-type=n1-standard-4,replica-count=2",
        "--args=--fail",
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert r.returncode == 6, r.stderr
    job_id = job_id_from_stderr(r.stderr)
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_FAILED"
    assert "exited with a non-zero status of 1" in job["error"]["message"]
    # Worker fails after ~1.5 s; the SIGTERM-ignoring chief must be gone well within 10 s.
    assert elapsed < 1.5 + 10
    assert not processes_with_env("VCLI_JOB_ID", job_id)
    states = {x["taskName"]: x["state"] for x in job["replicas"]}
    assert states["workerpool0-0"] == "STOPPED"
    assert "FAILED" in states.values()


def test_cancel_from_another_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"stubborn.py": STUBBORN})
    proc = spawn(
        home,
        "custom-jobs", "create", "--display-name=cancel-me",
        f"--worker-pool-spec={POOL},local-package-path={pkg},script=stubborn.py",
        f"--worker-pool-spec={POOL}",
    )
    try:
        seen = read_stderr_until(proc, "submitted successfully", 60)
        job_id = job_id_from_stderr(seen)
        wait_for(lambda: len(running_replicas(job_id)) == 2, 30, "both replicas running")
        r = vcli(home, "custom-jobs", "cancel", job_id, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "Request to cancel CustomJob" in r.stderr
        assert proc.wait(timeout=60) == 5
        assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
        assert not processes_with_env("VCLI_JOB_ID", job_id)
        # Cancelling a finished job is a no-op with a message.
        again = vcli(home, "custom-jobs", "cancel", job_id, timeout=60)
        assert again.returncode == 0 and "already ended" in again.stderr
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_ctrl_c_cancels(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"stubborn.py": STUBBORN})
    proc = spawn(
        home,
        "custom-jobs", "create", "--display-name=interrupt-me",
        f"--worker-pool-spec={POOL},local-package-path={pkg},script=stubborn.py",
        f"--worker-pool-spec={POOL}",
    )
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: len(running_replicas(job_id)) == 2, 30, "both replicas running")
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
        assert not processes_with_env("VCLI_JOB_ID", job_id)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _stubborn_job_stopping(home: Path, tmp_path: Path, name: str, *args: str,
                           sig: int = signal.SIGINT) -> tuple[subprocess.Popen[str], str]:
    """A job of one replica that ignores SIGTERM, Ctrl-C'd (or sent `sig`): (its controller, the
    job id) once the controller said it is stopping the replica (the 3 s grace has begun)."""
    pkg = write_package(tmp_path, {"stubborn.py": STUBBORN})
    proc = spawn(home, "custom-jobs", "create", f"--display-name={name}",
                 f"--worker-pool-spec={POOL},local-package-path={pkg},script=stubborn.py", *args)
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: len(running_replicas(job_id)) == 1, 30, "the replica running")
        os.kill(proc.pid, sig)
        read_stderr_until(proc, "Stopping 1 replica(s)", 30)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc, job_id


@pytest.mark.parametrize("sig, more, code", [(signal.SIGINT, 1, 130), (signal.SIGINT, 12, 130),
                                             (signal.SIGTERM, 1, 143), (signal.SIGHUP, 2, 129)],
                         ids=["ctrl-c", "ctrl-c-burst", "sigterm", "sighup"])
def test_a_second_ctrl_c_kills_at_once_and_still_leaves_nothing(tmp_path: Path, sig: int, more: int, code: int) -> None:
    # An impatient user's second Ctrl-C inside the stop's 3 s grace made vcli exit 130 "cancelled"
    # at once, with the trainer that ignores SIGTERM still running and the job CANCELLING. A
    # third one, 0.1 s after the second, escaped the handler: the job CANCELLING for good. So did a
    # second SIGTERM or SIGHUP (a process manager signalling vcli, then its group; found by a probe).
    home = tmp_path / "home"
    proc, job_id = _stubborn_job_stopping(home, tmp_path, "impatient", sig=sig)
    try:
        for _ in range(more):
            os.kill(proc.pid, sig)
            time.sleep(0.01)
        assert proc.wait(timeout=60) == code
        assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
        assert not processes_with_env("VCLI_JOB_ID", job_id)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_controller_killed_in_the_stop_grace_still_has_its_stubborn_trainer_killed(tmp_path: Path) -> None:
    """Ctrl-C, then `kill -9` of the controller within the 3 s grace: nobody sent the SIGKILL,
    and a trainer that ignores SIGTERM trained on (found by a probe). Its supervisor now
    kills it itself once the grace is over."""
    home = tmp_path / "home"
    proc, job_id = _stubborn_job_stopping(home, tmp_path, "graceless", "--args=--say-sigterm")
    try:
        # Killed once the stop reached the replica: killed before (the line above is printed
        # first; CI, loaded, killed it in between), the replica rightly runs on, for `resume`
        # or `cancel` to stop.
        wait_for(lambda: any("SIGTERM ignored" in p.read_text() for p in home.rglob("replica.log")), 30,
                 "the stop's SIGTERM at the trainer")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    wait_for(lambda: not processes_with_env("VCLI_JOB_ID", job_id), 20, "the stubborn trainer killed")


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_cancel_with_the_shells_exit_code(tmp_path: Path, sig: int, code: int) -> None:
    """A foreground run that gets SIGTERM (a CI runner's timeout) or SIGHUP (its terminal closed)
    cancels and cleans up as Ctrl-C does, and exits 128 + the signal, as shells expect."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"stubborn.py": STUBBORN})
    proc = spawn(home, "custom-jobs", "create", "--display-name=signalled",
                 f"--worker-pool-spec={POOL},local-package-path={pkg},script=stubborn.py")
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: len(running_replicas(job_id)) == 1, 30, "the replica running")
        os.kill(proc.pid, sig)
        assert proc.wait(timeout=60) == code
        assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
        assert not processes_with_env("VCLI_JOB_ID", job_id)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_reader_that_goes_away_ends_stream_logs_quietly(tmp_path: Path) -> None:
    """`stream-logs ID | head -1`: vcli stops at once, with no message and SIGPIPE's 141, as
    `cat` does; its pipe partner gets its line."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"chatty.py": "for i in range(20000):\n    print('line', i)\n"})
    r = vcli(home, "custom-jobs", "create", "--display-name=chatty", "--format=value(name.basename())",
             f"--worker-pool-spec={POOL},local-package-path={pkg},script=chatty.py", timeout=120)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    out = subprocess.run(f"{sys.executable} -m vcli custom-jobs stream-logs {job_id} | head -1; "
                         "echo \"codes=${PIPESTATUS[*]}\"", shell=True, executable="/bin/bash", capture_output=True,
                         text=True, env=vcli_env(home), timeout=120)
    assert out.stdout.splitlines()[0].endswith("line 0"), out.stdout
    assert out.stdout.splitlines()[-1] == "codes=141 0", out.stdout
    assert out.stderr == "", out.stderr


def test_a_reader_that_goes_away_is_141_under_pythonunbuffered_too(tmp_path: Path) -> None:
    """With PYTHONUNBUFFERED=1 (the Dockerfile sets it) stdout wrote straight to the pipe: the
    first 64 KiB of a big `--format=json` went out, the rest was dropped silently, exit 0."""
    home = tmp_path / "home"
    args = ",".join(f"--arg{i}={'x' * 40}" for i in range(2000))
    r = vcli(home, "custom-jobs", "create", "--display-name=big", "--format=value(name.basename())",
             f"--worker-pool-spec={POOL},container-image-uri=x", f"--command={sys.executable},-c,pass", f"--args={args}",
             timeout=120)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    out = subprocess.run(f"{sys.executable} -m vcli custom-jobs describe {job_id} --format=json | head -c 10; "
                         "s=\"${PIPESTATUS[*]}\"; echo; echo \"codes=$s\"", shell=True, executable="/bin/bash",
                         capture_output=True, text=True, env={**vcli_env(home), "PYTHONUNBUFFERED": "1"}, timeout=120)
    assert out.stdout.splitlines()[-1] == "codes=141 0", out.stdout
    assert out.stderr == "", out.stderr


CHATTY_SLOWLY = "import time\nfor i in range(20):\n    print('line', i, flush=True)\n    time.sleep(0.1)\n"


def test_a_console_that_stops_taking_output_never_ends_the_job(tmp_path: Path) -> None:
    """`create ... | head -1` and `create ... > /dev/full` killed the job's controller mid-job
    (exit 141, or 1 with a traceback): the job stayed RUNNING with nobody driving it. Studies
    share the same console handling (`keep_console`)."""
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"chatty.py": CHATTY_SLOWLY})
    pool = f"--worker-pool-spec={POOL},local-package-path={pkg},script=chatty.py"
    out = subprocess.run(f"{sys.executable} -m vcli custom-jobs create --display-name=piped {pool} | head -1; "
                         "echo \"codes=${PIPESTATUS[*]}\"", shell=True, executable="/bin/bash", capture_output=True,
                         text=True, env=vcli_env(home), timeout=120)
    assert out.stdout.splitlines()[0].endswith("line 0"), out.stdout
    assert out.stdout.splitlines()[-1] == "codes=0 0", (out.stdout, out.stderr)
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "vcli", "custom-jobs", "create", "--display-name=full", pool],
                           stdout=full, stderr=subprocess.PIPE, text=True, env=vcli_env(home), timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "WARNING: (vcli) the output cannot be written (No space left on device); the run goes on without it." \
        in r.stderr.splitlines()
    listed = vcli(home, "custom-jobs", "list", "--format=value(displayName,state)")
    assert sorted(listed.stdout.split("\n")[:-1]) == ["full\tJOB_STATE_SUCCEEDED", "piped\tJOB_STATE_SUCCEEDED"], listed
    for argv in (["custom-jobs", "list", "--format=json"], ["--help"]):  # one line, never a traceback
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, "-m", "vcli", *argv], stdout=full, stderr=subprocess.PIPE, text=True,
                               env=vcli_env(home), timeout=60)
        assert r.returncode == 1, r.stderr
        assert r.stderr.splitlines()[-1].endswith("cannot write the output: No space left on device."), r.stderr
        assert "Traceback" not in r.stderr


def test_scheduling_timeout_fails_job(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"stubborn.py": STUBBORN})
    config = tmp_path / "job.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            workerPoolSpecs:
              machineSpec: {{machineType: n1-standard-4}}
              replicaCount: 1
              containerSpec:
                command: [python3, {pkg}/stubborn.py]
            scheduling:
              timeout: 2s
            """
        )
    )
    r = vcli(home, "custom-jobs", "create", "--display-name=slow", f"--config={config}", timeout=60)
    assert r.returncode == 6, r.stderr
    job = describe(home, "custom-jobs", job_id_from_stderr(r.stderr))
    assert job["state"] == "JOB_STATE_FAILED"
    assert "scheduling.timeout of 2s" in job["error"]["message"]
    assert not processes_with_env("VCLI_JOB_ID", job["name"].rsplit("/", 1)[-1])


def test_killed_controller_leaves_supervised_replicas_and_cancel_cleans_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"stubborn.py": STUBBORN})
    proc = spawn(
        home,
        "custom-jobs", "create", "--display-name=orphan-check",
        f"--worker-pool-spec={POOL},local-package-path={pkg},script=stubborn.py",
        f"--worker-pool-spec={POOL}",
    )
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: len(running_replicas(job_id)) == 2, 30, "both replicas running")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the controller dies without any cleanup
        proc.wait(timeout=10)
    # The replicas outlive it (so `resume` can take them over), supervised, not orphaned:
    assert len(running_replicas(job_id)) == 2
    assert describe(home, "custom-jobs", job_id)["controller"]["alive"] is False
    r = vcli(home, "custom-jobs", "cancel", job_id, timeout=60)
    assert r.returncode == 0, r.stderr
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
    assert not processes_with_env("VCLI_JOB_ID", job_id)


@pytest.mark.parametrize("workers", [0, 3])
def test_config_file_job_with_env_and_command(tmp_path: Path, workers: int) -> None:
    home = tmp_path / "home"
    out = tmp_path / "out"
    config = tmp_path / "job.json"
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": "1",
        "containerSpec": {
            "imageUri": "recorded-only:latest",
            "command": ["python3", "-c", "import os,sys; print(os.environ['GREETING'], sys.argv[1:])"],
            "args": "--one",
            "env": [{"name": "GREETING", "value": "hello world"}],
        },
    }
    pools = pool if workers == 0 else [pool, {**pool, "replicaCount": workers}]
    replicas = 1 + workers
    config.write_text(
        json.dumps({"workerPoolSpecs": pools, "baseOutputDirectory": {"outputUriPrefix": f"file://{out}"}})
    )
    r = vcli(home, "custom-jobs", "create", "--display-name=cfg", f"--config={config}", "--format=json", timeout=120)
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == "recorded-only:latest"
    assert job["outputDirectory"] == str(out)
    assert (out / "model").is_dir()
    assert r.stderr.count("hello world ['--one']") == replicas


def test_async_create_returns_at_once_and_the_job_runs_in_background(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = write_package(tmp_path, {"stubborn.py": STUBBORN, "quick.py": "import sys; print('quick', sys.argv[1:])\n"})
    started = time.monotonic()
    r = vcli(home, "custom-jobs", "create", "--async", "--display-name=bg",
             f"--worker-pool-spec={POOL},local-package-path={pkg},script=quick.py", "--args=--a=1",
             "--format=value(name.basename())", timeout=60)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - started < 10
    job_id = r.stdout.strip()
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=120)  # follows until the job ends
    assert "quick ['--a=1']" in logs.stdout
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_SUCCEEDED"

    # an async job is cancelled from another process like any other
    r = vcli(home, "custom-jobs", "create", "--async", "--display-name=bg-cancel",
             f"--worker-pool-spec={POOL},local-package-path={pkg},script=stubborn.py",
             "--format=value(name.basename())", timeout=60)
    job_id = r.stdout.strip()
    wait_for(lambda: processes_with_env("VCLI_JOB_ID", job_id), 30, "the replica running")
    c = vcli(home, "custom-jobs", "cancel", job_id, timeout=120)
    assert c.returncode == 0, c.stderr
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
    assert not processes_with_env("VCLI_JOB_ID", job_id)


def test_async_jobs_get_their_secret_values_and_logs_mask_them(tmp_path: Path) -> None:
    """The store never holds a secret's value; the detached runner still gets it (a pipe)."""
    home = tmp_path / "home"
    config = tmp_path / "job.yaml"
    config.write_text(textwrap.dedent("""
        workerPoolSpecs:
          machineSpec: {machineType: n1-standard-4}
          replicaCount: 1
          containerSpec:
            imageUri: recorded-only:latest
            command: [python3, -c, "import os; v = os.environ['WANDB_API_KEY']; print(len(v), v[::-1] == '2400-eul4v-y3k'); print('key', v)"]
            env: [{name: WANDB_API_KEY, value: k3y-v4lue-0042}]
        """))
    r = vcli(home, "custom-jobs", "create", "--async", "--display-name=secret", f"--config={config}",
             "--format=value(name.basename())", timeout=60)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=120)
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED", job
    assert "14 True" in logs.stdout
    assert "key <redacted>" in logs.stdout and "k3y-v4lue-0042" not in logs.stdout
    assert "k3y-v4lue-0042" not in (home / "vcli.db").read_bytes().decode(errors="replace")
    assert "k3y-v4lue-0042" not in r.stdout + r.stderr + json.dumps(job)


def test_a_secret_a_local_replica_inherits_from_the_shell_is_masked_too(tmp_path: Path) -> None:
    """An exported token reaches a local trainer through vcli's own environment; its value
    never reaches the replica's log, `stream-logs` or the job's output."""
    home = tmp_path / "home"
    script = tmp_path / "show.py"
    script.write_text("import os\ntoken = os.environ['MY_API_TOKEN']\nprint('tok', token, len(token))\n")
    r = vcli(home, "custom-jobs", "create", "--display-name=inherited",
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=recorded-only:latest",
             f"--command=python3,{script}", "--executor=local", timeout=60, MY_API_TOKEN="supersecret123")
    assert r.returncode == 0, r.stderr
    assert "tok <redacted> 14" in r.stdout and "supersecret123" not in r.stdout + r.stderr
    job_id = job_id_from_stderr(r.stderr)
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60)
    assert "tok <redacted> 14" in logs.stdout and "supersecret123" not in logs.stdout
    assert not [f for f in home.rglob("*") if f.is_file() and b"supersecret123" in f.read_bytes()]


def test_a_progress_bar_and_a_long_line_reach_the_output_and_stream_logs_whole(tmp_path: Path) -> None:
    """A trainer's carriage returns stay inside its line (everything after the first one was
    dropped), and a 1 MB line without newlines arrives whole, in bounded records, at once."""
    from vcli.executors.supervisor import MAX_RECORD_BYTES

    home = tmp_path / "home"
    script = tmp_path / "bar.py"
    script.write_text("import sys\nsys.stdout.write('10%\\r20%\\r30% loss=0.25\\n')\n"
                      "sys.stdout.write('z' * 1000000)\nprint('done', flush=True)\n")
    def run(*args: str) -> tuple[str, str]:  # bytes, not text: text mode reads "\r" as a newline
        p = subprocess.run([sys.executable, "-m", "vcli", *args], env=vcli_env(home), cwd=REPO,
                           capture_output=True, timeout=60, check=True)
        return p.stdout.decode(), p.stderr.decode()

    out, err = run("custom-jobs", "create", "--display-name=bar", "--executor=local", f"--command=python3,{script}",
                   "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=recorded-only:latest")
    assert "[workerpool0-0] 10%\r20%\r30% loss=0.25\n" in out
    logs, _ = run("custom-jobs", "stream-logs", job_id_from_stderr(err))
    assert "\t10%\r20%\r30% loss=0.25\n" in logs
    parts = [line.split("\t", 3)[3] for line in logs.split("\n") if line.endswith(("z", "zdone"))]
    assert "".join(parts) == "z" * 1000000 + "done" and max(map(len, parts)) <= MAX_RECORD_BYTES


def test_the_output_and_stream_logs_print_a_log_longer_than_one_read_whole(tmp_path: Path) -> None:
    """A reader takes at most POLL_READ_BYTES of a log per poll; one that prints a job's last
    records (the end of create, stream-logs of an ended job) reads on to the end."""
    from vcli.logs import POLL_READ_BYTES

    home = tmp_path / "home"
    script = tmp_path / "many.py"
    script.write_text("for i in range(250000):\n    print('line', i, 'x' * 20)\nprint('LAST LINE')\n")
    r = vcli(home, "custom-jobs", "create", "--display-name=many", "--executor=local", f"--command=python3,{script}",
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=recorded-only:latest", timeout=120)
    assert r.returncode == 0, r.stderr
    job_id = job_id_from_stderr(r.stderr)
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=120)
    for out in (r.stdout, logs.stdout):
        lines = [line for line in out.splitlines() if "line " in line or "LAST LINE" in line]
        assert len(lines) == 250001 and lines[-1].endswith("LAST LINE"), (len(lines), lines[-1:])
    assert sum(len(line) + 1 for line in logs.stdout.splitlines()) > 2 * POLL_READ_BYTES


RESTART_TRAINER = '''
import json, os, sys, time
ckpt = os.environ["AIP_CHECKPOINT_DIR"]
os.makedirs(ckpt, exist_ok=True)
task = json.loads(os.environ["CLUSTER_SPEC"])["task"]
if task["type"] == "workerpool0":  # the chief checkpoints every step and resumes from the last
    path = os.path.join(ckpt, "step")
    step = int(open(path).read()) if os.path.exists(path) else 0
    print("resumed from step", step, flush=True)
    while step < 40:
        step += 1
        with open(path + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(path + ".tmp", path)
        time.sleep(0.05)
    print("chief done at step", step, flush=True)
else:  # the worker fails once (or always), after the chief made progress
    marker = os.path.join(ckpt, "worker-failed")
    time.sleep(0.6)
    if os.environ.get("FAIL_ALWAYS") or not os.path.exists(marker):
        open(marker, "a").close()
        print("worker fails", flush=True)
        sys.exit(1)
'''


def _restart_job(tmp_path: Path, scheduling: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    pkg = tmp_path / "pkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "restart_trainer.py").write_text(RESTART_TRAINER)
    pool = ("  - machineSpec: {machineType: n1-standard-4}\n    replicaCount: 1\n"
            "    pythonPackageSpec: {executorImageUri: python:3.11, pythonModule: restart_trainer}\n")
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"workerPoolSpecs:\n{pool}{pool}scheduling:\n{textwrap.indent(scheduling, '  ')}\n")
    home = tmp_path / "home"
    r = vcli(home, "custom-jobs", "create", "--display-name=restart", f"--config={cfg}", "--executor=local",
             "--format=json", timeout=120, PYTHONPATH=str(pkg), **env)
    return r, home


def test_restart_job_on_worker_restart_resumes_from_the_checkpoint(tmp_path: Path) -> None:
    r, home = _restart_job(tmp_path, "restartJobOnWorkerRestart: true")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state"] == "JOB_STATE_SUCCEEDED"
    assert sum(line.startswith("Restarting job") for line in r.stderr.splitlines()) == 1
    assert "replica workerpool1-0 exited with code 1 (restartJobOnWorkerRestart; restart 1 of at most 3)" in r.stderr
    job_id = job_id_from_stderr(r.stderr)
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60).stdout
    resumed = [int(line.rsplit(" ", 1)[1]) for line in logs.splitlines() if "resumed from step" in line]
    assert len(resumed) == 2 and resumed[0] == 0 and resumed[1] > 0, logs  # the second run went on from the checkpoint
    assert "chief done at step 40" in logs
    assert sum("\tRestarting job" in line for line in logs.splitlines()) == 2  # a line in each replica's log


def test_disable_retries_fails_the_job_and_restarts_are_bounded(tmp_path: Path) -> None:
    r, _ = _restart_job(tmp_path / "a", "restartJobOnWorkerRestart: true\ndisableRetries: true")
    assert r.returncode == 6, r.stderr
    assert json.loads(r.stdout)["state"] == "JOB_STATE_FAILED" and "Restarting job" not in r.stderr
    r, _ = _restart_job(tmp_path / "b", "restartJobOnWorkerRestart: true", FAIL_ALWAYS="1")
    assert r.returncode == 6, r.stderr
    assert sum(line.startswith("Restarting job") for line in r.stderr.splitlines()) == 3
    assert "restart 3 of at most 3" in r.stderr
    assert "The replica workerpool1-0 exited with a non-zero status of 1" in json.loads(r.stdout)["error"]["message"]
