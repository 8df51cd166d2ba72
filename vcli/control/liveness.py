"""Whether a job's controller still runs, and claiming that role.

A job is run by one vcli process, its *controller* (the foreground `create`, the detached
runner of `create --async`, or `resume`). The store records the controller's pid and start
time; any process reads them here to tell whether the job is driven (`controller_alive`).

Linux only: liveness reads /proc/PID/stat, so a reused pid is not mistaken for the controller.
Imports nothing of the data model: `custom-jobs list` reads liveness for every row.
"""

from __future__ import annotations

import os

from vcli.enums import JobState
from vcli.store import JobRow, Store

__all__ = ["claim_controller", "controller_alive", "controller_stopped", "give_back", "has_ended", "mark_controller",
           "process_start_time"]


def _stat_fields(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat after the command name (which may itself hold spaces and
    ')'): [0] is the state, [19] the start time; empty if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return []
    return data[data.rfind(b")") + 2:].split()


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot, as text); None if it is gone,
    or a zombie: a process killed with `kill -9` stays in the table until its parent reaps it
    (for ever under a parent that never does), but it controls nothing any more."""
    fields = _stat_fields(pid)
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return fields[19].decode()


def controller_stopped(row: JobRow) -> bool:
    """Is the job's live controller stopped (Ctrl-Z, SIGSTOP, a debugger)? It honours a cancel
    only once it continues."""
    fields = _stat_fields(row.controller_pid) if row.controller_pid else []
    return bool(fields) and fields[0] in (b"T", b"t")


def controller_alive(row: JobRow) -> bool:
    """Is the vcli process that runs this job still there (same pid, same start time)?"""
    if not row.controller_pid:
        return False
    return process_start_time(row.controller_pid) == row.controller_start


def mark_controller(store: Store, job_id: str, pid: int | None = None) -> None:
    """Record `pid` (default: this process) as the job's controller."""
    pid = os.getpid() if pid is None else pid
    store.update_job(job_id, controller_pid=pid, controller_start=process_start_time(pid))


def claim_controller(store: Store, job_id: str) -> None:
    """Make this process the job's controller, atomically; `ControllerConflictError` if a live
    vcli process already is (two controllers never drive the same job)."""
    from vcli.errors import ControllerConflictError

    pid = os.getpid()
    holder = store.claim_controller(job_id, pid, process_start_time(pid),
                                    alive=lambda p, start: process_start_time(p) == start)
    if holder is not None:
        raise ControllerConflictError(f"Job [{job_id}] is being run by vcli process {holder[0]}; stop it first "
                                      f"(`kill {holder[0]}` or `cancel`), or leave it be.")


def give_back(store: Store, row: JobRow) -> None:
    """Undo this process's `claim_controller` of `row` (as read before the claim): a resume that
    ends before it runs anything (a secret its shell lacks, a cluster it cannot reach) leaves
    the record naming the controller that died, not itself."""
    pid = os.getpid()
    store.hand_back_controller(row.id, (row.controller_pid, row.controller_start, row.heartbeat),
                               (pid, process_start_time(pid)))


def has_ended(row: JobRow) -> bool:
    return JobState(row.state).is_final()
