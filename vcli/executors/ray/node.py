"""What runs on a Ray node: the actor that supervises one replica there. Standard library only.

This module is shipped to the cluster by value (`cloudpickle.register_pickle_by_value`), so
a node needs Ray and Python, not vcli. The actor does on its node what `LocalExecutor` does
here: it runs vcli's per-replica supervisor (`vcli/executors/supervisor.py`, whose source it
is given and writes to a node-local file) in a session of its own with `--stop-with-parent`,
so the trainer's whole process tree goes when the replica is stopped *or when the actor dies*
(its worker process killed by `ray.kill`, a node that goes down with its raylet).

The actor holds the Ray resources of its placement-group bundle (CPUs, GPUs) for the
replica's life; the GPUs Ray assigned it (`ray.get_gpu_ids()`) become the trainer's
CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

#: Argv word for "this node's interpreter" (mirrors executor.NODE_PYTHON).
NODE_PYTHON = "@node-python@"
#: The supervisor's grace before it SIGKILLs leftovers (mirrors supervisor.LEFTOVER_GRACE_SECONDS).
_LEFTOVER_GRACE = 1.0


def free_port(address: str) -> int:
    """A TCP port free on this node's `address` now (bind to 0, read, release)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def node_facts() -> dict[str, Any]:
    """Where this code runs: Ray's node id and IP, and the GPUs Ray gave the caller."""
    import ray

    ctx = ray.get_runtime_context()
    return {"nodeId": ctx.get_node_id(), "nodeIp": ray.util.get_node_ip_address(),
            "gpuIds": [str(g) for g in ray.get_gpu_ids()]}


class ReplicaSupervisor:
    """One replica on this node (a Ray actor class: the executor wraps it with `ray.remote`)."""

    def __init__(self) -> None:
        self.popen: subprocess.Popen[bytes] | None = None
        self.status_path = ""
        self.log_path = ""
        self.tag = ""
        self.work = ""
        self.started: dict[str, Any] | None = None

    def start(self, *, argv: list[str], env: dict[str, str], cwd: str | None, output_dir: str,
              log_path: str | None, masks: list[str], supervisor_source: str, tag: str) -> dict[str, Any]:
        """Start the supervised trainer; returns node facts, the supervisor pid and the log path.

        `log_path` None: the log goes to a node-local file the executor streams back.
        """
        facts = node_facts()
        os.makedirs(output_dir, exist_ok=True)
        self.work = work = tempfile.mkdtemp(prefix="vcli-ray-")
        supervisor = os.path.join(work, "supervisor.py")
        with open(supervisor, "w", encoding="utf-8") as f:
            f.write(supervisor_source)
        self.log_path = log_path or os.path.join(work, "replica.log")
        self.status_path = os.path.join(work, "replica.status")
        self.tag = tag
        full_env = dict(os.environ)
        full_env.update(env)
        # What Ray assigned this actor, not what the controller guessed.
        full_env["CUDA_VISIBLE_DEVICES"] = ",".join(facts["gpuIds"])
        # Which Ray node runs the replica (for the trainer's own logs; Ray may put a node's
        # several raylets on one IP, so the address alone does not say).
        full_env["VCLI_RAY_NODE_ID"] = facts["nodeId"]
        argv = [sys.executable if a == NODE_PYTHON else a for a in argv]
        command = [sys.executable, "-S", supervisor, "--stop-with-parent",
                   *[a for m in masks for a in ("--mask", m)], self.status_path, self.log_path, "--", *argv]
        self.popen = subprocess.Popen(command, cwd=cwd or None, env=full_env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True, close_fds=True)
        self.started = {**facts, "pid": self.popen.pid, "logPath": self.log_path}
        return self.started

    def facts(self) -> dict[str, Any] | None:
        """What `start` returned, once it started the replica; None before (`RayExecutor.find`)."""
        return self.started

    def poll(self) -> dict[str, Any] | None:
        """The supervisor's status record once the trainer ended; None while it runs."""
        status = self._status()
        if status is not None:
            return status
        if self.popen is None or self.popen.poll() is not None:
            return {"exitCode": None, "message": "the replica's supervisor ended without a status"}
        return None

    def stop(self, grace_seconds: float) -> None:
        """SIGTERM the tree, wait `grace_seconds`, SIGKILL it; returns when nothing is left."""
        if self.popen is None:
            return
        if self.popen.poll() is None and self._status() is None:
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_seconds
            while time.monotonic() < deadline and self.popen.poll() is None and self._status() is None:
                time.sleep(0.02)
            if self.popen.poll() is None and self._status() is None:
                self._signal(signal.SIGUSR1)  # the supervisor SIGKILLs every descendant
        self._await_supervisor()

    def _await_supervisor(self) -> None:
        """Wait (bounded) for the supervisor to finish sweeping the trainer's tree, SIGKILL it
        if it does not, then kill whatever still carries the replica's tag."""
        try:
            self.popen.wait(timeout=_LEFTOVER_GRACE + 10)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.popen.wait()
        self._sweep()

    def read_file(self, path: str) -> str | None:
        from vcli.executors import read_replica_file

        return read_replica_file(path)

    def fetch_dir(self, path: str, dest: str) -> bool:
        """The contract's copy, taken on this node with the trainer's tree held still
        (`vcli.executors.freeze`: stopped between two of its writes, continued after, by a
        watchdog too). The copy runs here to its end whatever happens to the controller that
        asked, so a replica is never left stopped. `dest` is on the filesystem the Ray
        executor assumes shared (vcli's home)."""
        from vcli.executors import copy_dir_atomically
        from vcli.executors.freeze import copy_still, frozen
        from vcli.executors.local import tagged_processes

        running = self.popen is not None and self.popen.poll() is None and self._status() is None
        tree = [p for p in tagged_processes(self.tag, exclude=os.getpid()) if p != self.popen.pid] \
            if running and self.popen is not None else []
        if not tree:
            return copy_dir_atomically(path, dest)
        with frozen(tree) as (stop, cont):
            return copy_still(tree, stop, cont, path, dest)

    def read_log(self, offset: int) -> tuple[bytes, int]:
        """Whole lines of the log from byte `offset` on, and the offset after them."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return b"", offset
        end = data.rfind(b"\n") + 1
        return data[:end], offset + end

    def cleanup(self) -> None:
        """Once released: wait for the supervisor to finish stopping what the trainer left
        behind (it sweeps its tree a moment after the trainer's exit; bounded), kill anything
        that still carries the replica's tag, then remove the node-local files."""
        if self.popen is not None:
            self._await_supervisor()
        if self.work:
            shutil.rmtree(self.work, ignore_errors=True)

    def _status(self) -> dict[str, Any] | None:
        try:
            with open(self.status_path, encoding="utf-8") as f:
                data = json.load(f)
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) and "exitCode" in data else None

    def _signal(self, sig: int) -> None:
        try:
            os.kill(self.popen.pid, sig)  # type: ignore[union-attr]
        except ProcessLookupError:
            pass

    def _sweep(self) -> None:
        """Kill any process that still carries the replica's tag (a tree a dead supervisor left)."""
        needle = f"VCLI_REPLICA={self.tag}".encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        os.kill(int(entry), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                continue
