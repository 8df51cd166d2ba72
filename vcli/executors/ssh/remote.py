"""The remote process model: how a replica runs on a host and how vcli finds it again.

Every process replica runs under the same per-replica supervisor as on the local executor
(`vcli.executors.supervisor`: a child subreaper that owns the trainer's whole process tree,
writes its log and, the moment the trainer exits, its status file). Both that file and the
channel's end, `vcli.executors.ssh.wrapper`, are shipped once per host into `<workdir>/bin/`
(`install_tools`; names carry a hash of the source, so hosts never run a stale copy).

A replica is `cd CWD && exec python -S wrapper.py run ...` on its own SSH channel
(`build_remote_command`). The wrapper starts the supervisor, prints `VCLI-SUPERVISOR <pid>`,
then copies the log records the supervisor writes into the host's replica.log to the channel
(`pump` puts them into the local log with their own timestamps), and prints `VCLI-STATUS
<json>` the moment the trainer exits: the replica has ended then, even while a helper still
holds the trainer's stdout. Replicas outlive their controller: when the channel's stdin closes
(vcli released the replica, died or lost the connection) the wrapper keeps the replica running
on its lease, a file (`replica.lease` beside the host's replica.log) that every byte the
controller sends on the channel renews (`beat`, every `beat_seconds`). A new controller
re-adopts the replica with `attach_command` (`vcli custom-jobs resume`); a replica whose lease
is older than `orphan_timeout()` seconds (VCLI_SSH_ORPHAN_TIMEOUT, default 600: its controller
is dead, or cut off by a network partition) is stopped by its wrapper, whole tree included
(SIGTERM, `ORPHAN_GRACE_SECONDS`, SIGKILL), so a host never keeps an orphan for good.
The environment travels as quoted `NAME=VALUE` arguments (sshd's AcceptEnv would
drop arbitrary names), except secrets, which travel on the channel's stdin so they never
appear in a command line, a process list or a log. Every process of the replica carries
VCLI_JOB_ID=<job> and VCLI_REPLICA=<job>/<task>.

Stopping is `wrapper.py stop` run from a second channel (`stop_command`): SIGTERM to each
supervisor, grace, SIGUSR1 (SIGKILL to the whole tree), then SIGKILL to every process on the
host still carrying the replica's VCLI_REPLICA tag. sshd refuses the SSH "signal" channel
request for root logins, so vcli never relies on it. Only supervisors whose environment
carries `VCLI_JOB_ID=<job>` are signalled, so a reused pid is never hit.

Paths: every local path under vcli's home maps to the same relative path under the host's
workdir (`map_path`, `remote_view`): replica dirs, the hypertune metric file, AIP_MODEL_DIR etc.
Outputs (and the host's copy of replica.log and replica.status) stay on the host; the replica
log's first vcli line says where.

A handle's `ref` is `SUPERVISOR_PID@JOB@ROOT` (process) or `docker:CONTAINER@JOB@ROOT`
(container on the host's engine), so another vcli process can stop the replica from the
stored handle alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import random
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from vcli.errors import ExecutorError, InvalidValueError
from vcli.executors import ReplicaHandle, ReplicaLaunch, ReplicaStatus
from vcli.executors import supervisor as _supervisor
from vcli.executors.ssh import wrapper as _wrapper
from vcli.executors.ssh.link import Conn, HostLink, q, qargv, unreached
from vcli.logs import LogWriter
from vcli.placement import gpuinfo as _gpuinfo
from vcli.placement import gpulease as _gpulease
from vcli.placement import leasefiles as _leasefiles
from vcli.placement import leaseserver as _leaseserver

__all__ = [
    "ALIVE_SCRIPT",
    "find_replica",
    "DEFAULT_ORPHAN_TIMEOUT",
    "FREE_PORT",
    "ORPHAN_GRACE_SECONDS",
    "REPLICA_TAG",
    "RemoteView",
    "RemotePaths",
    "Replica",
    "Tools",
    "attach_command",
    "beat",
    "beat_seconds",
    "build_remote_command",
    "install_tools",
    "map_path",
    "orphan_timeout",
    "parse_ref",
    "pump",
    "remote_paths",
    "remote_view",
    "replica_details",
    "replica_tag",
    "signal_code",
    "status_of",
    "stop_command",
]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REPLICA_TAG = _wrapper.REPLICA_TAG
#: After the channel closes, how long the wrapper's stop request waits before SIGKILL: the
#: same as a local supervisor whose controller died.
ORPHAN_GRACE_SECONDS = _supervisor.ORPHAN_GRACE_SECONDS
#: How long a replica runs on with no controller renewing its lease (seconds).
DEFAULT_ORPHAN_TIMEOUT = 600.0


def orphan_timeout() -> float:
    """VCLI_SSH_ORPHAN_TIMEOUT (seconds, default 600): how long a replica whose controller is gone
    (dead, or cut off) keeps running, waiting to be re-adopted, before its host stops it."""
    raw = os.environ.get("VCLI_SSH_ORPHAN_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_ORPHAN_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise InvalidValueError("VCLI_SSH_ORPHAN_TIMEOUT", f"[{raw}] is not a positive number of seconds")
    return value


def beat_seconds(timeout: float) -> float:
    """How often a controller renews its replicas' leases: often enough that a few lost beats
    (a busy controller, a slow link) never let a lease expire."""
    return min(5.0, timeout / 4)


def beat(chan: Any) -> bool:
    """Renew one replica's lease: a byte on its channel's stdin. False if it could not be sent."""
    try:
        if chan.closed or not chan.send_ready():
            return False
        return chan.send(b"\n") == 1
    except Exception:  # a broken channel: the lease simply is not renewed
        return False


def replica_tag(job_id: str, task_name: str) -> str:
    """The VCLI_REPLICA value of every process of one replica (as the local executor sets it)."""
    return f"{job_id}/{task_name}"


@dataclass(frozen=True)
class Tools:
    """Where the supervisor, the wrapper and the GPU lease server are on one host."""

    supervisor: str
    wrapper: str
    gpulease: str
    leaseserver: str
    gpuinfo: str
    leasefiles: str


def install_tools(link: HostLink) -> Tools:
    """Ship the supervisor, the wrapper, the lease library (`vcli.placement.gpulease`), its
    server (`vcli.placement.leaseserver`), the GPU information library (`vcli.placement.gpuinfo`)
    and the lease library's file operations (`vcli.placement.leasefiles`) to `<workdir>/bin/` once
    per host and version.

    Each file is named after a hash of its source and written under a temporary name, then
    renamed into place, so concurrent vcli processes (or hosts sharing a workdir) never run a
    half-written or stale copy.
    """
    with link.tools_lock:
        if link.tools is None:
            bin_dir = f"{link.root()}/bin"
            rc, err = link.quick(f"mkdir -p -- {q(bin_dir)}", timeout=30)
            if rc != 0:
                raise ExecutorError(f"Host {link.host.name}: cannot create {bin_dir}: {err.strip()}")
            paths = []
            sftp = link.sftp()
            try:
                for module, stem in ((_supervisor, "supervisor"), (_wrapper, "wrapper"), (_gpulease, "gpulease"),
                                     (_leaseserver, "leaseserver"), (_gpuinfo, "gpuinfo"),
                                     (_leasefiles, "leasefiles")):
                    with open(module.__file__ or "", "rb") as f:
                        source = f.read()
                    path = f"{bin_dir}/vcli-{stem}-{hashlib.sha256(source).hexdigest()[:12]}.py"
                    try:
                        sftp.stat(path)
                    except FileNotFoundError:
                        tmp = f"{path}.tmp{random.randrange(1 << 32):x}"
                        with sftp.open(tmp, "wb") as f:
                            f.write(source)
                        sftp.posix_rename(tmp, path)
                    paths.append(path)
            except OSError as e:
                raise ExecutorError(f"Host {link.host.name}: cannot install vcli's supervisor in {bin_dir}: {e}") from None
            finally:
                sftp.close()
            link.tools = Tools(*paths)
        return link.tools


def build_remote_command(argv: Sequence[str], env: Mapping[str, str], *, cwd: str, python: str, tools: Tools,
                         status: str, log: str, tag: str, lease: str, timeout: float = DEFAULT_ORPHAN_TIMEOUT,
                         mkdirs: Sequence[str] = (), secrets: Sequence[str] = (),
                         grace: float = ORPHAN_GRACE_SECONDS, gpu_leases: tuple[str, Sequence[int | str]] | None = None) -> str:
    """The command string for a replica: every piece is quoted; env goes as NAME=VALUE arguments.

    `secrets` are the names of the variables the executor sends on stdin after starting the
    command (`NAME=VALUE` lines, then an empty line); their values are masked in the log.
    `lease` is the replica's lease file and `timeout` how stale it may get before the host
    stops the replica. `gpu_leases` is (the host's lease server socket, GPU indices): the
    wrapper takes those leases over from the server and its supervisor holds them.
    """
    if not argv:
        raise ExecutorError("nothing to run: empty command")
    for name in env:
        if not _ENV_NAME.match(name):
            raise InvalidValueError("env", f"[{name}] is not a valid environment variable name")
    parts = []
    if mkdirs:
        parts.append(f"mkdir -p -- {qargv(mkdirs)}")
    parts.append(f"cd -- {q(cwd)}")
    wrapper = [python, "-S", tools.wrapper, "run", tools.supervisor, status, log, tag, f"{grace:g}", lease,
               f"{timeout:g}"]
    if gpu_leases is not None:
        wrapper += ["--lease-from", gpu_leases[0], "--lease-gpus", ",".join(str(k) for k in gpu_leases[1])]
    if secrets:
        wrapper.append("--secrets")
    for name in secrets:
        wrapper += ["--mask", name]
    wrapper += [f"{k}={v}" for k, v in env.items()]
    parts.append("exec " + qargv([*wrapper, "--", *argv]))
    return " && ".join(parts)


def attach_command(python: str, tools: Tools, job_id: str, pid: str, paths: RemotePaths, tag: str,
                   after: Mapping[str, float]) -> str:
    """`wrapper.py attach`: follow supervisor `pid` of job `job_id`, its log after `after`."""
    return qargv([python, "-S", tools.wrapper, "attach", job_id, pid, paths.status, paths.log, tag, paths.lease,
                  json.dumps(dict(after))])


def stop_command(python: str, tools: Tools, job_id: str, grace_seconds: float,
                 targets: Sequence[tuple[str, str]]) -> str:
    """`wrapper.py stop`: TERM each (supervisor pid, tag) of job `job_id`, grace, KILL, sweep the tags."""
    args = [python, "-S", tools.wrapper, "stop", job_id, f"{max(0.1, grace_seconds):g}"]
    for pid, tag in targets:
        args += [pid, tag]
    return qargv(args)


#: `python -S -c FIND_CODE TAG STATUS`: `VCLI-SUPERVISOR <pid>` of replica TAG's supervisor (the
#: root of the live processes carrying VCLI_REPLICA=TAG: its wrapper does not), else
#: `VCLI-ENDED` if its STATUS file exists, else `VCLI-NONE`.
FIND_CODE = r"""
import os, sys
tag, status = ("VCLI_REPLICA=" + sys.argv[1]).encode(), sys.argv[2]
def stat(p):
    try:
        with open("/proc/%s/stat" % p, "rb") as f: s = f.read()
        with open("/proc/%s/environ" % p, "rb") as f: env = f.read().split(b"\0")
    except OSError: return None
    fields = s[s.rfind(b")") + 2:].split()
    return int(fields[1]) if tag in env and fields[0] not in (b"Z", b"X") else None
tagged = {int(p): stat(p) for p in os.listdir("/proc") if p.isdigit()}
roots = sorted(p for p, parent in tagged.items() if parent is not None and tagged.get(parent) is None)
print("VCLI-SUPERVISOR %d" % roots[0] if roots else "VCLI-ENDED" if os.path.exists(status) else "VCLI-NONE")
"""


def find_replica(executor: str, link: HostLink, launch: ReplicaLaunch, home: str) -> ReplicaHandle | None:
    """`FIND_CODE` on the host: the handle of the replica's live supervisor, or of its end (pid
    0: its status file is there), None if it never started. Raises ExecutorError."""
    paths = remote_paths(launch, remote_view(launch, link.root(), home), home)
    rc, out, err = link.run(qargv([link.host.python, "-S", "-c", FIND_CODE,
                                   replica_tag(launch.job_id, launch.task_name), paths.status]), timeout=30)
    said = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("VCLI-")}
    if rc != 0 or not said:
        raise ExecutorError(f"Cannot look for replica {launch.task_name} on host {link.host.name}: "
                            f"{(err.strip().splitlines() or [f'exit status {rc}'])[-1]}")
    pid = said["VCLI-SUPERVISOR"][0] if "VCLI-SUPERVISOR" in said else "0" if "VCLI-ENDED" in said else None
    if pid is None:
        return None
    ref = f"{pid}@{launch.job_id}@{link.root()}"
    return ReplicaHandle(executor=executor, host=link.host.name, ref=ref, task_name=launch.task_name,
                         details=replica_details(link.host.name, ref))


#: `sh -c ALIVE_SCRIPT alive JOB PID`: RUNNING if PID is alive and carries VCLI_JOB_ID=JOB.
ALIVE_SCRIPT = r'''
j=$1; p=$2
IFS= read -r s 2>/dev/null <"/proc/$p/stat" || { echo GONE; exit 0; }
case "${s##*) }" in Z*|X*) echo GONE; exit 0;; esac
tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxF "VCLI_JOB_ID=$j" && { echo RUNNING; exit 0; }
echo GONE
'''



def supervisor_alive(link: HostLink, job_id: str, pid: str, what: str, orphan_timeout: float) -> bool:
    """Is the supervisor `pid` of job `job_id` still running on `link`'s host? One round trip;
    a host it cannot reach (or a shell that never ran the check) raises `link.unreached`'s
    error: nothing is concluded."""
    try:
        rc, out, err = link.run(f"sh -c {q(ALIVE_SCRIPT)} alive {q(job_id)} {q(pid)}", timeout=20)
    except ExecutorError as e:
        raise unreached(link, what, orphan_timeout, str(e)) from None
    if "RUNNING" not in out and "GONE" not in out:
        raise unreached(link, what, orphan_timeout, err.strip() or f"its shell exited {rc}")
    return "RUNNING" in out


FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


@dataclass
class Replica:
    """A replica this process started: its channel, output pumps and what it ended with."""

    launch: ReplicaLaunch
    link: HostLink
    conn: Conn
    chan: Any
    writer: LogWriter
    remote_root: str
    remote_metric: str
    #: The supervisor's pid on the host (from the wrapper's handshake).
    supervisor: int | None = None
    #: How the trainer ended, from the wrapper's `VCLI-STATUS` line (the supervisor's status file).
    trainer_status: ReplicaStatus | None = None
    started: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    exit_signal: str | None = None
    result: ReplicaStatus | None = None
    stopped_by_vcli: bool = False
    early_stderr: list[str] = field(default_factory=list)
    released: bool = False
    #: path -> (monotonic time, text) of recent read_file answers (the study polls at 10 Hz).
    reads: dict[str, tuple[float, str | None]] = field(default_factory=dict)
    local_copy: bool = False

    def still_there(self) -> bool:
        """Is the replica's wrapper (so its supervisor, so part of its tree) still running on a live host?"""
        return self.conn.alive() and not self.chan.exit_status_ready()

    def status(self) -> ReplicaStatus:
        """How the replica stands (the executor's `poll`); once it ended, always that answer:
        the trainer's status line if the wrapper sent one, else how the channel ended, else,
        with the connection dead, the host's loss (exit code 255)."""
        if self.result is not None:
            return self.result
        if self.trainer_status is not None:  # the trainer exited; its supervisor may still be cleaning up
            self.result = self.trainer_status
            return self.result
        ended = self.chan.exit_status_ready()
        if ended and self.chan.exit_status < 0 and self.exit_signal is None and not self.conn.alive():
            ended = False  # the channel was torn down with a dead connection: report the host loss
        if ended:
            self.result = self._channel_end()
            return self.result
        if not self.conn.alive():
            host = self.link.host
            msg = (f"lost contact with host {host.name} ({host.address}): {self.conn.dead_reason}; "
                   "the replica's state there is unknown and the host is marked unhealthy")
            self.writer.write("vcli", msg)
            self.result = ReplicaStatus(running=False, exit_code=255, message=msg)
            return self.result
        return ReplicaStatus(running=True)

    def _channel_end(self) -> ReplicaStatus:
        """The replica's end once its channel closed (after the output pumps finished)."""
        for t in self.threads:
            t.join(timeout=5)
        if self.trainer_status is not None:  # the status line came with the last output
            return self.trainer_status
        code = self.chan.recv_exit_status()
        sig = signal_code(self.exit_signal)
        if sig is not None:
            return ReplicaStatus(running=False, exit_code=sig, message=f"killed by signal SIG{self.exit_signal}")
        if code < 0:
            return ReplicaStatus(running=False, exit_code=137 if self.stopped_by_vcli else 255,
                                 message="the remote process ended without an exit status")
        if self.supervisor is not None:  # the wrapper ran, but the status file never came
            return ReplicaStatus(running=False, exit_code=code,
                                 message="the replica's supervisor ended without recording an exit status")
        return ReplicaStatus(running=False, exit_code=code)


def hook_exit_signal(chan: Any, rep: Replica) -> None:
    """Remember the signal name of the channel's `exit-signal` request (paramiko drops it).

    paramiko dispatches channel requests through its transport's handler table, calling the
    class's `Channel._handle_request`, so a per-channel override would never run: the hook wraps
    that table entry once per transport (a private paramiko API, hence the `<4` cap on
    paramiko) and looks for a per-channel callback.
    """

    def on_request(m: Any) -> None:
        if m.get_text() == "exit-signal":
            m.get_boolean()
            rep.exit_signal = m.get_text()

    chan._vcli_on_request = on_request
    transport = chan.transport
    if "_channel_handler_table" in vars(transport):
        return
    from paramiko.common import MSG_CHANNEL_REQUEST

    table = dict(type(transport)._channel_handler_table)
    original = table[MSG_CHANNEL_REQUEST]

    def handle(channel: Any, m: Any) -> Any:
        callback = getattr(channel, "_vcli_on_request", None)
        if callback is not None:
            pos = m.packet.tell()
            try:
                callback(m)
            except Exception:  # never break the transport thread
                pass
            finally:
                m.packet.seek(pos)
        return original(channel, m)

    table[MSG_CHANNEL_REQUEST] = handle
    transport._channel_handler_table = table


def pump(rep: Replica, stream: str) -> None:
    """Read one stream of the replica's channel into the local log (see `_on_line`)."""
    recv = rep.chan.recv if stream == "stdout" else rep.chan.recv_stderr
    buf = b""
    try:
        while True:
            try:
                data = recv(65536)
            except Exception:  # socket closed under us
                break
            if not data:
                break
            rep.conn.touch()
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                _on_line(rep, stream, line.decode("utf-8", "replace"))
        if buf:
            _on_line(rep, stream, buf.decode("utf-8", "replace"))
    finally:
        if stream == "stdout":
            rep.started.set()  # unblock start() when the channel closed before the handshake


def _on_line(rep: Replica, stream: str, text: str) -> None:
    """stdout: rc-file noise, the handshake, then log records and the status line; stderr: as is."""
    if stream == "stderr":
        if not rep.started.is_set():
            rep.early_stderr.append(text)
        rep.writer.write("stderr", text)
        return
    if rep.supervisor is None:
        pid = text[len("VCLI-SUPERVISOR "):].strip()
        if text.startswith("VCLI-SUPERVISOR ") and pid.isdigit():
            rep.supervisor = int(pid)
            rep.started.set()
        else:  # lines before the handshake come from the login shell's rc files
            rep.writer.write("stdout", text)
        return
    if text.startswith("VCLI-STATUS "):
        try:
            rep.trainer_status = status_of(json.loads(text[len("VCLI-STATUS "):]))
        except (ValueError, TypeError, KeyError):
            rep.writer.write("vcli", f"unreadable replica status from the host: {text[:200]}")
        return
    stamp, _, rest = text.partition("\t")
    source, tab, message = rest.partition("\t")
    try:
        when = float(stamp)
    except ValueError:
        when = None
    if when is not None and tab:
        rep.writer.write(source, message, when)
    else:
        rep.writer.write("stdout", text)


def status_of(data: Mapping[str, Any]) -> ReplicaStatus:
    """A supervisor's status record `{"exitCode", "signal", "endTime"}` as a ReplicaStatus."""
    return ReplicaStatus.from_record(data)


def signal_code(name: str | None) -> int | None:
    if not name:
        return None
    import signal as _signal

    try:
        return 128 + int(_signal.Signals[f"SIG{name}"])
    except KeyError:
        return None


def parse_ref(ref: str) -> tuple[str, str, str]:
    """`SUPERVISOR_PID@JOB@ROOT` (process) or `docker:CONTAINER@JOB@ROOT` -> (token, job id, remote workdir)."""
    token, job_id, root = ref.split("@", 2)
    return token, job_id, root


@dataclass(frozen=True)
class RemoteView:
    """A launch's paths and environment as seen on its host."""

    root: str
    env: dict[str, str]
    output_dir: str
    metric_file: str
    mounts: tuple[str, ...]
    mkdirs: tuple[str, ...]


def remote_view(launch: ReplicaLaunch, root: str, home: str) -> RemoteView:
    """The launch as seen on its host: every local path under vcli's `home` maps to `root`."""
    env = {k: map_path(v, home, root) for k, v in launch.env.items()}
    out = map_path(os.path.abspath(launch.output_dir), home, root)
    if out == os.path.abspath(launch.output_dir):  # not under vcli's home: keep it per job
        out = f"{root}/jobs/{launch.job_id}/replicas/{launch.task_name}"
    metric = map_path(os.path.abspath(launch.metric_file), home, root)
    if metric == os.path.abspath(launch.metric_file):
        metric = f"{out}/hypertune/output.metrics"
    if "CLOUD_ML_HP_METRIC_FILE" in env:
        env["CLOUD_ML_HP_METRIC_FILE"] = metric
    mounts = tuple(map_path(os.path.abspath(m), home, root) for m in launch.mounts)
    mkdirs = [out, posixpath.dirname(metric)]
    for key in ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        if key in env and env[key].startswith(root + "/"):
            mkdirs.append(env[key])
    mkdirs += [m for m in mounts if m.startswith(root + "/")]
    return RemoteView(root=root, env=env, output_dir=out, metric_file=metric, mounts=mounts,
                       mkdirs=tuple(dict.fromkeys(mkdirs)))


@dataclass(frozen=True)
class RemotePaths:
    """A process replica's own files on its host: the log the supervisor writes, its status
    file and its lease."""

    log: str
    status: str
    lease: str


def remote_paths(launch: ReplicaLaunch, view: RemoteView, home: str) -> RemotePaths:
    """Where a launch's log, status and lease are on its host (the same for `start` and `attach`)."""
    log = map_path(os.path.abspath(launch.log_path), home, view.root)
    if log == os.path.abspath(launch.log_path):
        # Not under vcli's home, or a host whose workdir is this very directory: a file of
        # its own, so the two writers never append to the same file.
        log = f"{view.output_dir}/replica.host.log"
    where = posixpath.dirname(log)
    return RemotePaths(log=log, status=f"{where}/replica.status", lease=f"{where}/replica.lease")




def map_path(path: str, local_home: str, remote_root: str) -> str:
    """A local path under vcli's home -> the same relative path under the host's workdir."""
    if path == local_home:
        return remote_root
    if path.startswith(local_home.rstrip("/") + "/"):
        return posixpath.join(remote_root, path[len(local_home.rstrip("/")) + 1:])
    return path



def replica_details(host: str, ref: str) -> dict[str, str]:
    """Where a replica runs and keeps its files on its host, for `ReplicaHandle.details`.

    {"host", "workdir" (the host's vcli workdir), "jobDir", and "supervisor" (its pid) or "container"}.
    """
    token, job_id, root = parse_ref(ref)
    out = {"host": host, "workdir": root, "jobDir": f"{root}/jobs/{job_id}"}
    if token.startswith("docker:"):
        out["container"] = token[len("docker:"):][:12]
    else:
        out["supervisor"] = token
    return out
