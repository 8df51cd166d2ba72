"""Vertex machine types -> (vCPUs, memory GiB), for CPU/memory-aware placement. Standard library only."""

from __future__ import annotations

import re

from vcli.errors import InvalidValueError

__all__ = ["machine_resources"]

#: GiB of memory per vCPU of the predefined GCE families (family -> shape -> GiB per vCPU).
_PER_VCPU = {
    "n1": {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9},
    "n2": {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0},
    "n2d": {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0},
    "n4": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
    "e2": {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0},
    "c2": {"standard": 4.0},
    "c2d": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
    "c3": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
}
#: Accelerator-optimised types: (vCPUs, GiB).
_FIXED: dict[str, tuple[float, float]] = {
    "e2-micro": (2, 1), "e2-small": (2, 2), "e2-medium": (2, 4),
    "a2-highgpu-1g": (12, 85), "a2-highgpu-2g": (24, 170), "a2-highgpu-4g": (48, 340), "a2-highgpu-8g": (96, 680),
    "a2-megagpu-16g": (96, 1360),
    "a2-ultragpu-1g": (12, 170), "a2-ultragpu-2g": (24, 340), "a2-ultragpu-4g": (48, 680), "a2-ultragpu-8g": (96, 1360),
    "a3-highgpu-8g": (208, 1872), "a3-megagpu-8g": (208, 1872),
    "g2-standard-4": (4, 16), "g2-standard-8": (8, 32), "g2-standard-12": (12, 48), "g2-standard-16": (16, 64),
    "g2-standard-24": (24, 96), "g2-standard-32": (32, 128), "g2-standard-48": (48, 192), "g2-standard-96": (96, 384),
    "cloud-tpu": (96, 334),
}
_FAMILY_RE = re.compile(r"^([a-z][a-z0-9]*)-(standard|highmem|highcpu)-(\d+)$")


def machine_resources(machine_type: str | None) -> tuple[float, float]:
    """(vCPUs, memory GiB) of a Vertex machine type; ("" or None) -> (0, 0).

    Known: `{n1,n2,n2d,n4,e2,c2,c2d,c3}-{standard,highmem,highcpu}-N`, `e2-micro/small/medium`,
    `a2-highgpu-*`, `a2-megagpu-16g`, `a2-ultragpu-*`, `a3-*gpu-8g`, `g2-standard-*`,
    `cloud-tpu`. Anything else raises InvalidValueError naming the known families.
    """
    if not machine_type:
        return 0.0, 0.0
    mt = machine_type.strip().lower()
    if mt in _FIXED:
        cpus, mem = _FIXED[mt]
        return float(cpus), float(mem)
    m = _FAMILY_RE.match(mt)
    if m and m.group(1) in _PER_VCPU and m.group(2) in _PER_VCPU[m.group(1)]:
        n = int(m.group(3))
        return float(n), round(n * _PER_VCPU[m.group(1)][m.group(2)], 2)
    families = ", ".join(f"{f}-{{{','.join(s)}}}-N" for f, s in _PER_VCPU.items())
    raise InvalidValueError(
        "--worker-pool-spec",
        f"machine-type={machine_type} is not in vcli's machine catalogue, so its vCPUs and memory are unknown. "
        f"Known: {families}, e2-micro/small/medium, a2-highgpu-{{1,2,4,8}}g, a2-megagpu-16g, a2-ultragpu-{{1,2,4,8}}g, "
        "a3-highgpu-8g, g2-standard-N.",
    )

