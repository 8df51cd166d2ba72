"""The `slurm` kind: a job, or one trial, is one Slurm allocation and each replica a step."""

from __future__ import annotations

import os
from typing import Any, Mapping

from vcli.executors.kinds import ExecutorOptions, ExecutorType


def slurm_executor(options: ExecutorOptions) -> Any:
    """A Slurm executor with the partition, account, QOS and shared directory of the job
    (`options.stored`: `--slurm-partition`/`--slurm-account`/`--slurm-qos`, or a recorded job's
    own), else $VCLI_SLURM_PARTITION, ..., else the `slurm/...` properties (`vcli config set
    slurm/partition gpu`), else Slurm's defaults."""
    from vcli import properties
    from vcli.executors.slurm import SlurmExecutor
    from vcli.store import default_home

    def setting(name: str) -> str | None:
        key = {"shared-dir": "sharedDir"}.get(name, name)
        if key in options.stored:
            return options.stored[key]
        return os.environ.get(f"VCLI_SLURM_{name.upper().replace('-', '_')}") or properties.get(f"slurm/{name}")

    return SlurmExecutor(partition=setting("partition"), account=setting("account"), qos=setting("qos"),
                         shared_dir=setting("shared-dir"), home=default_home())


def _build(options: ExecutorOptions, *, leases: bool = True, job: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    from vcli.executors.slurm import SlurmPlacer

    executor = slurm_executor(options)
    return executor, SlurmPlacer(executor, submit=leases, labels=(job or {}).get("labels"))


# Handles name their Slurm job and step: scancel works from anywhere.
KIND = ExecutorType(name="slurm", summary="steps of one Slurm allocation per job or trial", build=_build,
                    for_handles=slurm_executor, places_itself=True,
                    # its Slurm job and step (for scontrol, sattach, sacct), node, partition, component
                    describe_details=("slurm", ("slurmJob", "step", "node", "partition", "hetGroup")))
