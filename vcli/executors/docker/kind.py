"""The `docker` kind: one container per replica on this machine's Docker engine, placed (and
its GPUs leased) as local processes are."""

from __future__ import annotations

from typing import Any, Mapping

from vcli.executors.kinds import ExecutorOptions, ExecutorType, this_machine_placer


def _build(options: ExecutorOptions, *, leases: bool = True, job: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    from vcli.executors.docker import DockerExecutor

    return DockerExecutor(), this_machine_placer(leases)


KIND = ExecutorType(name="docker", summary="containers on this machine's Docker engine", build=_build,
                    for_handles=lambda options: _build(options)[0], gpu_fractions=True)
