"""What a GPU host says about its GPUs: what they are doing, by `nvidia-smi` (the processes
that hold GPU memory, with their owner and command from /proc, and each GPU's utilisation),
and the lease policy its administrator wrote (`read_policy`). Standard library only,
no vcli imports: it is shipped to SSH hosts beside `gpulease.py` and the lease server asks it
there (`vcli.placement.leaseserver`), so an SSH host's own nvidia-smi and policy file answer.

Without nvidia-smi, or when it fails or hangs (10 s), every query answers "nothing": a host
without the NVIDIA driver has no GPU processes to report.
"""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import stat
import subprocess
from typing import Any, Iterable

__all__ = ["busy_reason", "ensure_mps", "gpu_processes", "memory_total", "nvidia_busy", "read_policy", "utilization", "write_policy"]

#: How long one nvidia-smi query may take (a GPU fallen off the bus makes it hang).
SMI_TIMEOUT = 10.0
#: At most this many characters of a process's command line in a reason.
COMMAND_CHARS = 60


def _smi(*args: str) -> list[list[str]]:
    """The CSV rows nvidia-smi prints for `args` (fields stripped); [] without it."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, *args, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=SMI_TIMEOUT).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[p.strip() for p in line.split(",")] for line in out.splitlines() if line.strip()]


def _indices() -> dict[str, int]:
    """GPU UUID -> index."""
    return {row[1]: int(row[0]) for row in _smi("--query-gpu=index,uuid") if len(row) >= 2 and row[0].isdigit()}


def process_owner(pid: int) -> tuple[str | None, str | None]:
    """(user, command line) of process `pid` on this host from /proc; None for what cannot be
    read (a process in another PID namespace, or gone)."""
    user = command = None
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as f:
            for line in f.read(8192).decode("utf-8", "replace").splitlines():
                if line.startswith("Uid:"):
                    uid = int(line.split()[1])
                    try:
                        user = pwd.getpwuid(uid).pw_name
                    except KeyError:
                        user = f"uid {uid}"
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            argv = [a.decode("utf-8", "replace") for a in f.read(4096).split(b"\0") if a]
        if argv:
            argv[0] = os.path.basename(argv[0])
            text = " ".join(argv)
            command = text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 1] + "…"
    except (OSError, ValueError):
        pass
    return user, command


def gpu_processes() -> dict[int, list[dict[str, Any]]]:
    """GPU index -> the compute processes holding its memory: `{"pid", "memory_mib", "user",
    "command"}` each (user and command None where /proc does not tell)."""
    index_of = _indices()
    out: dict[int, list[dict[str, Any]]] = {}
    for row in _smi("--query-compute-apps=gpu_uuid,pid,used_memory"):
        if len(row) < 3 or row[0] not in index_of or not row[1].isdigit():
            continue
        user, command = process_owner(int(row[1]))
        out.setdefault(index_of[row[0]], []).append(
            {"pid": int(row[1]), "memory_mib": int(row[2]) if row[2].isdigit() else None, "user": user,
             "command": command})
    return out


def busy_reason(procs: Iterable[dict[str, Any]]) -> str:
    """`used by a process vcli did not start (pid 4242 of bob: python serve.py, 1500 MiB)`."""
    parts = []
    for p in procs:
        who = f"pid {p['pid']}"
        if p.get("user") or p.get("command"):
            who += f" of {p.get('user') or 'an unknown user'}" + (f": {p['command']}" if p.get("command") else "")
        if p.get("memory_mib") is not None:
            who += f", {p['memory_mib']} MiB"
        parts.append(who)
    many = len(parts) > 1
    return f"used by {'processes' if many else 'a process'} vcli did not start ({'; '.join(parts)})"


def nvidia_busy(leased: Iterable[int] = ()) -> dict[int, str]:
    """GPU index -> why it is busy, for GPUs whose memory a process holds that is not vcli's
    (no lease of `leased` accounts for it). {} without nvidia-smi."""
    skip = set(int(i) for i in leased)
    return {i: busy_reason(procs) for i, procs in sorted(gpu_processes().items()) if i not in skip and procs}


def utilization() -> dict[int, float]:
    """GPU index -> its utilisation now, in percent (nvidia-smi's `utilization.gpu`)."""
    out: dict[int, float] = {}
    for row in _smi("--query-gpu=index,utilization.gpu"):
        if len(row) >= 2 and row[0].isdigit():
            try:
                out[int(row[0])] = float(row[1])
            except ValueError:
                continue  # "[N/A]", or a stand-in that answers another query
    return out


def memory_total() -> dict[int, int]:
    """GPU index -> its memory in MiB (nvidia-smi's `memory.total`)."""
    return {int(r[0]): int(r[1]) for r in _smi("--query-gpu=index,memory.total")
            if len(r) >= 2 and r[0].isdigit() and r[1].isdigit()}


def ensure_mps() -> str | None:
    """Start NVIDIA's MPS control daemon (`nvidia-cuda-mps-control -d`) unless one runs: None
    when one runs now, else why it cannot."""
    ctl = shutil.which("nvidia-cuda-mps-control")
    if not ctl:
        return "nvidia-cuda-mps-control is not installed (it comes with the NVIDIA driver)"
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm", "rb") as f:
                if f.read().strip() == b"nvidia-cuda-mps-control"[:15]:
                    return None
        except OSError:
            continue
    try:
        done = subprocess.run([ctl, "-d"], capture_output=True, text=True, timeout=SMI_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-cuda-mps-control -d: {e}"
    return None if done.returncode == 0 else f"nvidia-cuda-mps-control -d: {(done.stderr or done.stdout).strip()[:200]}"


#: The lease policy's file in a host's lease directory.
POLICY_FILE = "policy.yaml"


def read_policy(lease_dir: str) -> dict[str, Any]:
    """The host's lease policy file, `LEASE_DIR/policy.yaml`, as `{"path", "text"}`; `{}` when
    there is none; `{"path", "error"}` when it is not to be trusted or cannot be read. Only a
    regular file owned by root or by the owner of the lease directory, that nobody else can
    write, counts: the directory is writable by every user, so anyone could put a file there."""
    path = os.path.join(lease_dir, POLICY_FILE)
    try:
        top = os.open(lease_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as e:
        return {"path": path, "error": f"the lease directory cannot be read: {e.strerror}"}
    try:
        try:
            fd = os.open(POLICY_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=top)
        except FileNotFoundError:
            return {}
        except OSError as e:
            return {"path": path, "error": "a symbolic link: not trusted" if e.errno == errno.ELOOP else e.strerror}
        try:
            why = _untrusted(os.fstat(fd), os.fstat(top).st_uid)
            if why:
                return {"path": path, "error": why}
            return {"path": path, "text": os.read(fd, 65536).decode("utf-8", "replace")}
        finally:
            os.close(fd)
    finally:
        os.close(top)


def write_policy(lease_dir: str, text: str) -> dict[str, Any]:
    """Write `text` as the lease directory's policy file, atomically (a new file, then a
    rename), making the directory as the lease library does (sticky, like /tmp) if need be:
    `{"path"}`, or `{"path", "error"}` (only root or the directory's owner may write it)."""
    path = os.path.join(lease_dir, POLICY_FILE)
    try:
        os.mkdir(lease_dir, 0o1777)
        os.chmod(lease_dir, 0o1777)  # ours: the umask took bits away
    except OSError:
        pass  # it exists (or cannot be made: the open below says why)
    try:
        top = os.open(lease_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        return {"path": path, "error": f"{lease_dir}: {e.strerror}"}
    try:
        owner = os.fstat(top).st_uid
        if os.geteuid() not in (0, owner):
            return {"path": path, "error": f"only root or the owner of {lease_dir} ({_user(owner)}) may set its lease "
                    "policy"}
        tmp = f".{POLICY_FILE}.{os.getpid()}.{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=top)
        try:
            os.fchmod(fd, 0o644)  # ours: readable by every vcli user of the host, whatever the umask
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        try:
            os.rename(tmp, POLICY_FILE, src_dir_fd=top, dst_dir_fd=top)
        except OSError as e:
            os.unlink(tmp, dir_fd=top)
            why = "another user's file is in the way" if e.errno == errno.EPERM else e.strerror
            return {"path": path, "error": f"{path}: {why}"}
        return {"path": path}
    finally:
        os.close(top)


def _untrusted(st: os.stat_result, owner: int) -> str | None:
    """Why a policy file with status `st`, in a lease directory owned by `owner`, is not trusted."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid not in (0, owner):
        return (f"owned by {_user(st.st_uid)}, neither root nor the lease directory's owner ({_user(owner)}): "
                "not trusted")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by other users: not trusted"
    return None


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


# --------------------------------------------------------------------------- the idle watch

#: How often the idle watch asks nvidia-smi at most (a shorter window asks more often).
IDLE_SAMPLE_SECONDS = 10.0
#: How long a trainer the idle policy stops has between SIGTERM and SIGKILL (seconds).
IDLE_STOP_GRACE = 10.0


def watch(below: float, window: float, action: str, lease_dir: str, indices: list[int], argv: list[str]) -> int:
    """`python -S gpuinfo.py watch PERCENT SECONDS ACTION LEASE_DIR I,J -- ARGV`: run ARGV (the
    trainer; a replica's supervisor runs this in its place when the host's lease policy has an
    idle policy, `vcli.placement.leasepolicy.IdlePolicy`) and watch GPUs I,J: once they all stay
    below PERCENT utilisation for SECONDS, say so on stderr (the replica's log: the job's error
    names it) and in this user's lease records of them (`vcli hosts gpus`), and with ACTION
    `stop` stop the trainer (SIGTERM, SIGKILL after `IDLE_STOP_GRACE`) and exit 1. Otherwise the
    exit status is the trainer's; a stop request (SIGTERM) is passed on to it."""
    import signal
    import sys
    import time

    try:
        child = subprocess.Popen(argv)
    except OSError as e:
        sys.stderr.write(f"vcli: cannot run {argv[0]}: {e.strerror}\n")
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _: child.send_signal(signum))
    every, since, verdict = max(0.2, min(IDLE_SAMPLE_SECONDS, window / 4)), None, None
    while child.poll() is None:
        if verdict is None:
            seen, now = utilization(), time.monotonic()
            since = None if any(seen.get(i, 100.0) >= below for i in indices) else (since or now)
            if since is not None and now - since >= window:
                verdict = (f"GPU{'s' if len(indices) > 1 else ''} {','.join(map(str, indices))} stayed below "
                           f"{below:g} % utilisation for {window:g}s (the host's idle policy)")
                sys.stderr.write(f"vcli: {verdict}{': stopping the replica' if action == 'stop' else ''}.\n")
                sys.stderr.flush()
                _note_leases(lease_dir, indices, verdict)
                if action == "stop":
                    return _stop(child)
        try:
            child.wait(timeout=every)
        except subprocess.TimeoutExpired:
            pass
    code = child.returncode
    if code < 0:  # killed by a signal: end the same way, so that the supervisor records it so
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _stop(child: subprocess.Popen[bytes]) -> int:
    child.terminate()
    try:
        child.wait(timeout=IDLE_STOP_GRACE)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    return 1


def _note_leases(lease_dir: str, indices: list[int], note: str) -> None:
    """Add `idle: NOTE` to this user's lease records of `indices` (best effort: a record that
    is not a lease of this job is left alone)."""
    import json

    for i in indices:
        path = os.path.join(lease_dir, f"uid-{os.geteuid()}", f"gpu{int(i)}.lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            rec = json.loads(os.pread(fd, 65536, 0) or b"{}")
            if isinstance(rec, dict) and rec.get("job") == os.environ.get("VCLI_JOB_ID"):
                data = json.dumps({**rec, "idle": note}, sort_keys=True).encode()
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
        except (OSError, ValueError, RecursionError):
            pass
        finally:
            os.close(fd)


def _main(args: list[str]) -> int:
    import sys

    if len(args) >= 8 and args[0] == "watch" and args[6] == "--":
        _, below, window, action, lease_dir, gpus = args[:6]
        return watch(float(below), float(window), action, lease_dir, [int(i) for i in gpus.split(",") if i], args[7:])
    print("usage: python -S gpuinfo.py watch PERCENT SECONDS ACTION LEASE_DIR I,J -- ARGV...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv[1:]))
