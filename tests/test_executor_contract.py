"""The executor contract (vcli.executors.Executor), tested once for every executor.

Every executor (the in-process fake, local processes, Docker containers, processes on an SSH
host, processes supervised by Ray actors on a loopback Ray cluster, Slurm steps on a one-node
Slurm cluster started by the module) runs the same replica program (tests/contract_replica.py) through the same cases: start,
poll, exit codes, the log format, the environment, metric read-back, port reservation, stop
with a grace period (polite and stubborn replicas), stop from another executor instance (as
`cancel` in another terminal does), release, close. The kinds come from the registry
(`vcli.executors.kinds`, where tests/fakes.py registers the fake as any kind defined outside
vcli is registered); a new kind exists when it passes this suite: give it a harness in `_make`.

Docker needs the engine and the `vcli-base:bookworm` image (`.ci/docker-setup.sh`); ssh needs
sshd and root (`.ci/ssh-setup.sh`); both are set up by `.ci/test.sh`, and a missing one fails
the test with the reason rather than skipping it.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.contract_replica import PROGRESS, long_line, replica_command
from tests.fakes import SIGKILL_EXIT, SIGTERM_EXIT, FakeClock, FakeExecutor, FakeWorld
from vcli.errors import ExecutorError, InvalidValueError
from vcli.executors import Executor, ExecutorBase, Placement, ReplicaHandle, ReplicaLaunch, ReplicaStatus
from vcli.executors.kinds import ExecutorOptions, kind_of, kinds
from vcli.executors.supervisor import MAX_RECORD_BYTES, _Log
from vcli.logs import read_records
from vcli.metrics import MetricReader
from vcli.spec import ReplicaId

#: Every registered kind (tests.fakes, imported above, registers the fake).
KINDS = list(kinds())
BASE_IMAGE = "vcli-base:bookworm"


@dataclass
class Harness:
    """One executor under test and how to make launches for it and wait on its replicas."""

    kind: str
    executor: Executor
    home: Path
    python: str
    placement: Placement
    image: str | None = None
    #: Builds a second, independent executor of the same kind (another vcli process).
    another: Callable[[], Executor] = lambda: None  # type: ignore[assignment,return-value]
    clock: FakeClock | None = None
    #: Seconds since the epoch, as the executor's end times are (the fake world's own for the fake).
    wall: Callable[[], float] = time.time
    handles: list[ReplicaHandle] = field(default_factory=list)

    def launch(self, *actions: str, env: dict[str, str] | None = None, task: str = "workerpool0-0",
               command: tuple[str, ...] | None = None) -> ReplicaLaunch:
        job_id = uuid.uuid4().hex[:12]
        out = self.home / "jobs" / job_id / "replicas" / task
        out.mkdir(parents=True)
        metric = out / "hypertune" / "output.metrics"
        metric.parent.mkdir()
        pool, _, index = task.removeprefix("workerpool").partition("-")
        return ReplicaLaunch(
            job_id=job_id, trial_id=None, replica=ReplicaId(pool_index=int(pool), index=int(index)), placement=self.placement,
            image_uri=self.image, command=replica_command(self.python) if command is None else command,
            args=tuple(actions), env={"CLOUD_ML_HP_METRIC_FILE": str(metric), **(env or {})}, workdir=None,
            output_dir=str(out), log_path=str(out / "replica.log"), metric_file=str(metric),
        )

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        [ready] = self.executor.prepare([launch], cancelled=_never(), progress=lambda m: None)
        handle = self.executor.start(ready)
        self.handles.append(handle)
        return handle

    def run(self, *actions: str, **kw: Any) -> tuple[ReplicaHandle, ReplicaStatus, ReplicaLaunch]:
        launch = self.launch(*actions, **kw)
        handle = self.start(launch)
        return handle, self.wait(handle), launch

    def wait(self, handle: ReplicaHandle, timeout: float = 60) -> ReplicaStatus:
        deadline = time.monotonic() + timeout
        while True:
            status = self.executor.poll(handle)
            if not status.running:
                return status
            assert time.monotonic() < deadline, f"{self.kind}: replica still running after {timeout}s"
            self.sleep(0.05)

    def wait_for_log(self, launch: ReplicaLaunch, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(r.message == text for r in records(launch)):
            assert time.monotonic() < deadline, f"{self.kind}: no log line {text!r}: {records(launch)}"
            for h in self.handles:
                self.executor.poll(h)
            self.sleep(0.05)

    def sleep(self, seconds: float) -> None:
        (self.clock.sleep if self.clock is not None else time.sleep)(seconds)

    def now(self) -> float:
        return self.clock.now() if self.clock is not None else time.monotonic()


def _never() -> Any:
    import threading

    return threading.Event()


def records(launch: ReplicaLaunch) -> list[Any]:
    return read_records(launch.log_path, launch.task_name) if os.path.exists(launch.log_path) else []


def lines(launch: ReplicaLaunch, stream: str = "stdout") -> list[str]:
    return [r.message for r in records(launch) if r.stream == stream]


# --------------------------------------------------------------------------- executors


def _make(kind: str, tmp: Path, stack: Any, monkeypatch: pytest.MonkeyPatch) -> Harness:
    home = tmp / "home"
    home.mkdir()
    monkeypatch.setenv("VCLI_HOME", str(home))
    monkeypatch.setenv("VCLI_CONFIG_DIR", str(tmp / "config"))
    if kind == "fake":
        world = FakeWorld(FakeClock())
        return Harness(kind, FakeExecutor(world), home, "python3", Placement(), clock=world.clock,
                       another=lambda: FakeExecutor(world), wall=lambda: world.wall_offset + world.clock.now())
    by_kind = lambda **options: kind_of(kind).for_handles(ExecutorOptions(**options))
    if kind == "local":
        return Harness(kind, by_kind(), home, sys.executable, Placement(), another=by_kind)
    if kind == "docker":
        from tests.harness.docker_env import ensure_docker

        ensure_docker([BASE_IMAGE])
        return Harness(kind, by_kind(), home, "python3", Placement(runtime="docker"), image=BASE_IMAGE,
                       another=by_kind)
    if kind in ("ssh", "ssh-docker"):
        from tests.harness import loopback_sshd

        why = loopback_sshd.available()
        if why:
            pytest.fail(why)
        sshd = stack.enter_context(loopback_sshd.LoopbackSSHD(tmp / "sshd"))
        known = tmp / "known_hosts"
        known.write_text(sshd.known_hosts_line())
        monkeypatch.setenv("VCLI_SSH_USER_KNOWN_HOSTS", str(known))
        from vcli.placement.hosts import Host

        docker = kind == "ssh-docker"
        if docker:  # containers of the host's engine, reached over the SSH connection
            from tests.harness.docker_env import ensure_docker

            ensure_docker([BASE_IMAGE])
        from vcli.placement.gpus import local_leases

        host = Host(name="lo", address="127.0.0.1", port=sshd.port, user="root", identity_file=str(sshd.client_key),
                    workdir=str(tmp / "remote"), python=sys.executable, runtime="docker" if docker else "process",
                    gpu_lease_dir=local_leases().path)  # the host is this machine: one lease directory
        build = lambda: _ssh_executor(host)
        return Harness("ssh", build(), home, "python3" if docker else sys.executable,
                       Placement(host="lo", address="127.0.0.1", runtime=host.runtime), another=build,
                       image=BASE_IMAGE if docker else None)
    if kind == "ray":  # one single-node cluster for the module (`_ray_cluster`), actors on it
        from tests.harness.ray_cluster import AUTH_ENV
        from vcli.executors.ray import RayExecutor

        for name, value in AUTH_ENV.items():
            monkeypatch.setenv(name, value)
        address = os.environ["VCLI_TEST_RAY_ADDRESS"]
        ray = lambda: by_kind(stored={"address": address})
        assert isinstance(ray(), RayExecutor)
        return Harness(kind, ray(), home, sys.executable, Placement(), another=ray)
    if kind == "slurm":  # one single-node Slurm cluster for the module (`_slurm_cluster`)
        from vcli.executors.slurm import SlurmExecutor

        monkeypatch.setenv("SLURM_CONF", os.environ["VCLI_TEST_SLURM_CONF"])
        build = lambda: by_kind(stored={"sharedDir": str(home / "slurm")})
        assert isinstance(build(), SlurmExecutor)
        return Harness(kind, build(), home, sys.executable, Placement(), another=build)
    raise AssertionError(kind)


@pytest.fixture(scope="module")
def _slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """munged, slurmctld and one slurmd (8 CPUs) on loopback, started by the first slurm case."""
    from tests.harness.slurm_cluster import Node, SlurmCluster, available

    why = available()
    if why:
        pytest.fail(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), [Node("c1", cpus=8)]).start()
    try:
        yield str(cluster.conf)
    finally:
        cluster.stop()
        assert cluster.leftovers() == []


@pytest.fixture(scope="module")
def _ray_cluster() -> Iterator[str]:
    """A head-only Ray cluster on loopback, started by the first ray case of this module."""
    from tests.harness.ray_cluster import RayCluster

    cluster = RayCluster(workers=0).start()
    try:
        yield cluster.address
    finally:
        cluster.stop()


def _ssh_executor(host: Any) -> Executor:
    from vcli.control.wiring import ssh_executor

    return ssh_executor([host])


@pytest.fixture(params=KINDS)
def h(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    _ray_address(request, monkeypatch)
    yield from _harness(request.param, tmp_path, monkeypatch)


def _ray_address(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ray and slurm cases need the module's cluster (started only when such a case runs)."""
    if request.param == "ray":
        monkeypatch.setenv("VCLI_TEST_RAY_ADDRESS", request.getfixturevalue("_ray_cluster"))
    if request.param == "slurm":
        monkeypatch.setenv("VCLI_TEST_SLURM_CONF", request.getfixturevalue("_slurm_cluster"))


@pytest.fixture(params=[*KINDS, "ssh-docker"])
def hd(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    """`h`, and the ssh executor on a host whose runtime is docker: directories travel to and
    from containers on SSH hosts as to and from processes there."""
    _ray_address(request, monkeypatch)
    yield from _harness(request.param, tmp_path, monkeypatch)


def _harness(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    import contextlib

    with contextlib.ExitStack() as stack:
        harness = _make(kind, tmp_path, stack, monkeypatch)
        try:
            yield harness
        finally:
            live = [x for x in harness.handles if harness.executor.poll(x).running]
            if live:
                harness.executor.stop(live, grace_seconds=0.5)
            harness.executor.release(harness.handles)
            harness.executor.close()
        assert not live, f"{harness.kind}: a test left replicas running: {live}"


# --------------------------------------------------------------------------- the contract


def test_is_an_executor(h: Harness) -> None:
    assert isinstance(h.executor, Executor)
    assert isinstance(h.executor, ExecutorBase)
    assert h.executor.name == h.kind


def test_exit_zero_and_stdout_in_the_log_format(h: Harness) -> None:
    handle, status, launch = h.run("out:hello world", "out:tab\there")
    assert status == ReplicaStatus(running=False, exit_code=0, message=None) or (status.exit_code == 0 and not status.running)
    assert handle.task_name == "workerpool0-0"
    assert lines(launch)[-2:] == ["hello world", "tab    here"]
    for line in Path(launch.log_path).read_text().splitlines():  # `<unix time>\t<stream>\t<line>`
        ts, stream, _ = line.split("\t", 2)
        assert float(ts) > 1.5e9 and stream in ("stdout", "stderr", "vcli")


def test_a_long_line_is_logged_whole_in_bounded_records(h: Harness) -> None:
    # A 200 MB line without a newline once stalled its trainer for minutes (the supervisor
    # re-split the whole pending line on every chunk) and held it all in memory.
    n = 3 * MAX_RECORD_BYTES + 1000
    _, status, launch = h.run(f"long:{n}", "out:after")
    assert status.exit_code == 0
    out = lines(launch)
    assert out[-1] == "after"
    assert "".join(out[:-1]) == long_line(n)
    assert max(len(m) for m in out) <= MAX_RECORD_BYTES


def test_a_progress_bar_keeps_its_carriage_returns_in_one_record(h: Harness) -> None:
    # Readers split records at "\n" only: at "\r" too, they lost everything after it.
    _, status, launch = h.run("progress", "out:after")
    assert status.exit_code == 0
    assert lines(launch) == [PROGRESS, "after"]


def test_exit_code_and_stderr(h: Harness) -> None:
    _, status, launch = h.run("err:something broke", "exit:3")
    assert (status.running, status.exit_code) == (False, 3)
    assert "something broke" in lines(launch, "stderr")


def test_poll_is_idempotent_after_exit(h: Harness) -> None:
    handle, status, _ = h.run("exit:5")
    for _ in range(3):
        assert h.executor.poll(handle).exit_code == status.exit_code == 5


def test_an_ended_replica_says_when_it_ended_not_when_it_was_polled(h: Harness) -> None:
    # A replica that ended while no controller watched (one killed, `resume` later) was
    # recorded as ending when it was next polled.
    launch = h.launch("out:done", "exit:4")
    handle = h.start(launch)
    h.wait_for_log(launch, "done")
    seen = h.wall()
    h.sleep(4)  # nobody polls meanwhile
    status = h.wait(handle)
    assert (status.exit_code, status.running) == (4, False) and status.end_time is not None, status
    assert seen - 60 < status.end_time < seen + 2, (h.kind, status.end_time - seen)


def test_environment_is_delivered(h: Harness) -> None:
    _, status, launch = h.run("env:VCLI_CONTRACT", "env:CLOUD_ML_TRIAL_ID", env={"VCLI_CONTRACT": "a b;$(x)"})
    assert status.exit_code == 0
    assert lines(launch) == ["VCLI_CONTRACT=a b;$(x)", "CLOUD_ML_TRIAL_ID unset"]


def test_a_short_secret_is_masked_only_where_it_stands_alone(h: Harness) -> None:
    """A token `2345` turned `score=0.12345` into `score=0.1<redacted>`: the metric lost, the
    trial INFEASIBLE, the study FAILED. Secrets under 8 characters are masked as words or
    numbers of their own; longer ones everywhere."""
    launch = h.launch("out:score=0.12345 step=2345", "out:pin 2345.", "out:test_accuracy=0.9 (test)",
                      "out:x-k3y-s3cr3t-long-y", env={"API_TOKEN": "2345", "DB_PASSWORD": "test",
                                                     "VCLI_SECRET_KEY": "k3y-s3cr3t-long"})
    launch = replace(launch, secret_env=("API_TOKEN", "DB_PASSWORD", "VCLI_SECRET_KEY"))
    handle = h.start(launch)
    assert h.wait(handle).exit_code == 0
    assert lines(launch) == ["score=0.12345 step=<redacted>", "pin <redacted>.", "test_accuracy=0.9 (<redacted>)",
                             "x-<redacted>-y"]


def test_secrets_are_delivered_and_masked_in_the_log(h: Harness) -> None:
    launch = h.launch("envlen:API_TOKEN", "env:API_TOKEN", "out:token s3cret value!", "err:s3cret value",
                      env={"API_TOKEN": "s3cret value"})
    launch = replace(launch, secret_env=("API_TOKEN",))
    handle = h.start(launch)
    assert h.wait(handle).exit_code == 0
    assert lines(launch) == ["API_TOKEN has 12 characters", "API_TOKEN=<redacted>", "token <redacted>!"]
    assert lines(launch, "stderr") == ["<redacted>"]
    assert "s3cret" not in Path(launch.log_path).read_text()


def test_metric_file_is_read_back(h: Harness) -> None:
    handle, status, launch = h.run("metric:accuracy=0.5@1", "metric:accuracy=0.75@2")
    assert status.exit_code == 0
    reader = MetricReader("accuracy")
    assert reader.feed_hypertune(h.executor.read_file(handle, launch.metric_file))
    assert [(m.step_count, m.metrics["accuracy"]) for m in reader.measurements] == [(1, 0.5), (2, 0.75)]
    assert h.executor.read_file(handle, launch.metric_file + ".absent") is None


def test_a_replica_file_that_is_no_regular_file_reads_as_nothing_at_once(h: Harness) -> None:
    # A trainer that made its metric file a FIFO hung the study's controller for good; a link
    # to /dev/zero took all its memory; a link loop ended it with a traceback.
    m = "$CLOUD_ML_HP_METRIC_FILE"
    launch = h.launch(f"fifo:{m}.fifo", f"link:{m}.zero=/dev/zero", f"link:{m}.loop={m}.loop", "out:made", "sleep:60")
    handle = h.start(launch)
    h.wait_for_log(launch, "made")
    for suffix in (".fifo", ".zero", ".loop", ".absent"):
        started = time.monotonic()
        assert h.executor.read_file(handle, launch.metric_file + suffix) is None, suffix
        assert time.monotonic() - started < 20, suffix
    h.executor.stop([handle], grace_seconds=0.5)
    assert not h.wait(handle).running


def test_metric_file_is_readable_while_running(h: Harness) -> None:
    launch = h.launch("metric:loss=1.5@7", "out:reported", "sleep:60")
    handle = h.start(launch)
    h.wait_for_log(launch, "reported")
    reader = MetricReader("loss")
    assert reader.feed_hypertune(h.executor.read_file(handle, launch.metric_file))
    assert reader.measurements[0].metrics["loss"] == 1.5
    h.executor.stop([handle], grace_seconds=2)


def test_reserved_ports_are_distinct_and_free_on_the_host(h: Harness) -> None:
    ports = {h.executor.reserve_port(h.placement) for _ in range(4)}
    assert len(ports) == 4 and all(1024 <= p <= 65535 for p in ports)
    port = min(ports)
    _, status, launch = h.run(f"bind:{port}")
    assert status.exit_code == 0
    assert lines(launch) == [f"bound {port}"]


def test_stop_a_polite_replica(h: Harness) -> None:
    launch = h.launch("out:up", "sleep:300")
    handle = h.start(launch)
    h.wait_for_log(launch, "up")
    started = h.now()
    h.executor.stop([handle], grace_seconds=10)
    took = h.now() - started
    status = h.executor.poll(handle)
    assert not status.running
    assert status.exit_code == SIGTERM_EXIT, status
    assert took < 10, f"a replica that honours SIGTERM waited the whole grace period ({took:.1f}s)"


def test_stop_a_replica_that_ignores_sigterm(h: Harness) -> None:
    launch = h.launch("ignore-term", "sleep:300")
    handle = h.start(launch)
    h.wait_for_log(launch, "ignoring SIGTERM")
    started = h.now()
    h.executor.stop([handle], grace_seconds=1.5)
    took = h.now() - started
    status = h.executor.poll(handle)
    assert not status.running
    assert status.exit_code == SIGKILL_EXIT, status
    assert 1.4 <= took < 20, f"the grace period was not honoured ({took:.1f}s)"


def test_stop_from_another_executor_instance(h: Harness) -> None:
    """What `cancel` in another terminal does: a new executor, a stored handle."""
    launch = h.launch("out:up", "sleep:300")
    handle = h.start(launch)
    h.wait_for_log(launch, "up")
    other = h.another()
    stored = ReplicaHandle.from_json(handle.to_json())
    assert other.poll(stored).running
    other.stop([stored], grace_seconds=5)
    assert not other.poll(stored).running
    other.release([stored])
    other.close()
    assert not h.executor.poll(handle).running


#: Executors that can find a replica whose handle was never recorded (the others say None).
FINDERS = {"local", "docker", "slurm", "ssh", "ssh-docker", "ray"}


def test_find_a_replica_whose_handle_was_never_recorded(hd: Harness) -> None:
    """What `resume` does after a controller died between `start` and recording the handle:
    another executor finds the running replica (and, once it ended, its exit), and only its.
    (The ssh executor found none, and `resume` started a second chief beside the first.)"""
    h = hd
    launch = h.launch("out:up", "sleep:300")
    handle = h.start(launch)
    h.wait_for_log(launch, "up")
    other = h.another()
    never = h.launch("exit:0")
    assert other.find(never) is None
    found = other.find(launch)
    if h.kind not in FINDERS:
        assert found is None or other.poll(found).running
        other.close()
        h.executor.stop([handle], grace_seconds=5)
        return
    assert found is not None and found.task_name == launch.task_name
    assert ReplicaHandle.from_json(found.to_json()) == found
    assert other.poll(found).running
    other.stop([found], grace_seconds=5)
    ended = other.find(launch)
    assert ended is not None and not other.poll(ended).running
    other.release([found])
    other.close()
    assert not h.executor.poll(handle).running


def test_stop_and_release_are_idempotent(h: Harness) -> None:
    handle, status, _ = h.run("exit:0")
    h.executor.stop([handle], grace_seconds=1)
    h.executor.stop([handle], grace_seconds=1)
    h.executor.release([handle])
    h.executor.release([handle])
    assert not h.executor.poll(handle).running


def test_handles_round_trip_through_json(h: Harness) -> None:
    handle, _, _ = h.run("exit:0")
    assert ReplicaHandle.from_json(handle.to_json()) == handle
    assert handle.executor == h.kind


def test_check_and_command_for(h: Harness) -> None:
    launch = h.launch("out:x")
    h.executor.check([launch])
    argv = h.executor.command_for(launch)
    assert argv[-1] == "out:x" and argv[1] == "-c"


def test_a_runnable_launch_is_ready(h: Harness) -> None:
    h.executor.ready([h.launch("out:x")])


def test_check_refuses_a_replica_with_nothing_to_run(h: Harness) -> None:
    launch = h.launch(command=())
    if h.image is not None:
        h.executor.check([launch])  # a container runs its image's own entrypoint
        assert h.executor.command_for(launch) == []
    else:
        with pytest.raises(InvalidValueError, match="no command"):
            h.executor.check([launch])


def test_a_command_that_does_not_exist(h: Harness) -> None:
    launch = h.launch(command=("/nonexistent/vcli-contract-binary",))
    try:
        handle = h.start(launch)
    except ExecutorError as e:
        assert "nonexistent" in str(e) or "vcli-contract" in str(e) or h.kind == "fake"
        return
    status = h.wait(handle)
    assert status.exit_code not in (0, None), status


def test_many_replicas_at_once(h: Harness) -> None:
    launches = [h.launch(f"out:replica {i}", f"exit:{i}", task=f"workerpool1-{i}") for i in range(4)]
    handles = [h.start(l) for l in launches]
    statuses = [h.wait(x) for x in handles]
    assert [s.exit_code for s in statuses] == [0, 1, 2, 3]
    assert [lines(l) for l in launches] == [[f"replica {i}"] for i in range(4)]


# --------------------------------------------------------------------------- whole trees


def tree_processes(token: str) -> list[int]:
    """Processes on this machine (containers and the loopback SSH host included) with `token`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if token.encode() in argv and state not in (b"Z", b"X"):
            out.append(int(entry))
    return out


def test_the_whole_tree_goes_when_the_replica_succeeds(h: Harness) -> None:
    token = f"vcli-tree-{uuid.uuid4().hex[:8]}"
    launch = h.launch(f"tree:{token}", "exit:0")
    handle = h.start(launch)
    h.wait_for_log(launch, "tree started")
    started = time.monotonic()
    status = h.wait(handle)
    ended_after = time.monotonic() - started
    assert status.exit_code == 0
    # Helpers still hold the trainer's stdout: the replica has ended all the same.
    assert ended_after < 2.0, f"the end was seen {ended_after:.1f}s after the trainer exited"
    h.executor.release([handle])
    assert tree_processes(token) == []


def test_the_whole_tree_goes_when_the_replica_is_stopped(h: Harness) -> None:
    token = f"vcli-tree-{uuid.uuid4().hex[:8]}"
    launch = h.launch(f"tree:{token}", "sleep:300")
    handle = h.start(launch)
    h.wait_for_log(launch, "tree started")
    if h.kind != "fake":  # the grandchildren start a moment after "tree started"
        deadline = time.monotonic() + 10
        while len(tree_processes(token)) < 5:
            assert time.monotonic() < deadline, tree_processes(token)
            time.sleep(0.05)
    h.executor.stop([handle], grace_seconds=2)
    h.executor.release([handle])
    assert tree_processes(token) == []


def test_the_whole_tree_goes_when_another_instance_stops_it(h: Harness) -> None:
    token = f"vcli-tree-{uuid.uuid4().hex[:8]}"
    launch = h.launch(f"tree:{token}", "sleep:300")
    handle = h.start(launch)
    h.wait_for_log(launch, "tree started")
    other = h.another()
    stored = ReplicaHandle.from_json(handle.to_json())
    other.stop([stored], grace_seconds=2)
    other.release([stored])
    other.close()
    assert tree_processes(token) == []
    # The instance that started it learns the replica ended (its channel's exit status comes
    # asynchronously, so this waits a little rather than polling once).
    assert h.wait(handle, timeout=15).running is False


# --------------------------------------------------------------------------- directories in and out


def _checkpoint_env(h: Harness) -> dict[str, str]:
    """An AIP_CHECKPOINT_DIR of its own under vcli's home (an SSH host maps it to its workdir)."""
    return {"AIP_CHECKPOINT_DIR": f"{h.home}/output/{uuid.uuid4().hex[:8]}/checkpoints/"}


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_seed_dirs_are_in_place_before_the_replica_runs(hd: Harness, tmp_path: Path) -> None:
    """What a PBT trial resumes from: a copy of a better trial's checkpoint, placed before the
    trainer starts; a second seed replaces the first (nothing of it is left)."""
    env = _checkpoint_env(hd)
    first, second = tmp_path / "seed1", tmp_path / "seed2"
    (first / "sub").mkdir(parents=True)
    (first / "weights.txt").write_text("step 7")
    (first / "sub" / "optimizer.txt").write_text("adam")
    second.mkdir()
    (second / "weights.txt").write_text("step 9")
    reads = ("cat:$AIP_CHECKPOINT_DIR/weights.txt", "cat:$AIP_CHECKPOINT_DIR/sub/optimizer.txt")
    for seed, expected in ((first, ["step 7", "adam"]),
                           (second, ["step 9", "$AIP_CHECKPOINT_DIR/sub/optimizer.txt missing"])):
        launch = replace(hd.launch(*reads, env=env), seed_dirs=((str(seed), env["AIP_CHECKPOINT_DIR"]),))
        handle = hd.start(launch)
        assert hd.wait(handle).exit_code == 0
        assert lines(launch) == expected
    assert _tree(first) == {"weights.txt": "step 7", "sub/optimizer.txt": "adam"}  # the source stays as it was


CHECKPOINT = {"weights.txt": "w=1.5", "optimizer.txt": "adam", "meta/step.txt": "12"}


def _write_checkpoint(prefix: str = "$AIP_CHECKPOINT_DIR") -> tuple[str, ...]:
    return tuple(f"write:{prefix}/{rel}={text}" for rel, text in CHECKPOINT.items())


def test_fetch_dir_copies_what_the_replica_wrote_while_it_runs(hd: Harness, tmp_path: Path) -> None:
    env = _checkpoint_env(hd)
    launch = hd.launch(*_write_checkpoint(), "out:saved", "sleep:60", env=env)
    handle = hd.start(launch)
    hd.wait_for_log(launch, "saved")
    dest = tmp_path / "fetched" / "ckpt"
    assert hd.executor.fetch_dir(handle, env["AIP_CHECKPOINT_DIR"], str(dest))
    assert _tree(dest) == CHECKPOINT
    assert sorted(os.listdir(dest.parent)) == ["ckpt"]  # no temporary copy left beside it
    assert hd.executor.poll(handle).running
    hd.executor.stop([handle], grace_seconds=2)
    hd.wait(handle)  # a container's log may still be draining


def test_fetch_dir_after_exit_after_release_and_from_another_instance(hd: Harness, tmp_path: Path) -> None:
    env = _checkpoint_env(hd)
    handle, status, _ = hd.run(*_write_checkpoint(), env=env)
    assert status.exit_code == 0
    assert hd.executor.fetch_dir(handle, env["AIP_CHECKPOINT_DIR"], str(tmp_path / "after-exit"))
    assert _tree(tmp_path / "after-exit") == CHECKPOINT
    hd.executor.release([handle])  # trial outputs are not replica scratch: they stay
    assert hd.executor.fetch_dir(handle, env["AIP_CHECKPOINT_DIR"], str(tmp_path / "after-release"))
    assert _tree(tmp_path / "after-release") == CHECKPOINT
    other = hd.another()
    try:
        stored = ReplicaHandle.from_json(handle.to_json())
        assert other.fetch_dir(stored, env["AIP_CHECKPOINT_DIR"].rstrip("/"), str(tmp_path / "other"))
        assert _tree(tmp_path / "other") == CHECKPOINT
    finally:
        other.close()


def test_fetch_dir_of_a_missing_or_empty_dir_is_false_and_creates_nothing(hd: Harness, tmp_path: Path) -> None:
    """A trainer that never checkpointed: the exploit is skipped, nothing half-made is left."""
    env = _checkpoint_env(hd)
    handle, status, _ = hd.run("mkdir:$AIP_CHECKPOINT_DIR/empty/nested", env=env)
    assert status.exit_code == 0
    ckpt = env["AIP_CHECKPOINT_DIR"]
    for path in (f"{ckpt}empty", f"{ckpt}absent", f"{hd.home}/output/never-made"):
        assert hd.executor.fetch_dir(handle, path, str(tmp_path / "fetched" / "ckpt")) is False, path
    assert not (tmp_path / "fetched").exists()


def test_a_fetched_dir_is_whole_while_the_replica_keeps_rewriting_it(hd: Harness, tmp_path: Path) -> None:
    """A copy taken while the trainer rewrites its checkpoint in place holds every file, each as
    one whole write (never a truncated or half-written file): a copy that saw a file change is
    thrown away and taken again."""
    env = _checkpoint_env(hd)
    saves = []
    for n in range(1, 41):
        saves += [f"write:$AIP_CHECKPOINT_DIR/{name}={n:03d}" + "x" * 1000 for name in ("a.bin", "b.bin", "c/d.bin")]
        saves += ["out:saved" if n == 1 else "sleep:0.02"]
    launch = hd.launch(*saves, "sleep:60", env=env)
    handle = hd.start(launch)
    hd.wait_for_log(launch, "saved")
    copies = 0
    for i in range(6):
        dest = tmp_path / f"copy{i}"
        if hd.executor.fetch_dir(handle, env["AIP_CHECKPOINT_DIR"], str(dest)):
            copies += 1
            tree = _tree(dest)
            assert sorted(tree) == ["a.bin", "b.bin", "c/d.bin"], sorted(tree)
            assert all(len(text) == 1003 and text[3:] == "x" * 1000 for text in tree.values()), \
                {k: (len(v), v[:3]) for k, v in tree.items()}
        else:  # it never held still for a whole copy: then nothing is there
            assert not dest.exists()
        hd.sleep(0.05)
    assert copies, "no copy was ever taken"
    hd.executor.stop([handle], grace_seconds=2)
    hd.wait(handle)  # a container's log may still be draining


def _records_of(tmp_path: Path, chunks: list[bytes], secrets: tuple[str, ...] = ()) -> list[str]:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "replica.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log = _Log(fd, "stdout", secrets)
    for chunk in chunks:
        log.feed(chunk)
    log.flush()
    os.close(fd)
    return [r.message for r in read_records(str(path), "workerpool0-0")]


def test_the_supervisor_cuts_a_long_line_between_characters_and_outside_secrets(tmp_path: Path) -> None:
    text = "\u00e9" * MAX_RECORD_BYTES  # two bytes each: a cut at MAX_RECORD_BYTES + 1 bytes would split one
    out = _records_of(tmp_path, [text[:5].encode(), text[5:].encode() + b"\n"])
    assert "".join(out) == text and "\ufffd" not in "".join(out)
    assert all(len(m.encode()) <= MAX_RECORD_BYTES for m in out)
    secret = "k3y-" + "s" * 40
    line = "x" * (MAX_RECORD_BYTES - 10) + secret + "y" * 100  # the secret spans the first cut
    out = _records_of(tmp_path / "s", [line.encode()[i:i + 1000] for i in range(0, len(line), 1000)], (secret,))
    assert secret not in "".join(out) and "".join(out) == "x" * (MAX_RECORD_BYTES - 10) + "<redacted>" + "y" * 100


def test_the_supervisor_logs_a_200_mb_line_in_linear_time(tmp_path: Path) -> None:
    # Quadratic before: 30 MB as one line took 9.8 s against 0.5 s as 30 lines.
    chunk = b"x" * 65536
    path = tmp_path / "replica.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log = _Log(fd, "stdout")
    start = time.process_time()
    for _ in range(200 * 16):
        log.feed(chunk)
    log.flush()
    os.close(fd)
    assert time.process_time() - start < 20  # about 1 s here; the old code needed minutes
    assert len(log.buf) == 0 and path.stat().st_size > 200 * 1024 * 1024


def test_the_shipped_hold_program_tries_and_waits_as_the_local_copy_does() -> None:
    """`HOLD_PROGRAM` runs on hosts without vcli, so it spells out `_wait_after`'s formula and
    `_TRIES`: both copies must give the same tries and waits."""
    import re

    from vcli.executors import freeze

    found = re.search(r"time\.sleep\((.*)\)  # = _wait_after\(attempt\)", freeze.HOLD_PROGRAM)
    assert found, "HOLD_PROGRAM no longer says where it waits"
    shipped = [eval(found.group(1), {}, {"attempt": a}) for a in range(freeze._TRIES)]  # our own text
    assert shipped == [freeze._wait_after(a) for a in range(freeze._TRIES)]
    assert f"for attempt in range({freeze._TRIES}):" in freeze.HOLD_PROGRAM


#: Executors that hold a replica still while a directory of it is copied (`vcli.executors.freeze`).
FREEZING = ["local", "docker", "ssh", "ssh-docker", "ray", "slurm"]


@pytest.fixture(params=FREEZING)
def hf(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    _ray_address(request, monkeypatch)
    yield from _harness(request.param, tmp_path, monkeypatch)


#: Executors whose hold lives in (or with) the controller's process, so that a controller
#: killed mid-copy must end it (Ray's runs inside the replica's actor, beside the replica).
HOLDERS = ["local", "docker", "ssh", "ssh-docker", "slurm"]


@pytest.fixture(params=HOLDERS)
def hk(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    _ray_address(request, monkeypatch)
    yield from _harness(request.param, tmp_path, monkeypatch)


def test_a_replica_that_checkpoints_every_20_ms_is_held_still_for_a_consistent_copy(hf: Harness, tmp_path: Path) -> None:
    """A trainer that rewrites its whole checkpoint every 20 ms never holds still on its own
    (the copy used to give up: "no checkpoint"): the executor stops it between two writes for
    the copy, so every copy succeeds, every file in it is whole, and the trainer goes on
    afterwards."""
    env = _checkpoint_env(hf)
    launch = hf.launch("churn:$AIP_CHECKPOINT_DIR", env=env)
    handle = hf.start(launch)
    hf.wait_for_log(launch, "churning")
    ckpt = env["AIP_CHECKPOINT_DIR"]
    hf.sleep(0.3)
    steps = []
    for i in range(3):
        dest = tmp_path / f"copy{i}"
        assert hf.executor.fetch_dir(handle, ckpt, str(dest)), f"copy {i} was not taken"
        tree = _tree(dest)
        assert sorted(tree) == ["a.bin", "b.bin", "step"], sorted(tree)
        assert all(len(tree[name]) == 4008 and tree[name][:8].isdigit() for name in ("a.bin", "b.bin")), \
            {k: (len(v), v[:8]) for k, v in tree.items()}
        assert len(tree["step"]) == 8 and tree["step"].isdigit(), tree["step"]
        steps.append(int(tree["step"]))
        hf.sleep(0.2)
    assert steps == sorted(steps) and steps[-1] > steps[0], f"the trainer did not go on between copies: {steps}"
    assert hf.executor.poll(handle).running
    hf.executor.stop([handle], grace_seconds=2)
    hf.wait(handle)


#: A controller holding a replica still, as `fetch_dir` does, until it is killed: per kind.
#: With `twice`, it holds the replica once and lets go first (the block ends as a copy's does),
#: then at once holds it again.
_HOLDER = """
import json, os, sys, time
kind, twice, args = sys.argv[1], sys.argv[2] == "twice", sys.argv[3:]
if kind in ("ssh", "ssh-docker"):
    from vcli.control.wiring import ssh_executor
    from vcli.executors.ssh.hold import held
    from vcli.placement.hosts import Host
    host = Host(**json.loads(args[0]))
    link = ssh_executor([host])._link(host.name)
    hold = lambda: held(link, args[1], args[2], container=args[3] if args[3:] else None)
elif kind == "slurm":
    from vcli.executors.slurm.hold import held
    target, node, tag, directory = json.loads(args[0])
    hold = lambda: held(target, node, tag, directory)
elif kind == "local":
    from vcli.executors.freeze import frozen
    from vcli.executors.local import tagged_processes
    hold = lambda: frozen([p for p in tagged_processes(args[0], exclude=os.getpid()) if p != int(args[1])])
else:
    import docker
    from vcli.executors.freeze import paused
    hold = lambda: paused(docker.APIClient(base_url=args[1]), args[1], args[0])
if twice:
    with hold() as got:
        if not (got if isinstance(got, bool) else got[0]()):
            print("running", flush=True)
            sys.exit()
with hold() as got:
    ok = got if isinstance(got, bool) else got[0]()
    print("held" if ok else "running", flush=True)
    time.sleep(120)
"""


def _holder_args(h: Harness, handle: ReplicaHandle, launch: ReplicaLaunch, directory: str) -> list[str]:
    import dataclasses
    import json

    if h.kind in ("ssh", "ssh-docker"):
        from vcli.executors.ssh.remote import map_path, parse_ref, replica_tag

        token, job_id, root = parse_ref(handle.ref)
        host = h.executor._host("lo")  # type: ignore[attr-defined]
        remote = map_path(os.path.abspath(directory), h.executor._home, root)  # type: ignore[attr-defined]
        container = [token[len("docker:"):]] if token.startswith("docker:") else []
        return [json.dumps(dataclasses.asdict(host)), replica_tag(job_id, launch.task_name), remote, *container]
    if h.kind == "local":
        return [f"{launch.job_id}/{launch.task_name}", handle.ref.split("@", 1)[0]]
    if h.kind == "slurm":
        group = handle.details.get("hetGroup")
        target = [f"--jobid={handle.details['slurmJob']}", *([f"--het-group={group}"] if group else [])]
        return [json.dumps([target, handle.details["node"], f"{launch.job_id}/{launch.task_name}", directory])]
    from vcli.executors.docker.engine import engine_url

    return [handle.ref, engine_url(None)]


def _churner_held(hf: Harness, mode: str):
    """A replica rewriting its checkpoint every 20 ms, and `_HOLDER` (`mode`: once, twice)
    holding it: (handle, a reader of its step file, the holder), once the holder said held."""
    import subprocess

    env = _checkpoint_env(hf)
    launch = hf.launch("churn:$AIP_CHECKPOINT_DIR", env=env)
    handle = hf.start(launch)
    hf.wait_for_log(launch, "churning")
    step = lambda: hf.executor.read_file(handle, env["AIP_CHECKPOINT_DIR"] + "step")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, hf.kind, mode,
                               *_holder_args(hf, handle, launch, env["AIP_CHECKPOINT_DIR"])], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return handle, step, holder


def _goes_on(hf: Harness, handle: ReplicaHandle, step: Callable[[], str | None], first: str | None) -> None:
    """The replica writes a new step within 5 s, and is then stopped."""
    deadline = time.monotonic() + 5
    while step() == first:
        assert time.monotonic() < deadline, "the replica stayed stopped after its holder died"
        time.sleep(0.05)
    assert hf.executor.poll(handle).running
    hf.executor.stop([handle], grace_seconds=2)
    hf.wait(handle)


def test_a_controller_killed_while_it_holds_a_replica_still_leaves_it_running(hk: Harness) -> None:
    """The hold ends with the controller: one killed (-9) in the middle of a copy never leaves
    the donor stopped (local: the watchdog's pipe; docker: the watchdog unpauses; an SSH host,
    processes or containers: the hold's channel closes; Slurm: srun forwards the end of its
    stdin to the hold's step on the node)."""
    handle, step, holder = _churner_held(hk, "once")
    try:
        first = step()
        time.sleep(0.4)
        assert step() == first, "the replica was not held still"
        holder.kill()
        holder.wait(timeout=10)
        _goes_on(hk, handle, step, first)
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_a_hold_that_ended_does_not_let_go_of_the_next_one(hk: Harness) -> None:
    """A hold's end is complete when its block returns: the replica is continued by then, and
    nothing of that hold acts later. CI, loaded, saw the copies of one PBT exploit fail: the
    first copy's watchdog unpaused the container after the second copy had paused it, so the
    second copied a live checkpoint and gave up. Here a holder lets go and at once holds
    again: the replica must stay still."""
    handle, step, holder = _churner_held(hk, "twice")
    try:
        first = step()
        for _ in range(10):
            time.sleep(0.1)
            assert step() == first, "the first hold's end let go of the second hold"
    finally:
        holder.kill()
        holder.wait(timeout=10)
    _goes_on(hk, handle, step, first)


# --------------------------------------------------------------------------- host-wide GPU leases

#: Executors whose replicas run on hosts vcli's placement leases GPUs on (`vcli.placement.gpulease`): the
#: replica's lease must live exactly as long as the replica. The ssh cases' host is this machine
#: over loopback sshd, its lease directory the test's own, so the test sees its leases here;
#: "ssh-docker" is a host whose runtime is docker (the container's keeper runs on the host).
LEASING = ["local", "docker", "ssh", "ssh-docker"]


@pytest.fixture(params=LEASING)
def hl(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    yield from _harness(request.param, tmp_path, monkeypatch)


def _start_on_gpu(h: Harness, launch: ReplicaLaunch, index: int) -> ReplicaHandle:
    """Start `launch` as a replica placed on GPU `index`, its lease taken first (as the placer
    does). Containers: the engine here has no GPU runtime, so the container runs without a
    device request and the executor's lease keeper is given the GPU placement of the same
    container (on an SSH host: the keeper there, started over SSH)."""
    from vcli.placement.gpulease import base_record
    from vcli.placement.gpus import local_leases

    leases = h.executor.gpu_leases("lo") if h.kind == "ssh" else local_leases()  # type: ignore[attr-defined]
    leases.acquire([index], base_record(job=launch.job_id, replica=launch.task_name))
    gpu = replace(launch, placement=replace(launch.placement, gpu_indices=(index,)))
    if h.image is None:
        return h.start(gpu)
    handle = h.start(launch)
    if h.kind == "docker":
        h.executor._keep_leases(gpu, handle.ref)  # type: ignore[attr-defined]
    else:
        docker_on_hosts = h.executor._docker  # type: ignore[attr-defined]
        docker_on_hosts.keep_leases(gpu, docker_on_hosts.inner(handle).ref)
    return handle


def _holder(index: int) -> dict[str, Any] | None:
    from vcli.placement.gpulease import LeaseDir
    from vcli.placement.gpus import local_leases

    return LeaseDir(local_leases().path).probe([index])[index]  # as another process sees it


def test_a_replica_holds_its_gpu_lease_exactly_while_it_runs(hl: Harness) -> None:
    from vcli.placement.gpulease import LeaseBusy, LeaseDir
    from vcli.placement.gpus import local_leases

    launch = hl.launch("sleep:1.5", "out:done")
    handle = _start_on_gpu(hl, launch, 1)
    placer_side = hl.executor.gpu_leases("lo") if hl.kind == "ssh" else local_leases()  # type: ignore[attr-defined]
    assert placer_side.held_here(1) is None  # handed to the replica's holder process
    rec = _holder(1)
    assert rec is not None and rec["job"] == launch.job_id and rec["replica"] == "workerpool0-0"
    with pytest.raises(LeaseBusy):
        LeaseDir(local_leases().path).acquire([1], {"job": "another"})
    assert hl.wait(handle).exit_code == 0
    _wait_until(lambda: _holder(1) is None, 5, "the lease to end with the replica")


def test_a_stopped_replica_frees_its_gpu_lease(hl: Harness) -> None:
    handle = _start_on_gpu(hl, hl.launch("sleep:60"), 0)
    assert _holder(0) is not None
    hl.executor.stop([handle], grace_seconds=0.5)
    hl.executor.release([handle])
    _wait_until(lambda: _holder(0) is None, 5, "the lease to end with the stopped replica")


def test_kill_9_of_the_lease_holder_frees_the_gpu_within_a_second(hl: Harness) -> None:
    import signal

    handle = _start_on_gpu(hl, hl.launch("sleep:60"), 0)
    rec = _holder(0)
    assert rec is not None
    os.kill(int(rec["pid"]), signal.SIGKILL)
    t0 = time.monotonic()
    _wait_until(lambda: _holder(0) is None, 1.0, "the lease to be free after kill -9 of its holder")
    assert time.monotonic() - t0 < 1.0
    hl.executor.stop([handle], grace_seconds=0.5)
    hl.wait(handle)  # a container's log may still be draining


def test_the_gpu_lease_outlives_the_controller_while_the_replica_runs(hl: Harness) -> None:
    """The executor that started the replica closes (its controller is gone; for SSH hosts its
    lease server ends with it): the replica keeps its lease; another executor stops it and the
    lease ends with it."""
    launch = hl.launch("out:up", "sleep:300")
    handle = _start_on_gpu(hl, launch, 1)
    hl.wait_for_log(launch, "up")
    hl.executor.close()
    time.sleep(0.5)
    rec = _holder(1)
    assert rec is not None and rec["job"] == launch.job_id, rec
    other = hl.another()
    stored = ReplicaHandle.from_json(handle.to_json())
    try:
        assert other.poll(stored).running
        other.stop([stored], grace_seconds=1)
        other.release([stored])
    finally:
        other.close()
    _wait_until(lambda: _holder(1) is None, 10, "the lease to end with the stopped replica")
    hl.handles.remove(handle)


def test_a_replica_never_starts_on_a_gpu_another_replica_leases(hl: Harness) -> None:
    from vcli.placement.gpulease import LeaseDir
    from vcli.placement.gpus import local_leases

    other = LeaseDir(local_leases().path)
    other.acquire([0], {"job": "someone-else", "user": "bob"})
    try:
        launch = hl.launch("out:never")
        gpu = replace(launch, placement=replace(launch.placement, gpu_indices=(0,)))
        with pytest.raises(ExecutorError, match="held by job someone-else started by bob"):
            hl.start(gpu)  # docker: asked before the container runs, which is removed again
        if hl.image is not None:
            import docker

            from tests.harness.docker_env import job_containers

            assert job_containers(docker.from_env(), launch.job_id) == []
    finally:
        other.release([0])


def _wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_a_big_replica_file_reads_as_its_last_lines(tmp_path: Path) -> None:
    # The whole file was read at every poll (ten times a second), however big it grew.
    from vcli.executors import read_replica_file

    path = tmp_path / "output.metrics"
    lines = [f'{{"score": "{i}", "global_step": "{i}"}}' for i in range(60_000)]
    path.write_text("\n".join(lines) + "\n")
    text = read_replica_file(str(path), limit=4096)
    assert text is not None and len(text) <= 4096 and text.endswith(lines[-1] + "\n")
    assert text.splitlines()[0] in lines  # starts at a whole line
    assert read_replica_file(str(path), limit=path.stat().st_size) == path.read_text()  # within the limit: whole


def test_an_unchanged_replica_file_is_not_read_again(tmp_path: Path) -> None:
    """A study polls each running trial's metric file ten times a second: a file whose inode,
    size and modification time did not change gives the last read's text (the same object, so
    the metric reader's comparison is free) without opening it; a grown or rewritten one is read."""
    from vcli.executors import read_replica_file

    path = tmp_path / "output.metrics"
    path.write_text('{"score": "1"}\n')
    first = read_replica_file(str(path))
    again = read_replica_file(str(path))
    assert again is first
    with open(path, "a") as f:
        f.write('{"score": "2"}\n')
    grown = read_replica_file(str(path))
    assert grown == '{"score": "1"}\n{"score": "2"}\n' and grown is not first
    replacement = tmp_path / "new"
    replacement.write_text('{"score": "3"}\n')
    os.replace(replacement, path)  # the hypertune library rewrites its file whole
    assert read_replica_file(str(path)) == '{"score": "3"}\n'
    path.unlink()
    assert read_replica_file(str(path)) is None


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_the_hosts_idle_policy_stops_a_process_replica_whose_gpu_stays_idle(kind: str, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's lease policy says: a replica whose GPUs stay below 5 % for 1 s is stopped.
    Its nvidia-smi (a stand-in on the replica's PATH) says 0 %: the replica, here or on an SSH
    host (where the shipped `gpuinfo.py` watches), ends with status 1 within seconds and its
    log says why."""
    from vcli.placement import leasepolicy
    from vcli.placement.gpus import local_leases

    smi = tmp_path / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\ncase \"$1\" in\n  --query-gpu=index,utilization.gpu) printf '0, 0\\n1, 0\\n' ;;\n"
                   "  *) exit 2 ;;\nesac\n")
    smi.chmod(0o755)
    policy = Path(local_leases().path) / "policy.yaml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text("idle: {below_percent: 5, window: 1s, action: stop}\n")
    policy.chmod(0o644)
    harness = _harness(kind, tmp_path, monkeypatch)
    h = next(harness)
    try:
        launch = h.launch("sleep:60", env={"PATH": f"{smi.parent}{os.pathsep}{os.environ['PATH']}"})
        t0 = time.monotonic()
        status = h.wait(_start_on_gpu(h, launch, 0), timeout=60)
        assert status.exit_code == 1 and time.monotonic() - t0 < 30, status
        h.wait_for_log(launch, "vcli: GPU 0 stayed below 5 % utilisation for 1s (the host's idle policy): stopping the replica.")
    finally:
        policy.unlink()
        leasepolicy._CACHE.clear()
        next(harness, None)


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_two_replicas_with_half_a_gpu_each_share_it_and_their_supervisors_hold_the_shares(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two replicas placed on halves of GPU 0 (here, or on an SSH host through its lease
    server): each supervisor holds its own share while its replica runs, a whole-GPU lease of
    GPU 0 is refused meanwhile, and both shares end with their replicas."""
    from vcli.placement.gpulease import LeaseBusy, LeaseDir, base_record
    from vcli.placement.gpus import local_leases

    harness = _harness(kind, tmp_path, monkeypatch)
    h = next(harness)
    try:
        leases = h.executor.gpu_leases("lo") if kind == "ssh" else local_leases()  # type: ignore[attr-defined]
        handles = []
        for n in range(2):
            launch = h.launch("sleep:3", task=f"workerpool0-{n}")
            leases.acquire([0], base_record(job=launch.job_id, replica=launch.task_name), share=0.5)
            half = replace(launch, placement=replace(launch.placement, gpu_indices=(0,), gpu_share=0.5))
            handles.append(h.start(half))
        other = LeaseDir(local_leases().path)
        holders = [x for x in other.holders() if x["gpu"] == 0]
        assert sorted(x["share"] for x in holders) == [0.5, 0.5], holders
        assert all(x.get("pid") for x in holders), holders  # handed to each replica's supervisor
        with pytest.raises(LeaseBusy):
            other.acquire([0], {"job": "whole"})
        assert [h.wait(handle).exit_code for handle in handles] == [0, 0]
        _wait_until(lambda: not [x for x in other.holders() if x["gpu"] == 0], 10, "the shares to end")
    finally:
        next(harness, None)
