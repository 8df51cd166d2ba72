"""Connections to one host: a pool with heartbeats, short commands, a control shell, SFTP reads.

Every connection runs a heartbeat (a global request every 2 s) on top of paramiko's
keepalives. A connection that answers nothing for `VCLI_SSH_DEAD_AFTER` seconds (default 10)
is dead: `HostLink` reports it once through its `on_dead` callback and opens a fresh one on the
next use. Every blocking call has a timeout, so a dead host never hangs the controller.

Remote commands are strings for the login shell, which must be POSIX (sh, bash, dash, zsh);
build them from argument vectors with `q`/`qargv` (`shlex.quote`), never by pasting text.
"""

from __future__ import annotations

import os
import posixpath
import random
import shlex
import stat
import threading
import time
from typing import Any, Callable, Iterable

from vcli.errors import ExecutorError
from vcli.executors import MAX_READ_BYTES
from vcli.executors.ssh.trust import CONNECT_TIMEOUT, connect, paramiko
from vcli.placement.hosts import Host, KnownHosts

__all__ = ["DEAD_AFTER", "HEARTBEAT_SECONDS", "HostLink", "q", "qargv", "run_command"]

HEARTBEAT_SECONDS = 2.0
DEAD_AFTER = float(os.environ.get("VCLI_SSH_DEAD_AFTER", "10"))
#: Channels per connection before another connection is opened (sshd's MaxSessions is 10).
MAX_CHANNELS = 8


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



class Conn:
    """One SSH connection: a heartbeat thread and a liveness verdict."""

    def __init__(self, host: Host, client: Any, on_dead: Callable[[Conn, str], None]) -> None:
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
            except Exception:  # a broken transport is found below
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
        except Exception:
            pass

    def close(self) -> None:
        self._closed.set()
        self._close_quietly()


class HostLink:
    """Everything an executor holds for one host: connections, remote home, synced code."""

    def __init__(self, host: Host, known_hosts: KnownHosts, on_dead: Callable[[Host, str], None]) -> None:
        self.host = host
        self.known_hosts = known_hosts
        self._on_dead = on_dead
        self._lock = threading.RLock()
        self._conns: list[Conn] = []
        self._home: str | None = None
        #: remote code dir -> manifest key of what was last synced there (see `sync.ship`).
        self.synced: dict[str, str] = {}
        self.sync_lock = threading.Lock()
        #: Where the supervisor and the wrapper were installed on this host (`remote.install_tools`).
        self.tools: Any = None
        #: The host path of vcli's workspace helper (`code.install_workspace`); under tools_lock.
        self.workspace: str | None = None
        self.tools_lock = threading.Lock()
        self._sftp_lock = threading.Lock()
        self._ctl_lock = threading.Lock()
        self._ctl: tuple[Conn, Any] | None = None
        self._sftp: Any = None
        self._sftp_conn: Conn | None = None
        #: Ports handed out by `reserve_port` recently (port -> monotonic time), never twice.
        self.ports: dict[int, float] = {}

    # -- connections

    def _new_conn(self) -> Conn:
        client, _ = connect(self.host, known_hosts=self.known_hosts)
        conn = Conn(self.host, client, lambda c, reason: self._on_dead(self.host, reason))
        self._conns.append(conn)
        return conn

    def conn(self) -> Conn:
        with self._lock:
            for c in self._conns:
                if c.alive():
                    return c
            self._conns = [c for c in self._conns if c.dead_reason is None]
            return self._new_conn()

    def open_session(self) -> tuple[Conn, Any]:
        pm = paramiko()
        with self._lock:
            candidates = [c for c in self._conns if c.alive() and c.channels < MAX_CHANNELS]
            for c in candidates:
                try:
                    chan = c.transport.open_session(timeout=CONNECT_TIMEOUT)
                except (pm.ChannelException, pm.SSHException, EOFError, OSError):
                    c.channels = MAX_CHANNELS  # the server refused more sessions here
                    continue
                c.channels += 1
                return c, chan
            c = self._new_conn()
            try:
                chan = c.transport.open_session(timeout=CONNECT_TIMEOUT)
            except (pm.SSHException, EOFError, OSError) as e:
                raise ExecutorError(f"Host {self.host.name}: cannot open an SSH session: {e}") from None
            c.channels += 1
            return c, chan

    def run(self, command: str, *, timeout: float = 30, stdin: bytes | None = None) -> tuple[int, str, str]:
        conn = self.conn()
        try:
            rc, out, err = run_command(conn.client, command, timeout=timeout, stdin=stdin)
        except ExecutorError as e:
            raise ExecutorError(f"Host {self.host.name}: {e}") from None
        except Exception as e:  # paramiko/socket errors
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
                        except TimeoutError:
                            continue
                        if not data:
                            raise ExecutorError("the control shell closed")
                        buf += data
                    conn.touch()
                    head, _, tail = buf.rpartition(marker)
                    return int(tail.strip() or 255), head.decode("utf-8", "replace")
                except Exception as e:  # a broken control shell: one fresh try
                    if self._ctl is not None:
                        try:
                            self._ctl[1].close()
                        except Exception:
                            pass
                        self._ctl[0].channels = max(0, self._ctl[0].channels - 1)
                    self._ctl = None
                    if attempt or not self.healthy():
                        if isinstance(e, ExecutorError):
                            raise ExecutorError(f"Host {self.host.name}: {e}") from None
                        raise ExecutorError(f"Host {self.host.name}: remote command failed: {e or type(e).__name__}") from None
            raise AssertionError("unreachable")

    def sftp(self) -> Any:
        """A fresh SFTP session (30 s per operation); raises `ExecutorError` if none opens."""
        pm = paramiko()
        try:
            sftp = self.conn().client.open_sftp()
        except (pm.SSHException, EOFError, OSError) as e:
            raise ExecutorError(f"Host {self.host.name}: cannot open an SFTP session: {e or type(e).__name__}") from None
        sftp.get_channel().settimeout(30)
        return sftp

    def read_text(self, remote: str) -> str | None:
        """A remote file's text over a cached SFTP session, bounded by 10 s; None if absent or
        not a regular file (a FIFO would block the host's sftp-server, /dev/zero never ends),
        the last MAX_READ_BYTES of a bigger one, as `read_replica_file` reads a local one."""
        with self._sftp_lock:
            for attempt in (0, 1):
                try:
                    if self._sftp is None or self._sftp_conn is None or not self._sftp_conn.alive():
                        # opening the session sits inside the guard: a link that just went down
                        # raises paramiko's "Timeout opening channel" here (CI saw it escape)
                        conn = self.conn()
                        self._sftp = conn.client.open_sftp()
                        self._sftp.get_channel().settimeout(10)
                        self._sftp_conn = conn
                    info = self._sftp.stat(remote)
                    if not stat.S_ISREG(info.st_mode or 0):
                        return None
                    start = max(0, (info.st_size or 0) - MAX_READ_BYTES)
                    with self._sftp.open(remote, "r") as f:
                        f.seek(start)
                        data = f.read(MAX_READ_BYTES)
                    self._sftp_conn.touch()
                    if start:
                        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
                    return data.decode("utf-8", "replace")
                except (FileNotFoundError, IsADirectoryError, PermissionError):
                    return None
                except ExecutorError:  # no connection at all: the caller knows what that means
                    raise
                except Exception:  # a broken session: open a fresh one once
                    try:
                        if self._sftp is not None:
                            self._sftp.close()
                    except Exception:
                        pass
                    self._sftp = None
                    if attempt:
                        return None
            return None

    def healthy(self) -> bool:
        with self._lock:
            return any(c.alive() for c in self._conns)

    def lost(self) -> bool:
        """True when this link had connections and every one of them died (no reconnect tried)."""
        with self._lock:
            return bool(self._conns) and not any(c.alive() for c in self._conns)

    def close(self) -> None:
        with self._sftp_lock:
            if self._sftp is not None:
                try:
                    self._sftp.close()
                except Exception:
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



def answering(link: HostLink, what: str, orphan_timeout: float, advice: str = "") -> HostLink:
    """`link`, once its host ran a command; else ExecutorError saying so, and that replicas
    there may well run on (they outlive a controller, on their lease): nothing is concluded."""
    try:
        link.run("true", timeout=20)
    except ExecutorError as e:
        raise unreached(link, what, orphan_timeout, str(e), advice) from None
    return link


def unreached(link: HostLink, what: str, orphan_timeout: float, why: str, advice: str = "") -> ExecutorError:
    """The error `answering` raises, for a command that failed to reach `link`'s host (`why`)."""
    return ExecutorError(f"Cannot {what} on host {link.host.name}: {why.rstrip('.')}.{advice} Replicas there "
                         f"stop themselves once no controller renewed their lease for {orphan_timeout:g}s "
                         "(VCLI_SSH_ORPHAN_TIMEOUT).")
