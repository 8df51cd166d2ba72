"""A real, small Ray cluster on loopback for tests: a head and worker raylets on 127.0.0.1.

Each node is `ray start --block` in a session of its own (so its GCS, raylet, agents and the
workers it spawns share that session's process group), with a temp dir of its own under one
short root (Unix socket paths must stay under ~107 bytes). Every node declares fake GPUs
(`--num-gpus`) and a custom resource naming it (`node_a`, `node_b`, ...), so tests can tell
where Ray put something. `stop()` kills exactly this cluster: its sessions' process groups,
then any process whose command line names this cluster's temp root (a worker that left the
group). Nothing of another cluster, or of a `ray start` a person ran, is touched.

Startup on the 2-core CI machine: see `RayCluster.startup_seconds` (about 10-20 s for three
nodes); memory is kept low (75 MiB object stores, no dashboard).
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
from dataclasses import dataclass, field
from typing import Any

#: Environment variable naming the node's temp dir in every process of a node.
MARKER = "VCLI_TEST_RAY_NODE"
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
OBJECT_STORE_BYTES = 78643200
#: Ray 2.5x+ `ray start` turns token authentication on; a loopback test cluster turns it off,
#: and its drivers (the test process, vcli) must say the same (`driver_env`).
AUTH_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


#: The prefix of the one stdout line a driver script answers with: Ray itself may print
#: warnings to the driver's stdout after it ("raylet has lagging heartbeats ...", seen in CI
#: once a node had been killed), so the answer is never simply the last line.
JSON_MARK = "VCLI_TEST_JSON"


def marked_json(stdout: str) -> Any:
    """The JSON a driver printed after `JSON_MARK` (the last such line)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(JSON_MARK + " "):
            return json.loads(line[len(JSON_MARK) + 1:])
    raise AssertionError(f"no {JSON_MARK} line in the driver's output:\n{stdout[-3000:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RayNode:
    name: str
    popen: subprocess.Popen[bytes]
    temp_dir: str


@dataclass
class RayCluster:
    """A head (`node_a`) and `workers` worker raylets, each with `gpus_per_node` fake GPUs."""

    workers: int = 2
    gpus_per_node: int = 1
    cpus_per_node: int = 2
    root: str = ""
    address: str = ""
    nodes: list[RayNode] = field(default_factory=list)
    startup_seconds: float = 0.0

    def start(self) -> RayCluster:
        began = time.monotonic()
        self.root = tempfile.mkdtemp(prefix="vr-", dir="/tmp")
        port = _free_port()
        self.address = f"127.0.0.1:{port}"
        try:
            self._start_node("node_a", ["--head", f"--port={port}", "--include-dashboard=false",
                                         f"--dashboard-port={_free_port()}"])
            self._wait_nodes(1)
            for i in range(self.workers):
                self._start_node(f"node_{chr(ord('b') + i)}", [f"--address={self.address}"])
            self._wait_nodes(1 + self.workers)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _start_node(self, name: str, extra: list[str]) -> None:
        temp_dir = os.path.join(self.root, name)
        os.makedirs(temp_dir)
        argv = [
            RAY, "start", "--block", *extra, "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.cpus_per_node}", f"--num-gpus={self.gpus_per_node}",
            f'--resources={{"{name}": 1}}', f"--object-store-memory={OBJECT_STORE_BYTES}",
            f"--temp-dir={temp_dir}", "--disable-usage-stats",
            f"--dashboard-agent-listen-port={_free_port()}", f"--dashboard-agent-grpc-port={_free_port()}",
            f"--metrics-export-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}",
        ]
        env = self.driver_env()
        # Every process of the node inherits this (Ray workers retitle their command lines,
        # so the temp dir in argv does not find them): what `stop`/`kill_node` look for.
        env[MARKER] = temp_dir
        # The node's scratch files (e.g. a replica actor's, left by a killed node) go with it.
        env["TMPDIR"] = temp_dir
        with open(os.path.join(self.root, f"{name}.out"), "wb") as out:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=env)
        self.nodes.append(RayNode(name=name, popen=popen, temp_dir=temp_dir))

    def _wait_nodes(self, count: int, timeout: float = 90.0) -> None:
        """Until `ray status`-equivalent: `count` alive nodes known to the GCS."""
        code = ("import ray,sys;ray.init(address=sys.argv[1],log_to_driver=False,logging_level='ERROR');"
                "print(sum(1 for n in ray.nodes() if n['Alive']))")
        deadline = time.monotonic() + timeout
        while True:
            for node in self.nodes:
                if node.popen.poll() is not None:
                    raise RuntimeError(f"ray node {node.name} exited {node.popen.returncode}: {self.output(node.name)}")
            got = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True, text=True,
                                 env=self.driver_env())
            if got.returncode == 0 and got.stdout.strip().splitlines()[-1:] == [str(count)]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"ray cluster: {count} nodes not up in {timeout}s: {got.stderr[-2000:]}")
            time.sleep(0.5)

    @staticmethod
    def driver_env() -> dict[str, str]:
        """The environment of a process that connects to this cluster (no stray RAY_ADDRESS, and
        no test's VCLI_HOME: the cluster outlives single tests)."""
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VCLI_HOME", "VCLI_CONFIG_DIR")}
        env.update(AUTH_ENV)
        return env

    def node_ids(self) -> dict[str, str]:
        """Node name (`node_a`, ...) -> Ray node id, of the nodes alive now."""
        code = ("import ray,sys,json;ray.init(address=sys.argv[1],log_to_driver=False,logging_level='ERROR');"
                f"print({JSON_MARK!r}, json.dumps({{n['NodeID']: sorted(n['Resources']) for n in ray.nodes() if n['Alive']}}))")
        got = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True, text=True,
                             env=self.driver_env(), check=True)
        nodes = marked_json(got.stdout)
        return {name: node_id for node_id, keys in nodes.items() for name in keys if name.startswith("node_")}

    def placement_groups(self) -> dict[str, str]:
        """Placement group name -> state (CREATED, PENDING, REMOVED, ...) of every group known."""
        return {name: g["state"] for name, g in self._placement_group_table().items()}

    def bundles(self) -> dict[str, list[dict[str, float]]]:
        """Placement group name -> its bundles' resources, in bundle order."""
        return {name: [g["bundles"][i] for i in sorted(g["bundles"], key=int)]
                for name, g in self._placement_group_table().items()}

    def _placement_group_table(self) -> dict[str, dict]:
        code = ("import ray,sys,json;ray.init(address=sys.argv[1],log_to_driver=False,logging_level='ERROR');"
                "from ray.util import placement_group_table as t;"
                f"print({JSON_MARK!r}, json.dumps({{g['name']: g for g in t().values()}}, default=str))")
        got = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True, text=True,
                             env=self.driver_env(), check=True)
        return marked_json(got.stdout)  # type: ignore[no-any-return]

    def output(self, name: str) -> str:
        try:
            with open(os.path.join(self.root, f"{name}.out"), encoding="utf-8", errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def kill_node(self, name: str) -> None:
        """Kill every process of one node at once (a machine lost: its raylet, its Ray workers
        and what they run), not a graceful `ray stop`."""
        node = next(n for n in self.nodes if n.name == name)
        _kill_group(node.popen)
        _kill_named(node.temp_dir)

    def stop(self) -> None:
        """Kill every process of this cluster (and only of it), then remove its temp dirs."""
        for node in reversed(self.nodes):
            _kill_group(node.popen)
        if self.root:
            _kill_named(self.root)
            shutil.rmtree(self.root, ignore_errors=True)

    def processes(self) -> list[int]:
        """Pids of processes still running that belong to this cluster (tests assert none)."""
        return _named(self.root) if self.root else []


def _kill_group(popen: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        popen.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _named(fragment: str) -> list[int]:
    """Live processes whose command line contains `fragment` (this cluster's temp root, or one
    node's temp dir) or whose environment marks them as a process of a node under it."""
    out = []
    needle = fragment.encode()
    marker = f"{MARKER}={fragment}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/environ", "rb") as f:
                marked = any(v.startswith(marker) for v in f.read().split(b"\0"))
        except OSError:
            continue
        if (needle in cmdline or marked) and stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X"):
            out.append(int(entry))
    return out


def _kill_named(fragment: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = _named(fragment)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)
