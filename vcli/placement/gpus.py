"""GPU bookkeeping: which GPUs of which host belong to which running replica.

A host declares its GPUs (indices as the driver numbers them, optionally one accelerator type
such as `NVIDIA_TESLA_T4`). A replica that asks for `accelerator-count=N` gets N indices of one
host that no other running replica holds; it gives them back with `release` when it ends.
Executors turn the indices into `--gpus device=...`, NVIDIA_VISIBLE_DEVICES and
CUDA_VISIBLE_DEVICES.

The allocator is thread-safe and guarantees disjoint GPUs among the replicas of one vcli
process (a job or a study running trials in parallel) in memory. For hosts given a lease
directory (`leases={"local": vcli.placement.gpus.local_leases()}`), it also takes a host-wide lease of
every GPU it hands out (`vcli.placement.gpulease`), so several vcli processes, users and controllers on
one host never share a GPU either: an index leased by anyone else is not free. Standard
library only.

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
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from vcli.errors import ExitCode, VcliError

if TYPE_CHECKING:
    from vcli.placement.gpulease import LeaseDir

__all__ = [
    "GpuAllocationError",
    "GpuAllocator",
    "GpusBusyError",
    "HostGpus",
    "detect_local_gpus",
    "local_leases",
    "vertex_gpu_type",
    "visible_devices_env",
]


class GpuAllocationError(VcliError):
    """A request that can never be satisfied (more GPUs than the host has, wrong type)."""

    exit_code = ExitCode.INVALID


class GpuLeaseError(VcliError):
    """This host's GPU lease directory cannot be used (not a directory, a lock file that is not
    one): no GPU job can run here until it is fixed."""

    exit_code = ExitCode.INVALID


def lease_dir_error(host: str, leases: Any, error: OSError) -> GpuLeaseError:
    """One line for a lease directory that cannot be used, naming the file and the setting."""
    where = f": {error.filename}" if error.filename else f" ({getattr(leases, 'path', host)})"
    return GpuLeaseError(f"Cannot lease GPUs of host {host}: {error.strerror or error}{where}. The GPU lease directory "
                         "(VCLI_GPU_LEASE_DIR, `vcli config set gpu/lease-dir`) must be a directory every vcli user "
                         "of the host can write, sticky like /tmp (docs: \"Share GPUs\", who can do what on a shared host).")


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

    def __init__(self, leases: Mapping[str, Any] | None = None, *, nvidia_check: bool = False) -> None:
        self._cond = threading.Condition()
        self._hosts: dict[str, HostGpus] = {}
        self._in_use: dict[str, set[int]] = {}
        #: Host -> {index: why} of free GPUs the last try left to an earlier waiter (`first_come`).
        self._kept: dict[str, dict[int, str]] = {}
        #: host -> `vcli.placement.gpulease.LeaseDir`: hosts whose GPUs are leased host-wide.
        self.leases: dict[str, Any] = dict(leases or {})
        #: Treat a GPU whose memory a non-vcli process holds as busy (hosts with nvidia-smi).
        self.nvidia_check = nvidia_check
        #: id(lease dir) -> (when, what `nvidia_busy` said), per host.
        self._nvidia: dict[int, tuple[float, dict[int, str]]] = {}

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
        """Indices of `host` that nobody holds now (here, or host-wide for a leased host)."""
        with self._cond:
            gpus = self._hosts.get(host)
            if gpus is None:
                return ()
            free = tuple(i for i in gpus.indices if i not in self._in_use[host])
        busy = self.busy_elsewhere(host, free)
        return tuple(i for i in free if i not in busy)

    def busy_elsewhere(self, host: str, indices: tuple[int, ...] | list[int] | None = None) -> dict[int, str]:
        """Index -> who holds it, for GPUs of `host` (all declared ones, or `indices`) held by
        another process's lease or used by a process vcli did not start. {} for hosts without
        a lease directory."""
        leases = self.leases.get(host)
        if leases is None:
            return {}
        if indices is None:
            with self._cond:
                gpus = self._hosts.get(host)
                indices = gpus.indices if gpus else ()
        from vcli.placement.gpulease import describe_holder

        out = {}
        try:
            held = leases.probe(indices)
        except OSError as e:
            raise lease_dir_error(host, leases, e) from None
        for i, rec in held.items():
            if rec is not None and leases.held_here(i) is None:
                out[i] = "held by " + describe_holder(rec)
        if self.nvidia_check:
            for i, why in self._nvidia_busy(leases, [i for i, rec in held.items() if rec is not None]).items():
                if i in indices and i not in out:
                    out[i] = why
        return out

    def _nvidia_busy(self, leases: Any, leased: list[int]) -> dict[int, str]:
        """The host's GPUs that a process vcli did not start uses (its nvidia-smi, on the host
        itself for SSH hosts), but for those a lease accounts for (`leased`)."""
        at, busy = self._nvidia.get(id(leases), (float("-inf"), {}))
        if time.monotonic() - at > 2.0:  # nvidia-smi takes tens of ms: asked at most every 2 s
            busy = leases.nvidia_busy()
            self._nvidia[id(leases)] = (time.monotonic(), busy)
        return {i: why for i, why in busy.items() if i not in leased}

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
        record: Mapping[str, Any] | None = None,
    ) -> tuple[int, ...]:
        """`count` GPU indices of `host` held by nobody else, lowest first.

        `timeout=0` (default) raises GpusBusyError at once when they are taken; a number waits
        up to that many seconds for releases; None waits forever. A request that can never fit
        raises GpuAllocationError immediately. `count=0` returns ().

        On a leased host the indices are leased host-wide too, all or none, with `record`
        (who holds them) in the lease; an index another process leased is skipped.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                gpus = self._check_locked(host, count, accelerator_type)
                if count == 0:
                    return ()
                free = [i for i in gpus.indices if i not in self._in_use[host]]
                elsewhere: dict[int, str] = {}
                if len(free) >= count and host in self.leases:
                    chosen, elsewhere = self._lease(host, free, count, record or {})
                    if chosen is not None:
                        self._in_use[host].update(chosen)
                        return chosen
                    free = [i for i in free if i not in elsewhere]
                elif len(free) >= count:
                    chosen = tuple(free[:count])
                    self._in_use[host].update(chosen)
                    return chosen
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    held = "".join(f"; GPU {i} {why}" for i, why in sorted(elsewhere.items()))
                    raise GpusBusyError(
                        f"host {host}: {count} GPU{'s' if count != 1 else ''} requested, "
                        f"{len(free)} of {len(gpus.indices)} free (the others are held by running replicas{held})"
                    )
                self._cond.wait(remaining if remaining is None or host not in self.leases else min(remaining, 0.25))

    def _lease(self, host: str, free: list[int], count: int,
               record: Mapping[str, Any]) -> tuple[tuple[int, ...] | None, dict[int, str]]:
        """Lease `count` of `free` host-wide, one index at a time (skipping held ones), all or
        none: (indices, {}) or (None, index -> who holds it)."""
        leases = self.leases[host]
        try:
            chosen, elsewhere = self._lease_in(host, leases, free, count, record)
        except OSError as e:
            raise lease_dir_error(host, leases, e) from None
        self._kept[host] = {i: why for i, why in elsewhere.items() if why.startswith((KEPT, LIMITED))}
        return chosen, elsewhere

    def held_by_this_process(self, host: str) -> dict[int, str]:
        """{index: who} of `host`'s GPUs whose lease this process holds (placed, its replica not
        started yet): a study's next trial waits for them too."""
        from vcli.placement.gpulease import describe_holder

        leases = self.leases.get(host)
        if leases is None:
            return {}
        with self._cond:
            gpus = self._hosts.get(host)
            indices = gpus.indices if gpus else ()
        out = {}
        for i in indices:
            lease = leases.held_here(i)
            if lease is not None:
                out[i] = "held by " + describe_holder(lease.record() if hasattr(lease, "record") else {})
        return out

    def kept_for_others(self, host: str) -> dict[int, str]:
        """{index: why} of `host`'s free GPUs that the last try to allocate there left to an
        earlier waiter (first come, first served): what a wait message names."""
        with self._cond:
            return dict(self._kept.get(host, {}))

    def _lease_in(self, host: str, leases: Any, free: list[int], count: int,
                  record: Mapping[str, Any]) -> tuple[tuple[int, ...] | None, dict[int, str]]:
        from vcli.placement import leasepolicy
        from vcli.placement.gpulease import LeaseBusy, base_record, describe_holder

        policy = leasepolicy.load(leases)
        record = base_record(**record, ticket=os.urandom(6).hex() if policy.limits_anything else None)
        never = leasepolicy.never_fits(policy, record.get("user"), count, host)
        if never:
            raise GpuAllocationError(never)
        busy = self._nvidia_busy(leases, []) if self.nvidia_check else {}
        got: list[int] = []
        elsewhere: dict[int, str] = {i: why for i, why in busy.items() if i in free}
        ahead = first_come(leases, record, [i for i in free if i not in elsewhere], policy)
        if ahead is not None:
            return None, {**elsewhere, **{i: ahead for i in free if i not in elsewhere}}
        for i in free:
            if len(got) == count:
                break
            if i in elsewhere:
                continue
            try:
                leases.acquire([i], record)
            except LeaseBusy as e:
                elsewhere[i] = "held by " + describe_holder(e.holder)
                continue
            got.append(i)
        if len(got) == count:
            why = leasepolicy.over_limit(policy, leases.holders(), record, got) if policy.limits_anything else None
            if why is None:
                return tuple(got), {}
            elsewhere.update({i: LIMITED + why for i in free if i not in elsewhere})
        leases.release(got)
        return None, elsewhere

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

    def release(self, host: str, indices: tuple[int, ...] | list[int], *, share_of: str | None = None) -> None:
        """Give GPUs back (idempotent: releasing a free index is a no-op). A host-wide lease
        this process still holds is closed; one handed to a supervisor ends with it. With
        `share_of` (a job id): the shares of `indices` that job's replicas were given."""
        with self._cond:
            if share_of is not None:
                shared = self.leases.get(host)
                for i in indices if shared is not None else ():
                    while shared is not None and (lease := shared.held_share(i, job=share_of)) is not None:
                        shared.release_share(lease)
                self._cond.notify_all()
                return
            held = self._in_use.get(host)
            if held is not None:
                held.difference_update(indices)
            if host in self.leases:
                self.leases[host].release(indices)
            self._cond.notify_all()

    def allocate_share(self, host: str, share: float, *, record: Mapping[str, Any] | None = None) -> tuple[int, dict[str, str]]:
        """A share (0 < `share` < 1) of one GPU of `host` beside other shares of it, never beside
        a whole lease: (its index, the variables of the host's sharing mechanism). The GPU with
        the least room that still fits is taken (shares pack onto few GPUs, whole ones stay free).
        Needs a host whose lease policy names a `gpu_sharing` mechanism (GpuAllocationError
        otherwise); GpusBusyError when no GPU has room now."""
        from vcli.placement import leasepolicy, sharing
        from vcli.placement.gpulease import LeaseBusy, base_record

        with self._cond:
            gpus = self._check_locked(host, 1, None)
            free = [i for i in gpus.indices if i not in self._in_use[host]]
        leases = self.leases.get(host)
        if leases is None:  # placement only says where it would go (--validate-only)
            return gpus.indices[0], {}
        try:
            policy = leasepolicy.load(leases)
            mechanism = sharing.mechanism(policy, host, share)
            record = base_record(**(record or {}), ticket=os.urandom(6).hex())
            room = sharing.room(leases.holders(), free)
            busy = self._nvidia_busy(leases, []) if self.nvidia_check else {}
            for i in sorted((i for i in free if room[i] >= share - 1e-9 and i not in busy), key=lambda i: (room[i], i)):
                try:
                    lease = leases.acquire([i], record, share=share)[0]
                except LeaseBusy:
                    continue
                why = leasepolicy.over_limit(policy, leases.holders(), record, [i]) if policy.limits_anything else None
                if why is None:
                    return i, mechanism.env(i, share, leases)
                leases.release_share(lease)
                with self._cond:
                    self._kept[host] = {j: LIMITED + why for j in free}
                raise GpusBusyError(f"host {host}: a {share:g} share of a GPU is {LIMITED}{why}")
        except OSError as e:
            raise lease_dir_error(host, leases, e) from None
        raise GpusBusyError(f"host {host}: no GPU has room for a {share:g} share now "
                            f"(room: {', '.join(f'GPU {i} {room[i]:g}' for i in free) or 'none'})")


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


#: (a piece of nvidia-smi's GPU name, the Vertex accelerator type); the first match wins, so
#: the more specific names come first
_GPU_NAMES = [
    ("A100 80GB", "NVIDIA_A100_80GB"), ("A100-SXM4-80GB", "NVIDIA_A100_80GB"), ("A100", "NVIDIA_TESLA_A100"),
    ("H100 80GB", "NVIDIA_H100_80GB"), ("H100", "NVIDIA_H100_80GB"), ("H200", "NVIDIA_H200_141GB"),
    ("GB200", "NVIDIA_GB200"), ("B200", "NVIDIA_B200"), ("RTX PRO 6000", "NVIDIA_RTX_PRO_6000"),
    ("L4", "NVIDIA_L4"), ("T4", "NVIDIA_TESLA_T4"), ("V100", "NVIDIA_TESLA_V100"),
    ("P100", "NVIDIA_TESLA_P100"), ("P4", "NVIDIA_TESLA_P4"), ("K80", "NVIDIA_TESLA_K80"),
]


def vertex_gpu_type(name: str) -> str | None:
    """nvidia-smi's GPU name (e.g. "NVIDIA H200") -> Vertex accelerator type (None if unknown).
    A piece matches as a whole word, so an L40S is not an L4 nor a Tesla P40 a P4."""
    for needle, vtype in _GPU_NAMES:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(needle)}(?![A-Za-z0-9])", name):
            return vtype
    return None


#: The most GPUs a declared count may name (a DGX has 8, a2-megagpu-16g 16).
MAX_DECLARED_GPUS = 256


def parse_declared_gpus(name: str, text: str) -> tuple[int, ...]:
    """GPU indices from an environment variable `name` holding a count ("4" -> 0..3) or
    comma-separated indices ("0,2"); ConfigError (one line naming it) for anything else: a
    typo must not leave a GPU machine with no GPUs, nor build a list of 1e11."""
    from vcli.errors import ConfigError

    text = text.strip()
    bad = ConfigError(f"Invalid value for [{name}]: [{text}]: a GPU count such as 4 (at most "
                      f"{MAX_DECLARED_GPUS}) or comma-separated GPU indices such as 0,2.")
    if re.fullmatch(r"\d{1,4}", text):
        if int(text) > MAX_DECLARED_GPUS:
            raise bad
        return tuple(range(int(text)))
    parts = [p.strip() for p in text.split(",")]
    if not all(re.fullmatch(r"\d{1,4}", p) for p in parts):
        raise bad
    return tuple(int(p) for p in parts)


#: How long `nvidia-smi -L` may take (a GPU fallen off the bus hangs it).
SMI_TIMEOUT_SECONDS = 10
_SMI_HUNG = False


def _smi_hung() -> None:
    """Say once per process that nvidia-smi hung, and never ask it again here (every command
    waited for it twice, silently, then took this GPU machine for one without GPUs)."""
    global _SMI_HUNG
    if not _SMI_HUNG:
        _SMI_HUNG = True
        sys.stderr.write(f"WARNING: nvidia-smi did not answer within {SMI_TIMEOUT_SECONDS} s: this machine's GPUs are "
                         "taken as none (declare them with VCLI_LOCAL_GPUS, or fix the driver).\n")
        sys.stderr.flush()


def detect_local_gpus() -> tuple[tuple[int, ...], str | None]:
    """This machine's (GPU indices, Vertex accelerator type): $VCLI_GPUS ("0,1,3" or a count;
    no type; anything else is a ConfigError), else `nvidia-smi -L` (the type when every GPU's
    name maps to the same one, see `vertex_gpu_type`), else ((), None)."""
    declared = os.environ.get("VCLI_GPUS", "").strip()
    if declared:
        return parse_declared_gpus("VCLI_GPUS", declared), None
    smi = shutil.which("nvidia-smi")
    if not smi or _SMI_HUNG:
        return (), None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=SMI_TIMEOUT_SECONDS).stdout
    except subprocess.TimeoutExpired:
        _smi_hung()
        return (), None
    except (OSError, subprocess.SubprocessError):
        return (), None
    # "GPU 0: NVIDIA H200 (UUID: GPU-...)"; MIG devices are indented lines below their GPU
    names = [line.partition(": ")[2].partition(" (UUID")[0] for line in out.splitlines() if line.startswith("GPU ")]
    types = {vertex_gpu_type(name) for name in names}
    return tuple(range(len(names))), types.pop() if len(types) == 1 else None


#: A waiter that has not tried for this long (a suspended or hung process) keeps no place in
#: the queue (seconds; waiters try every 0.25 s, studies every controller tick).
STALE_WAITER_SECONDS = 10.0
#: A waiter that has waited this long has the next free GPUs kept for it even when it cannot
#: use them yet (its request is larger than what is free): younger requests no longer pass it.
FAIR_WAIT_SECONDS = 30.0


#: How `first_come`'s reasons begin.
KEPT = "kept for "
#: How the reasons begin of free GPUs a lease policy keeps from a request.
LIMITED = "free, but "


def first_come(leases: Any, record: Mapping[str, Any], free: Sequence[int], policy: Any = None) -> str | None:
    """Why a request (`record`: a job, or a study's trial) must leave the host's `free` GPUs to
    one that waits longer, or None: first come, first served among the jobs and trials in the
    host's waiting queue (`vcli.placement.gpulease.LeaseDir.waiters`), whatever process or user
    they belong to; with a lease policy (`vcli.placement.leasepolicy`) of `queue: fair-share`,
    the waiter whose user holds fewest GPUs of the host comes first, ties by arrival, and a
    waiter whose user holds all the policy lets them hold keeps nothing.

    An earlier waiter comes first when the GPUs free now are enough for it (it takes them at its
    next try), or once it has waited `FAIR_WAIT_SECONDS` (no large request starves behind a
    stream of small ones). Otherwise a later request may use GPUs the earlier one cannot use yet
    (no GPU idles for the queue's sake). A request not in the queue yet is the latest."""
    from vcli.placement import leasepolicy

    waiters = leases.waiters()
    if not waiters:
        return None
    policy = policy or leasepolicy.LeasePolicy()
    fair = policy.queue == "fair-share"
    held = leasepolicy.held_by_user(leases.holders()) if fair or policy.limits_anything else {}
    now = time.time()
    me = _requester(record)
    mine = next((_num(w.get("since")) for w in waiters if _requester(w) == me), now)

    def key(user: Any, since: float) -> tuple[float, float]:
        return (held.get(str(user), 0) if fair else 0, since)

    my_key = key(record.get("user"), mine)
    probed: dict[int, Any] | None = None
    for w in sorted(waiters, key=lambda w: key(w.get("user"), _num(w.get("since")))):
        since = _num(w.get("since"))
        if _requester(w) == me or key(w.get("user"), since) >= my_key:
            return None
        if _num(w.get("idle")) > STALE_WAITER_SECONDS or leasepolicy.at_limit(policy, w.get("user"), held):
            continue
        if probed is None:
            probed = leases.probe(list(free))
        available = sum(1 for i in free if probed.get(i) is None)
        wants = int(_num(w.get("gpus")))
        if 0 < wants <= available or now - since > FAIR_WAIT_SECONDS:
            return KEPT + _ahead(w, now - since, record.get("user"), held if fair else None)
    return None


def _ahead(w: Mapping[str, Any], waited: float, me: Any, held: Mapping[str, float] | None) -> str:
    """`trial 3 of study 17… of bob, which has waited 12s (first come, first served)`, or with
    fair share `… (bob first: fair share; bob holds 0 GPUs here, alice 2)`."""
    from vcli.placement.gpulease import describe_holder

    who = describe_holder({k: v for k, v in w.items() if k not in ("user", "since")})
    user = w.get("user")
    by = f" of {user}" if user else ""
    if held is None:
        return f"{who}{by}, which has waited {waited:.0f}s (first come, first served)"
    theirs, ours = held.get(str(user), 0), held.get(str(me), 0)
    return (f"{who}{by} ({user} first: fair share; {user} holds {theirs:g} GPU{'' if theirs == 1 else 's'} here, "
            f"{me} {ours:g})")


def _requester(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    """Who asks: a study's trial (whose job id is new at each attempt to place it), or a job."""
    if rec.get("study") and rec.get("trial"):
        return ("trial", rec["study"], rec["trial"])
    if rec.get("job") is None:  # `vcli gpu run`: the process itself
        return ("process", rec.get("host"), rec.get("pid"))
    return ("job", rec.get("job"))


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


_LOCAL: dict[str, LeaseDir] = {}
_LOCAL_LOCK = threading.Lock()


def local_leases(path: str | None = None) -> LeaseDir:
    """The lease directory `path` of this machine (default: $VCLI_GPU_LEASE_DIR, else
    DEFAULT_DIR), one object per path and process: it keeps the leases held here, which the
    executor that starts a replica hands to the replica's supervisor."""
    from vcli.placement.gpulease import DEFAULT_DIR, ENV_DIR, LeaseDir

    path = os.path.abspath(path or os.environ.get(ENV_DIR) or DEFAULT_DIR)
    with _LOCAL_LOCK:
        if path not in _LOCAL:
            _LOCAL[path] = LeaseDir(path)
        return _LOCAL[path]
