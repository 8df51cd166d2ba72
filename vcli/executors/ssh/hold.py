"""Holding a replica on an SSH host still while a directory of it is downloaded (the SSH side
of `vcli.executors.freeze`: a PBT exploit copies a donor's checkpoint while the donor trains).

A small standard-library program runs on the host over its own SSH channel: it stops the
replica's trainer tree (every process carrying the replica's VCLI_REPLICA tag except vcli's
supervisor and wrapper, which keep watching; a container is paused with the host's docker
CLI) at a moment when none of them holds a file of the directory open for writing, says
`held`, and continues the tree when its stdin closes.
The channel closing is that end: the download finished, the controller died (even `kill -9`:
sshd closes the channel), or the connection broke. A replica never stays stopped.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from vcli.executors.ssh.link import HostLink

#: Runs on the host: python3 -S -c HOLD tree TAG DIR, or HOLD docker CONTAINER DIR (`docker
#: pause` through the host's docker CLI). Prints `held` or `running`, then waits.
HOLD = r"""
import os, signal, sys, time
import subprocess
mode, target, root = sys.argv[1], sys.argv[2], os.path.realpath(sys.argv[3]).rstrip("/") + "/"
want, me = ("VCLI_REPLICA=" + target).encode(), os.getpid()
def docker(*args):
    return subprocess.run(["docker", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True)
def container_pids():
    out = docker("top", target, "-eo", "pid")
    return [int(x) for x in out.stdout.split()[1:] if x.isdigit()] if out.returncode == 0 else []
def tree():
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == me:
            continue
        try:
            with open("/proc/%s/environ" % e, "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            with open("/proc/%s/cmdline" % e, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"supervisor.py" in cmd or b"wrapper.py" in cmd:
            continue  # vcli's own: they keep watching the tree
        out.append(int(e))
    return out
def send(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except OSError:
            pass
def stopped(pids):
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        busy = 0
        for p in pids:
            try:
                with open("/proc/%d/stat" % p, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if data[data.rfind(b")") + 2:][:1] not in (b"T", b"t", b"Z", b"X"):
                busy += 1
        if not busy:
            return
        time.sleep(0.001)
def writing(pids):
    for p in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % p)
        except OSError:
            continue
        for fd in fds:
            try:
                if not os.readlink("/proc/%d/fd/%s" % (p, fd)).startswith(root):
                    continue
                with open("/proc/%d/fdinfo/%s" % (p, fd)) as f:
                    flags = next((int(l.split()[1], 8) for l in f if l.startswith("flags:")), 0)
            except (OSError, ValueError):
                continue
            if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                return True
    return False
def stop(pids):
    if mode == "docker":
        return docker("pause", target).returncode == 0
    send(pids, signal.SIGSTOP)
    stopped(pids)
    return True
def cont(pids):
    if mode == "docker":
        docker("unpause", target)
    else:
        send(pids, signal.SIGCONT)
pids, held = (container_pids() if mode == "docker" else tree()), False
try:
    for attempt in range(40):
        if not pids or not stop(pids):
            break
        if not writing(pids):
            held = True
            break
        cont(pids)
        time.sleep(0.003 * (1 + attempt % 5))
    sys.stdout.write("held\n" if held else "running\n")
    sys.stdout.flush()
    sys.stdin.buffer.read()
finally:
    if held or mode != "docker":
        cont(pids)
"""

#: How long the host may take to hold the tree before the copy goes ahead with it running.
HOLD_SECONDS = 10.0


@contextlib.contextmanager
def held(link: HostLink, tag: str, directory: str, *, container: str | None = None) -> Iterator[bool]:
    """Hold the replica `tag` (or its `container`, paused) on the link's host still while the
    block copies `directory`;
    yields whether it is held (False: the copy goes ahead live, as the contract's settle rule
    allows). The replica is continued when the block ends, or when this process dies."""
    try:
        conn, chan = link.open_session()
    except Exception:  # no session now: copy as it is
        yield False
        return
    try:
        what = ("docker", container) if container else ("tree", tag)
        chan.exec_command(" ".join(shlex.quote(a) for a in (link.host.python, "-S", "-c", HOLD, *what, directory)))
        answer, deadline = b"", time.monotonic() + HOLD_SECONDS
        while not answer.endswith(b"\n") and time.monotonic() < deadline:
            chan.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = chan.recv(64)
            except TimeoutError:
                break
            if not data:
                break
            answer += data
        yield answer.strip() == b"held"
    finally:
        try:
            chan.shutdown_write()  # stdin closes: the host continues the tree
            chan.close()
        except Exception:
            pass
        conn.channels = max(0, conn.channels - 1)
