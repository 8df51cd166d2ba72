"""What placement decides for one replica, as executors receive it. Standard library only:
executors import this, and nothing here imports an executor."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["HERE", "Here", "Placement"]


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a replica runs: a host of the inventory (`local` is this machine).

    `address` is how other replicas reach this host (it goes into TF_CONFIG/CLUSTER_SPEC);
    `gpu_indices` are the host's GPUs given to this replica alone, or with `gpu_share` the one
    GPU it has a share of, `gpu_env` then saying how (the host's sharing mechanism's variables).
    """

    host: str = "local"
    address: str = "127.0.0.1"
    gpu_indices: tuple[int, ...] = ()
    #: "process" or "docker": the runtime on that host (ssh hosts choose per host).
    runtime: str = "process"
    #: The host declares GPUs, which vcli leases: a replica given none of them sees none
    #: (CUDA_VISIBLE_DEVICES empty), never the shell's value or every GPU, leased ones too.
    gpu_host: bool = False
    #: A share of the one GPU of `gpu_indices` (`accelerator-count=0.25`), None for whole GPUs.
    gpu_share: float | None = None
    #: The variables of the host's GPU sharing mechanism for this replica (MPS limits, memory caps).
    gpu_env: Mapping[str, str] = field(default_factory=dict)


class Here:
    """The placer of a machine that declares no GPUs: every replica here, no bookkeeping."""

    def __call__(self, replicas: Sequence[Any], *, spec: Any = None, job_id: str | None = None,
                 holder: Mapping[str, Any] | None = None) -> list[Placement]:
        return [Placement() for _ in replicas]

    def release(self, job_id: str) -> None:
        return None

    def hold(self, job_id: str, replicas: Sequence[Any], spec: Any, placements: Sequence[Placement]) -> None:
        return None


HERE = Here()
