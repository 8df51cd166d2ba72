"""The `ray` executor (`--executor=ray`): replicas gang-placed on a Ray cluster.

    executor.py   `RayExecutor` and its placer (`import ray` happens there, lazily)
    node.py       the per-replica actor that runs on the nodes (standard library only)

This package's `__init__` imports nothing heavy: `vcli --help` never loads Ray.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RayExecutor", "RayPlacer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from vcli.executors.ray import executor

        return getattr(executor, name)
    raise AttributeError(name)
