"""A real, small Slurm cluster for tests: munged, slurmctld and one or more slurmd, all throw-away.

Debian's packages (slurmctld, slurmd, slurm-client, munge: `.ci/slurm-setup.sh`) provide the
binaries; everything else is this cluster's own, under one temp root: a munge key and socket,
`slurm.conf` and `gres.conf`, state and spool directories, pid and log files. Ports are picked
free at start; nothing under /etc is read or written, and the system's own services are never
started. Clients (sbatch, srun, squeue, ...) find the cluster through `SLURM_CONF`
(`cluster.env()`), which the tests export for vcli.

Two layouts:

- `SlurmCluster(root, nodes=[...])` (`netns=False`): everything in this network namespace on
  127.0.0.1, each slurmd named with `-N` and listening on a port of its own. What the
  contract suite and most tests use: the test process itself is a client.
- `netns=True`: a switch namespace with a bridge, a controller namespace (slurmctld, and where
  clients must run: `cluster.client(argv)`) at 10.214.0.2 and one namespace per node at
  10.214.0.(10+k), each slurmd with its own UTS hostname (`unshare --uts`) and NodeAddr the
  namespace's address, so replicas on two nodes really are at two addresses.

Nodes declare `gpus` plain files as GPUs (`gres.conf`, AutoDetect=off): Slurm allocates and
accounts them like GPUs, but sets no CUDA_VISIBLE_DEVICES of its own for them.

`stop()` scancels every job, stops the slurmd's, slurmctld and munged, kills every process left
that carries this cluster's marker (steps, tasks, their children; in namespaces: every process
there), removes the namespaces, and checks that nothing is left (`leftovers()`). Needs root.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

SUBNET = "10.214.0"
#: Environment variable every daemon of a cluster carries (its root): what `stop` looks for.
MARKER = "VCLI_TEST_SLURM"
DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")


def available() -> str | None:
    """None if a cluster can be started here, else why not (a test fails with this reason)."""
    if os.geteuid() != 0:
        return "needs root (munged, slurmd and network namespaces)"
    for path in DAEMONS:
        if not os.path.exists(path):
            return f"{path} is missing: run .ci/slurm-setup.sh"
    for tool in ("sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing: run .ci/slurm-setup.sh"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    name: str
    cpus: int = 8
    gpus: int = 0
    memory_mb: int = 4000
    address: str = "127.0.0.1"
    port: int = 0
    ns: str | None = None
    popen: subprocess.Popen[bytes] | None = None


@dataclass
class SlurmCluster:
    """`with SlurmCluster(tmp, [Node("n1", gpus=2)]) as c: ...`; see the module docstring."""

    root: Path
    nodes: list[Node] = field(default_factory=lambda: [Node("n1")])
    netns: bool = False
    #: Seconds without an answer from a slurmd before slurmctld calls its node DOWN.
    slurmd_timeout: int = 10
    partition: str = "main"
    #: Memory enforced without cgroups: jobacct_gather/linux samples each step's processes every
    #: second and kills a step over its memory (`JobAcctGatherParams=OverMemoryKill`).
    enforce_memory: bool = False
    #: More partitions, name -> node names (the first, `partition`, has every node).
    partitions: dict[str, list[str]] = field(default_factory=dict)
    #: Record finished jobs with JobCompType=jobcomp/filetxt in `root/jobcomp.txt`.
    jobcomp: bool = False
    #: Seconds slurmctld keeps a finished job (scontrol forgets it then; its purge runs about
    #: once a minute).
    min_job_age: int = 600
    startup_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.sfx = secrets.token_hex(3)
        self.conf = self.root / "slurm.conf"
        self._procs: list[subprocess.Popen[bytes]] = []
        self._namespaces: list[str] = []
        self.ctl_ns: str | None = None
        self.ctl_address = "127.0.0.1"
        self.hostname = socket.gethostname().split(".")[0]

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> SlurmCluster:
        why = available()
        if why:
            raise RuntimeError(why)
        began = time.monotonic()
        atexit.register(self.stop)
        try:
            for sub in ("state", "spool", "log", "gpu", *(f"spool/{n.name}" for n in self.nodes)):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            if self.netns:
                self._namespaces_up()
            self._munged()
            self._write_config()
            self._daemon("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)], self.ctl_ns)
            for node in self.nodes:
                self._slurmd(node)
            self.wait_idle()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def env(self) -> dict[str, str]:
        """What a client (vcli, sbatch, ...) needs in its environment to use this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def client(self, argv: Sequence[str]) -> list[str]:
        """`argv` as run where clients reach the controller (the controller namespace, if any)."""
        return ["nsenter", f"--net=/run/netns/{self.ctl_ns}", *argv] if self.ctl_ns else list(argv)

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.env()}
        res = subprocess.run(self.client(argv), capture_output=True, text=True, env=env, timeout=timeout)
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.strip()}")
        return res

    def wait_idle(self, timeout: float = 60) -> None:
        """Until every node is up (idle, mixed or allocated) in sinfo."""
        deadline = time.monotonic() + timeout
        names = {n.name for n in self.nodes}
        last = ""
        while time.monotonic() < deadline:
            res = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
            last = res.stdout + res.stderr
            states = dict(line.split()[:2] for line in res.stdout.splitlines() if len(line.split()) >= 2)
            if names <= set(states) and all(states[n].rstrip("*") in ("idle", "mix", "alloc") for n in names):
                return
            for p in self._procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon exited ({p.args}): {self.logs()[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"Slurm nodes not up in {timeout}s: {last}\n{self.logs()[-3000:]}")

    def logs(self) -> str:
        out = []
        for path in sorted((self.root / "log").glob("*.log")):
            out.append(f"== {path.name}\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(out)

    # ------------------------------------------------------------------ tests' helpers

    def jobs(self) -> list[str]:
        """Ids of the jobs squeue lists (pending or running)."""
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def kill_slurmd(self, name: str) -> None:
        """SIGKILL one node's slurmd (its steps' processes go on, as on a node whose daemon died)."""
        node = self.node(name)
        if node.popen is not None and node.popen.poll() is None:
            pid = _slurmd_pid(self.root, node)
            for p in {node.popen.pid, *([pid] if pid else [])}:
                _kill(p, signal.SIGKILL)
            node.popen.wait(10)

    def restart_slurmctld(self, down_seconds: float) -> None:
        """Stop slurmctld (SIGTERM: it saves its state), leave it down `down_seconds`, start it
        again with the same state (a restart for a configuration change, a failover): jobs
        and steps run on meanwhile; clients get "Unable to contact slurm controller"."""
        ctld = next(p for p in self._procs if "slurmctld" in " ".join(map(str, p.args)))
        ctld.terminate()
        ctld.wait(30)
        self._procs.remove(ctld)
        time.sleep(down_seconds)
        self._daemon("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)], self.ctl_ns)

    def kill_node_processes(self, name: str) -> None:
        """SIGKILL every process in a node's namespace (what is left of a node whose slurmd died:
        its steps' processes, which a real dead node would have taken with it)."""
        ns = self.node(name).ns
        if ns is None:
            raise ValueError("only nodes in network namespaces have processes of their own")
        for _ in range(3):
            pids = _netns_pids(ns)
            if not pids:
                return
            for pid in pids:
                _kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def marked_processes(self) -> list[int]:
        """Live processes of this cluster: daemons, steps, tasks and their children."""
        needles = (f"{MARKER}={self.root}".encode(), f"SLURM_CONF={self.conf}".encode())
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{entry}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X") and any(n in env for n in needles):
                out.append(int(entry))
        for ns in self._namespaces:
            out.extend(p for p in _netns_pids(ns) if p not in out)
        return out

    def step_processes(self) -> list[int]:
        """slurmstepd processes and what they run (everything of the cluster but the daemons)."""
        daemons = {p.pid for p in self._procs} | {p for n in self.nodes if (p := _slurmd_pid(self.root, n))}
        return [p for p in self.marked_processes() if p not in daemons and not _is_daemon(p)]

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Stop everything this cluster started (idempotent)."""
        if not self._procs and not self._namespaces:
            return
        if self._procs and all(p.poll() is None for p in self._procs[:2]):
            self.run("scancel", "--full", "-u", "root", check=False, timeout=15)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.step_processes():
                time.sleep(0.1)
        for p in reversed(self._procs):
            if p.poll() is None:
                _kill(p.pid, signal.SIGTERM)
        for p in reversed(self._procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                _kill(p.pid, signal.SIGKILL)
                p.wait(5)
        for _ in range(3):
            left = self.marked_processes()
            if not left:
                break
            for pid in left:
                _kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        for ns in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self._namespaces = []
        self._procs = []
        try:
            atexit.unregister(self.stop)
        except Exception:
            pass

    def leftovers(self) -> list[str]:
        """What of this cluster still exists after `stop()` (should be [])."""
        left = [f"pid {p}" for p in self.marked_processes()]
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        left += [line.split()[0] for line in names.splitlines() if self.sfx in line]
        return left

    # ------------------------------------------------------------------ internals

    def _namespaces_up(self) -> None:
        switch = f"vsl-{self.sfx}-sw"
        self._add_ns(switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        self.ctl_ns = f"vsl-{self.sfx}-c"
        self.ctl_address = f"{SUBNET}.2"
        self._add_ns(self.ctl_ns)
        self._wire(switch, self.ctl_ns, "c", self.ctl_address)
        for k, node in enumerate(self.nodes, start=1):
            node.ns = f"vsl-{self.sfx}-{node.name}"
            node.address = f"{SUBNET}.{10 + k}"
            self._add_ns(node.ns)
            self._wire(switch, node.ns, node.name, node.address)
        # Every namespace knows every node's name (srun and slurmstepd resolve them).
        hosts = self.root / "hosts"
        hosts.write_text("".join(f"{n.address} {n.name}\n" for n in self.nodes)
                         + f"{self.ctl_address} {self.hostname}\n")

    def _add_ns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _wire(self, switch: str, ns: str, tag: str, address: str) -> None:
        peer = f"s{self.sfx}{tag}"[:15]
        _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", peer, "netns", switch)
        _ip("-n", switch, "link", "set", peer, "master", "br0")
        _ip("-n", switch, "link", "set", peer, "up")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")

    def _env(self) -> dict[str, str]:
        return {**os.environ, MARKER: str(self.root), "SLURM_CONF": str(self.conf)}

    def _munged(self) -> None:
        key = self.root / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        self.munge_socket = self.root / "munge.sock"
        argv = ["/usr/sbin/munged", "--force", "--foreground", f"--socket={self.munge_socket}",
                f"--key-file={key}", f"--pid-file={self.root / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}", f"--seed-file={self.root / 'munged.seed'}"]
        self._daemon("munged", argv, None)
        deadline = time.monotonic() + 15
        while not self.munge_socket.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: {self.logs()}")
            time.sleep(0.05)

    def _write_config(self) -> None:
        ctld_port = _free_port()
        single = not self.netns
        lines = [
            f"ClusterName=vcli{self.sfx}",
            f"SlurmctldHost={self.hostname}({self.ctl_address})",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}/%n",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'ctld.log'}",
            f"SlurmdLogFile={self.root / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            # Batch jobs (and heterogeneous jobs, which only the backfill scheduler starts) start
            # within a second or two instead of 3 s / 30 s: the tests wait for many of them.
            "SchedulerType=sched/backfill", "SchedulerParameters=batch_sched_delay=0,bf_interval=1",
            "SelectType=select/cons_tres", f"SelectTypeParameters=CR_Core{'_Memory' if self.enforce_memory else ''}",
            "GresTypes=gpu", "ReturnToService=2", "SlurmdParameters=config_overrides",
            f"SlurmdTimeout={self.slurmd_timeout}", "KillWait=2", f"MinJobAge={self.min_job_age}", "InactiveLimit=0",
            "JobRequeue=0", "MessageTimeout=5", "TCPTimeout=3",
            "AccountingStorageType=accounting_storage/none",
            *(["JobCompType=jobcomp/filetxt", f"JobCompLoc={self.root / 'jobcomp.txt'}"] if self.jobcomp
              else ["JobCompType=jobcomp/none"]),
            *(["JobAcctGatherType=jobacct_gather/linux", "JobAcctGatherFrequency=task=1",
               "JobAcctGatherParams=OverMemoryKill"] if self.enforce_memory else []),
        ]
        gres = ["AutoDetect=off"]
        for node in self.nodes:
            node.port = _free_port() if single else _free_port()
            extra = f" Gres=gpu:{node.gpus}" if node.gpus else ""
            lines.append(f"NodeName={node.name} NodeAddr={node.address} NodeHostname={node.name if not single else self.hostname} "
                         f"Port={node.port} CPUs={node.cpus} RealMemory={node.memory_mb}{extra} State=UNKNOWN")
            if node.gpus:
                gdir = self.root / "gpu" / node.name
                gdir.mkdir(parents=True, exist_ok=True)
                for i in range(node.gpus):
                    (gdir / f"nv{i}").touch()
                gres.append(f"NodeName={node.name} Name=gpu File={gdir}/nv[0-{node.gpus - 1}]"
                            if node.gpus > 1 else f"NodeName={node.name} Name=gpu File={gdir}/nv0")
        lines.append(f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        for name, members in self.partitions.items():
            lines.append(f"PartitionName={name} Nodes={','.join(members)} MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.root / "gres.conf").write_text("\n".join(gres) + "\n")

    def _slurmd(self, node: Node) -> None:
        argv = ["/usr/sbin/slurmd", "-D", "-f", str(self.conf), "-N", node.name]
        if node.ns:
            # Its own hostname (what srun and slurmstepd call it) and the cluster's hosts file.
            script = (f"mount --bind {self.root / 'hosts'} /etc/hosts && hostname {node.name} && exec \"$@\"")
            argv = ["unshare", "--uts", "--mount", "sh", "-c", script, "sh", *argv]
        node.popen = self._daemon(f"slurmd-{node.name}", argv, node.ns)

    def _daemon(self, name: str, argv: list[str], ns: str | None) -> subprocess.Popen[bytes]:
        if ns:
            # nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroup mounts slurmd needs.
            argv = ["nsenter", f"--net=/run/netns/{ns}", *argv]
        out = open(self.root / "log" / f"{name}.out", "ab")
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=self._env(), start_new_session=True)
        out.close()
        self._procs.append(popen)
        return popen


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], capture_output=True, text=True, check=True, timeout=30)


def _netns_pids(ns: str) -> list[int]:
    res = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    out = []
    for tok in res.stdout.split():
        try:
            with open(f"/proc/{tok}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X"):
                    out.append(int(tok))
        except (OSError, IndexError):
            continue
    return out


def _slurmd_pid(root: Path, node: Node) -> int | None:
    try:
        return int((root / f"slurmd-{node.name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _is_daemon(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0")[0]
    except OSError:
        return False
    return os.path.basename(argv0).decode(errors="replace") in (
        "munged", "slurmctld", "slurmscriptd", "slurmd", "ip", "nsenter", "unshare", "sh")


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
