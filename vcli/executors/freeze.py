"""Holding a replica still while a directory of it is copied (a PBT exploit copies a donor's
checkpoint while the donor trains).

A trainer that rewrites its checkpoint every few tens of milliseconds never "holds still" for a
copy, and a Vertex-style trainer cannot be asked to pause; vcli can pause it: the replica's
process tree is stopped (SIGSTOP; a container is paused through its engine) for the copy and
continued after. A watchdog process holds the other end of a pipe to this process and
continues the tree the moment that pipe closes, so a controller that dies in the middle of a
copy (even `kill -9`) never leaves a replica stopped.

Stopped is not enough: a trainer stopped in the middle of writing a file leaves it half
written. So the copy is taken only at a moment when no process of the replica holds a file of
the directory open for writing (/proc/PID/fd and fdinfo); otherwise the trainer is continued
for a few milliseconds (more with each try: `_wait_after`) and stopped again. Each file is
then whole; files written in separate steps of a trainer (a weights file, then its index)
may still come from two steps, as with any copy of a live directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any, Callable, Iterator, Sequence

__all__ = ["HOLD_PROGRAM", "container_pids", "copy_still", "frozen", "paused", "writing_under"]

#: The hold as a standalone program, for a replica's own machine (an SSH host, a Slurm node):
#: `python3 -S -c HOLD_PROGRAM tree TAG DIR` stops every process carrying VCLI_REPLICA=TAG but
#: vcli's supervisor and wrapper (`HOLD_PROGRAM docker CONTAINER DIR`: `docker pause` through
#: the machine's docker CLI) at a moment none of them writes under DIR, prints `held` (or
#: `running`), and continues them when its stdin closes or it is sent SIGTERM or SIGHUP.
HOLD_PROGRAM = r"""
import os, signal, sys, time
import subprocess
def _end(*_):
    raise SystemExit(0)
signal.signal(signal.SIGTERM, _end)
signal.signal(signal.SIGHUP, _end)
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
        time.sleep(min(0.1, 0.003 * 1.2 ** attempt) * (2 + attempt % 3) / 2)  # = _wait_after(attempt)
    sys.stdout.write("held\n" if held else "running\n")
    sys.stdout.flush()
    sys.stdin.buffer.read()
finally:
    if held or mode != "docker":
        cont(pids)
"""

#: The watchdog: continue the processes (or unpause the container) once stdin closes.
_WATCHDOG = r"""
import os, signal, sys
try:
    sys.stdin.buffer.read()
finally:
    if sys.argv[1] == "pids":
        for pid in sys.argv[2:]:
            try:
                os.kill(int(pid), signal.SIGCONT)
            except OSError:
                pass
    else:
        import http.client, socket
        url, cid = sys.argv[2], sys.argv[3]
        class C(http.client.HTTPConnection):
            def connect(self):
                if url.startswith("unix://"):
                    self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    self.sock.connect(url[len("unix://"):])
                else:
                    super().connect()
        host = "localhost" if url.startswith("unix://") else url.split("://", 1)[-1].rstrip("/")
        try:
            c = C(host, timeout=30)
            c.request("POST", f"/containers/{cid}/unpause")
            c.getresponse().read()
        except OSError:
            pass
"""


#: How long a hold's end waits for its watchdog (its unpause request times out at 30 s).
_WATCHDOG_SECONDS = 35.0


@contextlib.contextmanager
def _watchdog(args: Sequence[str]) -> Iterator[None]:
    read_end, write_end = os.pipe()  # both close-on-exec: no other child inherits them
    try:
        dog = subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, *args], stdin=read_end,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    try:
        yield
    finally:
        os.close(write_end)  # the watchdog continues the tree now, if this process did not
        # ... and the hold ends only once it has: a watchdog still on its way would continue
        # (unpause) the replica in the middle of the next hold (CI, loaded, saw a PBT copy fail
        # so). One stuck past its request's own timeout is killed: it must not act later.
        try:
            dog.wait(timeout=_WATCHDOG_SECONDS)
        except subprocess.TimeoutExpired:
            dog.kill()
            dog.wait()


def writing_under(pids: Sequence[int], root: str) -> bool:
    """Does one of `pids` hold a file under `root` open for writing (a checkpoint half
    written)? Read from /proc (a container's processes are there too, under their host pids)."""
    base = os.path.realpath(root).rstrip("/") + "/"
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not target.startswith(base):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as f:
                    flags = next((int(line.split()[1], 8) for line in f if line.startswith("flags:")), 0)
            except (OSError, ValueError):
                continue
            if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                return True
    return False


#: How many times a copy waits for the trainer to be between writes.
_TRIES = 40


def _wait_after(attempt: int) -> float:
    """Seconds the trainer runs before the next try: 3 ms at first, growing by a fifth per
    try up to 0.1 s, varied so as not to keep meeting a trainer that writes on a fixed period;
    about 3.8 s over all `_TRIES`. On a loaded machine a trainer continued for only a few
    milliseconds may not run at all before it is stopped again, and stays in its write: with a
    fixed 3-15 ms (0.36 s in all), CI under load saw every try of a copy meet the same write."""
    return min(0.1, 0.003 * 1.2**attempt) * (2 + attempt % 3) / 2


def copy_still(pids: Sequence[int], stop: Callable[[], bool], cont: Callable[[], None], src: str,
               dest: str) -> bool:
    """`copy_dir_atomically(src, dest)` while the replica is stopped (`stop()`, which says
    whether it could be; `cont()` continues it) at a moment when none of `pids` holds a file
    under `src` open for writing, so every file is whole. A trainer caught in the middle of a
    write is continued for a moment and stopped again; after `_TRIES` the copy is taken as the
    contract's settle rule allows, with the replica running."""
    import time

    from vcli.executors import copy_dir_atomically

    for attempt in range(_TRIES):
        if not stop():
            break
        try:
            if not writing_under(pids, src):
                return copy_dir_atomically(src, dest)
        finally:
            cont()
        time.sleep(_wait_after(attempt))
    return copy_dir_atomically(src, dest)


@contextlib.contextmanager
def frozen(pids: Sequence[int]) -> Iterator[tuple[Callable[[], bool], Callable[[], None]]]:
    """(stop, cont) for the processes `pids` (SIGSTOP, SIGCONT); whatever is stopped when the
    block ends, or when this process dies, is continued (the watchdog)."""
    with _watchdog(["pids", *map(str, pids)]) if pids else contextlib.nullcontext():
        state = {"stopped": False}

        def stop() -> bool:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except OSError:
                    pass
            state["stopped"] = bool(pids)
            _wait_stopped(pids)  # a signal is delivered asynchronously: look only once it took
            return state["stopped"]

        def cont() -> None:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
            state["stopped"] = False

        try:
            yield stop, cont
        finally:
            if state["stopped"]:
                cont()


def _wait_stopped(pids: Sequence[int], timeout: float = 2.0) -> None:
    """Until every process of `pids` is stopped (state T or t in /proc) or gone."""
    import time

    deadline = time.monotonic() + timeout
    pending = list(pids)
    while pending and time.monotonic() < deadline:
        left = []
        for pid in pending:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            fields = data[data.rfind(b")") + 2:].split()
            if fields and fields[0] not in (b"T", b"t", b"Z", b"X"):
                left.append(pid)
        pending = left
        if pending:
            time.sleep(0.001)


@contextlib.contextmanager
def paused(api: Any, engine_url: str, container: str) -> Iterator[tuple[Callable[[], bool], Callable[[], None]]]:
    """(stop, cont) for a container through the Docker SDK's low-level `api` (`docker pause`,
    `unpause`); a container left paused when the block ends, or when this process dies, is
    unpaused (the watchdog)."""
    with _watchdog(["docker", engine_url, container]):
        state = {"paused": False}

        def stop() -> bool:
            try:
                api.pause(container)
                state["paused"] = True
            except Exception:  # not running (any more), or already paused: copy as it is
                state["paused"] = False
            return state["paused"]

        def cont() -> None:
            if state["paused"]:
                try:
                    api.unpause(container)
                except Exception:
                    pass  # the watchdog asks again as the block closes
                state["paused"] = False

        try:
            yield stop, cont
        finally:
            cont()


def container_pids(api: Any, container: str) -> list[int]:
    """The host pids of a container's processes (`docker top`)."""
    try:
        top = api.top(container)
        column = top["Titles"].index("PID")
        return [int(row[column]) for row in top["Processes"]]
    except Exception:
        return []
