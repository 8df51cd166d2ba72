"""The remote process model: how a replica runs on a host and how vcli finds it again.

A replica is `sh -c 'echo PGID=$$; ...; exec "$0" "$@"' env K=V... argv` on its own SSH
channel: sshd makes the login shell a session leader, so the replica and everything it spawns
are one process group, whose id the wrapper prints first. A watcher in the group waits for the
channel's stdin to close (vcli exited or released the replica) and then kills the group, so a
replica never outlives its controller's connection by more than the time sshd needs to notice.
The environment travels as quoted `env NAME=VALUE` arguments (sshd's AcceptEnv would drop
arbitrary names), except secrets, which travel on the channel's stdin so they never appear in a
command line, a process list or a log.

Stopping is `kill -TERM -- -PGID`, grace, `kill -KILL`, run from a second channel (`KILL_SCRIPT`):
sshd refuses the SSH "signal" channel request for root logins, so vcli never relies on it. Only
groups whose processes carry `VCLI_JOB_ID=<job>` are signalled, so a reused pgid is never hit.

Paths: every local path under vcli's home maps to the same relative path under the host's
workdir (`map_path`, `remote_view`): replica dirs, the hypertune metric file, AIP_MODEL_DIR etc.
Outputs stay on the host; the replica log's first vcli line says where.

A handle's `ref` is `PGID@JOB@ROOT` (process) or `docker:CONTAINER@JOB@ROOT` (container on the
host's engine), so another vcli process can stop the replica from the stored handle alone.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from vcli.errors import ExecutorError, InvalidValueError
from vcli.executors import ReplicaLaunch, ReplicaStatus
from vcli.executors.ssh.link import Conn, HostLink, q, qargv
from vcli.logs import LogWriter

__all__ = [
    "ALIVE_SCRIPT",
    "FREE_PORT",
    "KILL_SCRIPT",
    "RemoteView",
    "Replica",
    "build_remote_command",
    "map_path",
    "parse_ref",
    "pump",
    "remote_view",
    "replica_details",
    "signal_code",
]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


#: Prints the pgid, reads secret NAME=VALUE lines from stdin (ended by an empty line), starts
#: the watcher that kills the group when stdin closes, and becomes `env K=V... argv`.
_WRAPPER_HEAD = 'echo "PGID=$$"; exec 3<&0; '
_WRAPPER_SECRETS = 'while IFS= read -r l <&3 && [ -n "$l" ]; do export "$l" || exit 126; done; '
_WRAPPER_TAIL = ('( cat >/dev/null 2>&1; kill -s KILL -- "-$$" ) <&3 >/dev/null 2>&1 & '
                 'exec "$0" "$@" </dev/null 3<&-')


def build_remote_command(argv: Sequence[str], env: Mapping[str, str], *, cwd: str,
                         mkdirs: Sequence[str] = (), secrets: bool = False) -> str:
    """The command string for a replica: every piece is quoted; env goes through `env K=V`."""
    if not argv:
        raise ExecutorError("nothing to run: empty command")
    for name in env:
        if not _ENV_NAME.match(name):
            raise InvalidValueError("env", f"[{name}] is not a valid environment variable name")
    wrapper = _WRAPPER_HEAD + (_WRAPPER_SECRETS if secrets else "") + _WRAPPER_TAIL
    parts = []
    if mkdirs:
        parts.append(f"mkdir -p -- {qargv(mkdirs)}")
    parts.append(f"cd -- {q(cwd)}")
    assignments = [f"{k}={v}" for k, v in env.items()]
    parts.append(" ".join(["exec /bin/sh -c", q(wrapper), "env", *(q(a) for a in assignments), *(q(a) for a in argv)]))
    return " && ".join(parts)


#: `sh -s JOB GRACE_TENTHS PGID...`: TERM the groups that carry VCLI_JOB_ID=JOB, wait, KILL.
KILL_SCRIPT = r'''
j=$1; n=$2; shift 2
live() {
  for d in /proc/[0-9]*; do
    IFS= read -r s 2>/dev/null <"$d/stat" || continue
    r=${s##*) }
    set -f; set -- $r; set +f
    [ "$1" = Z ] && continue
    [ "$3" = "$pg" ] || continue
    if [ -n "$own" ]; then
      tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qxF "VCLI_JOB_ID=$j" && return 0
      continue
    fi
    return 0
  done
  return 1
}
t=""
for pg in "$@"; do own=1; if live; then t="$t $pg"; kill -s TERM -- "-$pg" 2>/dev/null; fi; done
own=""
wait_gone() {
  i=0
  while [ "$i" -lt "$1" ]; do
    any=""; for pg in $t; do live && any=1; done
    [ -z "$any" ] && return 0
    sleep 0.1; i=$((i+1))
  done
  return 1
}
if [ -n "$t" ] && ! wait_gone "$n"; then
  for pg in $t; do live && kill -s KILL -- "-$pg" 2>/dev/null; done
  wait_gone 50 || { echo "LEFT$t"; exit 3; }
fi
echo "STOPPED$t"
'''

ALIVE_SCRIPT = r'''
j=$1; pg=$2
for d in /proc/[0-9]*; do
  IFS= read -r s 2>/dev/null <"$d/stat" || continue
  r=${s##*) }
  set -f; set -- $r; set +f
  [ "$1" = Z ] && continue
  [ "$3" = "$pg" ] || continue
  tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qxF "VCLI_JOB_ID=$j" && { echo RUNNING; exit 0; }
done
echo GONE
'''

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
    pgid: int | None = None
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
    recv = rep.chan.recv if stream == "stdout" else rep.chan.recv_stderr
    buf = b""
    want_pgid = stream == "stdout"
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
                text = line.decode("utf-8", "replace")
                if want_pgid and text.startswith("PGID=") and text[5:].strip().isdigit():
                    want_pgid = False  # lines before it come from the login shell's rc files
                    rep.pgid = int(text[5:].strip())
                    rep.started.set()
                    continue
                if not rep.started.is_set() and stream == "stderr":
                    rep.early_stderr.append(text)
                rep.writer.write(stream, text)
        if buf:
            rep.writer.write(stream, buf.decode("utf-8", "replace"))
    finally:
        if stream == "stdout":
            rep.started.set()  # unblock start() when the channel closed before PGID


def signal_code(name: str | None) -> int | None:
    if not name:
        return None
    import signal as _signal

    try:
        return 128 + int(_signal.Signals[f"SIG{name}"])
    except KeyError:
        return None


def parse_ref(ref: str) -> tuple[str, str, str]:
    """`PGID@JOB@ROOT` (process) or `docker:CONTAINER@JOB@ROOT` -> (token, job id, remote workdir)."""
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


def map_path(path: str, local_home: str, remote_root: str) -> str:
    """A local path under vcli's home -> the same relative path under the host's workdir."""
    if path == local_home:
        return remote_root
    if path.startswith(local_home.rstrip("/") + "/"):
        return posixpath.join(remote_root, path[len(local_home.rstrip("/")) + 1:])
    return path



def replica_details(host: str, ref: str) -> dict[str, str]:
    """Where a replica runs and keeps its files on its host, for `ReplicaHandle.details`.

    {"host", "workdir" (the host's vcli workdir), "jobDir", and "processGroup" or "container"}.
    """
    token, job_id, root = parse_ref(ref)
    out = {"host": host, "workdir": root, "jobDir": f"{root}/jobs/{job_id}"}
    if token.startswith("docker:"):
        out["container"] = token[len("docker:"):][:12]
    else:
        out["processGroup"] = token
    return out
