"""The remote end of a replica's SSH channel, shipped to each host with the supervisor.

    python -S wrapper.py run SUPERVISOR STATUS LOG TAG GRACE [--secrets] [--mask NAME]... [NAME=VALUE...] -- ARGV...
    python -S wrapper.py stop JOB_ID GRACE PID TAG [PID TAG...]

`run` sits between the channel and the replica's supervisor (`vcli.executors.supervisor`):

1. with `--secrets`, reads `NAME=VALUE` lines from stdin up to an empty line, so secret values
   never appear in a command line, a process list or a log;
2. starts `python -S SUPERVISOR --stop-with-parent [--mask NAME]... STATUS LOG -- ARGV` (the
   supervisor masks the values of those variables in the log) in a session of its own, with the NAME=VALUE assignments and the secrets added to the supervisor's environment
   only (never to this process's: the final sweep below must not hit the wrapper itself);
3. prints `VCLI-SUPERVISOR <pid>` on stdout: the handshake, after whatever the login shell's
   rc files printed;
4. copies every record the supervisor appends to LOG (`<time>\\t<stream>\\t<line>`) to stdout,
   so the controller keeps the replica's log live while the host keeps its own copy;
5. prints `VCLI-STATUS <json>` the moment STATUS appears: the trainer has exited, even if a
   helper still holds its stdout and the supervisor is still stopping leftovers;
6. when stdin closes (the controller released the replica, died, or lost the connection):
   SIGTERM to the supervisor (a stop request for the whole tree), SIGUSR1 after GRACE seconds
   (SIGKILL to the whole tree); if the wrapper itself is killed, the supervisor's
   PR_SET_PDEATHSIG does the same;
7. once the supervisor has exited: SIGKILL to any process still carrying VCLI_REPLICA=TAG (a
   supervisor that was itself killed leaves its tree behind), the rest of the log, the status
   if not printed yet, and exit with the trainer's exit code (255 if it has none).

`stop` is what the executor's stop runs on the host, from any vcli process: SIGTERM to each
listed supervisor that is alive and carries VCLI_JOB_ID=JOB_ID (never a reused pid), a grace
period for them to finish, SIGUSR1, then SIGKILL to every process that carries one of the
TAGs. It prints `STOPPED` or `LEFT <pids>` (exit status 3).

Standard library only and no vcli imports, like the supervisor: it runs on hosts that have
no vcli installed.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

#: The environment variable that marks every process of one replica (`<job id>/<task name>`).
REPLICA_TAG = "VCLI_REPLICA"
#: How often the wrapper looks at the log and the status file (seconds).
TICK = 0.02


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2:].split()
    return bool(fields) and fields[0] not in (b"Z", b"X")


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def tagged(tags: list[str]) -> list[int]:
    """Live processes (other than this one) whose environment carries VCLI_REPLICA=<one of tags>."""
    wanted = {f"{REPLICA_TAG}={t}".encode() for t in tags}
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me and wanted.intersection(_environ(int(entry))) and _alive(int(entry)):
            out.append(int(entry))
    return out


def sweep(tags: list[str], seconds: float = 5.0) -> list[int]:
    """SIGKILL every process carrying one of `tags` until none is left; returns those left."""
    deadline = time.monotonic() + seconds
    left = tagged(tags)
    while left and time.monotonic() < deadline:
        for pid in left:
            _kill(pid, signal.SIGKILL)
        time.sleep(0.02)
        left = tagged(tags)
    return left


# --------------------------------------------------------------------------- run


def _read_secrets() -> dict[str, str]:
    """NAME=VALUE lines from stdin up to an empty line."""
    buf = b""
    while b"\n\n" not in buf:
        data = os.read(0, 4096)
        if not data:
            raise SystemExit("vcli: the secrets did not arrive")
        buf += data
    secrets = {}
    for line in buf.split(b"\n\n", 1)[0].decode("utf-8", "replace").split("\n"):
        name, eq, value = line.partition("=")
        if not eq or not name:
            raise SystemExit("vcli: a secret line is not NAME=VALUE")
        secrets[name] = value
    return secrets


class _Out:
    """stdout (the channel), which may break when the controller goes: then we stop writing."""

    def __init__(self) -> None:
        self.broken = False

    def write(self, data: bytes) -> None:
        while data and not self.broken:
            try:
                n = os.write(1, data)
            except BrokenPipeError:
                self.broken = True
                return
            except InterruptedError:
                continue
            data = data[n:]


def run(supervisor: str, status: str, log: str, tag: str, grace: float, secrets: bool, mask: list[str],
        assignments: list[str], argv: list[str]) -> int:
    env = dict(os.environ)
    for a in assignments:
        name, _, value = a.partition("=")
        env[name] = value
    if secrets:
        env.update(_read_secrets())
    try:
        os.unlink(status)
    except FileNotFoundError:
        pass
    try:  # follow the log from where it ends now: a retry appends to the same file
        offset = os.path.getsize(log)
    except OSError:
        offset = 0
    out = _Out()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)  # the supervisor writes nothing; a crash of it goes to stderr
            masks = [arg for name in mask for arg in ("--mask", name)]
            os.execve(sys.executable,
                      [sys.executable, "-S", supervisor, "--stop-with-parent", *masks, status, log, "--", *argv], env)
        except OSError as e:
            os.write(2, f"vcli: cannot start the supervisor: {e.strerror}\n".encode())
        finally:
            os._exit(127)
    out.write(f"VCLI-SUPERVISOR {pid}\n".encode())
    log_fd: int | None = None
    pending = b""
    result: dict[str, object] | None = None
    stdin_open = True
    kill_at: float | None = None
    sup_status: int | None = None

    def forward() -> None:
        nonlocal log_fd, offset, pending
        if log_fd is None:
            try:
                log_fd = os.open(log, os.O_RDONLY)
            except OSError:
                return
        while True:
            data = os.pread(log_fd, 65536, offset)
            if not data:
                break
            offset += len(data)
            pending += data
        whole, nl, pending = pending.rpartition(b"\n")
        if nl:
            out.write(whole + b"\n")

    def report() -> None:
        nonlocal result
        try:
            with open(status, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and "exitCode" in data:
            forward()  # the records written before the trainer's end come before its status
            result = data
            out.write(f"VCLI-STATUS {json.dumps(data)}\n".encode())

    while sup_status is None:
        if stdin_open:
            ready, _, _ = select.select([0], [], [], TICK)
            if ready and not os.read(0, 4096):
                stdin_open = False  # the channel is gone: stop the replica (whole tree)
                _kill(pid, signal.SIGTERM)
                kill_at = time.monotonic() + grace
        else:
            time.sleep(TICK)
        if kill_at is not None and time.monotonic() > kill_at:
            _kill(pid, signal.SIGUSR1)
            kill_at = None
        forward()
        if result is None:
            report()
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            sup_status = wait_status
    sweep([tag])
    forward()
    if pending:
        out.write(pending + b"\n")
    if result is None:
        report()
    if result is None:
        return 255
    return int(result["exitCode"]) & 0xFF  # type: ignore[call-overload]


# --------------------------------------------------------------------------- stop


def _is_supervisor(pid: int, job_id: str) -> bool:
    return _alive(pid) and f"VCLI_JOB_ID={job_id}".encode() in _environ(pid)


def stop(job_id: str, grace: float, targets: list[tuple[int, str]]) -> int:
    live = [pid for pid, _ in targets if _is_supervisor(pid, job_id)]
    for pid in live:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = [pid for pid in live if _is_supervisor(pid, job_id)]
    for pid in live:
        _kill(pid, signal.SIGUSR1)  # the grace period is over: SIGKILL to the whole tree
    deadline = time.monotonic() + 5
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = [pid for pid in live if _is_supervisor(pid, job_id)]
    left = sweep([tag for _, tag in targets])
    if left:
        print("LEFT " + " ".join(map(str, left)))
        return 3
    print("STOPPED")
    return 0


def main(args: list[str]) -> int:
    if len(args) >= 7 and args[0] == "run" and "--" in args:
        sep = args.index("--")
        head, argv = args[1:sep], args[sep + 1:]
        supervisor, status, log, tag, grace = head[:5]
        rest = head[5:]
        secrets = bool(rest) and rest[0] == "--secrets"
        rest = rest[1:] if secrets else rest
        mask = []
        while len(rest) > 1 and rest[0] == "--mask":
            mask.append(rest[1])
            rest = rest[2:]
        return run(supervisor, status, log, tag, float(grace), secrets, mask, rest, argv)
    if len(args) >= 5 and args[0] == "stop" and len(args) % 2 == 1:
        pairs = args[3:]
        return stop(args[1], float(args[2]), [(int(pairs[i]), pairs[i + 1]) for i in range(0, len(pairs), 2)])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
