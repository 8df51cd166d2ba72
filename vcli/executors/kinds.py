"""Executor kinds: the registry `--executor` and the wiring are derived from.

A kind is its package (an `Executor` implementation) plus one `ExecutorType`, declared in the
package's `kind.py` (local's, the default, is declared here) and listed in `_BUILTIN`. The
type says what the rest of vcli needs to know about the kind without importing it:

- `build(options, leases=, job=)` makes the executor and the placer that decides where its
  replicas go, for the life of one command;
- `for_handles(options)` makes an executor able to poll, stop, read and release replicas that
  another process started (`cancel` from another terminal, a dead controller's job);
- traits (`places_itself`, `processes_only`, `gpu_fractions`) that notices and checks read.

Everything else a controller asks of an executor is a method of the `Executor` contract
(`vcli.executors`), with defaults in `ExecutorBase` for what only some kinds do. A new kind is
its package and one line in `_BUILTIN` (or, for a kind outside vcli, `register`), and it
exists when the contract suite (tests/test_executor_contract.py, which reads its kinds from
here) passes over it.

Importing this module imports no executor: the kind modules are small and import their
executors inside `build`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from vcli.executors import Executor

__all__ = ["ExecutorOptions", "ExecutorType", "get_executor", "kind_of", "kinds", "names", "register", "this_machine_placer"]


@dataclass(frozen=True, kw_only=True)
class ExecutorOptions:
    """What one command says about its executor, as one value (never through `os.environ`).

    `hosts`: `--hosts` (an ssh run). `stored`: the kind's settings, in the shape a job's record
    keeps them (`Executor.settings`): a recorded job's own, so that `resume` and `--async`'s
    runner build the executor it was created with, or a new job's flags (`--ray-address` is
    `{"address": ...}`, `--slurm-partition` `{"partition": ...}`). They win; what they leave
    out comes from the kind's defaults (properties, the environment), which each kind reads.
    """

    hosts: str | None = None
    stored: Mapping[str, Any] = field(default_factory=dict)


#: `build(options, leases=..., job=...) -> (executor, placer)`.
Builder = Callable[..., "tuple[Executor, Any]"]


@dataclass(frozen=True, kw_only=True)
class ExecutorType:
    """One executor kind, as the registry knows it (see the module docstring)."""

    name: str
    #: One line for help texts and errors.
    summary: str
    build: Builder
    for_handles: Callable[[ExecutorOptions], Executor]
    #: Its placer refuses a job that can never fit (a scheduler over hosts, a cluster that
    #: places replicas itself): nothing needs saying about this machine's GPUs.
    places_itself: bool = False
    #: Runs every replica as a process, whatever image its pool names (no container runtime).
    processes_only: bool = False
    #: Accounts for fractions of a GPU (`accelerator-count=0.25`): Ray's own, or this machine's
    #: leases, shared as its lease policy's `gpu_sharing` says (`vcli.placement.sharing`).
    gpu_fractions: bool = False
    #: The kind counts GPUs itself in steps of this size (Ray: 0.0001, any number of GPUs);
    #: None: a fraction is a share of one GPU (below 1), from this machine's leases.
    gpu_fraction_step: float | None = None
    #: Where `describe` shows a stored handle's `details` (`replicas[].<key>`) and which of
    #: them (None: all as recorded; else those named, empty ones left out); None: not shown.
    describe_details: tuple[str, tuple[str, ...] | None] | None = None

    def described(self, details: Mapping[str, str]) -> tuple[str, dict[str, str]] | None:
        """(key, what `describe` shows) of a replica handle's `details`; None: nothing."""
        if not self.describe_details or not details:
            return None
        key, kept = self.describe_details
        return key, dict(details) if kept is None else {k: v for k, v in details.items() if k in kept and v != ""}


def _build_local(options: ExecutorOptions, *, leases: bool = True, job: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    from vcli.executors.local import LocalExecutor

    return LocalExecutor(), this_machine_placer(leases)


_PLACERS: dict[bool, Any] = {}


def this_machine_placer(leases: bool = True) -> Any:
    """This machine's placer (local and docker): GPU-aware when it declares or has GPUs, else
    everything here. With GPUs, replicas get specific GPUs from the scheduler the SSH hosts
    use, leased host-wide (`vcli.placement.gpulease`) unless `leases` is False (what only
    validates a job). One per process and `leases`: its bookkeeping is the process's."""
    if leases not in _PLACERS:
        from vcli.placement import HERE, local_placer
        from vcli.placement.hosts import local_host

        _PLACERS[leases] = local_placer(leases=leases) if local_host().gpus()[0] else HERE
    return _PLACERS[leases]


LOCAL = ExecutorType(
    name="local", summary="processes on this machine",
    build=_build_local, for_handles=lambda options: _build_local(options)[0], processes_only=True, gpu_fractions=True)

#: The kinds vcli ships, in `ExecutorKind`'s order: (name, module defining `KIND`).
_BUILTIN: tuple[tuple[str, str | None], ...] = (
    ("local", None),
    ("docker", "vcli.executors.docker.kind"),
    ("ssh", "vcli.executors.ssh.kind"),
    ("ray", "vcli.executors.ray.kind"),
    ("slurm", "vcli.executors.slurm.kind"),
)
_REGISTRY: dict[str, ExecutorType] = {}


def kinds() -> dict[str, ExecutorType]:
    """Every kind by name: vcli's own, then those `register`ed."""
    if "local" not in _REGISTRY:
        loaded = {name: LOCAL if module is None else importlib.import_module(module).KIND for name, module in _BUILTIN}
        extra = dict(_REGISTRY)
        _REGISTRY.clear()
        _REGISTRY.update(loaded)
        _REGISTRY.update(extra)
    return _REGISTRY


def names() -> tuple[str, ...]:
    return tuple(kinds())


def kind_of(name: str) -> ExecutorType:
    """The kind called `name`; a UsageError naming --executor and the choices otherwise."""
    found = kinds().get(name)
    if found is None:
        from vcli.errors import UsageError

        raise UsageError(f"argument --executor: invalid choice: '{name}' (choose from {', '.join(names())})")
    return found


def register(executor_type: ExecutorType) -> None:
    """Add a kind (or replace one of the same name): an executor defined outside vcli."""
    kinds()[executor_type.name] = executor_type


def get_executor(name: str) -> Executor:
    """An executor of kind `name` with its default settings: for `local` and `docker` the one
    a job would use; `vcli.control.wiring` builds the others from the command's options."""
    return kind_of(name).for_handles(ExecutorOptions())
