"""How replicas given a share of one GPU (`accelerator-count=0.25`) share it: the mechanism the
host's lease policy names (`gpu_sharing`, `vcli.placement.leasepolicy`). Without one, a share is
refused on that host: vcli never co-locates replicas on a GPU silently.

- `shared`: co-location with the memory caps set where frameworks read them: JAX's
  `XLA_PYTHON_CLIENT_MEM_FRACTION`, TensorFlow's `TF_FORCE_GPU_ALLOW_GROWTH`, and
  `VCLI_GPU_SHARE` for the trainer's own cap (PyTorch:
  `torch.cuda.set_per_process_memory_fraction`). Advisory: a trainer that ignores them can
  take the whole GPU's memory.
- `mps`: NVIDIA's Multi-Process Service. vcli starts the MPS control daemon
  (`nvidia-cuda-mps-control -d`) unless one runs, and gives each replica its share of the
  GPU's streaming multiprocessors (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`) and of its memory
  (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, from nvidia-smi's `memory.total`), which MPS enforces.

Every replica with a share also gets `VCLI_GPU_SHARE` (the share, e.g. `0.25`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from vcli.errors import ExitCode, VcliError
from vcli.placement.leasepolicy import GPU_SHARING

__all__ = ["MECHANISMS", "Mechanism", "SharingError", "mechanism", "room"]


class SharingError(VcliError):
    """A share of a GPU that this host cannot give: no mechanism named, or it cannot run."""

    exit_code = ExitCode.INVALID


class Mechanism:
    """A way for replicas to share a GPU: `env` is what a replica with a share of GPU `index`
    of the host (whose lease directory is `leases`) runs with."""

    name = ""

    def env(self, index: int, share: float, leases: Any) -> dict[str, str]:
        raise NotImplementedError


class Shared(Mechanism):
    name = "shared"

    def env(self, index: int, share: float, leases: Any) -> dict[str, str]:
        return {"VCLI_GPU_SHARE": f"{share:g}", "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{share:g}",
                "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


class Mps(Mechanism):
    name = "mps"

    def env(self, index: int, share: float, leases: Any) -> dict[str, str]:
        info = leases.info()
        why = info.ensure_mps()
        if why:
            raise SharingError(f"gpu_sharing is mps, but NVIDIA MPS cannot run: {why}")
        env = {"VCLI_GPU_SHARE": f"{share:g}",
               "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, math.floor(share * 100)))}
        total = info.memory_total().get(int(index))
        if total:  # the replica sees its one GPU as device 0 (CUDA_VISIBLE_DEVICES names it alone)
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={math.floor(total * share)}M"
        return env


#: The mechanisms a lease policy's `gpu_sharing` may name.
MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (Mps(), Shared())}
assert set(MECHANISMS) == set(GPU_SHARING)


def mechanism(policy: Any, host: str, share: float) -> Mechanism:
    """The mechanism of `host`'s lease policy; GpuAllocationError (one line naming the
    setting) when it names none."""
    if policy.gpu_sharing is None:
        raise SharingError(
            f"a {share:g} share of a GPU needs host {host}'s lease policy to name how its GPUs are shared: "
            "`vcli hosts policy --set gpu_sharing=shared` (co-location with framework memory caps) or "
            "`gpu_sharing=mps` (NVIDIA MPS), as root or the owner of its lease directory")
    return MECHANISMS[policy.gpu_sharing]


def room(holders: Sequence[Mapping[str, Any]], indices: Sequence[int]) -> dict[int, float]:
    """GPU index -> the share of it nobody holds (`holders`: `LeaseDir.holders`)."""
    out = {int(i): 1.0 for i in indices}
    for h in holders:
        if h.get("gpu") in out:
            share = h.get("share")
            out[h["gpu"]] -= float(share) if isinstance(share, (int, float)) and 0 < share < 1 else 1.0
    return {i: max(0.0, round(r, 6)) for i, r in out.items()}
