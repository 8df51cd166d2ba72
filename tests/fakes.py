"""In-process stand-ins for time and replicas, so controllers run through every ending in ms.

`FakeClock` is a controller `Clock` whose `sleep` advances time at once. `FakeExecutor` is an
`Executor` that interprets the contract replica's actions (tests/contract_replica.py) on that
clock instead of running a process: `sleep:5` takes five fake seconds, `ignore-term` makes
`stop` wait the whole grace period (on the fake clock) and then kill. It writes real log and
metric files, so everything downstream (log followers, metric readers, the store) is the real
code. Seed directories are placed, and `fetch_dir` copies, on this machine's filesystem, as
for local processes. It passes the same contract suite as the real executors
(tests/test_executor_contract.py).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from tests.contract_replica import PROGRESS, SOURCE, long_line
from vcli.errors import ExecutorError
from vcli.executors import (
    ExecutorBase,
    Placement,
    ReplicaHandle,
    ReplicaLaunch,
    ReplicaStatus,
    place_seed_dirs,
    read_replica_file,
)
from vcli.executors.kinds import ExecutorOptions, ExecutorType, register
from vcli.executors.supervisor import MAX_RECORD_BYTES
from vcli.logs import LogWriter
from vcli.tuning.suggesters.random_search import RandomSearchSuggester

SIGTERM_EXIT = 128 + 15
SIGKILL_EXIT = 128 + 9


class FakeClock:
    """Monotonic fake time: `sleep` advances it immediately (and yields the GIL)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self.t

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.t += max(0.0, seconds)
        time.sleep(0)  # let a controller's start thread run

    advance = sleep


@dataclass
class _Replica:
    launch: ReplicaLaunch
    actions: list[str]
    writer: LogWriter
    wake_at: float
    position: int = 0
    ignore_term: bool = False
    exit_code: int | None = None
    message: str | None = None
    ended_at: float | None = None  # fake clock time
    released: bool = False


@dataclass
class FakeWorld:
    """What the "machine" knows: every replica any FakeExecutor on it started (like the OS)."""

    clock: FakeClock
    replicas: dict[str, _Replica] = field(default_factory=dict)
    ports: set[int] = field(default_factory=set)
    next_port: int = 41000
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: Drop a replica once released (a soak test's world must not keep every replica it ran).
    forget_released: bool = False
    #: Wall time (seconds since the epoch) minus the fake clock's, as of the world's creation.
    wall_offset: float = field(init=False)

    def __post_init__(self) -> None:
        self.wall_offset = time.time() - self.clock.now()

    def running(self) -> list[str]:
        """Refs of replicas still running now (after catching up with the clock)."""
        out = []
        for ref, rep in list(self.replicas.items()):
            _advance(rep, self)
            if rep.exit_code is None:
                out.append(ref)
        return out


class FakeExecutor(ExecutorBase):
    """Replicas as timelines on a fake clock. Knobs make prepare/start fail on purpose."""

    name = "fake"
    python = "python3"

    def __init__(
        self,
        world: FakeWorld,
        *,
        prepare_error: Exception | None = None,
        start_error: Callable[[ReplicaLaunch], Exception | None] | None = None,
    ) -> None:
        self.world = world
        self.clock = world.clock
        self.prepare_error = prepare_error
        self.start_error = start_error
        self.closed = False

    def prepare(self, launches: Sequence[ReplicaLaunch], *, cancelled: threading.Event,
                progress: Callable[[str], None]) -> list[ReplicaLaunch]:
        self.check(launches)
        if self.prepare_error is not None:
            raise self.prepare_error
        return list(launches)

    def reserve_port(self, placement: Placement) -> int:
        with self.world.lock:
            port = self.world.next_port
            self.world.next_port += 1
            self.world.ports.add(port)
            return port

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        argv = self.command_for(launch)
        if len(argv) < 3 or argv[1] != "-c" or argv[2] != SOURCE:
            raise ExecutorError(f"The fake executor runs only the contract replica, not {argv[:3]}.")
        if self.start_error is not None:
            error = self.start_error(launch)
            if error is not None:
                raise error
        os.makedirs(launch.output_dir, exist_ok=True)
        place_seed_dirs(launch)
        with self.world.lock:
            ref = f"fake-{len(self.world.started) + 1}@{launch.job_id}"
            self.world.started.append(ref)
            params = dict(a[2:].split("=", 1) for a in argv[3:] if a.startswith("--") and "=" in a)
            actions = []
            for action in argv[3:]:
                if not action.startswith("--"):
                    for name, value in params.items():
                        action = action.replace("%" + name, value)
                    actions.append(action)
            self.world.replicas[ref] = _Replica(launch=launch, actions=actions,
                                                writer=LogWriter(launch.log_path), wake_at=self.clock.now())
        return ReplicaHandle(executor=self.name, host=launch.placement.host, ref=ref, task_name=launch.task_name)

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        rep = self.world.replicas.get(handle.ref)
        if rep is None:
            return ReplicaStatus(running=False, message="the replica is gone (exit code unknown)")
        _advance(rep, self.world)
        if rep.exit_code is None:
            return ReplicaStatus(running=True)
        return ReplicaStatus(running=False, exit_code=rep.exit_code, message=rep.message,
                             end_time=self.world.wall_offset + rep.ended_at if rep.ended_at is not None else None)

    def stop(self, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        reps = [self.world.replicas[h.ref] for h in handles if h.ref in self.world.replicas]
        for rep in reps:
            _advance(rep, self.world)
        stubborn = [r for r in reps if r.exit_code is None and r.ignore_term]
        for rep in reps:
            if rep.exit_code is None and not rep.ignore_term:
                _end(rep, SIGTERM_EXIT, "killed by signal SIGTERM", at=self.clock.now())
        if stubborn:
            self.clock.sleep(grace_seconds)
            for rep in stubborn:
                _advance(rep, self.world)
                if rep.exit_code is None:
                    _end(rep, SIGKILL_EXIT, "killed by signal SIGKILL", at=self.clock.now())
        with self.world.lock:
            self.world.stopped.extend(h.ref for h in handles)

    def read_file(self, handle: ReplicaHandle, path: str) -> str | None:
        rep = self.world.replicas.get(handle.ref)
        if rep is not None:
            _advance(rep, self.world)
        return read_replica_file(path)  # the files are real ones, read as every executor reads them

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        with self.world.lock:
            for h in handles:
                rep = self.world.replicas.get(h.ref)
                if rep is not None and not rep.released:
                    rep.released = True
                    rep.writer.close()
                    if self.world.forget_released:
                        del self.world.replicas[h.ref]
                    else:
                        self.world.released.append(h.ref)

    def close(self) -> None:
        self.closed = True


def _end(rep: _Replica, code: int, message: str | None = None, *, at: float) -> None:
    rep.exit_code = code
    rep.message = message
    rep.ended_at = at
    rep.writer.close()


def _mask(rep: _Replica, line: str) -> str:
    from vcli.executors.supervisor import MASK_MIN_LENGTH, masker

    values = {rep.launch.env.get(name, "") for name in rep.launch.secret_env}
    return masker(tuple(sorted((v for v in values if len(v) >= MASK_MIN_LENGTH), key=len, reverse=True)))(line)


def _expand(path: str, env: Mapping[str, str]) -> str:
    """`$NAME` -> the replica's environment variable NAME (as os.path.expandvars does there)."""
    return re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), m.group(0)), path)


def _advance(rep: _Replica, world: FakeWorld) -> None:
    """Run the replica's actions whose time has come."""
    now = world.clock.now()
    while rep.exit_code is None and rep.wake_at <= now:
        if rep.position >= len(rep.actions):
            _end(rep, 0, at=rep.wake_at)
            return
        action = rep.actions[rep.position]
        rep.position += 1
        verb, _, arg = action.partition(":")
        env = rep.launch.env
        if verb in ("out", "err"):
            rep.writer.write("stdout" if verb == "out" else "stderr", _mask(rep, arg))
        elif verb == "chatter":  # N lines of 223 bytes on stdout at once (a chatty trainer)
            for _ in range(int(arg)):
                rep.writer.write("stdout", "epoch 1 batch progress " + "x" * 200)
        elif verb == "metric":
            mid, _, rest = arg.partition("=")
            value, _, step = rest.partition("@")
            path = env["CLOUD_ML_HP_METRIC_FILE"]
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({mid: value, "global_step": step or "0", "timestamp": rep.wake_at,
                                    "trial": env.get("CLOUD_ML_TRIAL_ID", "")}) + "\n")
        elif verb == "sleep":
            rep.wake_at += float(arg)
        elif verb == "exit":
            _end(rep, int(arg), at=rep.wake_at)
        elif verb == "ignore-term":
            rep.ignore_term = True
            rep.writer.write("stdout", "ignoring SIGTERM")
        elif verb == "env":
            rep.writer.write("stdout", _mask(rep, f"{arg}={env[arg]}" if arg in env else f"{arg} unset"))
        elif verb == "cat":
            try:
                with open(_expand(arg, env), encoding="utf-8") as f:
                    rep.writer.write("stdout", f.read())
            except FileNotFoundError:
                rep.writer.write("stdout", f"{arg} missing")
        elif verb == "write":
            path, _, text = arg.partition("=")
            path = _expand(path, env)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        elif verb == "mkdir":
            os.makedirs(_expand(arg, env), exist_ok=True)
        elif verb == "fifo":
            os.mkfifo(_expand(arg, env))
        elif verb == "link":
            path, _, target = arg.partition("=")
            os.symlink(_expand(target, env), _expand(path, env))
        elif verb == "tree":  # no processes in-process: nothing can be left behind
            rep.writer.write("stdout", "tree started")
        elif verb == "envlen":
            rep.writer.write("stdout", f"{arg} has {len(env.get(arg, ''))} characters")
        elif verb == "long":  # as the supervisor logs it: records of at most MAX_RECORD_BYTES
            text = long_line(int(arg))
            for i in range(0, len(text), MAX_RECORD_BYTES):
                rep.writer.write("stdout", text[i:i + MAX_RECORD_BYTES])
        elif verb == "progress":
            rep.writer.write("stdout", PROGRESS)
        elif verb == "bind":
            rep.writer.write("stdout", f"bound {arg}" if int(arg) in world.ports else "bind-failed")
        else:
            rep.writer.write("stderr", f"unknown action {action}")
            _end(rep, 2, at=rep.wake_at)


#: The world a registered fake kind builds its executors on (one per process, as a machine is).
FAKE_WORLD = FakeWorld(FakeClock())


def _build_fake(options: ExecutorOptions, *, leases: bool = True,
                job: Mapping[str, object] | None = None) -> tuple[FakeExecutor, object]:
    from vcli.placement import HERE

    return FakeExecutor(FAKE_WORLD), HERE


#: The fake is registered as a kind defined outside vcli would be (`vcli.executors.kinds.register`):
#: the contract suite reads its kinds from the registry, so the fake runs through it as a kind.
register(ExecutorType(name="fake", summary="replicas as timelines on a fake clock", build=_build_fake,
                      for_handles=lambda options: _build_fake(options)[0]))


class SlowSuggester(RandomSearchSuggester):
    """Random search that takes `SLOW_ASK_SECONDS` per ask and calls itself a model, so a study
    asks it in a worker process (`vcli.control.suggesting`): the tuner that makes slots wait."""

    models = True

    def _ask(self, count: int) -> list[dict[str, Any]]:
        time.sleep(SLOW_ASK_SECONDS)
        return super()._ask(count)


#: Seconds each ask of `SlowSuggester` takes.
SLOW_ASK_SECONDS = 2.0
