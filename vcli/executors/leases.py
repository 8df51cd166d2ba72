"""Host-wide GPU leases (`vcli.placement.gpulease`) from the executors' side, on this machine: the
leases a placed replica's holder process must hold, and handing them to it.

The placer took a job's leases in this process (`vcli.placement.gpus.local_leases`); the executor
that starts a replica passes the locked descriptors to the process that lives exactly as long
as the replica (its supervisor, or for a container a keeper that waits for it to stop), records
that process as the holder, and closes its own copies. SSH hosts have their own path
(`vcli.executors.ssh.leases`): the descriptors go from a lease server on the host to the
replica's wrapper there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any, Sequence

from vcli.errors import ExecutorError
from vcli.executors import ReplicaLaunch

__all__ = ["hand_over", "held_leases", "idle_argv", "keep_container_leases"]


def held_leases(launch: ReplicaLaunch) -> list:
    """The host-wide leases (`vcli.placement.gpulease.Lease`) of the GPUs of a replica placed on this
    machine: what its supervisor (or container keeper) must hold. The placer took them; those
    it did not (a resumed job's replica that never started) are taken now, and one another
    replica holds is an `ExecutorError`: a replica never starts on a GPU it has no lease of.
    A replica with a share of a GPU (`placement.gpu_share`) holds its share's lease."""
    if not launch.placement.gpu_indices or launch.placement.host != "local":
        return []
    from vcli.placement.gpulease import LeaseBusy, base_record
    from vcli.placement.gpus import local_leases
    from vcli.properties import gpu_lease_dir

    leases = local_leases(gpu_lease_dir())
    share = launch.placement.gpu_share
    owner = {"job": launch.job_id, "replica": launch.task_name}
    if share:
        held = [leases.held_share(i, **owner) for i in launch.placement.gpu_indices]
        missing = [i for i, lease in zip(launch.placement.gpu_indices, held) if lease is None]
    else:
        missing = [i for i in launch.placement.gpu_indices if leases.held_here(i) is None]
    if missing:
        try:
            taken = leases.acquire(missing, base_record(trial=launch.trial_id, **owner), share=share)
        except LeaseBusy as e:
            raise ExecutorError(f"Cannot start replica {launch.task_name}: {e}.") from None
        except OSError as e:
            raise ExecutorError(f"Cannot lease GPU(s) {missing} for replica {launch.task_name} in "
                                f"{leases.path}: {e.strerror or e}.") from None
        if share:
            return taken
    if share:
        return [lease for lease in held if lease is not None]
    return [lease for lease in (leases.held_here(i) for i in launch.placement.gpu_indices) if lease is not None]


def idle_argv(launch: ReplicaLaunch, argv: list[str], *, python: str, gpuinfo: str, leases: Any = None) -> list[str]:
    """`argv` run under the idle watch (`vcli.placement.gpuinfo.watch`, the file `gpuinfo` run by
    `python -S -I`: its directory must not shadow the standard library) when the replica holds GPUs and its host's lease policy has an idle policy
    (`vcli.placement.leasepolicy.IdlePolicy`); else `argv`. `leases` is the host's lease
    directory (default: this machine's)."""
    indices = launch.placement.gpu_indices
    if not indices:
        return argv
    from vcli.placement import leasepolicy

    if leases is None:
        from vcli.placement.gpus import local_leases
        from vcli.properties import gpu_lease_dir

        leases = local_leases(gpu_lease_dir())
    idle = leasepolicy.load(leases).idle
    if idle is None:
        return argv
    return [python, "-S", "-I", gpuinfo, "watch", f"{idle.below_percent:g}", f"{idle.window:g}", idle.action, leases.path,
            ",".join(str(int(i)) for i in indices), "--", *argv]


def hand_over(launch: ReplicaLaunch, leases: Sequence, pid: int) -> None:
    """The process `pid` now holds `leases` (it inherited their descriptors): record it as
    the holder and close this process's copies, so that the lease ends with it."""
    if not leases:
        return
    from vcli.placement.gpus import local_leases
    from vcli.properties import gpu_lease_dir

    for lease in leases:
        lease.write({**lease.record(), "job": launch.job_id, "trial": launch.trial_id, "replica": launch.task_name,
                     "pid": pid, "controllerPid": os.getpid(), "gpu": lease.index})
    local = local_leases(gpu_lease_dir())
    if launch.placement.gpu_share:
        for lease in leases:
            local.release_share(lease)
    else:
        local.release([lease.index for lease in leases])


def keep_container_leases(launch: ReplicaLaunch, cid: str, engine_url: str, leases: Sequence[Any] | None = None) -> None:
    """Hand a container's host-wide GPU leases to a keeper process that lives until the
    container stops (`docker/lease_keeper.py` under the replica supervisor, in a session of its
    own, waiting on the engine at `engine_url`): the GPUs stay leased while the container runs,
    even after this vcli process died, and are free the moment it stops or is removed."""
    from vcli.executors import supervisor

    if leases is None:
        leases = held_leases(launch)
    if not leases:
        return
    fds = [lease.fd for lease in leases]
    keeper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "docker", "lease_keeper.py")
    base = os.path.join(launch.output_dir, "lease-keeper")
    try:
        popen = subprocess.Popen(
            [sys.executable, "-S", os.path.abspath(supervisor.__file__), *[a for fd in fds for a in ("--lease-fd", str(fd))],
             f"{base}.status", f"{base}.log", "--", sys.executable, "-S", keeper, engine_url, cid],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, pass_fds=fds,
            env={**os.environ, "VCLI_JOB_ID": launch.job_id})
    except OSError as e:
        raise ExecutorError(f"Cannot start the GPU lease keeper of replica {launch.task_name}: {e.strerror}.") from None
    hand_over(launch, leases, popen.pid)
    threading.Thread(target=popen.wait, name="vcli-lease-keeper-reaper", daemon=True).start()
