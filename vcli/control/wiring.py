"""Build what runs a job: the executor and the placer that decides where its replicas go.

The one place that knows which executor needs which data (inventory hosts, the placement
scheduler that hears about host health): controllers and the CLI ask for an `Execution` by
`--executor`/`--hosts` and use only the `Executor` contract and the placer afterwards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from vcli.executors import Executor, get_executor
from vcli.spec import ExecutorKind


@dataclass
class Execution:
    """An executor and its placer, for the life of one command."""

    kind: ExecutorKind
    executor: Executor
    #: `placer(replicas, spec=..., job_id=...) -> placements` (see `vcli.control.jobs.Placer`).
    placer: Any

    def close(self) -> None:
        self.executor.close()


def executor_kind(flag: str | None) -> ExecutorKind:
    """`--executor`, else $VCLI_EXECUTOR, else `vcli config set executor`, else local."""
    from vcli import properties
    from vcli.errors import UsageError

    name = flag or os.environ.get("VCLI_EXECUTOR") or properties.get("executor") or ExecutorKind.LOCAL.value
    try:
        return ExecutorKind(name)
    except ValueError:
        choices = ", ".join(k.value for k in ExecutorKind)
        raise UsageError(f"argument --executor: invalid choice: '{name}' (choose from {choices})") from None


_LOCAL_PLACER: Any = None


def _local_placer() -> Any:
    """This machine's placer: GPU-aware when it declares or has GPUs, else everything here.

    When this machine declares or has GPUs (inventory host `local`, $VCLI_LOCAL_GPUS or
    nvidia-smi), local replicas get specific GPUs from the same scheduler the SSH hosts use.
    """
    global _LOCAL_PLACER
    if _LOCAL_PLACER is None:
        from vcli.control.jobs import local_placer
        from vcli.hosts import local_host

        if local_host().gpus()[0]:
            from vcli.placement import local_placer as gpu_placer

            _LOCAL_PLACER = gpu_placer()
        else:
            _LOCAL_PLACER = local_placer
    return _LOCAL_PLACER


def open_execution(kind: ExecutorKind, hosts: str | None = None) -> Execution:
    """The executor for `kind` (`--hosts` implies ssh) with its placer."""
    if kind == ExecutorKind.SSH or hosts:
        from vcli.executors.ssh import SSHExecutor

        ex = SSHExecutor(hosts=hosts)
        return Execution(kind=ExecutorKind.SSH, executor=ex, placer=ex.placer)
    return Execution(kind=kind, executor=get_executor(kind.value), placer=_local_placer())
