"""DockerExecutor against the real Docker engine (no mocks, never skipped).

The engine and images come from tests/harness/docker_env.py (it runs .ci/docker-setup.sh when
they are missing and we are root). Replicas are `python3 -c` one-liners on vcli-base:bookworm.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.harness.docker_env import BASE_IMAGE, PYBASE_IMAGE, ensure_docker, job_containers, remove_job_containers
from vcli.errors import ExecutorError, InvalidValueError
from vcli.executors import Placement, ReplicaHandle, ReplicaLaunch, ReplicaStatus
from vcli.executors.docker import (
    DockerExecutor,
    autopackage_dockerfile,
    cleanup_job,
    container_create_kwargs,
    iter_log_lines,
)
from vcli.logs import read_records
from vcli.placement.gpus import GpuAllocationError, GpuAllocator, GpusBusyError
from vcli.spec import LocalPackage, MachineSpec, ReplicaId

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def client() -> Any:
    return ensure_docker()


@pytest.fixture
def jobs(client: Any):
    """new_job() -> a unique job id; every container of those jobs is removed afterwards."""
    created: list[str] = []

    def new_job() -> str:
        job_id = f"t{uuid.uuid4().hex[:10]}"
        created.append(job_id)
        return job_id

    yield new_job
    for job_id in created:
        remove_job_containers(client, job_id)


@pytest.fixture
def executor(client: Any) -> DockerExecutor:
    return DockerExecutor()


def make_launch(
    tmp_path: Path,
    job_id: str,
    code: str | None = None,
    *,
    pool: int = 0,
    index: int = 0,
    trial_id: str | None = None,
    image: str | None = BASE_IMAGE,
    command: tuple[str, ...] | None = None,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    workdir: str | None = None,
    **extra: Any,
) -> ReplicaLaunch:
    replica = ReplicaId(pool_index=pool, index=index)
    out = tmp_path / job_id / (trial_id or "0") / replica.task_name
    out.mkdir(parents=True, exist_ok=True)
    if command is None:
        command = ("python3", "-c", code or "pass")
    return ReplicaLaunch(
        job_id=job_id,
        trial_id=trial_id,
        replica=replica,
        placement=Placement(runtime="docker"),
        image_uri=image,
        command=command,
        args=args,
        env=env or {},
        workdir=workdir,
        output_dir=str(out),
        log_path=str(out / "replica.log"),
        metric_file=str(out / "metrics.jsonl"),
        **extra,
    )


def wait_done(ex: DockerExecutor, handle: ReplicaHandle, timeout: float = 60) -> ReplicaStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = ex.poll(handle)
        if not status.running:
            return status
        time.sleep(0.1)
    raise AssertionError(f"{handle.task_name} still running after {timeout}s")


def no_progress(_: str) -> None:
    pass


# ----------------------------------------------------------------------------- running replicas


def test_exit_codes_and_logs(executor: DockerExecutor, jobs, tmp_path: Path) -> None:
    job = jobs()
    ok = make_launch(
        tmp_path,
        job,
        "import sys\nprint('hello out')\nprint('tab\\there', flush=True)\nprint('bad news', file=sys.stderr)\nprint('no newline', end='')",
    )
    bad = make_launch(tmp_path, job, "import sys; print('failing'); sys.exit(3)", pool=1)
    launches = executor.prepare([ok, bad], cancelled=threading.Event(), progress=no_progress)
    handles = [executor.start(launch) for launch in launches]
    assert all(h.executor == "docker" and h.ref for h in handles)
    assert ReplicaHandle.from_json(json.loads(json.dumps(handles[0].to_json()))) == handles[0]

    status_ok, status_bad = (wait_done(executor, h) for h in handles)
    assert status_ok == ReplicaStatus(running=False, exit_code=0, end_time=status_ok.end_time)
    assert status_ok.end_time is not None and abs(status_ok.end_time - time.time()) < 120  # the container's FinishedAt
    assert status_bad.exit_code == 3 and "exited with code 3" in (status_bad.message or "")

    # poll says "done" only once the log is complete, vcli exit record included.
    records = read_records(ok.log_path, ok.task_name)
    by_stream = {(r.stream, r.message) for r in records}
    assert ("stdout", "hello out") in by_stream
    assert ("stdout", "tab    here") in by_stream  # LogWriter's tab replacement
    assert ("stdout", "no newline") in by_stream
    assert ("stderr", "bad news") in by_stream
    # A plain exit gets no line of the executor's own: the job's end line says it (`Task completed. ...`).
    assert not [r for r in records if r.stream == "vcli"], records
    assert all(abs(r.timestamp - time.time()) < 120 for r in records)  # engine timestamps, unix time
    bad_records = read_records(bad.log_path, bad.task_name)
    assert [r.message for r in bad_records if r.stream == "stdout"] == ["failing"]
    assert not [r for r in bad_records if r.stream == "vcli"], bad_records

    names = {c.name: c.labels for c in job_containers(executor.client(), job)}
    assert names == {
        f"vcli-{job}-0-workerpool0-0": {"vcli.job": job, "vcli.trial": "", "vcli.task": "workerpool0-0"},
        f"vcli-{job}-0-workerpool1-0": {"vcli.job": job, "vcli.trial": "", "vcli.task": "workerpool1-0"},
    }
    executor.release(handles)
    assert job_containers(executor.client(), job) == []


def test_env_mounts_and_metric_file(executor: DockerExecutor, jobs, tmp_path: Path) -> None:
    job = jobs()
    shared = tmp_path / "shared-data"
    shared.mkdir()
    (shared / "input.txt").write_text("from the host")
    launch = make_launch(
        tmp_path,
        job,
        "import json, os\n"
        "p = os.environ['CLOUD_ML_HP_METRIC_FILE']\n"
        "open(p, 'w').write(json.dumps({'accuracy': 0.75, 'global_step': 3}) + '\\n')\n"
        "d = os.environ['SHARED']\n"
        "print(open(os.path.join(d, 'input.txt')).read())\n"
        "open(os.path.join(d, 'output.txt'), 'w').write('from the container')\n"
        "print(os.environ['TF_CONFIG'])",
        trial_id="7",
        mounts=(str(shared),),
    )
    env = {
        "CLOUD_ML_HP_METRIC_FILE": launch.metric_file,
        "SHARED": str(shared),
        "TF_CONFIG": json.dumps({"cluster": {"chief": ["127.0.0.1:1234"]}, "task": {"type": "chief", "index": 0}}),
    }
    launch = ReplicaLaunch(**{**launch.__dict__, "env": env})
    handle = executor.start(launch)
    assert wait_done(executor, handle).exit_code == 0
    metric = executor.read_file(handle, launch.metric_file)
    assert metric is not None and json.loads(metric) == {"accuracy": 0.75, "global_step": 3}
    assert executor.read_file(handle, os.path.join(launch.output_dir, "absent.json")) is None
    assert (shared / "output.txt").read_text() == "from the container"
    out = [r.message for r in read_records(launch.log_path, launch.task_name) if r.stream == "stdout"]
    assert out[0] == "from the host" and json.loads(out[1])["task"]["type"] == "chief"
    (container,) = job_containers(executor.client(), job)
    assert container.name == f"vcli-{job}-7-workerpool0-0" and container.labels["vcli.trial"] == "7"
    assert container.attrs["HostConfig"]["NetworkMode"] == "host"
    executor.release([handle])


def test_stop_within_grace_and_release(executor: DockerExecutor, jobs, tmp_path: Path) -> None:
    job = jobs()
    ignoring = make_launch(
        tmp_path,
        job,
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(600)",
    )
    sleeper = make_launch(tmp_path, job, command=("sleep", "600"), pool=1)
    handles = [executor.start(ignoring), executor.start(sleeper)]
    deadline = time.monotonic() + 30
    while not any(r.message == "ready" for r in read_records(ignoring.log_path, ignoring.task_name)):
        assert time.monotonic() < deadline, "replica never became ready"
        time.sleep(0.1)
    assert all(executor.poll(h).running for h in handles)

    # A second executor instance (as in `cancel` from another process) stops by handle.
    other = DockerExecutor()
    grace = 2.0
    t0 = time.monotonic()
    other.stop([ReplicaHandle.from_json(h.to_json()) for h in handles], grace_seconds=grace)
    elapsed = time.monotonic() - t0
    assert elapsed < grace + 8, f"stop took {elapsed:.1f}s"  # not the engine's 10 s default, nor twice the grace
    statuses = [other.poll(h) for h in handles]
    assert not any(s.running for s in statuses)
    assert statuses[0].exit_code == 137  # SIGKILL after the grace period
    assert statuses[1].exit_code == 143  # sleep died of SIGTERM at once
    own = [wait_done(executor, h, timeout=10) for h in handles]
    assert "stopped" not in (own[0].message or "")  # this instance did not stop it: just "killed"
    assert "stopped" in (statuses[0].message or "") and "out of memory" not in (statuses[0].message or "")
    assert read_records(ignoring.log_path, ignoring.task_name)[-1].stream == "vcli"

    other.release(handles)
    assert job_containers(executor.client(), job) == []


def test_oom_and_plain_sigkill(client: Any, jobs, tmp_path: Path) -> None:
    job = jobs()
    executor = DockerExecutor(mem_limit="64m")
    hog = make_launch(tmp_path, job, "x = bytearray(512 * 1024 * 1024)\nprint(len(x))")
    killed = make_launch(tmp_path, job, command=("sh", "-c", "kill -9 $$"), pool=1)
    handles = [executor.start(hog), executor.start(killed)]
    oom, sigkill = (wait_done(executor, h) for h in handles)
    assert oom.exit_code == 137
    assert oom.message == "replica workerpool0-0 was killed: out of memory (OOMKilled, exit 137)"
    assert sigkill.exit_code == 137 and "out of memory" not in (sigkill.message or "")
    from vcli.control.failures import classify_replica  # what a job or trial that ended so is

    assert [classify_replica(s, []).cls.value for s in (oom, sigkill)] == ["RESOURCE", "INFRASTRUCTURE"]
    assert read_records(hog.log_path, hog.task_name)[-1].message == oom.message
    executor.release(handles)


def test_failed_command_is_a_replica_failure(executor: DockerExecutor, jobs, tmp_path: Path) -> None:
    job = jobs()
    handle = executor.start(make_launch(tmp_path, job, command=("no-such-binary",)))
    status = wait_done(executor, handle)
    assert status.exit_code == 127 and status.message
    executor.release([handle])


# ----------------------------------------------------------------------------- errors


def test_image_not_found(executor: DockerExecutor, jobs, tmp_path: Path) -> None:
    job = jobs()
    missing = make_launch(tmp_path, job, image="vcli-no-such-image:1")
    with pytest.raises(ExecutorError) as err:
        executor.prepare([missing], cancelled=threading.Event(), progress=no_progress)
    text = str(err.value)
    assert "\n" not in text and "[vcli-no-such-image:1]" in text and "docker build -t vcli-no-such-image:1" in text
    with pytest.raises(ExecutorError) as err:
        executor.start(missing)
    assert "[vcli-no-such-image:1]" in str(err.value)
    trainer_like = make_launch(tmp_path, job, image="vcli-trainer:does-not-exist")
    with pytest.raises(ExecutorError, match=r"docker build -t vcli-trainer:does-not-exist \."):
        executor.prepare([trainer_like], cancelled=threading.Event(), progress=no_progress)
    # With a registry host vcli tries a pull and reports its failure in one line.
    remote = make_launch(tmp_path, job, image="registry.invalid/vcli/none:1")
    with pytest.raises(ExecutorError) as err:
        executor.prepare([remote], cancelled=threading.Event(), progress=no_progress)
    assert str(err.value).startswith("Cannot pull image [registry.invalid/vcli/none:1]:") and "\n" not in str(err.value)
    assert job_containers(executor.client(), job) == []


def test_engine_down(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bogus = f"unix://{tmp_path}/no-dockerd.sock"
    expected = (
        f"Cannot connect to the Docker engine at {bogus}: is dockerd running? "
        "Start it with `sudo systemctl start docker` (or `dockerd &`)."
    )
    launch = make_launch(tmp_path, "down")
    with pytest.raises(ExecutorError) as err:
        DockerExecutor(base_url=bogus).prepare([launch], cancelled=threading.Event(), progress=no_progress)
    assert str(err.value) == expected
    monkeypatch.setenv("DOCKER_HOST", bogus)
    executor = DockerExecutor()  # constructing never touches the engine
    with pytest.raises(ExecutorError) as err:
        executor.start(launch)
    assert str(err.value) == expected and err.value.exit_code == 3


def test_autopackage_requires_executor_image(executor: DockerExecutor, tmp_path: Path) -> None:
    launch = make_launch(tmp_path, "pkg", image=None, local_package=LocalPackage(path=str(tmp_path), script="x.py"))
    with pytest.raises(InvalidValueError) as err:
        executor.prepare([launch], cancelled=threading.Event(), progress=no_progress)
    assert str(err.value) == (
        "Invalid value for [--worker-pool-spec]: Key [executor-image-uri] is required when `local-package-path` is specified."
    )


# ----------------------------------------------------------------------------- jobs side by side


def test_cancel_one_job_leaves_the_other(client: Any, jobs, tmp_path: Path) -> None:
    job_a, job_b = jobs(), jobs()
    ex_a, ex_b = DockerExecutor(), DockerExecutor()
    handles_a = [ex_a.start(make_launch(tmp_path, job_a, command=("sleep", "600"), pool=p)) for p in (0, 1)]
    handles_b = [ex_b.start(make_launch(tmp_path, job_b, command=("sleep", "600"), pool=p)) for p in (0, 1)]
    assert len(job_containers(client, job_a)) == 2 and len(job_containers(client, job_b)) == 2

    assert cleanup_job(job_a) == 2  # what `cancel` in another process does
    assert job_containers(client, job_a) == []
    assert [c.status for c in job_containers(client, job_b)] == ["running", "running"]
    assert all(ex_b.poll(h).running for h in handles_b)
    assert not any(ex_a.poll(h).running for h in handles_a)

    assert DockerExecutor().cleanup_job(job_b) == 2
    assert job_containers(client, job_b) == []


# ----------------------------------------------------------------------------- what is sent to the engine


def test_create_kwargs_commands_mounts_workdir(tmp_path: Path) -> None:
    base = make_launch(tmp_path, "kw", command=(), args=("--epochs", "3"), image="img:1", shm_size="2g")
    kw = container_create_kwargs(base)
    assert "entrypoint" not in kw and kw["command"] == ["--epochs", "3"]  # image ENTRYPOINT + args
    assert kw["network_mode"] == "host" and kw["shm_size"] == "2g" and kw["init"] is True
    assert kw["volumes"] == {base.output_dir: {"bind": base.output_dir, "mode": "rw"}}
    assert "device_requests" not in kw and "runtime" not in kw
    code = tmp_path / "code"
    code.mkdir()
    local = make_launch(tmp_path, "kw", command=("python3", "-m", "trainer.task"), args=("--x",), image="img:1", workdir=str(code))
    kw = container_create_kwargs(local)
    assert kw["entrypoint"] == ["python3", "-m", "trainer.task"] and kw["command"] == ["--x"]
    assert kw["working_dir"] == str(code) and kw["volumes"][str(code)] == {"bind": str(code), "mode": "ro"}
    no_args = make_launch(tmp_path, "kw", command=(), image="img:1")
    assert "command" not in container_create_kwargs(no_args)  # the image's CMD
    module = make_launch(tmp_path, "kw", command=(), args=("--a",), image="img:1", python_module="trainer.task")
    kw = container_create_kwargs(module)  # pythonPackageSpec: python3 -m in the executor image
    assert kw["entrypoint"] == ["python3", "-m", "trainer.task"] and kw["command"] == ["--a"]
    # A CPU replica on a host that declares GPUs: none of them, even under an nvidia default runtime
    cpu = ReplicaLaunch(**{**base.__dict__, "placement": Placement(runtime="docker", gpu_host=True)})
    kw = container_create_kwargs(cpu)
    assert "device_requests" not in kw
    assert (kw["environment"]["NVIDIA_VISIBLE_DEVICES"], kw["environment"]["CUDA_VISIBLE_DEVICES"]) == ("void", "")


def test_gpu_assignment_two_concurrent_replicas(tmp_path: Path) -> None:
    allocator = GpuAllocator()
    allocator.declare("local", count=4, accelerator_type="NVIDIA_TESLA_T4")
    machine = MachineSpec(machine_type="n1-standard-8", accelerator_type="NVIDIA_TESLA_T4", accelerator_count=2)
    results: dict[int, dict[str, Any]] = {}

    def replica(index: int) -> None:
        gpus = allocator.allocate("local", machine.accelerator_count, accelerator_type=machine.accelerator_type)
        launch = make_launch(tmp_path, "gpu", index=index, image="img:1", machine_spec=machine)
        launch = ReplicaLaunch(**{**launch.__dict__, "placement": Placement(gpu_indices=gpus, runtime="docker")})
        results[index] = container_create_kwargs(launch)

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = []
    for kw in results.values():
        (request,) = kw["device_requests"]
        assert request["Capabilities"] == [["gpu"]] and request["Driver"] == ""
        assert kw["environment"]["NVIDIA_VISIBLE_DEVICES"] == ",".join(request["DeviceIDs"])
        assert kw["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"  # renumbered inside the container
        assert "runtime" not in kw
        ids.append(set(request["DeviceIDs"]))
    assert len(ids[0]) == 2 and len(ids[1]) == 2 and not ids[0] & ids[1]
    assert ids[0] | ids[1] == {"0", "1", "2", "3"}

    with pytest.raises(GpusBusyError):
        allocator.allocate("local", 1)
    with pytest.raises(GpuAllocationError, match="needs 5 GPUs but host local has 4"):
        allocator.allocate("local", 5)
    with pytest.raises(GpuAllocationError, match="NVIDIA_L4"):
        allocator.allocate("local", 1, accelerator_type="NVIDIA_L4")
    allocator.release("local", (0, 1))
    assert allocator.allocate("local", 2, timeout=1) == (0, 1)


def test_log_frames_parsing() -> None:
    frames = [
        b"2026-01-02T03:04:05.500000000Z part one ",
        b"2026-01-02T03:04:06.000000000Z and two\n",
        b"2026-01-02T03:04:07.250000000Z a\nb\n",
        b"2026-01-02T03:04:08Z tail",
    ]
    lines = list(iter_log_lines(frames))
    assert [line for _, line in lines] == ["part one and two", "a", "b", "tail"]
    assert lines[0][0] == pytest.approx(1767323045.5)
    assert lines[1][0] == pytest.approx(1767323047.25)


def test_log_frames_of_a_long_line_come_in_bounded_lines_cut_outside_secrets() -> None:
    from vcli.executors.supervisor import MAX_RECORD_BYTES

    secret = "tok-" + "s" * 30
    text = "x" * (MAX_RECORD_BYTES - 5) + secret + "y" * (3 * MAX_RECORD_BYTES) + "\r done"
    frames = [b"2026-01-02T03:04:05Z " + text[i:i + 16384].encode() for i in range(0, len(text), 16384)]
    frames[-1] += b"\n"
    lines = [line for _, line in iter_log_lines(frames, [secret])]
    assert "".join(lines) == text and lines[-1].endswith("\r done")
    assert max(len(line) for line in lines) <= MAX_RECORD_BYTES and len(lines) >= 4
    assert any(line.startswith(secret) for line in lines)  # never cut inside it, so masking finds it


# ----------------------------------------------------------------------------- autopackaging


def test_autopackage_dockerfile_like_gcloud() -> None:
    text = autopackage_dockerfile(
        "base:1", python_module="trainer.task", has_requirements_txt=True, requirements=("pandas==2.0", "scipy>=1.3.0"), extra_dirs=("data",)
    )
    assert text.startswith("FROM base:1\n")
    for line in (
        "RUN mkdir -m 777 -p /usr/app /home",
        "WORKDIR /usr/app",
        "ENV HOME=/home",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        'COPY ["package/requirements.txt", "./requirements.txt"]',
        "RUN python3 -m pip install --no-cache-dir -r ./requirements.txt",
        "RUN python3 -m pip install --no-cache-dir --upgrade pandas==2.0",
        "RUN python3 -m pip install --no-cache-dir --upgrade 'scipy>=1.3.0'",
        'COPY ["package/data", "data"]',
        'COPY ["package/trainer", "trainer"]',
        'ENTRYPOINT ["python3", "-m", "trainer.task"]',
    ):
        assert line + "\n" in text, line
    assert "PIP_CERT" not in text
    script = autopackage_dockerfile("base:1", script="run.sh", build_ca=True)
    assert 'COPY ["package", "."]' in script and script.endswith('ENTRYPOINT ["/bin/bash", "run.sh"]\n')
    assert "PIP_CERT" not in script  # nothing is pip-installed
    prebuilt = autopackage_dockerfile("us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-4:latest", script="t.py")
    assert "RUN rm -rf /var/sitecustomize\n" in prebuilt


def _package(tmp_path: Path, name: str = "mypkg") -> Path:
    pkg = tmp_path / name
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "values.txt").write_text("41\n")
    (pkg / "task.py").write_text(
        "import sys, six\n"
        "value = int(open('data/values.txt').read()) + 1\n"
        "print('six', six.__version__, 'value', value, 'args', ' '.join(sys.argv[1:]))\n"
    )
    (pkg / "data" / "run-id.txt").write_text(uuid.uuid4().hex)  # every test run really builds
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "junk.pyc").write_bytes(b"ignored")
    return pkg


def test_autopackage_build_run_and_cache(jobs, tmp_path: Path) -> None:
    client = ensure_docker(images=(BASE_IMAGE, PYBASE_IMAGE))
    executor = DockerExecutor()
    job = jobs()
    pkg = _package(tmp_path)
    local = LocalPackage(
        path=str(pkg), executor_image_uri=PYBASE_IMAGE, script="task.py", requirements=("six",), extra_dirs=("data",)
    )
    launches = [
        make_launch(  # as vcli.jobs plans them: no command, the package dir as workdir
            tmp_path,
            job,
            pool=p,
            image=image,
            command=(),
            args=("--lr", "0.1"),
            workdir=str(pkg),
            local_package=local,
        )
        for p, image in ((0, None), (1, PYBASE_IMAGE))  # base image: image_uri or the package's
    ]
    # Without prepare (no build) the package runs in place on the executor image.
    in_place = container_create_kwargs(replace(launches[1]))
    assert in_place["entrypoint"] == ["python3", "task.py"] and in_place["working_dir"] == str(pkg)
    progress: list[str] = []
    t0 = time.monotonic()
    prepared = executor.prepare(launches, cancelled=threading.Event(), progress=progress.append)
    first = time.monotonic() - t0
    tag = prepared[0].image_uri
    assert tag and tag.startswith("vcli-autogenerated/mypkg:") and prepared[1].image_uri == tag
    assert all(p.command == () and p.workdir is None and p.local_package is None and p.args == ("--lr", "0.1") for p in prepared)
    assert any("Custom container image [" in line for line in progress), progress[-5:]
    image = client.images.get(tag)
    assert not any(e.startswith("PIP_CERT=") for e in image.attrs["Config"]["Env"])  # build-time only
    assert image.attrs["Config"]["Entrypoint"] == ["python3", "task.py"]

    handles = [executor.start(p) for p in prepared]
    assert [wait_done(executor, h).exit_code for h in handles] == [0, 0]
    out = [r.message for r in read_records(prepared[0].log_path, "workerpool0-0") if r.stream == "stdout"]
    assert len(out) == 1 and out[0].startswith("six 1.") and out[0].endswith("value 42 args --lr 0.1")
    executor.release(handles)

    # Unchanged code (a new __pycache__ file does not count): a cache hit, no build.
    (pkg / "__pycache__" / "other.pyc").write_bytes(b"x")
    progress.clear()
    t0 = time.monotonic()
    again = DockerExecutor().prepare(launches, cancelled=threading.Event(), progress=progress.append)
    second = time.monotonic() - t0
    assert again[0].image_uri == tag
    assert second < 2, f"cache hit took {second:.2f}s (first prepare {first:.1f}s)"
    assert not any(line.startswith("Step ") for line in progress)

    # Changed code: a new tag.
    (pkg / "task.py").write_text((pkg / "task.py").read_text() + "print('v2')\n")
    changed = DockerExecutor().prepare(launches[:1], cancelled=threading.Event(), progress=no_progress)
    assert changed[0].image_uri != tag
    for built in (changed[0].image_uri, tag):
        client.images.remove(built, force=True)


def test_autopackage_build_cancel(jobs, tmp_path: Path) -> None:
    client = ensure_docker(images=(BASE_IMAGE, PYBASE_IMAGE))
    executor = DockerExecutor()
    pkg = tmp_path / "slowpkg"
    pkg.mkdir()
    (pkg / "setup.py").write_text("import time\nprint('setup.py sleeping', flush=True)\ntime.sleep(300)\n")
    (pkg / "task.py").write_text("print('never')\n")
    launch = make_launch(tmp_path, jobs(), image=PYBASE_IMAGE, local_package=LocalPackage(path=str(pkg), script="task.py"))
    cancelled = threading.Event()
    lines: list[str] = []
    running_in: list[str] = []
    cancel_at: list[float] = []

    def cancel() -> None:
        cancel_at.append(time.monotonic())
        cancelled.set()

    def progress(line: str) -> None:
        lines.append(line)
        if "Running in" in line:
            running_in.append(line.split()[-1])
        if "pip install --no-cache-dir ." in line:  # the slow step has begun
            threading.Timer(2.0, cancel).start()

    result = executor.prepare([launch], cancelled=cancelled, progress=progress)
    assert cancelled.is_set(), lines[-10:]
    returned_after = time.monotonic() - cancel_at[0]
    assert returned_after < 3, f"prepare returned {returned_after:.1f}s after the cancel"
    assert result == [launch]  # nothing built
    assert any("Build cancelled." == line for line in lines)
    import docker

    deadline = time.monotonic() + 10
    for cid in running_in:
        while True:
            try:
                client.api.inspect_container(cid)
            except docker.errors.NotFound:
                break
            assert time.monotonic() < deadline, f"build container {cid} left behind"
            time.sleep(0.2)
    assert not client.images.list(name="vcli-autogenerated/slowpkg")


def test_gpu_request_reaches_the_engine(executor: DockerExecutor, jobs, tmp_path: Path) -> None:
    """`--gpus device=0,1` really sent: without the NVIDIA toolkit the replica fails with a hint."""
    job = jobs()
    launch = make_launch(tmp_path, job, command=("sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES"))
    launch = replace(launch, placement=Placement(gpu_indices=(0, 1), runtime="docker"))
    handle = executor.start(launch)
    status = wait_done(executor, handle)
    if status.exit_code == 0:  # a GPU machine with the toolkit
        out = [r.message for r in read_records(launch.log_path, launch.task_name) if r.stream == "stdout"]
        assert out == ["0,1 0,1"]
    else:
        assert status.message and "could not start" in status.message and "NVIDIA Container Toolkit" in status.message
        assert DockerExecutor().poll(handle) == status  # the same, seen from another process
    executor.release([handle])


def test_gpu_allocator_waits_for_release() -> None:
    allocator = GpuAllocator()
    allocator.declare("h", indices=(2, 5))
    held = allocator.allocate("h", 2)
    assert held == (2, 5) and allocator.free("h") == ()
    got: list[tuple[int, ...]] = []
    waiter = threading.Thread(target=lambda: got.append(allocator.allocate("h", 1, timeout=10)))
    waiter.start()
    time.sleep(0.2)
    assert got == []  # blocked: both GPUs are held
    allocator.release("h", (5,))
    waiter.join(5)
    assert got == [(5,)]
    with pytest.raises(GpuAllocationError, match="none declared"):
        allocator.allocate("other-host", 1)
    assert allocator.allocate("other-host", 0) == ()


def test_a_missing_image_is_valid_but_not_ready(tmp_path) -> None:
    """`check` judges the job (an image is named), `ready` the engine (the image is not there)."""
    from vcli.errors import ExecutorError
    from vcli.executors.docker import DockerExecutor

    ensure_docker()
    launch = make_launch(tmp_path, "ready-check", image="vcli-no-such-image:latest", command=("true",))
    ex = DockerExecutor()
    ex.check([launch])
    with pytest.raises(ExecutorError, match="vcli-no-such-image"):
        ex.ready([launch])
