"""The SSH executor: replicas as processes on inventory hosts, over paramiko (no agent, no sudo).

paramiko is imported here only, lazily (`pip install 'vcli[ssh]'`).

Security
    Host keys are checked against the user's `~/.ssh/known_hosts` and vcli's own
    `<config dir>/known_hosts`. An unknown key is refused with its type and SHA256
    fingerprint and the command that accepts it (`vcli hosts add NAME --accept-new-host-key`,
    which appends it to vcli's file); a changed key is refused loudly. Nothing is ever added
    silently. Remote commands are built from argument vectors with `shlex.quote`; the
    environment travels as quoted `env NAME=VALUE` arguments (sshd's AcceptEnv would drop
    arbitrary names), except secrets (`vcli.codec.is_secret`), which travel on the channel's
    stdin so they never appear in a command line, a process list or a log. The remote
    login shell must be POSIX (sh, bash, dash, zsh).

Remote layout (`workdir` of the host, default `~/.vcli`, expanded on the host)
    code/<package>-<hash>/     the job's local package, synced by SFTP (size+mtime; stale
                               files removed; each file replaced atomically)
    jobs/<job id>/...          every local path under vcli's home (`VCLI_HOME`) maps to the
                               same relative path under the workdir: replica dirs, the
                               hypertune metric file, AIP_MODEL_DIR etc. Outputs stay on the
                               host; the replica log's first vcli line says where.

Process model
    `sh -c 'echo PGID=$$; ...; exec "$0" "$@"' env K=V... argv`: sshd makes the login shell a
    session leader, so the replica and everything it spawns are one process group whose id
    the wrapper prints first. A watcher in the group waits for the channel's stdin to close
    (vcli exited or released the replica) and then kills the group, so a replica never
    outlives its controller's connection by more than the time sshd needs to notice.
    stop = `kill -TERM -- -PGID`, grace, `kill -KILL` from a second channel (the SSH "signal"
    request is refused for root logins; feasibility.md §5). Only groups whose processes carry
    `VCLI_JOB_ID=<job>` are signalled, so a reused pgid is never hit.

Docker runtime (`runtime: docker` in the inventory)
    The replica runs through vcli's Docker executor against the host's own engine: a private
    local UNIX socket forwards each engine connection to `docker system dial-stdio` on the host
    over the same verified SSH connection (the Docker SDK's own ssh:// transport would bypass
    vcli's known_hosts and identity file). Output/metric/AIP_* paths are mapped to the host's
    workdir as above and bind-mounted there; images must exist on the host's engine, be pullable
    from a registry, or be built there (autopackaging streams the build context over SSH).
    Needs the docker CLI (>= 18.09) on the host and the login user in its docker group.

Host failure
    Every connection runs a heartbeat (a global request every 2 s) and paramiko keepalives.
    A connection that answers nothing for `VCLI_SSH_DEAD_AFTER` seconds (default 10) is
    dead: its replicas' `poll` returns exit code 255 with a message, the host is marked
    unhealthy in the scheduler, and a background probe marks it healthy once it answers again.
    Every blocking call has a timeout, so a dead host never hangs the controller.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import posixpath
import random
import re
import shlex
import socket
import stat
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from vcli.errors import ExecutorError, InvalidValueError
from vcli.executors import ExecutorBase, Placement, ReplicaHandle, ReplicaLaunch, ReplicaStatus, process_argv
from vcli.hosts import Host
from vcli.logs import LogWriter

__all__ = [
    "ChangedHostKeyError",
    "HostKeyError",
    "SSHExecutor",
    "UnknownHostKeyError",
    "accept_host_key",
    "build_remote_command",
    "check_hosts",
    "connect",
    "fingerprint",
]

CONNECT_TIMEOUT = float(os.environ.get("VCLI_SSH_CONNECT_TIMEOUT", "10"))
HEARTBEAT_SECONDS = 2.0
DEAD_AFTER = float(os.environ.get("VCLI_SSH_DEAD_AFTER", "10"))
START_TIMEOUT = float(os.environ.get("VCLI_SSH_START_TIMEOUT", "60"))
#: read_file answers for a running replica are at most this old (seconds).
READ_INTERVAL = 1.0
#: Channels per connection before another connection is opened (sshd's MaxSessions is 10).
MAX_CHANNELS = 8
#: Fallback port range when the host has no Python to ask for a free port.
PORT_RANGE = (20000, 29999)
_EXCLUDED_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", "venv",
                  "node_modules", ".tox", ".ipynb_checkpoints"}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _paramiko() -> Any:
    try:
        import paramiko
    except ImportError:  # pragma: no cover - depends on the installation
        raise ExecutorError("The ssh executor needs paramiko: pip install 'vcli[ssh]'.") from None
    import logging

    log = logging.getLogger("paramiko")
    if not log.handlers:  # its transport threads log tracebacks; vcli reports one line instead
        log.addHandler(logging.NullHandler())
    return paramiko


# =========================================================================== host keys


class HostKeyError(ExecutorError):
    """The host's key could not be verified; nothing was sent to it."""


class UnknownHostKeyError(HostKeyError):
    def __init__(self, host: Host, key_type: str, fp: str, accept_hint: str | None = None) -> None:
        self.host, self.key_type, self.fingerprint = host, key_type, fp
        hint = accept_hint or f"vcli hosts add {host.name} --accept-new-host-key"
        super().__init__(
            f"Host key of {host.name} ({_hostport(host)}) is not known: the host offered the {key_type} key "
            f"{fp}. vcli never accepts keys silently. Check the fingerprint on the host "
            f"(`ssh-keygen -lf /etc/ssh/ssh_host_{_key_file_kind(key_type)}_key.pub`), then accept it with: {hint}"
        )


class ChangedHostKeyError(HostKeyError):
    def __init__(self, host: Host, key_type: str, fp: str, known_fp: str, where: str) -> None:
        self.key_type, self.fingerprint, self.known_fingerprint = key_type, fp, known_fp
        super().__init__(
            f"HOST KEY CHANGED for {host.name} ({_hostport(host)}): it offered {key_type} {fp}, but {where} "
            f"records {known_fp}. Someone may be intercepting the connection (or the host was reinstalled); "
            f"vcli refused to connect. If the change is expected, remove the old key with "
            f"`ssh-keygen -f {where} -R '{known_host_name(host.address, host.port)}'` and accept the new one with "
            f"`vcli hosts add {host.name} --accept-new-host-key`."
        )


def _hostport(host: Host) -> str:
    return f"{host.login}@{host.address}:{host.port}"


def _key_file_kind(key_type: str) -> str:
    return {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "rsa-sha2-512": "rsa", "rsa-sha2-256": "rsa"}.get(
        key_type, "ecdsa" if key_type.startswith("ecdsa") else "*")


def fingerprint(key: Any) -> str:
    """OpenSSH's `SHA256:<base64>` fingerprint of a paramiko public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_host_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _known_hosts_files() -> list[Path]:
    from vcli.hosts import known_hosts_file, user_known_hosts_file

    return [user_known_hosts_file(), known_hosts_file()]


def _recorded_key(host: Host, key_type: str) -> tuple[str, str] | None:
    """(fingerprint, file) of the key recorded for the host (same type first), if any."""
    paramiko = _paramiko()
    name = known_host_name(host.address, host.port)
    fallback = None
    for path in _known_hosts_files():
        if not path.exists():
            continue
        try:
            keys = paramiko.HostKeys(str(path)).lookup(name)
        except (OSError, paramiko.SSHException):
            continue
        if not keys:
            continue
        for ktype in keys.keys():
            if ktype == key_type:
                return fingerprint(keys[ktype]), str(path)
            fallback = fallback or (fingerprint(keys[ktype]), str(path))
    return fallback


def _record_host_key(host: Host, key: Any) -> Path:
    from vcli.hosts import known_hosts_file

    path = known_hosts_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="ascii") as f:
        f.write(f"{known_host_name(host.address, host.port)} {key.get_name()} {key.get_base64()}\n")
    return path


def _make_policy(host: Host, accept_new: bool, accepted: list[Any]) -> Any:
    paramiko = _paramiko()

    class _Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            if not accept_new:
                raise UnknownHostKeyError(host, key.get_name(), fingerprint(key))
            _record_host_key(host, key)
            accepted.append(key)

    return _Policy()


# =========================================================================== connecting


def connect(host: Host, *, accept_new_host_key: bool = False, timeout: float | None = None) -> tuple[Any, Any | None]:
    """An authenticated paramiko SSHClient for `host`, plus the key accepted now (if any).

    Raises UnknownHostKeyError / ChangedHostKeyError / ExecutorError with one clear line. The
    client is closed whenever connecting fails (sshd would otherwise keep the pre-auth
    connection until LoginGraceTime).
    """
    paramiko = _paramiko()
    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    client = paramiko.SSHClient()
    accepted: list[Any] = []
    try:
        for path in _known_hosts_files():
            if path.exists():
                try:
                    client.load_system_host_keys(str(path))
                except (OSError, paramiko.SSHException) as e:
                    raise ExecutorError(f"Cannot read known_hosts file {path}: {e}") from None
        client.set_missing_host_key_policy(_make_policy(host, accept_new_host_key, accepted))
        kwargs: dict[str, Any] = {}
        if host.identity_file:
            key_file = os.path.expanduser(host.identity_file)
            if not os.path.exists(key_file):
                raise ExecutorError(f"Host {host.name}: identity file {host.identity_file} does not exist.")
            kwargs.update(key_filename=key_file, look_for_keys=False, allow_agent=False)
        client.connect(
            hostname=host.address, port=host.port, username=host.login, timeout=timeout,
            banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout, **kwargs,
        )
        transport = client.get_transport()
        transport.set_keepalive(int(HEARTBEAT_SECONDS * 2) or 1)
        return client, (accepted[0] if accepted else None)
    except HostKeyError:
        client.close()
        raise
    except paramiko.BadHostKeyException as e:
        client.close()
        recorded = _recorded_key(host, e.key.get_name())
        known_fp, where = recorded if recorded else (fingerprint(e.expected_key), "known_hosts")
        raise ChangedHostKeyError(host, e.key.get_name(), fingerprint(e.key), known_fp, where) from None
    except paramiko.AuthenticationException as e:
        client.close()
        how = f"identity file {host.identity_file}" if host.identity_file else "ssh-agent / ~/.ssh/id_* keys"
        raise ExecutorError(f"Host {host.name} ({_hostport(host)}): authentication failed with {how}: {e}") from None
    except (paramiko.SSHException, OSError, EOFError) as e:
        client.close()
        reason = "timed out" if isinstance(e, socket.timeout) else (str(e) or type(e).__name__)
        raise ExecutorError(f"Cannot connect to host {host.name} ({_hostport(host)}): {reason}") from None
    except BaseException:
        client.close()
        raise


def accept_host_key(host: Host, *, timeout: float | None = None) -> tuple[str, str, bool]:
    """Connect, recording the host's key in vcli's known_hosts if it is new.

    Returns (key type, fingerprint, newly accepted). A changed key is still refused.
    """
    client, key = connect(host, accept_new_host_key=True, timeout=timeout)
    try:
        server_key = client.get_transport().get_remote_server_key()
        return server_key.get_name(), fingerprint(server_key), key is not None
    finally:
        client.close()


def run_command(client: Any, command: str, *, timeout: float, stdin: bytes | None = None) -> tuple[int, str, str]:
    """Run a shell command string, return (exit status, stdout, stderr); bounded by `timeout`."""
    chan = client.get_transport().open_session(timeout=timeout)
    try:
        chan.settimeout(timeout)
        chan.exec_command(command)
        if stdin:
            chan.sendall(stdin)
        chan.shutdown_write()
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout
        while True:
            progressed = False
            if chan.recv_ready():
                out += chan.recv(65536)
                progressed = True
            if chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
                progressed = True
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            if time.monotonic() > deadline:
                raise ExecutorError(f"remote command timed out after {timeout:g}s")
            if not progressed:
                time.sleep(0.01)
        return chan.recv_exit_status(), out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    finally:
        chan.close()


def q(value: str) -> str:
    return shlex.quote(str(value))


def qargv(argv: Iterable[str]) -> str:
    return " ".join(q(a) for a in argv)


# =========================================================================== remote command

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
_KILL_SCRIPT = r'''
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

_ALIVE_SCRIPT = r'''
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

_FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


# =========================================================================== connections


class _Conn:
    """One SSH connection: a heartbeat thread and a liveness verdict."""

    def __init__(self, host: Host, client: Any, on_dead: Callable[["_Conn", str], None]) -> None:
        self.host = host
        self.client = client
        self.transport = client.get_transport()
        self.channels = 0
        self.last_ok = time.monotonic()
        self.dead_reason: str | None = None
        self._on_dead = on_dead
        self._closed = threading.Event()
        threading.Thread(target=self._heartbeat, name=f"vcli-ssh-hb-{host.name}", daemon=True).start()

    def touch(self) -> None:
        self.last_ok = time.monotonic()

    def _heartbeat(self) -> None:
        while not self._closed.wait(HEARTBEAT_SECONDS):
            if not self.transport.is_active():
                break
            try:
                self.transport.global_request("keepalive@openssh.com", wait=True)
            except Exception:  # noqa: BLE001 - a broken transport is found below
                pass
            if self.transport.is_active():
                self.touch()
        self.alive()

    def alive(self) -> bool:
        """False once the connection broke or has not answered for DEAD_AFTER seconds."""
        if self.dead_reason is not None:
            return False
        if self._closed.is_set():
            return False
        if not self.transport.is_active():
            self._declare_dead("the SSH connection was closed")
            return False
        silent = time.monotonic() - self.last_ok
        if silent > DEAD_AFTER:
            self._declare_dead(f"no answer over SSH for {silent:.0f}s")
            return False
        return True

    def _declare_dead(self, reason: str) -> None:
        if self.dead_reason is not None:
            return
        self.dead_reason = reason
        self._closed.set()
        threading.Thread(target=self._close_quietly, daemon=True).start()
        self._on_dead(self, reason)

    def _close_quietly(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass

    def close(self) -> None:
        self._closed.set()
        self._close_quietly()


class _HostLink:
    """Everything an executor holds for one host: connections, remote home, synced code."""

    def __init__(self, host: Host, on_dead: Callable[[Host, str], None]) -> None:
        self.host = host
        self._on_dead = on_dead
        self._lock = threading.RLock()
        self._conns: list[_Conn] = []
        self._home: str | None = None
        self._synced: dict[str, str] = {}
        self._sync_lock = threading.Lock()
        self._sftp_lock = threading.Lock()
        self._ctl_lock = threading.Lock()
        self._ctl: tuple[_Conn, Any] | None = None
        self._sftp: Any = None
        self._sftp_conn: _Conn | None = None
        self.ports: dict[int, float] = {}

    # -- connections

    def _new_conn(self) -> _Conn:
        client, _ = connect(self.host)
        conn = _Conn(self.host, client, lambda c, reason: self._on_dead(self.host, reason))
        self._conns.append(conn)
        return conn

    def conn(self) -> _Conn:
        with self._lock:
            for c in self._conns:
                if c.alive():
                    return c
            self._conns = [c for c in self._conns if c.dead_reason is None]
            return self._new_conn()

    def open_session(self) -> tuple[_Conn, Any]:
        paramiko = _paramiko()
        with self._lock:
            candidates = [c for c in self._conns if c.alive() and c.channels < MAX_CHANNELS]
            for c in candidates:
                try:
                    chan = c.transport.open_session(timeout=CONNECT_TIMEOUT)
                except (paramiko.ChannelException, paramiko.SSHException, EOFError, OSError):
                    c.channels = MAX_CHANNELS  # the server refused more sessions here
                    continue
                c.channels += 1
                return c, chan
            c = self._new_conn()
            try:
                chan = c.transport.open_session(timeout=CONNECT_TIMEOUT)
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise ExecutorError(f"Host {self.host.name}: cannot open an SSH session: {e}") from None
            c.channels += 1
            return c, chan

    def run(self, command: str, *, timeout: float = 30, stdin: bytes | None = None) -> tuple[int, str, str]:
        conn = self.conn()
        try:
            rc, out, err = run_command(conn.client, command, timeout=timeout, stdin=stdin)
        except ExecutorError as e:
            raise ExecutorError(f"Host {self.host.name}: {e}") from None
        except Exception as e:  # noqa: BLE001 - paramiko/socket errors
            raise ExecutorError(f"Host {self.host.name}: remote command failed: {e or type(e).__name__}") from None
        conn.touch()
        return rc, out, err

    def quick(self, command: str, *, timeout: float = 20) -> tuple[int, str]:
        """Run a short command in this host's control shell: (exit status, stdout+stderr).

        One long-lived `/bin/sh` session per host saves the session set-up (login shell, rc
        files) that every exec pays: ~200 ms on a loaded machine, a few ms this way. Calls are
        serialised; the command must not read stdin (it gets /dev/null) and must not exit.
        """
        with self._ctl_lock:
            for attempt in (0, 1):
                self.conn()  # connection errors (host key, auth, unreachable) pass through as they are
                try:
                    if self._ctl is None or self._ctl[1].closed or not self._ctl[0].alive():
                        conn, chan = self.open_session()
                        chan.exec_command("exec /bin/sh")
                        self._ctl = (conn, chan)
                    conn, chan = self._ctl
                    token = f"__vcli_{os.getpid()}_{random.randrange(1 << 40):x}"
                    chan.sendall(f"{{ {command}\n}} </dev/null 2>&1; printf '\\n%s %s\\n' {token} $?\n".encode())
                    buf = b""
                    deadline = time.monotonic() + timeout
                    marker = ("\n" + token + " ").encode()
                    while marker not in buf or not buf.endswith(b"\n"):
                        if time.monotonic() > deadline:
                            raise ExecutorError(f"remote command timed out after {timeout:g}s")
                        chan.settimeout(max(0.05, min(1.0, deadline - time.monotonic())))
                        try:
                            data = chan.recv(65536)
                        except socket.timeout:
                            continue
                        if not data:
                            raise ExecutorError("the control shell closed")
                        buf += data
                    conn.touch()
                    head, _, tail = buf.rpartition(marker)
                    return int(tail.strip() or 255), head.decode("utf-8", "replace")
                except Exception as e:  # noqa: BLE001 - a broken control shell: one fresh try
                    if self._ctl is not None:
                        try:
                            self._ctl[1].close()
                        except Exception:  # noqa: BLE001
                            pass
                        self._ctl[0].channels = max(0, self._ctl[0].channels - 1)
                    self._ctl = None
                    if attempt or not self.healthy():
                        if isinstance(e, ExecutorError):
                            raise ExecutorError(f"Host {self.host.name}: {e}") from None
                        raise ExecutorError(f"Host {self.host.name}: remote command failed: {e or type(e).__name__}") from None
            raise AssertionError("unreachable")

    def sftp(self) -> Any:
        sftp = self.conn().client.open_sftp()
        sftp.get_channel().settimeout(30)
        return sftp

    def read_text(self, remote: str) -> str | None:
        """A remote file's text over a cached SFTP session (None if absent); bounded by 10 s."""
        with self._sftp_lock:
            for attempt in (0, 1):
                if self._sftp is None or self._sftp_conn is None or not self._sftp_conn.alive():
                    conn = self.conn()
                    self._sftp = conn.client.open_sftp()
                    self._sftp.get_channel().settimeout(10)
                    self._sftp_conn = conn
                try:
                    with self._sftp.open(remote, "r") as f:
                        data = f.read()
                    self._sftp_conn.touch()
                    return data.decode("utf-8", "replace")
                except (FileNotFoundError, IsADirectoryError):
                    return None
                except Exception:  # noqa: BLE001 - a broken session: open a fresh one once
                    try:
                        self._sftp.close()
                    except Exception:  # noqa: BLE001
                        pass
                    self._sftp = None
                    if attempt:
                        return None
            return None

    def healthy(self) -> bool:
        with self._lock:
            return any(c.alive() for c in self._conns)

    def close(self) -> None:
        with self._sftp_lock:
            if self._sftp is not None:
                try:
                    self._sftp.close()
                except Exception:  # noqa: BLE001
                    pass
                self._sftp = None
        with self._lock:
            for c in self._conns:
                c.close()
            self._conns = []

    # -- remote paths

    def home(self) -> str:
        with self._lock:
            if self._home is None:
                rc, out = self.quick('printf "%s" "$HOME"', timeout=CONNECT_TIMEOUT)
                if rc != 0 or not out.startswith("/"):
                    raise ExecutorError(f"Host {self.host.name}: cannot find the remote home directory: {out.strip()}")
                self._home = out.rstrip("/") or "/"
            return self._home

    def expand(self, path: str) -> str:
        if path == "~":
            return self.home()
        if path.startswith("~/"):
            return posixpath.join(self.home(), path[2:])
        if not path.startswith("/"):
            return posixpath.join(self.home(), path)
        return path

    def root(self) -> str:
        return self.expand(self.host.workdir).rstrip("/") or "/"


# =========================================================================== code shipping


def _local_manifest(root: str) -> dict[str, tuple[int, int, int]]:
    """rel path -> (size, mtime seconds, mode) of the files to ship."""
    out: dict[str, tuple[int, int, int]] = {}
    root = os.path.abspath(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _EXCLUDED_DIRS and not d.endswith(".egg-info"))
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            out[rel] = (st.st_size, int(st.st_mtime), stat.S_IMODE(st.st_mode))
    return out


def _remote_manifest(sftp: Any, root: str) -> tuple[dict[str, tuple[int, int]], set[str]]:
    files: dict[str, tuple[int, int]] = {}
    dirs: set[str] = set()
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = sftp.listdir_attr(posixpath.join(root, rel) if rel else root)
        except FileNotFoundError:
            continue
        if rel:
            dirs.add(rel)
        for e in entries:
            child = f"{rel}/{e.filename}" if rel else e.filename
            if stat.S_ISDIR(e.st_mode or 0):
                stack.append(child)
            elif stat.S_ISREG(e.st_mode or 0):
                files[child] = (int(e.st_size or 0), int(e.st_mtime or 0))
    return files, dirs


def sync_dir(link: _HostLink, local_dir: str, remote_dir: str) -> tuple[int, int, int]:
    """Make `remote_dir` a copy of `local_dir`; returns (uploaded, unchanged, removed)."""
    local = _local_manifest(local_dir)
    rc, err = link.quick(f"mkdir -p -- {q(remote_dir)}", timeout=30)
    if rc != 0:
        raise ExecutorError(f"Host {link.host.name}: cannot create {remote_dir}: {err.strip()}")
    sftp = link.sftp()
    try:
        remote, remote_dirs = _remote_manifest(sftp, remote_dir)
        uploaded = unchanged = removed = 0
        made = set(remote_dirs) | {""}
        for rel, (size, mtime, mode) in sorted(local.items()):
            if remote.get(rel) == (size, mtime):
                unchanged += 1
                continue
            parent = posixpath.dirname(rel)
            if parent not in made:
                acc = ""
                for piece in parent.split("/"):
                    acc = f"{acc}/{piece}" if acc else piece
                    if acc not in made:
                        try:
                            sftp.mkdir(posixpath.join(remote_dir, acc))
                        except OSError:
                            pass  # exists already (another replica/process made it)
                        made.add(acc)
            target = posixpath.join(remote_dir, rel)
            tmp = posixpath.join(posixpath.dirname(target), f".{posixpath.basename(target)}.vcli-{os.getpid()}-{random.randrange(1 << 30)}")
            sftp.put(os.path.join(local_dir, *rel.split("/")), tmp)
            sftp.chmod(tmp, mode)
            sftp.utime(tmp, (mtime, mtime))
            sftp.posix_rename(tmp, target)
            uploaded += 1
        for rel in remote:
            if rel not in local and not posixpath.basename(rel).startswith(".") and not rel.endswith((".pyc", ".pyo")):
                try:
                    sftp.remove(posixpath.join(remote_dir, rel))
                    removed += 1
                except OSError:
                    pass
        return uploaded, unchanged, removed
    finally:
        sftp.close()


# =========================================================================== replicas


@dataclass
class _Replica:
    launch: ReplicaLaunch
    link: _HostLink
    conn: _Conn
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


def _hook_exit_signal(chan: Any, rep: _Replica) -> None:
    """paramiko ignores the `exit-signal` channel request; remember its signal name."""
    original = chan._handle_request

    def handle(m: Any) -> Any:
        try:
            pos = m.packet.tell()
            if m.get_text() == "exit-signal":
                m.get_boolean()
                rep.exit_signal = m.get_text()
            m.packet.seek(pos)
        except Exception:  # noqa: BLE001 - never break the transport thread
            pass
        return original(m)

    chan._handle_request = handle


def _pump(rep: _Replica, stream: str) -> None:
    recv = rep.chan.recv if stream == "stdout" else rep.chan.recv_stderr
    buf = b""
    want_pgid = stream == "stdout"
    try:
        while True:
            try:
                data = recv(65536)
            except Exception:  # noqa: BLE001 - socket closed under us
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


def _signal_code(name: str | None) -> int | None:
    if not name:
        return None
    import signal as _signal

    try:
        return 128 + int(_signal.Signals[f"SIG{name}"])
    except KeyError:
        return None


def _parse_ref(ref: str) -> tuple[str, str, str]:
    """`PGID@JOB@ROOT` (process) or `docker:CONTAINER@JOB@ROOT` -> (token, job id, remote workdir)."""
    token, job_id, root = ref.split("@", 2)
    return token, job_id, root


@dataclass(frozen=True)
class _RemoteView:
    """A launch's paths and environment as seen on its host."""

    root: str
    env: dict[str, str]
    output_dir: str
    metric_file: str
    mounts: tuple[str, ...]
    mkdirs: tuple[str, ...]


def remote_view(launch: ReplicaLaunch, root: str) -> _RemoteView:
    """Map every local path under vcli's home to the host's workdir (`root`)."""
    home = _local_home()
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
    return _RemoteView(root=root, env=env, output_dir=out, metric_file=metric, mounts=mounts,
                       mkdirs=tuple(dict.fromkeys(mkdirs)))


class _DockerBridge:
    """A private local UNIX socket whose every connection is `docker system dial-stdio` run on
    the host over the link's verified SSH connection, so the Docker SDK (and vcli's Docker
    executor) talks to the host's engine with vcli's host-key checking, identity file and
    timeouts. Needs the docker CLI (>= 18.09) on the host and the login user in its docker group.
    """

    def __init__(self, link: "_HostLink") -> None:
        import tempfile

        self.link = link
        self.dir = tempfile.mkdtemp(prefix="vcli-docker-ssh-")
        os.chmod(self.dir, 0o700)
        self.path = os.path.join(self.dir, "engine.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, name=f"vcli-docker-bridge-{link.host.name}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                local, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(local,), daemon=True).start()

    def _serve(self, local: socket.socket) -> None:
        try:
            conn, chan = self.link.open_session()
            chan.exec_command("docker system dial-stdio")
        except Exception:  # noqa: BLE001 - the SDK sees a closed connection and reports it
            local.close()
            return

        def up() -> None:
            try:
                while True:
                    data = local.recv(65536)
                    if not data:
                        chan.shutdown_write()
                        return
                    chan.sendall(data)
            except Exception:  # noqa: BLE001
                chan.close()

        t = threading.Thread(target=up, daemon=True)
        t.start()
        try:
            while True:
                data = chan.recv(65536)
                if not data:
                    break
                conn.touch()
                local.sendall(data)
        except Exception:  # noqa: BLE001
            pass
        finally:
            try:
                local.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            t.join(5)
            local.close()
            chan.close()
            conn.channels = max(0, conn.channels - 1)

    def close(self) -> None:
        self._closed = True
        try:
            self._server.close()
        finally:
            try:
                os.unlink(self.path)
                os.rmdir(self.dir)
            except OSError:
                pass


def _remote_docker_executor(base_url: str) -> Any:
    from vcli.executors.docker import DockerExecutor

    class RemoteDockerExecutor(DockerExecutor):
        #: The output dirs are paths on the host: not to be created on this machine (honoured by
        #: DockerExecutor.start when it checks this attribute).
        create_local_dirs = False

    return RemoteDockerExecutor(base_url=base_url)


def _local_home() -> str:
    from vcli.store import default_home

    return os.path.abspath(str(default_home()))


def map_path(path: str, local_home: str, remote_root: str) -> str:
    """A local path under vcli's home -> the same relative path under the host's workdir."""
    if path == local_home:
        return remote_root
    if path.startswith(local_home.rstrip("/") + "/"):
        return posixpath.join(remote_root, path[len(local_home.rstrip("/")) + 1:])
    return path


def _code_dir(root: str, local_dir: str) -> str:
    tag = hashlib.sha1(f"{socket.gethostname()}:{os.path.abspath(local_dir)}".encode()).hexdigest()[:10]
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(os.path.abspath(local_dir))) or "package"
    return f"{root}/code/{base}-{tag}"


class SSHExecutor(ExecutorBase):
    """Replicas as processes on SSH hosts of the inventory. See the module docstring."""

    name = "ssh"

    def __init__(self, hosts: str | Sequence[str] | None = None, *, inventory: Mapping[str, Host] | None = None) -> None:
        from vcli import hosts as hosts_mod
        from vcli.placement import HostCapacity, JobPlacer, Scheduler

        self._inventory = dict(inventory) if inventory is not None else hosts_mod.load_inventory()
        names = hosts
        if names is None or (isinstance(names, str) and not names.strip()):
            from vcli import properties

            names = properties.get("hosts") or None
        self._host_names_given = names
        self._hosts: dict[str, Host] | None = None
        self._links: dict[str, _HostLink] = {}
        self._replicas: dict[str, _Replica] = {}
        self._lock = threading.RLock()
        self._probing: set[str] = set()
        self._dockers: dict[str, tuple[_DockerBridge, Any]] = {}
        self._docker_metric: dict[str, str] = {}
        self._docker_lost: dict[str, ReplicaStatus] = {}
        self._closed = threading.Event()
        self._Scheduler, self._HostCapacity, self._JobPlacer = Scheduler, HostCapacity, JobPlacer
        self._scheduler: Any = None
        self._placer: Any = None

    # ------------------------------------------------------------------ hosts and placement

    @property
    def hosts(self) -> dict[str, Host]:
        if self._hosts is None:
            from vcli.hosts import LOCAL, resolve_hosts

            chosen = resolve_hosts(self._host_names_given, self._inventory)
            for h in chosen:
                if h.name == LOCAL:
                    raise InvalidValueError(
                        "--hosts", "`local` cannot be mixed into an ssh run: remote replicas could not reach "
                        "127.0.0.1. Add this machine to the inventory under its network address instead.")
            self._hosts = {h.name: h for h in chosen}
        return self._hosts

    @property
    def scheduler(self) -> Any:
        if self._scheduler is None:
            self._scheduler = self._Scheduler([self._HostCapacity.from_host(h) for h in self.hosts.values()])
        return self._scheduler

    @property
    def placer(self) -> Any:
        """`placer(replicas, spec=..., job_id=...)` for `plan_job`: capacity-aware, over --hosts."""
        if self._placer is None:
            self._placer = self._JobPlacer(self.scheduler)
        return self._placer

    def _host(self, name: str) -> Host:
        if self._hosts is not None and name in self._hosts:
            return self._hosts[name]
        from vcli.hosts import get_host

        return get_host(name, self._inventory)

    def _link(self, name: str) -> _HostLink:
        with self._lock:
            link = self._links.get(name)
            if link is None:
                link = self._links[name] = _HostLink(self._host(name), self._host_dead)
            return link

    def _host_dead(self, host: Host, reason: str) -> None:
        if self._scheduler is not None:
            self._scheduler.mark_unhealthy(host.name, reason)
        with self._lock:
            if host.name in self._probing or self._closed.is_set():
                return
            self._probing.add(host.name)
        threading.Thread(target=self._probe_until_healthy, args=(host,), name=f"vcli-ssh-probe-{host.name}",
                         daemon=True).start()

    def _probe_until_healthy(self, host: Host) -> None:
        try:
            while not self._closed.wait(5.0):
                try:
                    client, _ = connect(host, timeout=5.0)
                except ExecutorError:
                    continue
                client.close()
                if self._scheduler is not None:
                    self._scheduler.mark_healthy(host.name)
                return
        finally:
            with self._lock:
                self._probing.discard(host.name)

    # ------------------------------------------------------------------ protocol

    def command_for(self, launch: ReplicaLaunch) -> list[str]:
        if self._is_docker(launch):
            return list(launch.argv)
        return process_argv(launch, self._host(launch.placement.host).python)


    def prepare(self, launches: Sequence[ReplicaLaunch], *, cancelled: threading.Event,
                progress: Callable[[str], None]) -> list[ReplicaLaunch]:
        out = list(launches)
        try:
            for launch in launches:
                if not self._is_docker(launch):
                    process_argv(launch, self._host(launch.placement.host).python)
            done: set[tuple[str, str]] = set()
            for launch in launches:
                if cancelled.is_set():
                    break
                host = self._host(launch.placement.host)
                if not self._is_docker(launch) and launch.workdir and (host.name, launch.workdir) not in done:
                    done.add((host.name, launch.workdir))
                    self._ship(host, launch.workdir, progress)
            by_host: dict[str, list[int]] = {}
            for i, launch in enumerate(launches):
                if self._is_docker(launch):
                    by_host.setdefault(launch.placement.host, []).append(i)
            for host_name, idx in by_host.items():
                if cancelled.is_set():
                    break
                docker_ex = self._docker(host_name)
                link = self._link(host_name)
                views = [remote_view(launches[i], link.root()) for i in idx]
                dirs = sorted({d for v in views for d in v.mkdirs})
                rc, err = link.quick(f"mkdir -p -- {qargv(dirs)}", timeout=30)
                if rc != 0:
                    raise ExecutorError(f"Host {host_name}: cannot create {dirs[0]}: {err.strip()}")
                remote = [replace(launches[i], env=v.env, output_dir=v.output_dir, metric_file=v.metric_file,
                                  mounts=v.mounts) for i, v in zip(idx, views)]
                progress(f"Using the Docker engine of {host_name} over SSH.")
                ready = docker_ex.prepare(remote, cancelled=cancelled, progress=progress)
                for i, launch in zip(idx, ready):
                    out[i] = launch
        except BaseException:
            self.release_job(launches[0].job_id if launches else "")
            raise
        return out

    def _is_docker(self, launch: ReplicaLaunch) -> bool:
        return launch.placement.runtime == "docker" or self._host(launch.placement.host).runtime == "docker"

    def _docker(self, host_name: str) -> Any:
        """The Docker executor bound to `host_name`'s engine (through an SSH bridge)."""
        with self._lock:
            entry = self._dockers.get(host_name)
            if entry is None:
                bridge = _DockerBridge(self._link(host_name))
                entry = self._dockers[host_name] = (bridge, _remote_docker_executor(f"unix://{bridge.path}"))
            return entry[1]

    def _start_docker(self, launch: ReplicaLaunch, host: Host, link: "_HostLink") -> ReplicaHandle:
        view = remote_view(launch, link.root())  # idempotent for launches prepare() already mapped
        remote = replace(launch, env=view.env, output_dir=view.output_dir, metric_file=view.metric_file,
                         mounts=view.mounts)
        docker_ex = self._docker(host.name)
        try:
            inner = docker_ex.start(remote)
        except PermissionError as e:
            raise ExecutorError(
                f"Cannot start replica {launch.task_name} on {host.name}'s Docker engine: the Docker executor tried to "
                f"create the host's directory {e.filename} on this machine (it needs to honour "
                "`create_local_dirs = False`).") from None
        ref = f"docker:{inner.ref}@{launch.job_id}@{view.root}"
        with self._lock:
            self._docker_metric[ref] = view.metric_file
        w = LogWriter(launch.log_path)
        w.write("vcli", f"Started on {host.name} ({host.login}@{host.address}:{host.port}) as container "
                        f"{inner.ref[:12]} of the host's Docker engine; outputs under {view.root}/jobs on {host.name}.")
        w.close()
        return ReplicaHandle(executor=self.name, host=host.name, ref=ref, task_name=launch.task_name)

    def _docker_handle(self, handle: ReplicaHandle) -> ReplicaHandle:
        token, _, _ = _parse_ref(handle.ref)
        return ReplicaHandle(executor="docker", host=handle.host, ref=token[len("docker:"):], task_name=handle.task_name)

    def _ship(self, host: Host, local_dir: str, progress: Callable[[str], None]) -> str:
        if not os.path.isdir(local_dir):
            raise ExecutorError(f"Directory '{local_dir}' is not found.")
        link = self._link(host.name)
        remote = _code_dir(link.root(), local_dir)
        with link._sync_lock:
            key = json.dumps(sorted(_local_manifest(local_dir).items()))
            if link._synced.get(remote) == key:
                return remote
            started = time.monotonic()
            up, same, gone = sync_dir(link, local_dir, remote)
            link._synced[remote] = key
            progress(f"Copied {local_dir} to {host.name}:{remote} ({up} uploaded, {same} unchanged, "
                     f"{gone} removed, {time.monotonic() - started:.1f}s).")
        return remote

    def reserve_port(self, placement: Placement) -> int:
        link = self._link(placement.host)
        now = time.monotonic()
        with self._lock:
            for p, t in list(link.ports.items()):
                if now - t > 120:
                    del link.ports[p]
        for _ in range(5):
            port = None
            try:
                rc, out = link.quick(f"{q(link.host.python)} -S -c {q(_FREE_PORT)}", timeout=CONNECT_TIMEOUT + 10)
                if rc == 0 and out.strip().isdigit():
                    port = int(out.strip())
            except ExecutorError:
                if not link.healthy():
                    raise
            if port is None:
                port = random.randint(*PORT_RANGE)
            with self._lock:
                if port not in link.ports:
                    link.ports[port] = now
                    return port
        raise ExecutorError(f"Host {placement.host}: could not find a free port")

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        host = self._host(launch.placement.host)
        link = self._link(host.name)
        if self._is_docker(launch):
            return self._start_docker(launch, host, link)
        view = remote_view(launch, link.root())
        root, env, remote_out, remote_metric = view.root, dict(view.env), view.output_dir, view.metric_file
        env.setdefault("PYTHONUNBUFFERED", "1")
        if launch.workdir:
            cwd = _code_dir(root, launch.workdir)
            env["PYTHONPATH"] = ":".join(p for p in (cwd, env.get("PYTHONPATH", "")) if p)
        else:
            cwd = remote_out
        mkdirs = list(view.mkdirs)
        secret_names = [k for k in env if k in launch.secret_env]
        secrets = {k: env.pop(k) for k in secret_names}
        for k, v in secrets.items():
            if "\n" in v or "\r" in v:
                raise ExecutorError(f"The secret {k} contains a line break, which the ssh executor cannot pass.")
        argv = process_argv(launch, host.python)
        command = build_remote_command(argv, env, cwd=cwd, mkdirs=mkdirs, secrets=bool(secrets))

        os.makedirs(launch.output_dir, exist_ok=True)
        writer = LogWriter(launch.log_path)
        try:
            conn, chan = link.open_session()
        except ExecutorError as e:
            writer.write("vcli", f"failed to start on {host.name}: {e}")
            writer.close()
            raise
        rep = _Replica(launch=launch, link=link, conn=conn, chan=chan, writer=writer, remote_root=root,
                       remote_metric=remote_metric)
        _hook_exit_signal(chan, rep)
        try:
            chan.exec_command(command)
            if secrets:
                chan.sendall("".join(f"{k}={v}\n" for k, v in secrets.items()).encode() + b"\n")
        except Exception as e:  # noqa: BLE001
            writer.close()
            chan.close()
            raise ExecutorError(f"Cannot start replica {launch.task_name} on host {host.name}: {e}") from None
        for stream in ("stdout", "stderr"):
            t = threading.Thread(target=_pump, args=(rep, stream), name=f"vcli-ssh-{stream}-{launch.task_name}",
                                 daemon=True)
            t.start()
            rep.threads.append(t)
        deadline = time.monotonic() + START_TIMEOUT
        while not rep.started.wait(0.2):
            if time.monotonic() > deadline or not conn.alive():
                chan.close()
                writer.write("vcli", f"no answer from {host.name} while starting")
                writer.close()
                raise ExecutorError(f"Cannot start replica {launch.task_name} on host {host.name}: no answer "
                                    f"within {START_TIMEOUT:g}s")
        if rep.pgid is None:
            for t in rep.threads:
                t.join(2)
            detail = "; ".join(l for l in rep.early_stderr if l.strip())[-500:] or "the remote shell exited"
            writer.close()
            chan.close()
            raise ExecutorError(f"Cannot start replica {launch.task_name} on host {host.name}: {detail}")
        where = f"{host.name} ({host.login}@{host.address}:{host.port})"
        writer.write("vcli", f"Started on {where} as process group {rep.pgid} in {cwd}; outputs under "
                             f"{posixpath.dirname(posixpath.dirname(remote_out))} on {host.name}.")
        ref = f"{rep.pgid}@{launch.job_id}@{root}"
        with self._lock:
            self._replicas[ref] = rep
        return ReplicaHandle(executor=self.name, host=host.name, ref=ref, task_name=launch.task_name)

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        if handle.ref.startswith("docker:"):
            return self._poll_docker(handle)
        rep = self._replicas.get(handle.ref)
        if rep is None:
            return self._poll_foreign(handle)
        if rep.result is not None:
            return rep.result
        ended = rep.chan.exit_status_ready()
        if ended and rep.chan.exit_status < 0 and rep.exit_signal is None and not rep.conn.alive():
            ended = False  # the channel was torn down with a dead connection: report the host loss
        if ended:
            for t in rep.threads:
                t.join(timeout=5)
            code = rep.chan.recv_exit_status()
            sig = _signal_code(rep.exit_signal)
            if sig is not None:
                rep.result = ReplicaStatus(running=False, exit_code=sig, message=f"killed by signal SIG{rep.exit_signal}")
            elif code < 0:
                rep.result = ReplicaStatus(running=False, exit_code=137 if rep.stopped_by_vcli else 255,
                                           message="the remote process ended without an exit status")
            else:
                rep.result = ReplicaStatus(running=False, exit_code=code)
            return rep.result
        if not rep.conn.alive():
            host = rep.link.host
            msg = (f"lost contact with host {host.name} ({host.address}): {rep.conn.dead_reason}; "
                   "the replica's state there is unknown and the host is marked unhealthy")
            rep.writer.write("vcli", msg)
            rep.result = ReplicaStatus(running=False, exit_code=255, message=msg)
            return rep.result
        return ReplicaStatus(running=True)

    def _poll_docker(self, handle: ReplicaHandle) -> ReplicaStatus:
        link = self._link(handle.host)
        with self._lock:
            lost = self._docker_lost.get(handle.ref)
        if lost is not None:
            return lost
        if link._conns and not link.healthy():  # noqa: SLF001 - connections existed and all died
            host = link.host
            msg = (f"lost contact with host {host.name} ({host.address}): no answer over SSH; the container's state "
                   "there is unknown and the host is marked unhealthy")
            status = ReplicaStatus(running=False, exit_code=255, message=msg)
            with self._lock:
                self._docker_lost[handle.ref] = status
            return status
        try:
            return self._docker(handle.host).poll(self._docker_handle(handle))
        except ExecutorError as e:
            status = ReplicaStatus(running=False, exit_code=255, message=f"host {handle.host}: {e}")
            with self._lock:
                self._docker_lost[handle.ref] = status
            return status

    def _poll_foreign(self, handle: ReplicaHandle) -> ReplicaStatus:
        pgid, job_id, _ = _parse_ref(handle.ref)
        try:
            rc, out, _ = self._link(handle.host).run(f"sh -c {q(_ALIVE_SCRIPT)} alive {q(job_id)} {q(pgid)}", timeout=20)
        except ExecutorError as e:
            return ReplicaStatus(running=False, exit_code=255, message=str(e))
        alive = "RUNNING" in out
        return ReplicaStatus(running=alive, message=None if alive else "the replica is gone (exit code unknown)")

    def stop(self, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        docker_handles = [h for h in handles if h.ref.startswith("docker:")]
        handles = [h for h in handles if not h.ref.startswith("docker:")]
        errors: list[str] = []

        def docker_stop(host_name: str, mine: list[ReplicaHandle]) -> None:
            if self._link(host_name)._conns and not self._link(host_name).healthy():  # noqa: SLF001
                return
            try:
                self._docker(host_name).stop(mine, grace_seconds=grace_seconds)
            except ExecutorError as e:
                errors.append(f"{host_name}: {e}")

        threads = [threading.Thread(target=docker_stop, args=(
            name, [self._docker_handle(h) for h in docker_handles if h.host == name]), daemon=True)
            for name in sorted({h.host for h in docker_handles})]
        by_host: dict[tuple[str, str], list[str]] = {}
        for h in handles:
            pgid, job_id, _ = _parse_ref(h.ref)
            rep = self._replicas.get(h.ref)
            if rep is not None:
                rep.stopped_by_vcli = True
                if rep.result is not None or rep.chan.exit_status_ready():
                    continue
                if not rep.conn.alive():
                    rep.writer.write("vcli", f"cannot stop the replica: host {h.host} is unreachable")
                    continue
            by_host.setdefault((h.host, job_id), []).append(pgid)

        def kill(host: str, job_id: str, pgids: list[str]) -> None:
            tenths = max(1, int(grace_seconds * 10))
            cmd = f"sh -c {q(_KILL_SCRIPT)} kill {q(job_id)} {tenths} {qargv(pgids)}"
            try:
                rc, out, err = self._link(host).run(cmd, timeout=grace_seconds + 20)
                if rc != 0:
                    errors.append(f"{host}: processes left after SIGKILL: {out.strip()} {err.strip()}")
            except ExecutorError as e:
                errors.append(str(e))

        threads += [threading.Thread(target=kill, args=(host, job, pg), daemon=True)
                    for (host, job), pg in by_host.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(grace_seconds + 30)
        deadline = time.monotonic() + 5
        for h in handles:  # let the channels deliver the exit status and the last output
            rep = self._replicas.get(h.ref)
            while rep is not None and rep.conn.alive() and not rep.chan.exit_status_ready() and time.monotonic() < deadline:
                time.sleep(0.05)
        for e in errors:
            for h in handles:
                rep = self._replicas.get(h.ref)
                if rep is not None:
                    rep.writer.write("vcli", f"stop: {e}")
                    break

    def read_file(self, handle: ReplicaHandle, path: str) -> str | None:
        rep = self._replicas.get(handle.ref)
        _, _, root = _parse_ref(handle.ref)
        local = os.path.abspath(path)
        remote = map_path(local, _local_home(), root)
        if handle.ref.startswith("docker:"):
            with self._lock:
                if handle.ref in self._docker_lost:
                    return None
            if os.path.basename(local) == "output.metrics" and handle.ref in self._docker_metric:
                remote = self._docker_metric[handle.ref]
        if rep is not None:
            is_metric = local == os.path.abspath(rep.launch.metric_file)
            if is_metric:
                remote = rep.remote_metric
                if rep.released and rep.local_copy:  # copied back at release
                    try:
                        with open(local, encoding="utf-8", errors="replace") as f:
                            return f.read()
                    except OSError:
                        return None
            cached = rep.reads.get(local)
            if cached is not None and rep.result is None and time.monotonic() - cached[0] < READ_INTERVAL:
                return cached[1]
            if not rep.conn.alive():
                return cached[1] if cached else None
        if self._scheduler is not None and handle.host in self._scheduler.host_names() \
                and not self._scheduler.is_healthy(handle.host):
            return None
        try:
            text = self._link(handle.host).read_text(remote)
        except ExecutorError:
            return None
        if rep is not None:
            rep.reads[local] = (time.monotonic(), text)
        return text

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        jobs = set()
        for host_name in sorted({h.host for h in handles if h.ref.startswith("docker:")}):
            mine = [h for h in handles if h.host == host_name and h.ref.startswith("docker:")]
            for h in mine:
                jobs.add(_parse_ref(h.ref)[1])
            if self._link(host_name)._conns and not self._link(host_name).healthy():  # noqa: SLF001
                continue
            try:
                self._docker(host_name).release([self._docker_handle(h) for h in mine])
            except ExecutorError:
                pass
        handles = [h for h in handles if not h.ref.startswith("docker:")]
        for h in handles:
            _, job_id, _ = _parse_ref(h.ref)
            jobs.add(job_id)
            with self._lock:
                rep = self._replicas.get(h.ref)
            if rep is None or rep.released:
                continue
            rep.released = True
            if rep.conn.alive():  # keep a local copy of the metric file, for local readers
                rep.reads.pop(os.path.abspath(rep.launch.metric_file), None)
                text = self.read_file(h, rep.launch.metric_file)
                if text is not None:
                    try:
                        os.makedirs(os.path.dirname(rep.launch.metric_file), exist_ok=True)
                        with open(rep.launch.metric_file, "w", encoding="utf-8") as f:
                            f.write(text)
                        rep.local_copy = True
                    except OSError:
                        pass
            try:
                rep.chan.close()  # stdin EOF: the watcher kills whatever is left of the group
            except Exception:  # noqa: BLE001
                pass
            rep.conn.channels = max(0, rep.conn.channels - 1)
            for t in rep.threads:
                t.join(timeout=1)
            rep.writer.close()
        for job_id in jobs:
            self.release_job(job_id)

    # ------------------------------------------------------------------ extras

    def release_job(self, job_id: str) -> None:
        """Give back the job's placement (GPUs, CPU share). Safe to call more than once."""
        if self._scheduler is not None and job_id:
            self._scheduler.release(job_id)

    def remote_dirs(self, handle: ReplicaHandle) -> dict[str, str]:
        """Where a replica's files are on its host (for describe)."""
        return handle_location(handle.to_json())

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            links = list(self._links.values())
            bridges = [b for b, _ in self._dockers.values()]
        for b in bridges:
            b.close()
        for link in links:
            link.close()


def handle_location(handle: Mapping[str, str]) -> dict[str, str]:
    """For `describe`: where an ssh replica ran and keeps its files, from its stored handle JSON.

    {"host", "workdir" (the host's vcli workdir), "jobDir", and "processGroup" or "container"}.
    Pure: no connection, no paramiko.
    """
    token, job_id, root = _parse_ref(handle["ref"])
    out = {"host": handle.get("host", ""), "workdir": root, "jobDir": f"{root}/jobs/{job_id}"}
    if token.startswith("docker:"):
        out["container"] = token[len("docker:"):][:12]
    else:
        out["processGroup"] = token
    return out


# =========================================================================== vcli hosts check

_PROBE_SCRIPT = r'''
wd=$1; py=$2
echo "os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -s)"
echo "kernel=$(uname -sr)"
echo "cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)"
while read -r k v rest; do [ "$k" = "MemTotal:" ] && echo "mem_kb=$v"; done </proc/meminfo
case $wd in "~") wd=$HOME ;; "~/"*) wd=$HOME/${wd#"~/"} ;; /*) ;; *) wd=$HOME/$wd ;; esac
d=$wd; while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "workdir=$wd"
echo "disk_kb=$(df -Pk "$d" 2>/dev/null | tail -n 1 | { read -r a b c f rest; echo "$f"; })"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,utilization.gpu --format=csv,noheader,nounits 2>&1 | sed 's/^/gpu=/'
else
  echo "gpu=none"
fi
if command -v docker >/dev/null 2>&1; then
  echo "docker=$(docker version --format '{{.Server.Version}}' 2>&1 | head -n 1)"
else
  echo "docker=absent"
fi
echo "python=$("$py" -c 'import sys; print(sys.version.split()[0])' 2>&1 | head -n 1)"
'''

_LISTEN = ("import socket, sys, time\n"
           "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "s.bind(('0.0.0.0', 0)); s.listen(64); print(s.getsockname()[1], flush=True)\n"
           "s.settimeout(0.5); end = time.time() + float(sys.argv[1])\n"
           "while time.time() < end:\n"
           "    try:\n"
           "        c, _ = s.accept(); c.close()\n"
           "    except OSError:\n"
           "        pass\n")
_DIAL = ("import socket, sys\n"
         "try:\n"
         "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close(); print('OK')\n"
         "except OSError as e:\n"
         "    print('FAIL', e)\n")

_GPU_NAMES = [
    ("A100 80GB", "NVIDIA_A100_80GB"), ("A100-SXM4-80GB", "NVIDIA_A100_80GB"), ("A100", "NVIDIA_TESLA_A100"),
    ("H100 80GB", "NVIDIA_H100_80GB"), ("H100", "NVIDIA_H100_80GB"), ("H200", "NVIDIA_H200_141GB"),
    ("B200", "NVIDIA_B200"), ("L4", "NVIDIA_L4"), ("T4", "NVIDIA_TESLA_T4"), ("V100", "NVIDIA_TESLA_V100"),
    ("P100", "NVIDIA_TESLA_P100"), ("P4", "NVIDIA_TESLA_P4"), ("K80", "NVIDIA_TESLA_K80"),
]


def vertex_gpu_type(name: str) -> str | None:
    """nvidia-smi's GPU name -> Vertex accelerator type (None if unknown)."""
    for needle, vtype in _GPU_NAMES:
        if needle in name:
            return vtype
    return None


def _parse_probe(out: str) -> dict[str, Any]:
    facts: dict[str, Any] = {"gpus": []}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key == "gpu":
            if value != "none":
                parts = [p.strip() for p in value.split(",")]
                if len(parts) >= 5 and parts[0].isdigit():
                    facts["gpus"].append({"index": int(parts[0]), "name": parts[1], "memoryMb": parts[2],
                                          "memoryUsedMb": parts[3], "utilization": parts[4],
                                          "type": vertex_gpu_type(parts[1])})
                else:
                    facts["gpuError"] = value
        elif key:
            facts[key] = value
    return facts


def probe_host(host: Host, *, timeout: float | None = None) -> tuple[dict[str, Any], list[str], Any]:
    """Connect and collect facts. Returns (resource dict, problems, client or None)."""
    res: dict[str, Any] = {"name": host.name, "address": host.address, "runtime": host.runtime}
    problems: list[str] = []
    try:
        client, _ = connect(host, timeout=timeout)
    except ExecutorError as e:
        res["status"] = "UNREACHABLE"
        problems.append(str(e))
        return res, problems, None
    started = time.monotonic()
    try:
        rc, out, err = run_command(client, f"sh -c {q(_PROBE_SCRIPT)} probe {q(host.workdir)} {q(host.python)}",
                                   timeout=60)
    except Exception as e:  # noqa: BLE001
        res["status"] = "ERROR"
        problems.append(f"{host.name}: probe failed: {e}")
        return res, problems, client
    res["latencyMs"] = round((time.monotonic() - started) * 1000)
    facts = _parse_probe(out)
    res["os"] = facts.get("os")
    res["kernel"] = facts.get("kernel")
    try:
        res["cpus"] = int(facts.get("cpus", ""))
    except ValueError:
        pass
    try:
        res["memoryGb"] = round(int(facts["mem_kb"]) / 1024 / 1024, 1)
    except (KeyError, ValueError):
        pass
    try:
        res["diskFreeGb"] = round(int(facts["disk_kb"]) / 1024 / 1024, 1)
    except (KeyError, ValueError):
        problems.append(f"{host.name}: cannot measure free disk space under {facts.get('workdir', host.workdir)}")
    res["workdir"] = facts.get("workdir")
    gpus = facts["gpus"]
    res["gpus"] = len(gpus)
    if gpus:
        res["gpuType"] = gpus[0]["type"] or gpus[0]["name"]
        res["gpuDetails"] = gpus
        res["gpuSummary"] = ", ".join(
            f"{g['index']}:{g['name']} {g['memoryUsedMb']}/{g['memoryMb']}MiB {g['utilization']}%" for g in gpus)
    if facts.get("gpuError"):
        problems.append(f"{host.name}: nvidia-smi is installed but failed: {facts['gpuError']}")
    declared, _ = host.gpus()
    if host.gpu_count is not None and gpus and host.gpu_count > len(gpus):
        problems.append(f"{host.name}: declares {host.gpu_count} GPUs but nvidia-smi shows {len(gpus)}")
    docker = facts.get("docker", "absent")
    res["docker"] = docker if re.match(r"^\d", docker or "") else ("absent" if docker == "absent" else "unavailable")
    if host.runtime == "docker" and not re.match(r"^\d", docker or ""):
        problems.append(f"{host.name}: runtime is docker but the Docker engine does not answer: {docker}")
    py = facts.get("python", "")
    if re.match(r"^\d+\.\d+", py):
        res["python"] = f"{host.python} ({py})"
    else:
        res["python"] = "missing"
        if host.runtime == "process":
            problems.append(f"{host.name}: python '{host.python}' does not run there ({py.strip() or 'no output'}); "
                            f"set it with `vcli hosts add {host.name} --python=/path/to/python`")
    res["status"] = "OK" if not problems else "PROBLEMS"
    return res, problems, client


def check_reachability(hosts: Sequence[Host], clients: Mapping[str, Any], *, seconds: float = 20) -> list[str]:
    """Can every host open a TCP connection to every other host's TF port? One line per problem."""
    problems: list[str] = []
    names = [h.name for h in hosts if clients.get(h.name) is not None]
    if len(names) < 2:
        return problems
    by_name = {h.name: h for h in hosts}
    listeners: dict[str, tuple[Any, int]] = {}
    for name in names:
        h = by_name[name]
        try:
            chan = clients[name].get_transport().open_session(timeout=CONNECT_TIMEOUT)
            chan.settimeout(15)
            chan.exec_command(f"{q(h.python)} -c {q(_LISTEN)} {seconds:g}")
            line = b""
            while not line.endswith(b"\n"):
                data = chan.recv(64)
                if not data:
                    break
                line += data
            port = int(line.strip())
            listeners[name] = (chan, port)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{name}: cannot start a test listener with {h.python}: {e or type(e).__name__}")
    try:
        for src in names:
            for dst, (_, port) in listeners.items():
                if src == dst:
                    continue
                target = by_name[dst].tf_address
                try:
                    rc, out, err = run_command(
                        clients[src], f"{q(by_name[src].python)} -c {q(_DIAL)} {q(target)} {port} 5", timeout=20)
                except Exception as e:  # noqa: BLE001
                    problems.append(f"{src}: cannot test the connection to {dst}: {e}")
                    continue
                if not out.startswith("OK"):
                    reason = (out.strip()[5:] or err.strip() or f"exit {rc}")[-200:]
                    problems.append(f"{src} cannot reach {dst} at {target}:{port} (a TF port): {reason}")
    finally:
        for chan, _ in listeners.values():
            try:
                chan.close()
            except Exception:  # noqa: BLE001
                pass
    return problems


def check_hosts(hosts: Sequence[Host], *, reachability: bool = True) -> tuple[list[dict[str, Any]], list[str]]:
    """`vcli hosts check`: per-host facts and problem lines (probes run in parallel)."""
    results: dict[str, tuple[dict[str, Any], list[str], Any]] = {}

    def one(h: Host) -> None:
        results[h.name] = probe_host(h)

    threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CONNECT_TIMEOUT * 3 + 90)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    clients: dict[str, Any] = {}
    for h in hosts:
        res, probs, client = results.get(h.name, ({"name": h.name, "address": h.address, "status": "TIMEOUT"},
                                                   [f"{h.name}: the check timed out"], None))
        rows.append(res)
        problems.extend(probs)
        if client is not None and res.get("python") not in (None, "missing"):
            clients[h.name] = client
        elif client is not None:
            client.close()
    try:
        if reachability:
            reach = check_reachability(hosts, clients)
            problems.extend(reach)
            for row in rows:
                if any(p.startswith(f"{row['name']} cannot reach") for p in reach) and row.get("status") == "OK":
                    row["status"] = "PROBLEMS"
    finally:
        for c in clients.values():
            c.close()
    return rows, problems
