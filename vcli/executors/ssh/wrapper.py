"""The remote end of a replica's SSH channel, shipped to each host with the supervisor.

    python -S wrapper.py run SUPERVISOR STATUS LOG TAG GRACE LEASE ORPHAN_TIMEOUT
                             [--lease-from SOCKET --lease-gpus I,J...] [--secrets] [--mask NAME]...
                             [NAME=VALUE...] -- ARGV...
    python -S wrapper.py attach JOB_ID PID STATUS LOG TAG LEASE AFTER_JSON
    python -S wrapper.py stop JOB_ID GRACE PID TAG [PID TAG...]
    python -S wrapper.py keep SOCKET|- I,J... CONTAINER JOB_ID REPLICA LEASE ORPHAN_TIMEOUT GRACE

`run` sits between the channel and the replica's supervisor (`vcli.executors.supervisor`):

0. with `--lease-from`, takes the host-wide GPU leases of GPUs I,J... over from the
   controller's lease server on this host (`vcli.placement.leaseserver.serve`, abstract Unix socket SOCKET,
   descriptors by SCM_RIGHTS), passes them to the supervisor (`--lease-fd`), records the
   supervisor as their holder and closes its own copies: the leases end with the supervisor.
   If they cannot be taken, nothing starts (`vcli: cannot take over ...` on stderr, exit 127);
1. with `--secrets`, reads `NAME=VALUE` lines from stdin up to an empty line, so secret values
   never appear in a command line, a process list or a log;
2. starts `python -S SUPERVISOR --stop-with-parent [--mask NAME]... STATUS LOG -- ARGV` (the
   supervisor masks the values of those variables in the log) in a session of its own, with
   the NAME=VALUE assignments and the secrets added to the supervisor's environment only
   (never to this process's: the final sweep below must not hit the wrapper itself);
3. prints `VCLI-SUPERVISOR <pid>` on stdout: the handshake, after whatever the login shell's
   rc files printed;
4. copies every record the supervisor appends to LOG (`<time>\\t<stream>\\t<line>`) to stdout,
   so the controller keeps the replica's log live while the host keeps its own copy;
5. prints `VCLI-STATUS <json>` the moment STATUS appears: the trainer has exited, even if a
   helper still holds its stdout and the supervisor is still stopping leftovers;
6. keeps the replica's lease: LEASE is a file whose mtime says when a controller last showed
   it is alive (every byte the controller sends on stdin, here or on an `attach` channel,
   touches it). When stdin closes (the controller released the replica, died, or lost the
   connection) the replica keeps running, so a new controller can re-adopt it (`attach`).
   Once the lease is older than ORPHAN_TIMEOUT seconds (the controller is gone or cut off by
   a partition, whether or not this channel noticed): SIGTERM to the supervisor (a stop
   request for the whole tree), SIGUSR1 after GRACE seconds (SIGKILL to the whole tree). If
   the wrapper itself is killed, the supervisor's PR_SET_PDEATHSIG stops the tree;
7. once the supervisor has exited: SIGKILL to any process still carrying VCLI_REPLICA=TAG (a
   supervisor that was itself killed leaves its tree behind), the rest of the log, the status
   if not printed yet, and exit with the trainer's exit code (255 if it has none).

`attach` is how a new controller re-adopts a replica that `run` started for another one: the
same handshake, then the records of LOG whose time is after AFTER_JSON's (`{stream: last
time}` already in the controller's copy, so the copy goes on with no gap and no repeat),
`VCLI-STATUS`, and the exit code once supervisor PID (checked to carry VCLI_JOB_ID=JOB_ID) is
gone. Bytes on its stdin touch LEASE; stdin closing ends it (the replica keeps running).

`stop` is what the executor's stop runs on the host, from any vcli process: SIGTERM to each
listed supervisor that is alive and carries VCLI_JOB_ID=JOB_ID (never a reused pid), a grace
period for them to finish, SIGUSR1, then SIGKILL to every process that carries one of the
TAGs. It prints `STOPPED` or `LEFT <pids>` (exit status 3).

`keep` keeps a container replica (the Docker runtime on SSH hosts): it takes its host-wide GPU
leases (SOCKET `-`: none) over from the controller's lease server as `run` does, forks a
keeper in a session of its own that holds them, waits with `docker container wait CONTAINER`
and stops the container once LEASE (touched by the controller) is older than ORPHAN_TIMEOUT,
records the keeper as their holder, prints `VCLI-KEEPER <pid>` and exits. The keeper, and so
the leases, end when the container stops; `kill -9` of the keeper frees them at once.

Standard library only and no vcli imports, like the supervisor: it runs on hosts that have
no vcli installed.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
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
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


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


class _Relay:
    """Copies LOG's new records and, once, STATUS's record to the channel (`out`).

    `after` maps a stream to the time of its last record the controller already has: older
    records of that stream (other streams: older than the latest of them) are not sent again.
    """

    def __init__(self, out: _Out, status: str, log: str, offset: int = 0,
                 after: dict[str, float] | None = None) -> None:
        self.out = out
        self.status = status
        self.log = log
        self.offset = offset
        self.after = after or {}
        self.fd: int | None = None
        self.pending = b""
        self.result: dict[str, object] | None = None

    def _new(self, line: bytes) -> bool:
        stamp, _, rest = line.partition(b"\t")
        stream = rest.partition(b"\t")[0].decode("utf-8", "replace")
        try:
            when = float(stamp)
        except ValueError:
            return True
        last = self.after.get(stream, max(self.after.values(), default=None))
        return last is None or when > last + 1e-6  # the log keeps microseconds

    def forward(self) -> None:
        if self.out.broken:
            return
        if self.fd is None:
            try:
                self.fd = os.open(self.log, os.O_RDONLY)
            except OSError:
                return
        while True:
            data = os.pread(self.fd, 65536, self.offset)
            if not data:
                break
            self.offset += len(data)
            self.pending += data
        whole, nl, self.pending = self.pending.rpartition(b"\n")
        if nl:
            if self.after:
                whole = b"\n".join(line for line in whole.split(b"\n") if self._new(line))
            if whole:
                self.out.write(whole + b"\n")

    def report(self) -> None:
        """`VCLI-STATUS <json>` once STATUS holds the trainer's exit (after the records before it)."""
        if self.result is not None:
            return
        try:
            with open(self.status, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and "exitCode" in data:
            self.forward()  # the records written before the trainer's end come before its status
            self.result = data
            self.out.write(f"VCLI-STATUS {json.dumps(data)}\n".encode())

    def finish(self) -> int:
        """The rest of the log and the status; the exit code to end with (255: none recorded)."""
        self.forward()
        if self.pending and (not self.after or self._new(self.pending)):
            self.out.write(self.pending + b"\n")
        self.pending = b""
        self.report()
        if self.result is None:
            return 255
        return int(self.result["exitCode"]) & 0xFF  # type: ignore[call-overload]


def _touch(lease: str) -> None:
    try:
        os.utime(lease)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            os.close(os.open(lease, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        pass


def _lease_age(lease: str, floor: float) -> float:
    """Seconds since a controller last touched `lease` (or since `floor`, if later)."""
    try:
        touched = max(os.stat(lease).st_mtime, floor)
    except OSError:
        touched = floor
    return time.time() - touched


def _read_stdin(lease: str) -> bool:
    """Consume what the controller sent (each send renews the lease); False once stdin closed."""
    ready, _, _ = select.select([0], [], [], TICK)
    if not ready:
        return True
    if not os.read(0, 4096):
        return False
    _touch(lease)
    return True


def _note(log: str, text: str) -> None:
    """Append a vcli record to the host's replica log (the supervisor appends with O_APPEND too)."""
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{time.time():.6f}\tvcli\t{text}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def take_over(socket_name: str, gpus: list[int]) -> list[int]:
    """The lock descriptors of `gpus`, from the lease server listening on `socket_name`
    (inheritable, for the supervisor). Raises OSError with the server's reason."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fds = array.array("i")
    try:
        s.settimeout(10)
        s.connect("\0" + socket_name)
        s.sendall(json.dumps({"gpus": gpus}).encode() + b"\n")
        msg, ancdata, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(len(gpus) * fds.itemsize))
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    finally:
        s.close()
    try:
        reply = json.loads(msg.decode("utf-8", "replace") or "{}")
    except ValueError:
        reply = {}
    if len(fds) != len(gpus) or not reply.get("ok"):
        for fd in fds:
            os.close(fd)
        raise OSError(reply.get("error") or "the lease server sent no leases")
    for fd in fds:
        os.set_inheritable(fd, True)
    return list(fds)


def _record_holder(fds: list[int], updates: dict) -> None:
    """Add `updates` (the supervisor's pid, the replica) to each lease's holder record."""
    for fd in fds:
        try:
            data = os.pread(fd, 65536, 0)
            rec = json.loads(data.decode("utf-8", "replace")) if data else {}
            rec = rec if isinstance(rec, dict) else {}
            rec.update(updates)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(rec, sort_keys=True).encode(), 0)
        except (OSError, ValueError):
            pass  # the record is informative only


def run(supervisor: str, status: str, log: str, tag: str, grace: float, lease: str, orphan_timeout: float,
        secrets: bool, mask: list[str], assignments: list[str], argv: list[str],
        gpu_leases: tuple[str, list[int]] | None = None) -> int:
    lease_fds: list[int] = []
    if gpu_leases is not None:
        try:
            lease_fds = take_over(*gpu_leases)
        except OSError as e:
            os.write(2, f"vcli: cannot take over the leases of GPU(s) {gpu_leases[1]}: {e.strerror or e}\n".encode())
            return 127
    env = _environment(assignments, secrets)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(status)
    try:  # follow the log from where it ends now: a retry appends to the same file
        offset = os.path.getsize(log)
    except OSError:
        offset = 0
    _touch(lease)
    started = time.time()
    out = _Out()
    pid = _spawn_supervisor(supervisor, status, log, mask, lease_fds, argv, env)
    if lease_fds:  # the supervisor holds them now; this process must not outlive it holding them
        _record_holder(lease_fds, {"pid": pid, "replica": tag.partition("/")[2], "wrapperPid": os.getpid()})
        for fd in lease_fds:
            os.close(fd)
    out.write(f"VCLI-SUPERVISOR {pid}\n".encode())
    relay = _Relay(out, status, log, offset)
    _watch(pid, relay, log, lease, started, grace, orphan_timeout)
    sweep([tag])
    return relay.finish()


def _environment(assignments: list[str], secrets: bool) -> dict[str, str]:
    """This process's environment with the replica's NAME=VALUE `assignments` (and the
    secrets read from stdin's first line, when `secrets`)."""
    env = dict(os.environ)
    for a in assignments:
        name, _, value = a.partition("=")
        env[name] = value
    if secrets:
        env.update(_read_secrets())
    return env


def _spawn_supervisor(supervisor: str, status: str, log: str, mask: list[str], lease_fds: list[int],
                      argv: list[str], env: dict[str, str]) -> int:
    """Fork the supervisor of `argv` in its own session (stdin and stdout /dev/null, the
    lease descriptors inherited); its pid. The child never returns."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)  # the supervisor writes nothing; a crash of it goes to stderr
            masks = [arg for name in mask for arg in ("--mask", name)]
            held = [arg for fd in lease_fds for arg in ("--lease-fd", str(fd))]
            os.execve(sys.executable, [sys.executable, "-S", supervisor, "--stop-with-parent", *masks, *held, status,
                                       log, "--", *argv], env)
        except OSError as e:
            os.write(2, f"vcli: cannot start the supervisor: {e.strerror}\n".encode())
        finally:
            os._exit(127)
    return pid


def _watch(pid: int, relay: _Relay, log: str, lease: str, started: float, grace: float,
           orphan_timeout: float) -> None:
    """Relay the supervisor's log and status until it exits. Stdin's lines renew the lease
    (closed: the replica goes on, on its lease alone); a lease older than `orphan_timeout`
    (no controller) stops the replica: SIGTERM, then SIGUSR1 (the supervisor's kill) after
    `grace` seconds."""
    stdin_open = True
    orphaned = False
    kill_at: float | None = None
    next_lease_check = 0.0
    while True:
        if stdin_open:
            stdin_open = _read_stdin(lease)
        else:
            time.sleep(TICK)
        now = time.monotonic()
        if not orphaned and now >= next_lease_check:
            next_lease_check = now + min(1.0, orphan_timeout / 10)
            age = _lease_age(lease, started)
            if age > orphan_timeout:  # no controller for that long: never keep an orphan forever
                orphaned = True
                _note(log, f"no controller renewed this replica's lease for {age:.0f}s "
                           f"(VCLI_SSH_ORPHAN_TIMEOUT={orphan_timeout:g}): stopping it")
                _kill(pid, signal.SIGTERM)
                kill_at = now + grace
        if kill_at is not None and now > kill_at:
            _kill(pid, signal.SIGUSR1)
            kill_at = None
        relay.forward()
        relay.report()
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else None


def attach(job_id: str, pid: int, status: str, log: str, tag: str, lease: str, after: dict[str, float]) -> int:
    """Follow a replica another controller's `run` started, from where that controller's copy ends."""
    out = _Out()
    alive = _is_supervisor(pid, job_id)
    if alive:
        _touch(lease)
    # Its `run` wrapper sweeps the tree once the supervisor is gone; end after that.
    keeper = _parent(pid) if alive else None
    out.write(f"VCLI-SUPERVISOR {pid}\n".encode())
    relay = _Relay(out, status, log, 0, after)
    while alive:
        if not _read_stdin(lease):
            return 0  # this controller let go; the replica goes on, on its lease
        relay.forward()
        relay.report()
        alive = _is_supervisor(pid, job_id)
    deadline = time.monotonic() + 10
    while keeper is not None and _alive(keeper) and time.monotonic() < deadline:
        time.sleep(TICK)
    sweep([tag])
    return relay.finish()


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


def _container_running(container: str) -> bool | None:
    """True/False as the engine says; None when it cannot be asked (no answer, no CLI)."""
    import subprocess

    try:
        p = subprocess.run(["docker", "container", "inspect", "--format", "{{.State.Running}}", container],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() == b"true" if p.returncode == 0 else False if b"no such" in p.stderr.lower() else None


def _keep_waiting(container: str, lease: str, orphan_timeout: float, grace: float) -> None:
    """Until the container is not running (stopped, removed, unknown to a reachable engine);
    once no controller renewed `lease` for `orphan_timeout` seconds, `docker stop -t GRACE` it,
    as a process replica's wrapper stops its tree (a container whose controller died ran on)."""
    import subprocess

    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    started, unsure, stopped = time.time(), 0, False
    while True:
        try:
            waiter: subprocess.Popen[bytes] | None = subprocess.Popen(["docker", "container", "wait", container], **quiet)
        except OSError:
            waiter = None
        while waiter is not None and waiter.poll() is None:
            if not stopped and _lease_age(lease, started) > orphan_timeout:
                stopped = True
                subprocess.run(["docker", "container", "stop", "-t", f"{grace:g}", container], timeout=grace + 60, **quiet)
            with contextlib.suppress(subprocess.TimeoutExpired):
                waiter.wait(timeout=min(5.0, max(0.5, orphan_timeout / 10)))
        running = _container_running(container)
        if running is False:
            return
        unsure = unsure + 1 if running is None else 0
        if unsure > 10:  # the engine is gone for good (as the local keeper does)
            return
        time.sleep(1.0)


def keep(socket_name: str, gpus: list[int], container: str, job_id: str, replica: str, lease: str,
         orphan_timeout: float, grace: float) -> int:
    """Keep a container replica: hold its GPU leases (SOCKET `-`: none) and stop it once its
    lease (LEASE, renewed by the controller) is older than ORPHAN_TIMEOUT, until it stops."""
    try:
        fds = take_over(socket_name, gpus) if socket_name != "-" else []
    except OSError as e:
        os.write(2, f"vcli: cannot take over the leases of GPU(s) {gpus}: {e.strerror or e}\n".encode())
        return 127
    os.makedirs(os.path.dirname(lease), exist_ok=True)
    _touch(lease)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for std in (0, 1, 2):
                os.dup2(devnull, std)
            os.environ["VCLI_JOB_ID"] = job_id
            _keep_waiting(container, lease, orphan_timeout, grace)
        finally:
            os._exit(0)
    if fds:
        _record_holder(fds, {"pid": pid, "replica": replica, "container": container[:12], "wrapperPid": os.getpid()})
    for fd in fds:
        os.close(fd)
    os.write(1, f"VCLI-KEEPER {pid}\n".encode())
    return 0


def _main_run(args: list[str]) -> int:
    """`run` with its arguments (`args`, the module's docstring): the options parsed in order."""
    sep = args.index("--", 8)
    head, argv = args[1:sep], args[sep + 1:]
    supervisor, status, log, tag, grace, lease, orphan_timeout = head[:7]
    rest = head[7:]
    gpu_leases = None
    if len(rest) >= 4 and rest[0] == "--lease-from" and rest[2] == "--lease-gpus":
        gpu_leases = (rest[1], [int(i) if i.isdigit() else i for i in rest[3].split(",") if i])  # a share: its key
        rest = rest[4:]
    secrets = bool(rest) and rest[0] == "--secrets"
    rest = rest[1:] if secrets else rest
    mask = []
    while len(rest) > 1 and rest[0] == "--mask":
        mask.append(rest[1])
        rest = rest[2:]
    return run(supervisor, status, log, tag, float(grace), lease, float(orphan_timeout), secrets, mask, rest,
               argv, gpu_leases)


def main(args: list[str]) -> int:
    """Run the command `args` name (the module's docstring); its usage and 2 when they fit none."""
    if len(args) >= 10 and args[0] == "run" and "--" in args[8:]:
        return _main_run(args)
    if len(args) == 8 and args[0] == "attach":
        job_id, pid, status, log, tag, lease, after = args[1:]
        return attach(job_id, int(pid), status, log, tag, lease, {k: float(v) for k, v in json.loads(after).items()})
    if len(args) >= 5 and args[0] == "stop" and len(args) % 2 == 1:
        pairs = args[3:]
        return stop(args[1], float(args[2]), [(int(pairs[i]), pairs[i + 1]) for i in range(0, len(pairs), 2)])
    if len(args) == 9 and args[0] == "keep":
        return keep(args[1], [int(i) for i in args[2].split(",") if i], *args[3:6], args[6], float(args[7]),
                    float(args[8]))
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
