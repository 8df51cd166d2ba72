"""The `slurm` executor (`--executor=slurm`): a job, or one trial, is one Slurm allocation.

    executor.py   `SlurmExecutor` (allocations, steps, polling, cancel)
    allocation.py an allocation's components and their sbatch options, the slots Slurm
                  granted, ports reserved on the nodes, the files nodes read (holder script)
    placer.py     `SlurmPlacer`: one allocation per job or trial, and its placements
    status.py     a replica's start record and status file, and Slurm's words for how a job
                  or step ended
    hold.py       holding a replica still on its node while a directory of it is copied
    client.py     the Slurm commands vcli runs (sbatch, srun, squeue, scontrol, scancel, sinfo),
                  the parsing of their output, and a job's state wherever Slurm keeps it
    node.py       what runs first in each replica's step on its node (standard library only)
    check.py      `vcli slurm check`: do the commands work, partitions, nodes, GPUs

Nothing here imports anything heavy; Slurm is reached only through its command-line clients.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SlurmExecutor", "SlurmPlacer"]


def __getattr__(name: str) -> Any:
    if name == "SlurmExecutor":
        from vcli.executors.slurm.executor import SlurmExecutor

        return SlurmExecutor
    if name == "SlurmPlacer":
        from vcli.executors.slurm.placer import SlurmPlacer

        return SlurmPlacer
    raise AttributeError(name)
