"""Jobs and studies as containers on the real Docker engine, through the real CLI.

Needs the engine and the images of `.ci/docker-setup.sh` (`vcli-trainer:latest` built from the
repository's Dockerfile on an offline Debian base). Afterwards no container of a job may
exist, running or stopped.
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

from tests.harness.docker_env import BASE_IMAGE, PYBASE_IMAGE, ensure_docker
from tests.helpers import (
    clusters_from_stdout,
    describe,
    job_id_from_stderr,
    read_stderr_until,
    spawn,
    vcli,
    vcli_env,
    wait_for,
)

pytestmark = pytest.mark.docker

TRAINER_IMAGE = "vcli-trainer:latest"
POOL = "machine-type=n1-standard-4,replica-count=1"


@pytest.fixture(scope="module")
def client():
    c = ensure_docker([BASE_IMAGE, PYBASE_IMAGE])  # the module's autopackaging tests build on vcli-pybase
    c.images.get(TRAINER_IMAGE)  # built by .ci/docker-setup.sh; a clear KeyError-free failure if not
    return c


def _containers(client, job_id: str) -> list:
    """The job's containers, running or not. docker-py lists, then inspects each one: a
    container removed in between (a replica replaced or cleaned up just then) raises NotFound,
    so the listing is simply taken again."""
    import docker

    for _ in range(10):
        try:
            return client.containers.list(all=True, filters={"label": f"vcli.job={job_id}"})
        except docker.errors.NotFound:
            time.sleep(0.1)
    return client.containers.list(all=True, filters={"label": f"vcli.job={job_id}"})


def test_two_replica_job_as_containers(client, tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = vcli(
        home, "custom-jobs", "create", "--executor=docker", "--display-name=digits",
        f"--worker-pool-spec={POOL},container-image-uri={TRAINER_IMAGE}",
        f"--worker-pool-spec={POOL},container-image-uri={TRAINER_IMAGE}",
        "--args=--epochs=3",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = job_id_from_stderr(r.stderr)
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED" and job["executor"] == "docker"
    clusters = clusters_from_stdout(r.stdout)
    assert clusters["workerpool0-0"] == clusters["workerpool1-0"] and set(clusters["workerpool0-0"]) == {"chief", "worker"}
    model = Path(job["outputDirectory"]) / "model"
    assert (model / "saved_model.pb").exists(), list(model.iterdir())
    metrics = home / "jobs" / job_id / "replicas" / "workerpool0-0" / "hypertune" / "output.metrics"
    last = json.loads(metrics.read_text().splitlines()[-1])
    assert float(last["accuracy"]) > 0.8
    assert not _containers(client, job_id)
    # One end line per replica, the job's own (a container's plain exit was said twice).
    for task in ("workerpool0-0", "workerpool1-0"):
        ends = [line for line in r.stdout.splitlines() if line.startswith(f"[{task}] vcli: ")]
        assert ends == [f"[{task}] vcli: Task completed. Exit code (0). Exit reason (SUCCEEDED)"], ends


def test_study_with_container_trials(client, tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = tmp_path / "hp.yaml"
    config.write_text(textwrap.dedent(f"""
        studySpec:
          metrics: {{metricId: accuracy, goal: MAXIMIZE}}
          parameters:
          - parameterId: learning_rate
            doubleValueSpec: {{minValue: 0.01, maxValue: 0.3}}
            scaleType: UNIT_LOG_SCALE
          - parameterId: num_units
            integerValueSpec: {{minValue: 16, maxValue: 64}}
            scaleType: UNIT_LINEAR_SCALE
        maxTrialCount: 3
        parallelTrialCount: 2
        trialJobSpec:
          workerPoolSpecs:
            machineSpec: {{machineType: n1-standard-4}}
            replicaCount: 1
            containerSpec:
              imageUri: {TRAINER_IMAGE}
              args: [--epochs=2]
    """))
    r = vcli(home, "hp-tuning-jobs", "create", "--executor=docker", f"--config={config}",
             "--display-name=docker-hpt", "--seed=2", "--format=json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 3
    for t in study["trials"]:
        assert t["finalMeasurement"]["stepCount"] == "2"
        job_id = t["customJob"].rsplit("/", 1)[-1]
        assert not _containers(client, job_id)
        # metrics came from the bind-mounted hypertune file
        f = home / "jobs" / job_id / "replicas" / "workerpool0-0" / "hypertune" / "output.metrics"
        assert json.loads(f.read_text().splitlines()[-1])["trial"] == t["id"]


STUBBORN = "import signal,time,os,sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\n" \
           "if os.environ['VCLI_TASK_NAME'].startswith('workerpool1'):\n    time.sleep(1); sys.exit(1)\n" \
           "while True: time.sleep(0.1)\n"


def test_failure_and_cancel_leave_no_container(client, tmp_path: Path) -> None:
    home = tmp_path / "home"
    cmd = "--command=^|^python3|-c|" + STUBBORN
    r = vcli(
        home, "custom-jobs", "create", "--executor=docker", "--display-name=fails",
        f"--worker-pool-spec={POOL},container-image-uri=vcli-base:bookworm",
        f"--worker-pool-spec={POOL},container-image-uri=vcli-base:bookworm",
        cmd, timeout=120,
    )
    assert r.returncode == 6, r.stderr
    job_id = job_id_from_stderr(r.stderr)
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_FAILED"
    assert not _containers(client, job_id)

    # cancel from a second process while both run (the chief ignores SIGTERM)
    proc = spawn(
        home, "custom-jobs", "create", "--executor=docker", "--display-name=cancel-me",
        f"--worker-pool-spec={POOL},container-image-uri=vcli-base:bookworm",
        "--command=^|^python3|-c|import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
    )
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: [c for c in _containers(client, job_id) if c.status == "running"], 60, "container running")
        c = vcli(home, "custom-jobs", "cancel", job_id, timeout=120)
        assert c.returncode == 0, c.stderr
        assert proc.wait(timeout=60) == 5
        assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
        assert not _containers(client, job_id)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_autopackaged_job_with_script_and_requirements(client, tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "run.py").write_text("import six, sys\nprint('six', six.__version__, 'args', sys.argv[1:])\n")
    r = vcli(
        home, "custom-jobs", "create", "--executor=docker", "--display-name=autopkg",
        f"--worker-pool-spec={POOL},executor-image-uri=vcli-pybase:bookworm,local-package-path={pkg},"
        "script=run.py,requirements=six",
        "--args=--hello", timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "six 1." in r.stdout and "args ['--hello']" in r.stdout
    job_id = job_id_from_stderr(r.stderr)
    assert not _containers(client, job_id)


def test_autopackaging_a_package_with_pipes_devices_and_non_utf8_names(client, tmp_path: Path) -> None:
    # Hashing the build context opened the FIFO (a hang) and /dev/zero's node, and a non-UTF-8
    # name failed the job with UnicodeEncodeError; pipes, sockets and devices are left out.
    from tests.kit import hostile_package

    pkg = hostile_package(tmp_path / "pkg")
    r = subprocess.run([sys.executable, "-m", "vcli", "custom-jobs", "create", "--executor=docker", "--display-name=hostile",
                        f"--worker-pool-spec={POOL},executor-image-uri=vcli-base:bookworm,local-package-path={pkg},"
                        "python-module=task"],
                       env=vcli_env(tmp_path / "home"), capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert b"files [b'link', b'task.py', b'\\xff\\xfe.txt']" in r.stdout


def test_missing_image_is_one_clear_line(client, tmp_path: Path) -> None:
    r = vcli(
        tmp_path / "home", "custom-jobs", "create", "--executor=docker", "--display-name=noimg",
        f"--worker-pool-spec={POOL},container-image-uri=vcli-does-not-exist:latest",
        timeout=120,
    )
    assert r.returncode == 3, r.stderr
    errors = [l for l in r.stderr.splitlines() if l.startswith("ERROR:") or "Traceback" in l]
    assert len(errors) == 1 and "vcli-does-not-exist:latest" in errors[0], r.stderr



def _orphan(client, home: Path, name: str, nap: int) -> str:
    """A 2-container job whose controller is killed (-9) once both containers run."""
    script = f"import os, time; print('container', os.environ['VCLI_TASK_NAME'], flush=True); time.sleep({nap})"
    proc = spawn(home, "custom-jobs", "create", "--executor=docker", f"--display-name={name}",
                 f"--worker-pool-spec={POOL},container-image-uri=vcli-base:bookworm",
                 f"--worker-pool-spec={POOL},container-image-uri=vcli-base:bookworm",
                 "--command=^|^python3|-c|" + script)
    try:
        job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: len([c for c in _containers(client, job_id) if c.status == "running"]) == 2, 60,
                 "both containers running")
        # ... and recorded: a container the controller started but had not recorded yet when
        # it died is found by its labels, but its replica row says NOT_STARTED.
        wait_for(lambda: [x.get("state") for x in describe(home, "custom-jobs", job_id).get("replicas", [])]
                 == ["RUNNING", "RUNNING"], 60, "both replicas recorded RUNNING")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the controller dies without any cleanup
        proc.wait(timeout=10)
    return job_id


def test_containers_outlive_a_killed_controller_and_resume_reattaches(client, tmp_path: Path) -> None:
    home = tmp_path / "home"
    job_id = _orphan(client, home, "resume-me", 8)
    before = {c.id for c in _containers(client, job_id) if c.status == "running"}
    assert len(before) == 2, "containers must outlive their controller"
    r = vcli(home, "custom-jobs", "resume", job_id, timeout=120)
    assert r.returncode == 0, r.stderr
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_SUCCEEDED"
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60).stdout
    assert logs.count("\tcontainer workerpool") == 2  # each started once: re-attached, not restarted
    assert not _containers(client, job_id)


def _unrecord(home: Path, job_id: str, *tasks: str) -> None:
    """The store as a controller killed between starting these replicas and recording them leaves it."""
    from vcli.store import Store

    store = Store(home)
    for task in tasks:
        store.upsert_replica(job_id, task, handle=None, state="PENDING", start_time=None)
    store.close()


@pytest.mark.parametrize("unrecorded", [["workerpool1-0"], ["workerpool0-0", "workerpool1-0"]], ids=["one", "all"])
def test_resume_adopts_a_container_whose_start_was_never_recorded(client, tmp_path: Path, unrecorded) -> None:
    """A controller killed between starting a container and recording its handle leaves the
    replica PENDING in the store while it runs: resume finds it by name and labels and adopts
    it, never starting that replica a second time. With no handle recorded at all (killed
    during the first start, found by a probe), resume planned the job afresh: it removed the
    running container and started it again."""
    home = tmp_path / "home"
    job_id = _orphan(client, home, "pending-window", 8)
    before = {c.id for c in _containers(client, job_id) if c.status == "running"}
    _unrecord(home, job_id, *unrecorded)
    r = vcli(home, "custom-jobs", "resume", job_id, timeout=120)
    assert r.returncode == 0, r.stderr
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert [x["state"] for x in job["replicas"]] == ["SUCCEEDED", "SUCCEEDED"]
    logs = vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60).stdout
    assert logs.count("\tcontainer workerpool1-0") == 1, logs  # adopted, not started again
    assert logs.count("\tcontainer workerpool0-0") == 1, logs
    assert len(before) == 2 and not _containers(client, job_id)


@pytest.mark.parametrize("unrecorded", [[], ["workerpool0-0", "workerpool1-0"]], ids=["recorded", "unrecorded"])
def test_cancel_of_an_orphaned_container_job_removes_everything(client, tmp_path: Path, unrecorded) -> None:
    """Containers whose start the killed controller never recorded too (found by a probe: they ran
    on to their end, and stayed, the job CANCELLED and its replicas NOT_STARTED)."""
    home = tmp_path / "home"
    job_id = _orphan(client, home, "orphan", 600)
    _unrecord(home, job_id, *unrecorded)
    r = vcli(home, "custom-jobs", "cancel", job_id, timeout=120)
    assert r.returncode == 0, r.stderr
    job = describe(home, "custom-jobs", job_id)
    assert job["state"] == "JOB_STATE_CANCELLED"
    assert {x["state"] for x in job["replicas"]} == {"STOPPED"}
    assert not _containers(client, job_id)


def test_pools_with_an_image_and_no_command_run_as_containers_without_flags(client, tmp_path: Path) -> None:
    """As on Vertex: an image and no command means the image's own entrypoint, so a container."""
    home = tmp_path / "home"
    config = tmp_path / "job.yaml"
    config.write_text(textwrap.dedent("""
        workerPoolSpecs:
          - machineSpec: {machineType: n1-standard-4}
            replicaCount: 1
            containerSpec:
              imageUri: vcli-base:bookworm
              args: [python3, -c, "import os; print('in a container', os.path.exists('/.dockerenv'))"]
        """))
    valid = vcli(home, "custom-jobs", "create", "--display-name=img", f"--config={config}", "--validate-only")
    assert valid.returncode == 0, valid.stderr
    r = vcli(home, "custom-jobs", "create", "--display-name=img", f"--config={config}", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "in a container True" in r.stdout
    job = describe(home, "custom-jobs", job_id_from_stderr(r.stderr))
    assert job["executor"] == "docker" and job["state"] == "JOB_STATE_SUCCEEDED"
    assert not _containers(client, job["name"].rsplit("/", 1)[-1])


# ---------------------------------------------------------------------------- packages (issue #14)


def test_notebook_study_with_package_uris_runs_in_containers(client, tmp_path: Path) -> None:
    """A packageUris sdist and pythonModule: trainer.task, from an empty directory: the sdist is
    installed once into an image derived from the executor image (here one whose python3 has no
    pip, so a virtual environment is made in it), and a second study reuses that image."""
    from tests.kit import PACKAGE_URIS_STUDY, trainer_sdist, vcli_only

    tarball = trainer_sdist(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    config = tmp_path / "study.yaml"
    config.write_text(PACKAGE_URIS_STUDY.format(uri=f"file://{tarball}").replace(
        "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12.py310:latest", "vcli-base:bookworm"))
    home = tmp_path / "home"

    first = vcli_only(home, empty, "hp-tuning-jobs", "create", "--executor=docker", f"--config={config}", "--format=json")
    assert first.returncode == 0, first.stderr[-3000:]
    study = json.loads(first.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert sorted(t["finalMeasurement"]["metrics"][0]["value"] for t in study["trials"]) == [0.1, 0.2]
    assert "Installing trainer-0.1.tar.gz" in first.stderr
    [tag] = {line.split("[", 1)[1].split("]", 1)[0] for line in first.stderr.splitlines()
             if "Installing trainer-0.1.tar.gz" in line}
    image = client.images.get(tag)
    assert not list(empty.iterdir())  # nothing written where vcli was run

    second = vcli_only(home, empty, "hp-tuning-jobs", "create", "--executor=docker", f"--config={config}", "--format=json")
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads(second.stdout)["state"] == "JOB_STATE_SUCCEEDED"
    assert "Installing" not in second.stderr and f"Using the container image [{tag}]" in second.stderr
    assert client.images.get(tag).id == image.id
    assert not list(empty.iterdir())
    for t in study["trials"]:
        assert not _containers(client, t["customJob"].rsplit("/", 1)[-1])


def test_parallel_container_trials_have_private_working_directories(client, tmp_path: Path) -> None:
    """Each trial's trainer writes data.csv where it runs and checks it stays its own; the
    package directory on the host is left exactly as it was."""
    from tests.kit import file_tree, trainer_package, vcli_only

    pkg = trainer_package(tmp_path / "pkg")
    before = file_tree(pkg)
    r = vcli_only(
        tmp_path / "home", tmp_path, "hp-tuning-jobs", "create", "--executor=docker", "--display-name=isolated",
        "--metric=metric-id=accuracy,goal=maximize",
        f"--worker-pool-spec={POOL},executor-image-uri=vcli-pybase:bookworm,local-package-path={pkg},"
        "python-module=trainer.task",
        "--parameter-spec=parameter-id=lr,type=discrete,values=0.1;0.2",
        "--algorithm=grid-search", "--max-trial-count=2", "--parallel-trial-count=2", "--format=json",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    trials = json.loads(r.stdout)["trials"]
    assert [t["state"] for t in trials] == ["SUCCEEDED", "SUCCEEDED"]
    assert sorted(t["finalMeasurement"]["metrics"][0]["value"] for t in trials) == [0.1, 0.2]
    assert file_tree(pkg) == before  # no data.csv, no __pycache__, nothing changed in the source


def _image_command_config(tmp_path: Path, image: str) -> Path:
    """A job whose one pool runs a command in `image`; it prints whether it ran in a container
    (its mount namespace is not this process's: this machine may itself be a container, and
    containers share the host's network and hostname)."""
    cfg = tmp_path / f"job-{image.replace(':', '-')}.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        workerPoolSpecs:
          - machineSpec: {{machineType: n1-standard-4}}
            replicaCount: 1
            containerSpec:
              imageUri: {image}
              command: [python3, -c, "import os; print('in-container', os.readlink('/proc/self/ns/mnt') != '{os.readlink('/proc/self/ns/mnt')}')"]
        """))
    return cfg


def test_a_pool_with_an_image_and_a_command_runs_in_the_image(client, tmp_path: Path) -> None:
    """As on Vertex (gcloud's own --config example): an image pool is a container pool, with
    no executor chosen and a Docker engine that has the image; otherwise its command runs on
    this host and one Note line says why."""
    home = tmp_path / "home"
    r = vcli(home, "custom-jobs", "create", "--display-name=img", f"--config={_image_command_config(tmp_path, 'vcli-base:bookworm')}",
             timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "with the docker executor" in r.stderr and "Note: workerpool0" not in r.stderr
    assert "in-container True" in r.stdout
    assert not _containers(client, job_id_from_stderr(r.stderr))

    r = vcli(home, "custom-jobs", "create", "--display-name=img", f"--config={_image_command_config(tmp_path, 'vcli-no-such:1')}",
             timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "in-container False" in r.stdout
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("Note: workerpool0")]
    assert len(notes) == 1 and "not inside image [vcli-no-such:1]" in notes[0] and "is not in the local Docker engine" in notes[0]

    r = vcli(home, "custom-jobs", "create", "--display-name=img", "--executor=local",
             f"--config={_image_command_config(tmp_path, 'vcli-base:bookworm')}", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "in-container False" in r.stdout
    assert "not inside image [vcli-base:bookworm]: the local executor runs processes" in r.stderr


def test_study_validate_only_says_when_its_image_is_missing(client, tmp_path: Path) -> None:
    """Studies validate like jobs: a missing image is reported at --validate-only (still exit 0:
    the study is valid, the machine cannot run it now)."""
    args = ["--display-name=t", "--metric=metric-id=score,goal=maximize", "--executor=docker", "--validate-only",
            "--parameter-spec=parameter-id=x,min=0,max=1", "--max-trial-count=2", "--format=none"]
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", *args,
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=vcli-no-such:1")
    assert r.returncode == 0, r.stderr
    assert "WARNING: the docker executor cannot run it now (exit code 3 at create): Image [vcli-no-such:1] is not in " \
           "the local Docker engine" in r.stderr
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", *args,
             f"--worker-pool-spec=machine-type=n1-standard-4,container-image-uri={TRAINER_IMAGE}")
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stderr
