"""The `slurm` executor (`--executor=slurm`): a job, or one trial, is one Slurm allocation.

    executor.py   `SlurmExecutor` and `SlurmPlacer` (allocations, steps, polling, cancel)
    client.py     the Slurm commands vcli runs (sbatch, srun, squeue, scontrol, scancel, sinfo)
                  and the parsing of their output
    node.py       what runs first in each replica's step on its node (standard library only)
    check.py      `vcli slurm check`: do the commands work, partitions, nodes, GPUs

Nothing here imports anything heavy; Slurm is reached only through its command-line clients.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SlurmExecutor", "SlurmPlacer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from vcli.executors.slurm import executor

        return getattr(executor, name)
    raise AttributeError(name)
