"""The `ray` kind: each replica a process supervised by a detached actor on a Ray cluster,
which places them itself (a placement group per job); fractions of a GPU are Ray's."""

from __future__ import annotations

import os
from typing import Any, Mapping

from vcli.executors.kinds import ExecutorOptions, ExecutorType


def ray_address(stored: Mapping[str, Any]) -> str:
    """The Ray cluster of --executor=ray: the job's (`--ray-address`, or its record's), else
    `vcli config set ray/address`, else $RAY_ADDRESS, else `auto` (the cluster this machine is
    a node of)."""
    from vcli import properties

    return stored.get("address") or properties.get("ray/address") or os.environ.get("RAY_ADDRESS") or "auto"


def ray_executor(options: ExecutorOptions) -> Any:
    """A Ray executor connected (lazily, at first use) to the options' cluster."""
    from vcli.executors.ray import RayExecutor
    from vcli.store import default_home

    return RayExecutor(ray_address(options.stored), home=default_home())


def _build(options: ExecutorOptions, *, leases: bool = True, job: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    executor = ray_executor(options)
    return executor, executor.placer()


# Actors are named and detached: a stored handle's replica is found from any process.
KIND = ExecutorType(name="ray", summary="processes on a Ray cluster's nodes", build=_build, for_handles=ray_executor,
                    places_itself=True, processes_only=True, gpu_fractions=True, gpu_fraction_step=0.0001)
