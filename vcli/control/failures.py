"""Why a custom job or a trial failed: its failure class (`vcli.enums.FailureClass`) and the
cause in a few words. Every classification vcli makes is here.

- USER: the trainer's own error: an exception (its last traceback line is the cause), a
  non-zero exit, a crash of its own (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL), a trainer
  that cannot start (a package that does not build or install), a job cancelled by a person.
- RESOURCE: out of memory, GPU or host, or out of disk space (the signatures below).
- INFRASTRUCTURE: the host, container engine, node, network or controller was lost (a
  replica without an exit status, an SSH host that dropped, a container that vanished,
  Slurm's NODE_FAIL and PREEMPTED, a Ray actor that died), or a replica was killed by a
  signal vcli did not send (SIGKILL, SIGTERM, SIGINT, SIGHUP, SIGQUIT from outside).
- TIMEOUT: `scheduling.timeout` ran out (vcli's, or Slurm's TIMEOUT from `--time`), or
  `scheduling.maxWaitDuration` did before the trial could be placed.

Signatures of RESOURCE, looked for in the executor's message about the replica and in the end
of the failing replica's log (stdout and stderr): from its last Python traceback on, or its
last `TAIL_LINES` lines when it printed none (an out-of-memory error caught and survived
earlier in the run does not count):

| what ran out | signature |
|---|---|
| GPU memory, CUDA and PyTorch | `CUDA out of memory`, `torch.cuda.OutOfMemoryError`, `torch.OutOfMemoryError`, `CUDA error: out of memory`, `CUBLAS_STATUS_ALLOC_FAILED`, `HIP out of memory` |
| memory, TensorFlow and XLA | `RESOURCE_EXHAUSTED`, `OOM when allocating`, `ResourceExhaustedError` |
| memory, JAX | `RESOURCE_EXHAUSTED: Out of memory` |
| host memory | Python's `MemoryError`, C++'s `std::bad_alloc`, `Cannot allocate memory` (ENOMEM) |
| shared memory | PyTorch's DataLoader: `insufficient shared memory` |
| host memory, Docker | the container's `OOMKilled` (the docker executor's message) |
| host memory, Slurm | the job's or step's `OUT_OF_MEMORY` (the slurm executor's message) |
| host memory, the kernel's OOM killer | a replica on this machine killed by SIGKILL that vcli did not send while the OOM-kill counter grew (below) |
| disk | `No space left on device`, `ENOSPC`, `Disk quota exceeded`, vcli's store: `the disk is full` |

What can be known of the kernel's OOM killer: it ends its victim with SIGKILL and prints
nothing in the victim's output. vcli reads the `oom_kill` counter of its own memory cgroup
(cgroup v2 `memory.events`, v1 `memory.oom_control`), which the local executor's trainers
share (the machine's, `/proc/vmstat`, where no cgroup counter is readable), when a job starts
and when its replica is found killed: a SIGKILL while the counter grew is RESOURCE; one while it
did not, on another host (whose counter vcli does not read), of a trainer moved to a cgroup of
its own, or where no counter is readable, is INFRASTRUCTURE (`killed by signal SIGKILL, which
vcli did not send`). A replica killed by a person at the moment another process of the cgroup
was killed for memory is RESOURCE too. A container or a Slurm step killed for its memory is
known from Docker's and Slurm's own words.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from vcli.enums import FailureClass, JobState, RpcCode

if TYPE_CHECKING:
    from vcli.control.jobs import JobRun
    from vcli.executors import ReplicaStatus

__all__ = ["Failure", "classify_replica", "classify_startup", "error_lines", "job_failure", "oom_kills", "recorded",
           "replica_failed", "resource_signature", "settle"]

#: Lines of a replica's log read back from its end when it printed no traceback.
TAIL_LINES = 40
#: The most of a replica's log read back (its end).
TAIL_BYTES = 256 * 1024

_GPU, _MEM, _HOST, _DISK = "out of GPU memory", "out of memory", "out of host memory", "out of disk space"
#: (what the line says, what ran out), first match wins: the specific before the general.
SIGNATURES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), what) for p, what in (
    (r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
     r"|HIP out of memory", _GPU),
    (r"RESOURCE_EXHAUSTED: Out of memory", f"{_MEM} (JAX/XLA)"),
    (r"OOM when allocating|ResourceExhaustedError|RESOURCE_EXHAUSTED", f"{_MEM} (TensorFlow/XLA)"),
    (r"OOMKilled", f"{_MEM} (Docker's OOMKilled)"),
    (r"OUT_OF_MEMORY", f"{_MEM} (Slurm's OUT_OF_MEMORY)"),
    (r"insufficient shared memory", "out of shared memory (/dev/shm)"),
    (r"(?<![\w.])MemoryError\b|std::bad_alloc|Cannot allocate memory", _HOST),
    (r"No space left on device|ENOSPC|[Tt]he disk is full", _DISK),
    (r"Disk quota exceeded|EDQUOT", "out of disk quota"),
))

#: Words of an executor's message about a replica, or of a start that failed, that say the
#: machinery was lost rather than the trainer failing.
_LOST = re.compile(
    r"is gone|no longer exists|was removed|lost the Docker engine|lost contact with host|marked unhealthy"
    r"|without an exit status|without recording|ended without"
    r"|NODE_FAIL|PREEMPTED|BOOT_FAIL|Slurm no longer knows|: GONE|: CANCELLED|Ray actor|Ray cluster does not answer"
    r"|[Cc]onnection (refused|reset|closed|timed out|lost)|timed out|[Uu]nreachable|[Nn]o route to host"
    r"|[Cc]annot reach|[Cc]annot connect|not responding|does not answer|[Bb]roken pipe|^host |Host \S+: ")

#: Signals a trainer gets from outside (a person, a supervisor, the kernel); other signals
#: are its own crash.
_OUTSIDE = {"SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE"}
_BY_EXIT = {137: "SIGKILL", 143: "SIGTERM", 134: "SIGABRT", 139: "SIGSEGV", 135: "SIGBUS"}
_SIGNAL = re.compile(r"\b(SIG[A-Z]+[0-9]*)\b")


@dataclass(frozen=True)
class Failure:
    """A failure's class and its cause in a few words (one line)."""

    cls: FailureClass
    cause: str
    #: The failing replica's last stderr line, if it printed one (a USER error's own words).
    last_error: str | None = None

    def text(self, said: str | None = None) -> str:
        """`CLASS: cause`; the cause without the line it quotes when `said` (the trainer's
        last error line, shown beside it) is that line."""
        what, _, line = self.cause.partition(": ")
        return f"{self.cls.value}: {what if said and line and said.startswith(line) else self.cause}"


def resource_signature(text: str | None) -> str | None:
    """What ran out, with the line that says so, when `text` (lines) holds a RESOURCE
    signature (the module docstring's table); else None."""
    from vcli.logs import printable

    for line in reversed((text or "").splitlines()):
        for pattern, what in SIGNATURES:
            if pattern.search(line):
                return f"{what}: {printable(line.strip())[:200]}"
    return None


def error_lines(records: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The end of a replica's output that says why it failed: (stream, line) records from its
    last Python traceback on, else its last `TAIL_LINES` (vcli's own lines left out)."""
    out = [(s, m) for s, m in records if s in ("stdout", "stderr")]
    start = next((i for i in range(len(out) - 1, -1, -1) if out[i][1].startswith("Traceback (most recent call last)")), None)
    return out[start:] if start is not None else out[-TAIL_LINES:]


def _log_tail(path: str) -> list[tuple[str, str]]:
    """(stream, message) of the last records of a replica's log file (none when unreadable)."""
    from vcli.logs import parse_line

    try:
        with open(path, "rb") as f:
            start = max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES)
            f.seek(start)
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    recs = (parse_line(line, "") for line in (lines[1:] if start else lines))  # a cut first line is left out
    return [(r.stream, r.message) for r in recs if r is not None]


def _last_error(lines: Sequence[tuple[str, str]]) -> str | None:
    from vcli.logs import printable

    said = [m.strip() for s, m in lines if s == "stderr" and m.strip()]
    return printable(said[-1])[:300] if said else None


def _signal_of(status: ReplicaStatus) -> str | None:
    found = _SIGNAL.search(status.message or "")
    if found:
        return found.group(1)
    return _BY_EXIT.get(status.exit_code or 0) if not status.message else None


def classify_replica(status: ReplicaStatus, lines: Sequence[tuple[str, str]], *, oom_grew: bool = False) -> Failure:
    """The class of a replica that ended non-zero or was lost: from its executor's status and
    the end of its output (`error_lines`); `oom_grew`: the OOM-kill counter grew meanwhile."""
    message = status.message or ""
    last = _last_error(lines)
    if "TIMEOUT" in message:  # Slurm's --time
        return Failure(FailureClass.TIMEOUT, message, last)
    if said := resource_signature("\n".join([*(m for _, m in lines), message])):
        return Failure(FailureClass.RESOURCE, said, last)
    sig = _signal_of(status)
    if (by_signal := _killed(status, sig, oom_grew, last)) is not None:
        return by_signal
    if status.exit_code is None or _LOST.search(message):
        return Failure(FailureClass.INFRASTRUCTURE, message or "the replica ended without an exit status", last)
    if sig is not None:
        return Failure(FailureClass.USER, f"crashed ({sig})" + (f": {last}" if last else ""), last)
    return Failure(FailureClass.USER, last or f"exited with status {status.exit_code}", last)


def _killed(status: ReplicaStatus, sig: str | None, oom_grew: bool, last: str | None) -> Failure | None:
    """The class of a replica killed from outside (`_OUTSIDE`) or stopped by vcli, else None."""
    if sig == "SIGKILL" and oom_grew and not status.stopped:
        return Failure(FailureClass.RESOURCE, f"{_HOST}: killed by the kernel's OOM killer (SIGKILL while the "
                       "OOM-kill counter grew)", last)
    if status.stopped:
        return Failure(FailureClass.INFRASTRUCTURE, f"stopped by vcli while no controller followed it ({status.message or sig})",
                       last)
    if sig in _OUTSIDE:
        return Failure(FailureClass.INFRASTRUCTURE, f"killed by signal {sig}, which vcli did not send", last)
    return None


def classify_startup(error: BaseException) -> Failure:
    """The class of a job whose replicas could not be started (`JobRun.startup_error`): the
    disk full is RESOURCE; a host, engine or cluster that cannot be reached INFRASTRUCTURE;
    anything else (an image or package that does not build, a bad spec) USER."""
    import errno

    text = " ".join(str(error).split())[:300]
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT) or resource_signature(text):
        return Failure(FailureClass.RESOURCE, resource_signature(text) or f"{_DISK}: {text}")
    if _LOST.search(text) or isinstance(error, (ConnectionError, TimeoutError)):
        return Failure(FailureClass.INFRASTRUCTURE, f"could not start: {text}")
    return Failure(FailureClass.USER, f"could not start: {text}")


def job_failure(run: JobRun, error: dict[str, Any] | None) -> Failure:
    """The class of a custom job that ended FAILED with `error` (`JobRun._finish`)."""
    code = (error or {}).get("code")
    message = str((error or {}).get("message") or "")
    if code == RpcCode.DEADLINE_EXCEEDED:
        return Failure(FailureClass.TIMEOUT, message.split(" and was stopped")[0])
    if run.failed_replica is not None:
        launch, status = run.failed_replica
        oom = oom_kills() if status.exit_code is not None else None
        grew = oom is not None and run.oom_kills is not None and oom > run.oom_kills and launch.placement.host in _HERE
        return classify_replica(status, error_lines(_log_tail(launch.log_path)), oom_grew=grew)
    if run.startup_error is not None:
        return classify_startup(run.startup_error)
    if said := resource_signature(message):  # the store under the job failed: a full disk
        return Failure(FailureClass.RESOURCE, said)
    return Failure(FailureClass.INFRASTRUCTURE, message or "vcli's controller failed")


#: The hosts a placement names when a replica runs on this machine (the OOM-kill counter is this machine's).
_HERE = {"", "local", "localhost", "127.0.0.1"}


def settle(run: JobRun, state: JobState, error: dict[str, Any] | None) -> Failure | None:
    """The class of a job that ends as `state` (None unless FAILED), written to its record
    (`failureClass`, `failureCause`) before its final state is."""
    if state != JobState.JOB_STATE_FAILED:
        return None
    failure = job_failure(run, error)
    row = run.store.get_job(run.job_id)
    if row is not None:
        run.store.update_job(run.job_id, record={**row.record, "failureClass": failure.cls.value,
                                                 "failureCause": failure.cause})
    return failure


def recorded(run: JobRun) -> Failure | None:
    """The class an earlier controller recorded for the job (`settle`): a job that ended
    while no controller followed it, taken over by `resume`."""
    row = run.store.get_job(run.job_id)
    cls = row.record.get("failureClass") if row is not None else None
    return Failure(FailureClass(cls), str(row.record.get("failureCause") or "")) if cls and row is not None else None


def replica_failed(task_name: str, status: ReplicaStatus, job_id: str) -> tuple[JobState, dict[str, Any]]:
    """The ending of a job whose replica `task_name` exited non-zero (code 13), pointing at its logs."""
    detail = f" ({status.message})" if status.message else ""
    ended = (f"exited with a non-zero status of {status.exit_code}" if status.exit_code is not None
             else "ended without an exit code")  # a replica whose supervisor was killed has none
    return (JobState.JOB_STATE_FAILED, {
        "code": RpcCode.INTERNAL,
        "message": f"The replica {task_name} {ended}{detail}. To find out more about why your job "
        f"exited please check the logs: vcli custom-jobs stream-logs {job_id}",
    })


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer killed: in this process's memory cgroup (v2
    `memory.events`, v1 `memory.oom_control`), else on the machine (`/proc/vmstat`); None when
    neither is readable."""
    here = _first_count(_cgroup_files())
    return here if here is not None else _first_count(["/proc/vmstat"])


def _first_count(paths: Sequence[str]) -> int | None:
    """The `oom_kill N` of the first of `paths` that is readable and has one."""
    for path in paths:
        try:
            with open(path, encoding="ascii") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def _cgroup_files() -> list[str]:
    """This process's memory cgroup's files that count OOM kills (v2, then v1; the path as
    /proc/self/cgroup names it, then the mount's root, as inside a container)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            entries = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return []
    out = []
    for entry in entries:
        if len(entry) != 3:
            continue
        _, controllers, path = entry
        if controllers == "":
            out += [f"/sys/fs/cgroup{path.rstrip('/')}/memory.events", "/sys/fs/cgroup/memory.events"]
        elif "memory" in controllers.split(","):
            out += [f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.oom_control", "/sys/fs/cgroup/memory/memory.oom_control"]
    return out
