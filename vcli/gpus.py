"""GPU bookkeeping: which GPUs of which host belong to which running replica.

A host declares its GPUs (indices as the driver numbers them, optionally one accelerator type
such as `NVIDIA_TESLA_T4`). A replica that asks for `accelerator-count=N` gets N indices of one
host that no other running replica holds; it gives them back with `release` when it ends.
Executors turn the indices into `--gpus device=...`, NVIDIA_VISIBLE_DEVICES and
CUDA_VISIBLE_DEVICES.

The allocator is in-memory and thread-safe: it guarantees disjoint GPUs among the replicas of
one vcli process (a job or a study running trials in parallel). Standard library only.

    alloc = GpuAllocator()
    alloc.declare("local", count=4, accelerator_type="NVIDIA_TESLA_T4")
    a = alloc.allocate("local", 2)             # (0, 1)
    b = alloc.allocate("local", 2)             # (2, 3)
    alloc.allocate("local", 1)                 # GpusBusyError: all 4 in use (timeout=0)
    alloc.allocate("local", 8)                 # GpuAllocationError: never fits
    alloc.release("local", a)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass

from vcli.errors import ExitCode, VcliError

__all__ = [
    "GpuAllocationError",
    "GpuAllocator",
    "GpusBusyError",
    "HostGpus",
    "detect_local_gpus",
    "visible_devices_env",
]


class GpuAllocationError(VcliError):
    """A request that can never be satisfied (more GPUs than the host has, wrong type)."""

    exit_code = ExitCode.INVALID


class GpusBusyError(VcliError):
    """The GPUs exist but other replicas hold them now (only when not waiting)."""

    exit_code = ExitCode.EXECUTOR_UNAVAILABLE


@dataclass(frozen=True)
class HostGpus:
    host: str
    indices: tuple[int, ...]
    accelerator_type: str | None = None


class GpuAllocator:
    """Hands out disjoint GPU indices per host; safe to share between threads."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._hosts: dict[str, HostGpus] = {}
        self._in_use: dict[str, set[int]] = {}

    def declare(
        self,
        host: str,
        *,
        count: int | None = None,
        indices: tuple[int, ...] | list[int] | None = None,
        accelerator_type: str | None = None,
    ) -> HostGpus:
        """Declare the GPUs of `host`: `count` (indices 0..count-1) or explicit `indices`."""
        if indices is None:
            indices = tuple(range(count or 0))
        elif count is not None and count != len(indices):
            raise GpuAllocationError(f"host {host}: count={count} does not match indices {list(indices)}")
        idx = tuple(int(i) for i in indices)
        if len(set(idx)) != len(idx) or any(i < 0 for i in idx):
            raise GpuAllocationError(f"host {host}: GPU indices must be distinct and >= 0, got {list(idx)}")
        gpus = HostGpus(host, idx, accelerator_type)
        with self._cond:
            self._hosts[host] = gpus
            self._in_use.setdefault(host, set())
            self._cond.notify_all()
        return gpus

    def hosts(self) -> dict[str, HostGpus]:
        with self._cond:
            return dict(self._hosts)

    def free(self, host: str) -> tuple[int, ...]:
        """Indices of `host` that nobody holds now."""
        with self._cond:
            gpus = self._hosts.get(host)
            if gpus is None:
                return ()
            return tuple(i for i in gpus.indices if i not in self._in_use[host])

    def check(self, host: str, count: int, accelerator_type: str | None = None) -> None:
        """Raise GpuAllocationError if `count` GPUs of that type can never be had on `host`."""
        with self._cond:
            self._check_locked(host, count, accelerator_type)

    def _check_locked(self, host: str, count: int, accelerator_type: str | None) -> HostGpus:
        if count < 0:
            raise GpuAllocationError(f"accelerator count must be >= 0, got {count}")
        gpus = self._hosts.get(host)
        have = len(gpus.indices) if gpus else 0
        if count > have:
            raise GpuAllocationError(
                f"a replica needs {count} GPU{'s' if count != 1 else ''} but host {host} has "
                f"{have}{'' if gpus else ' (none declared)'}: lower accelerator-count or add GPUs to the host"
            )
        assert gpus is not None or count == 0
        if (
            count
            and accelerator_type
            and gpus is not None
            and gpus.accelerator_type
            and gpus.accelerator_type != accelerator_type
        ):
            raise GpuAllocationError(
                f"a replica needs {accelerator_type} but host {host} has {gpus.accelerator_type} GPUs"
            )
        return gpus or HostGpus(host, ())

    def allocate(
        self,
        host: str,
        count: int,
        *,
        accelerator_type: str | None = None,
        timeout: float | None = 0,
    ) -> tuple[int, ...]:
        """`count` GPU indices of `host` held by nobody else, lowest first.

        `timeout=0` (default) raises GpusBusyError at once when they are taken; a number waits
        up to that many seconds for releases; None waits forever. A request that can never fit
        raises GpuAllocationError immediately. `count=0` returns ().
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                gpus = self._check_locked(host, count, accelerator_type)
                if count == 0:
                    return ()
                free = [i for i in gpus.indices if i not in self._in_use[host]]
                if len(free) >= count:
                    chosen = tuple(free[:count])
                    self._in_use[host].update(chosen)
                    return chosen
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise GpusBusyError(
                        f"host {host}: {count} GPU{'s' if count != 1 else ''} requested, "
                        f"{len(free)} of {len(gpus.indices)} free (the others are held by running replicas)"
                    )
                self._cond.wait(remaining)

    def take(self, host: str, indices: tuple[int, ...] | list[int]) -> tuple[int, ...]:
        """Mark the given indices of `host` held (a replica already uses them); returns those
        that are declared and were free (only they are to be released later)."""
        with self._cond:
            gpus = self._hosts.get(host)
            if gpus is None:
                return ()
            taken = tuple(i for i in indices if i in gpus.indices and i not in self._in_use[host])
            self._in_use[host].update(taken)
            return taken

    def release(self, host: str, indices: tuple[int, ...] | list[int]) -> None:
        """Give GPUs back (idempotent: releasing a free index is a no-op)."""
        with self._cond:
            held = self._in_use.get(host)
            if held is not None:
                held.difference_update(indices)
            self._cond.notify_all()


def visible_devices_env(indices: tuple[int, ...] | list[int], *, in_container: bool = False) -> dict[str, str]:
    """The environment that restricts a replica to the host GPUs `indices` ({} when none).

    NVIDIA_VISIBLE_DEVICES always names host indices (what `--gpus device=...` gives the
    NVIDIA container toolkit). CUDA_VISIBLE_DEVICES names the devices as the replica sees them:
    host indices for a process, but 0..n-1 inside a container, where only the requested
    devices exist and CUDA renumbers them from 0 (host indices there would hide the GPUs).
    """
    if not indices:
        return {}
    host = ",".join(str(i) for i in indices)
    cuda = ",".join(str(i) for i in range(len(indices))) if in_container else host
    return {"NVIDIA_VISIBLE_DEVICES": host, "CUDA_VISIBLE_DEVICES": cuda}


def detect_local_gpus() -> tuple[int, ...]:
    """This machine's GPU indices: $VCLI_GPUS ("0,1,3" or a count), else `nvidia-smi -L`, else ()."""
    declared = os.environ.get("VCLI_GPUS", "").strip()
    if declared:
        if declared.isdigit():
            return tuple(range(int(declared)))
        return tuple(int(part) for part in declared.split(",") if part.strip())
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(range(sum(1 for line in out.splitlines() if line.startswith("GPU "))))
