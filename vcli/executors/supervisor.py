"""The per-replica supervisor: one small process that owns a replica's whole process tree.

    python -S supervisor.py [--stop-with-parent] [--mask NAME]... [--lease-fd FD]... STATUS_FILE LOG_FILE -- ARGV...

It is started by an executor in a session of its own, runs ARGV (the trainer) as its child in
a new process group, and:

- is a child subreaper (`PR_SET_CHILD_SUBREAPER`): every orphaned descendant (`setsid`
  grandchildren, double-forked daemons) is re-parented to it, so "the replica's processes"
  are exactly the supervisor's descendants;
- writes the trainer's stdout and stderr to LOG_FILE as vcli log records (`vcli.logs`) itself,
  so the log goes on without the controller, with the `--mask` variables' values (secrets)
  replaced by `<redacted>`;
- the moment the trainer exits, writes `{"exitCode": N, "signal": NAME|null, "endTime": T}` to
  STATUS_FILE atomically, then stops every remaining descendant (SIGTERM, a short grace,
  SIGKILL, until none is left) and exits 0;
- on SIGTERM (a stop request): SIGTERM to every descendant, and keeps waiting for the trainer;
  on SIGUSR1 (the grace is over): SIGKILL to every descendant; if the executor that asked is
  gone, SIGKILL after ORPHAN_GRACE_SECONDS itself. Such an exit is recorded like any other;
- holds the replica's host-wide GPU leases (`--lease-fd`: locked `vcli.placement.gpulease`
  descriptors) for exactly as long as it lives; the trainer does not inherit them and dies
  with the supervisor (`PR_SET_PDEATHSIG` = SIGKILL), so no trainer runs on a GPU whose lease
  is free. It refreshes the lock files' times every `TOUCH_SECONDS` (tmp cleaners keep them)
  and puts back a lock file that was removed (`_restore_if_removed`).

It dies with its parent (`PR_SET_PDEATHSIG` = SIGTERM, set by the executor in the child) only
when the executor asks for it with `--stop-with-parent`; then a dead controller's replicas are
stopped, whole trees included.

Standard library only and no vcli imports: executors run it by path (`-S`, no site packages)
so it starts in milliseconds, and it can be shipped to hosts that have no vcli installed.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import selectors
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Callable

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
#: After the trainer ends, how long its leftover descendants get between SIGTERM and SIGKILL.
LEFTOVER_GRACE_SECONDS = 1.0
#: With no parent left to send SIGUSR1, how long a stop request waits before SIGKILL.
ORPHAN_GRACE_SECONDS = 3.0
#: Exit status of the supervisor when the trainer could not be started at all.
EXIT_CANNOT_START = 127
#: How often held lease files get their times refreshed (see `vcli.placement.gpulease.TOUCH_SECONDS`).
TOUCH_SECONDS = 3600.0
#: How often a supervisor checks that its lease files are still in the lease directory.
LEASE_CHECK_SECONDS = 1.0


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """Every live process below `root` (by parent links in /proc), deepest first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) < 2 or fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, ()))
    return out[::-1]


def _signal_all(sig: int) -> int:
    pids = descendants(os.getpid())
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    return len(pids)


#: What a secret's value is replaced with in the log. Values shorter than MASK_MIN_LENGTH are
#: not masked: masking "1" or "ab" everywhere would destroy the log and protect nothing.
REDACTED = "<redacted>"
MASK_MIN_LENGTH = 4


#: Secrets at least this long are masked wherever they appear; shorter ones only where they
#: stand as a word or number of their own (see `masker`).
MASK_ANYWHERE_LENGTH = 8


def masker(secrets: tuple[str, ...]) -> Callable[[str], str]:
    """A function that replaces each of `secrets` (longest first) in a line by REDACTED: one of
    MASK_ANYWHERE_LENGTH characters or more wherever it appears, a shorter one only where it
    is not part of a longer word or number (a token `2345` must not eat `score=0.12345`)."""
    long = [re.escape(v) for v in secrets if len(v) >= MASK_ANYWHERE_LENGTH]
    short = [re.escape(v) for v in secrets if len(v) < MASK_ANYWHERE_LENGTH]
    parts = long + ([r"(?<![0-9A-Za-z_])(?<![0-9]\.)(?:" + "|".join(short) + r")(?![0-9A-Za-z_])(?!\.[0-9])"]
                    if short else [])
    if not parts:
        return lambda line: line
    pattern = re.compile("|".join(parts))
    return lambda line: pattern.sub(REDACTED, line)


#: The longest log record, in bytes: a longer line is logged as several records, so memory
#: stays bounded and a 200 MB line costs linear time (Cloud Logging's entries are <= 256 KB).
MAX_RECORD_BYTES = 64 * 1024


class _Log:
    """Turns byte chunks from one stream into log records, a line at a time (a line longer
    than MAX_RECORD_BYTES: several records, cut between UTF-8 characters and outside any
    secret, so masking still applies)."""

    def __init__(self, out: int, stream: str, secrets: tuple[str, ...] = ()) -> None:
        self.out = out
        self.stream = stream
        self.secrets = tuple(sorted((v for v in secrets if len(v) >= MASK_MIN_LENGTH), key=len, reverse=True))
        self.secret_bytes = tuple(v.encode("utf-8", errors="replace") for v in self.secrets)
        self.mask = masker(self.secrets)
        self.buf = bytearray()
        self.scanned = 0  # buf[:scanned] holds no newline
        self.lost = 0

    def feed(self, data: bytes) -> None:
        self.buf += data
        while True:
            nl = self.buf.find(b"\n", self.scanned)
            if (nl if nl >= 0 else len(self.buf)) > MAX_RECORD_BYTES:
                cut = self._cut()
                self._write(bytes(self.buf[:cut]))
                del self.buf[:cut]
                self.scanned = 0
            elif nl >= 0:
                self._write(bytes(self.buf[:nl]))
                del self.buf[:nl + 1]
                self.scanned = 0
            else:
                self.scanned = len(self.buf)
                return

    def _cut(self) -> int:
        """Where to cut a line longer than MAX_RECORD_BYTES: at most that, not inside a UTF-8
        character, nor inside an occurrence of a secret."""
        buf, cut = self.buf, MAX_RECORD_BYTES
        while cut > MAX_RECORD_BYTES - 4 and buf[cut] & 0xC0 == 0x80:
            cut -= 1
        moved = True
        while moved:
            moved = False
            for secret in self.secret_bytes:
                at = buf.find(secret, max(0, cut - len(secret) + 1), cut + len(secret) - 1)
                if 0 < at < cut:
                    cut, moved = at, True
        return cut

    def flush(self) -> None:
        if self.buf:
            self._write(bytes(self.buf))
            self.buf = bytearray()
            self.scanned = 0

    def _write(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r").replace("\t", "    ")
        line = self.mask(line)
        record = f"{time.time():.6f}\t{self.stream}\t{line}\n".encode("utf-8", errors="replace")
        try:
            os.write(self.out, record)
        except OSError:
            self.lost += 1  # a full disk loses log lines, never the supervision of the tree


def _write_status(path: str, status: dict[str, object]) -> None:
    """Atomically; retried for a few seconds while the disk is full (vcli frees its reserve)."""
    tmp = f"{path}.tmp{os.getpid()}"
    for _ in range(50):
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
                json.dump(status, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            time.sleep(0.1)


def _status_of(wait_status: int) -> dict[str, object]:
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return {"exitCode": 128 + sig, "signal": name, "endTime": time.time()}
    return {"exitCode": os.WEXITSTATUS(wait_status), "signal": None, "endTime": time.time()}


def _restore_if_removed(fd: int) -> str | None:
    """Put back a removed lock file of a held lease (a new file, locked, with the holder's record
    and `restored`, takes `fd`'s place): a line for the replica's log, or None."""
    import fcntl

    try:
        if os.fstat(fd).st_nlink > 0:
            return None
        path = re.sub(r" \(deleted\)$", "", os.readlink(f"/proc/self/fd/{fd}"))
        rec = json.loads(os.pread(fd, 65536, 0) or b"{}")
        rec = {**(rec if isinstance(rec, dict) else {}), "restored": time.time()}
    except (OSError, ValueError, RecursionError):
        return None
    what = f"WARNING: the lease file {path} was removed while this replica held it"
    try:
        new = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        return f"{what}, and cannot be put back ({e.strerror}): another job may use its GPU now."
    try:
        fcntl.flock(new, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.fchmod(new, 0o644)  # ours, just created: readable by every user's vcli
        os.write(new, json.dumps(rec, sort_keys=True).encode())
        os.dup2(new, fd, inheritable=False)  # the same descriptor now holds the new file's lock
    except OSError as e:
        return f"{what}, and cannot be put back ({e.strerror})."
    finally:
        os.close(new)
    return f"{what}; vcli put it back."


class _Supervisor:
    """One replica's supervision: the trainer, its log pipes, and what has been asked and seen so far."""

    def __init__(self, status_path: str, log_path: str, argv: list[str], mask: tuple[str, ...],
                 lease_fds: tuple[int, ...]) -> None:
        self.status_path = status_path
        self.log_path = log_path
        self.argv = argv
        self.mask = mask
        self.lease_fds = lease_fds
        self.requested: list[int] = []  # signals received, handled in order by the loop (not in the handler)
        self.pid = 0  # the trainer
        self.trainer_status: dict[str, object] | None = None
        self.cleanup_deadline: float | None = None
        self.killed = False  # once set, every turn SIGKILLs every descendant
        self.orphan_kill_at: float | None = None
        self.stop_requested = False  # a SIGTERM came while the trainer ran
        # Set by `_take_over` (the log and the trainer's pipes) and by `run` after the fork.
        self.log_fd = self.out_r = self.out_w = self.err_r = self.err_w = -1
        self.parent = 0
        self.touched = self.checked = 0.0
        self.lost: set[int] = set()  # lease fds whose removed file could not be put back

    def run(self, stop_with_parent: bool) -> int:
        """Run the trainer and supervise its tree until none of it is left; the exit status of `run`."""
        self._take_over(stop_with_parent)
        me = os.getpid()
        try:
            self.pid = os.fork()
        except OSError as e:
            return self._cannot_start(e)
        if self.pid == 0:
            self._exec_trainer(me)  # never returns
        self._watch_output()
        # Both taken only now, in the parent after the fork, exactly where the checks compare to them.
        self.parent = os.getppid()
        self.touched = time.monotonic()
        while not self._turn():
            pass
        self._drain_logs()
        os.close(self.log_fd)
        return 0

    def _take_over(self, stop_with_parent: bool) -> None:
        """Keep the leases from the trainer, become subreaper, open the log and pipes, install handlers."""
        for fd in self.lease_fds:
            try:
                os.set_inheritable(fd, False)  # the trainer and its children never hold a lease
            except OSError:
                pass
        if stop_with_parent:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        self.log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.out_r, self.out_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGUSR1, self._on_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _on_signal(self, signum: int, frame: object) -> None:
        """Signal handler: only records the signal; the loop acts on it."""
        self.requested.append(signum)

    def _cannot_start(self, error: OSError) -> int:
        """The fork failed: say so in the log, record EXIT_CANNOT_START as the replica's status, return it."""
        _Log(self.log_fd, "vcli").feed(f"cannot start the replica: {error.strerror}\n".encode())
        _write_status(self.status_path, {"exitCode": EXIT_CANNOT_START, "signal": None, "endTime": time.time()})
        return EXIT_CANNOT_START

    def _exec_trainer(self, me: int) -> None:
        """In the forked child: become the trainer (own group, default signals, pipes as stdout/stderr); never returns."""
        try:
            os.setpgid(0, 0)
            if self.lease_fds:
                _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # its GPUs are only leased while we live
                if os.getppid() != me:  # we died before the line above took effect
                    os._exit(EXIT_CANNOT_START)
            # The trainer must not inherit our handlers' dispositions (SIG_IGN would be inherited).
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGUSR1, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.dup2(self.out_w, 1)
            os.dup2(self.err_w, 2)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            for fd in (self.out_r, self.out_w, self.err_r, self.err_w, self.log_fd, devnull, *self.lease_fds):
                if fd > 2:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            os.execvp(self.argv[0], self.argv)
        except OSError as e:
            os.write(2, f"vcli: cannot run {self.argv[0]}: {e.strerror}\n".encode())
        finally:
            os._exit(EXIT_CANNOT_START)

    def _watch_output(self) -> None:
        """Close our ends of the trainer's pipes and register the read ends, each with its masking `_Log`."""
        os.close(self.out_w)
        os.close(self.err_w)
        secrets = tuple(os.environ[name] for name in self.mask if os.environ.get(name))
        self.logs = {self.out_r: _Log(self.log_fd, "stdout", secrets), self.err_r: _Log(self.log_fd, "stderr", secrets)}
        self.sel = selectors.DefaultSelector()
        for fd in self.logs:
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)

    def _turn(self) -> bool:
        """One turn of the loop (waits at most ~50 ms for output); True once trainer and tree are gone."""
        self._touch_leases()
        self._pump_logs()
        self._handle_requests()
        self._escalate()
        self._reap()
        return self._finished()

    def _touch_leases(self) -> None:
        """Every TOUCH_SECONDS, refresh the held lease files' times (so /tmp cleaners keep them);
        every LEASE_CHECK_SECONDS, put back a held lease file that was removed."""
        now = time.monotonic()
        if self.lease_fds and now - self.checked > LEASE_CHECK_SECONDS:
            self.checked, touch = now, now - self.touched > TOUCH_SECONDS
            self.touched = now if touch else self.touched
            for fd in set(self.lease_fds) - self.lost:
                if touch:
                    try:
                        os.utime(fd)
                    except OSError:
                        pass
                if note := _restore_if_removed(fd):
                    _Log(self.log_fd, "vcli").feed(f"{note}\n".encode())
                    self.lost |= set() if note.endswith("put it back.") else {fd}  # said once

    def _pump_logs(self) -> None:
        """Copy whatever output is ready to the log; a pipe at EOF is flushed, unregistered and closed."""
        for key, _ in self.sel.select(timeout=0.05):
            fd = key.fd
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if data:
                self.logs[fd].feed(data)
            else:
                self.logs[fd].flush()
                self.sel.unregister(fd)
                os.close(fd)

    def _handle_requests(self) -> None:
        """Act on received signals: SIGTERM stops the tree (while the trainer runs), SIGUSR1 kills it."""
        while self.requested:
            signum = self.requested.pop(0)
            if signum == signal.SIGTERM and self.trainer_status is None:
                _signal_all(signal.SIGTERM)
                self.stop_requested = True
            elif signum == signal.SIGUSR1:
                self.killed = True

    def _escalate(self) -> None:
        """Once the orphan grace is over, or SIGKILL was called for, SIGKILL every descendant (every turn).
        A stop whose executor is gone, before or during its grace, gets the grace from here:
        a controller killed in the grace left a trainer that ignores SIGTERM training on."""
        if self.stop_requested and self.orphan_kill_at is None and os.getppid() != self.parent:
            self.orphan_kill_at = time.monotonic() + ORPHAN_GRACE_SECONDS
        if self.orphan_kill_at is not None and time.monotonic() > self.orphan_kill_at:
            self.killed = True
        if self.killed:
            _signal_all(signal.SIGKILL)

    def _reap(self) -> None:
        """Reap every exited child, the trainer and every orphan re-parented to us, without blocking."""
        while True:
            try:
                child, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if child == 0:
                break
            if child == self.pid and self.trainer_status is None:
                self._trainer_ended(wait_status)

    def _trainer_ended(self, wait_status: int) -> None:
        """Record the trainer's status at once (the replica ends now), then start stopping the leftovers."""
        self.trainer_status = _status_of(wait_status)
        if self.stop_requested or self.killed:  # vcli stopped it: whoever reads the record later says STOPPED
            self.trainer_status["stopped"] = True
        _write_status(self.status_path, self.trainer_status)
        self.cleanup_deadline = time.monotonic() + LEFTOVER_GRACE_SECONDS
        _signal_all(signal.SIGTERM)

    def _finished(self) -> bool:
        """True once the trainer has ended and no descendant is left; past the leftover grace, sets `killed`."""
        if self.trainer_status is None:
            return False
        if self.cleanup_deadline is not None and time.monotonic() > self.cleanup_deadline:
            self.killed = True  # takes effect on the next turn's `_escalate`
        return not descendants(os.getpid())

    def _drain_logs(self) -> None:
        """Copy what is left in the pipes to the log and flush partial lines (closed pipes just fail)."""
        for fd in list(self.logs):
            try:
                while True:
                    data = os.read(fd, 65536)
                    if not data:
                        break
                    self.logs[fd].feed(data)
            except (BlockingIOError, OSError):
                pass
            self.logs[fd].flush()


def run(status_path: str, log_path: str, argv: list[str], *, stop_with_parent: bool = False,
        mask: tuple[str, ...] = (), lease_fds: tuple[int, ...] = ()) -> int:
    """Supervise ARGV as the replica's trainer (see the module docstring); 0, or EXIT_CANNOT_START."""
    return _Supervisor(status_path, log_path, argv, mask, lease_fds).run(stop_with_parent)


def main(args: list[str]) -> int:
    stop_with_parent = False
    mask: list[str] = []
    lease_fds: list[int] = []
    while args and args[0] in ("--stop-with-parent", "--mask", "--lease-fd"):
        flag, value = args[0], args[1] if len(args) > 1 else ""
        if flag == "--stop-with-parent":
            stop_with_parent, args = True, args[1:]
            continue
        if not value or (flag == "--lease-fd" and not value.isdigit()):
            break
        mask.append(value) if flag == "--mask" else lease_fds.append(int(value))
        args = args[2:]
    if len(args) < 4 or args[2] != "--":
        print("usage: supervisor.py [--stop-with-parent] [--mask NAME]... [--lease-fd FD]... STATUS_FILE LOG_FILE "
              "-- ARGV...", file=sys.stderr)
        return 2
    return run(args[0], args[1], args[3:], stop_with_parent=stop_with_parent, mask=tuple(mask),
               lease_fds=tuple(lease_fds))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
