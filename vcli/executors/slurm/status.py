"""What the slurm executor reads and writes about a replica: the record its step writes when it
starts on its node, its supervisor's status file, Slurm's words for a job it ended, and
slurmstepd's for a step it killed."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from vcli.errors import ExecutorError
from vcli.executors.slurm.client import first_error

#: How long `start` waits for a replica's step to report from its node.
STEP_START_SECONDS = 60.0
#: scontrol's reason while a job it ended is still COMPLETING -> the state it ends in.
REASON_STATES = {"TimeLimit": "TIMEOUT", "NodeDown": "NODE_FAIL", "NodeFail": "NODE_FAIL",
                 "DeadLine": "DEADLINE", "OutOfMemory": "OUT_OF_MEMORY"}


def slurm_end(slurm_id: str, state: str, reason: str) -> str:
    """One line for a job Slurm ended itself: its state, Slurm's reason, and what that means."""
    why = {"TIMEOUT": "its time limit (--time, from scheduling.timeout) ran out",
           "NODE_FAIL": "a node of the allocation failed", "OUT_OF_MEMORY": "it ran out of memory",
           "PREEMPTED": "it was preempted", "CANCELLED": "it was cancelled", "DEADLINE": "its deadline passed",
           "GONE": "Slurm no longer knows it"}.get(state, "")
    said = f" ({reason})" if reason and reason != "None" else ""
    return f"Slurm ended job {slurm_id}: {state}{said}" + (f": {why}" if why else "")


def step_killed(step: str, status_path: str) -> str | None:
    """Slurm's reason when it killed a replica's step itself, from what slurmstepd told srun
    (`srun.log` in the replica's directory): over its memory (jobacct_gather's OverMemoryKill,
    "StepId=J.S exceeded memory limit (USED > LIMIT), being killed", or a cgroup's oom-kill)."""
    text = ""
    for _ in range(10):  # srun may still be writing what slurmstepd said
        text = read_text(os.path.join(os.path.dirname(status_path), "srun.log"))
        if "memory limit" in text or "oom-kill" in text or "Out Of Memory" in text:
            break
        time.sleep(0.1)
    lines = [ln.strip() for ln in text.splitlines()]
    said = next((ln for ln in lines if "exceeded memory limit" in ln), None) or next(
        (ln for ln in lines if "oom-kill" in ln or "Out Of Memory" in ln), None)
    if said is None:
        return None
    said = said.split("error:", 1)[1].strip() if "error:" in said else said
    return f"Slurm killed its step {step}: OUT_OF_MEMORY ({said}): it ran out of memory"


def parse_ref(ref: str) -> tuple[str, str]:
    step, _, status = ref.partition("@")
    return step, status


def read_status(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, ValueError, IsADirectoryError):
        return None
    return data if isinstance(data, dict) and "exitCode" in data else None


def write_status_once(path: str, status: dict[str, Any]) -> None:
    """Write a replica's status file unless its supervisor wrote one (never overwritten)."""
    tmp = f"{path}.vcli{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(status, f)
        os.link(tmp, path)
    except OSError:
        pass
    finally:
        unlink(tmp)


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def await_record(record: str, popen: subprocess.Popen[bytes], srun_log: str, task: str, node: str,
                 shared_dir: str) -> dict[str, Any]:
    """The facts node.py recorded (`record`) once the replica's step started on `node`;
    `ExecutorError` with srun's first error when srun (`popen`, its output in `srun_log`) ended
    first, or when nothing came within `STEP_START_SECONDS` (srun is then killed)."""
    deadline = time.monotonic() + STEP_START_SECONDS
    while time.monotonic() < deadline:
        try:
            with open(record, encoding="utf-8") as f:
                return json.load(f)  # type: ignore[no-any-return]
        except (FileNotFoundError, ValueError):
            pass
        if popen.poll() is not None:
            time.sleep(0.05)
            if os.path.exists(record):
                continue
            raise ExecutorError(f"Cannot start replica {task} on Slurm node {node}: {first_error(read_text(srun_log))}")
        time.sleep(0.01)
    popen.kill()
    raise ExecutorError(f"Replica {task}'s Slurm step on node {node} did not start within {STEP_START_SECONDS:g}s "
                        f"(the shared directory {shared_dir} must be visible on the node).")
