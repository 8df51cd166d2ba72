"""What a job's Slurm allocation is made of, before and after Slurm grants it: its components
(`TaskGroup`, sized from the machine types by `task_groups`), their sbatch options
(`group_options`, shared by `sbatch` and the `create` notice), the record of a submitted job
(`Allocation`), the slots Slurm granted on its nodes (`node_slots`), and the files every node
reads from the shared directory (`shared_files`: the holder script, node.py, the supervisor).

Pure functions of what they are given, except `shared_files` (it writes the shared directory)
and `reserve_ports` (one short step per node); the rest of the commands are `SlurmExecutor`'s
(`executor.py`)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from vcli.errors import ExecutorError
from vcli.executors.slurm import client
from vcli.executors.slurm.client import Component, NodeInfo
from vcli.executors.slurm.status import read_text

if TYPE_CHECKING:
    from vcli.placement.types import Placement
    from vcli.spec import CustomJobSpec, ReplicaId


@dataclass
class TaskGroup:
    """One component of the allocation: `tasks` replicas alike in CPUs, memory and GPUs."""

    pools: tuple[int, ...]
    tasks: int
    cpus: int
    mem_per_cpu_mb: int
    gpus: int
    nodes: int


def allocation_key(job_id: str, holder: Mapping[str, Any]) -> str:
    """What an allocation is for: `study S trial N` for a study's trial, else the job's id
    (written in its lease file)."""
    return f"study {holder['study']} trial {holder.get('trial')}" if holder.get("study") else job_id


def allocation_name(key: str) -> str:
    """The Slurm job name of the allocation for `key`: `vcli-S-tN` for trial N of study S,
    `vcli-JOB` for a job (what `cancel` and `resume` find a dead controller's leftovers by)."""
    m = re.fullmatch(r"study (\S+) trial (\S+)", key)
    return f"vcli-{m.group(1)}-t{m.group(2)}" if m else f"vcli-{key}"


@dataclass
class Allocation:
    """One Slurm job vcli submitted (the holder), and what it was for."""

    slurm_id: str
    key: str
    lease: str
    groups: list[TaskGroup]
    submitted: float
    max_wait: float | None = None
    job_id: str = ""
    components: list[Component] = field(default_factory=list)

    @property
    def hetero(self) -> bool:
        return len(self.groups) > 1

    def group_of(self, pool_index: int) -> int:
        """The component that runs the replicas of worker pool `pool_index`."""
        return next((i for i, g in enumerate(self.groups) if pool_index in g.pools), 0)

    def step_target(self, group: int) -> list[str]:
        """srun's options that put a step into component `group` of this job."""
        return [f"--jobid={self.slurm_id}", *([f"--het-group={group}"] if self.hetero else [])]


def _shape(spec: CustomJobSpec, pool: int, largest_cpus: int, lean_mb: int) -> tuple[int, int, int]:
    """(CPUs, memory MB per CPU, GPUs) of one replica of worker pool `pool`: CPUs from the
    machine type capped at the largest node, memory never more per CPU than the leanest node
    has (0: unknown, no --mem-per-cpu), GPUs from accelerator-count."""
    from vcli.placement import machine_resources

    ms = spec.worker_pool_specs[pool].machine_spec
    cpus, mem_gib = machine_resources(ms.machine_type)
    c = max(1, min(int(math.ceil(cpus or 1)), largest_cpus))
    mem = int(min(mem_gib * 1024 / c, lean_mb)) if mem_gib and lean_mb else 0
    return c, mem, int(ms.accelerator_count or 0)


def task_groups(nodes: Sequence[NodeInfo], replicas: Sequence[ReplicaId], spec: CustomJobSpec,
                where: str) -> list[TaskGroup]:
    """The allocation's components for these replicas of `spec` on `nodes` (described as
    `where` in errors): one component when every pool's replicas are alike, else one per pool
    (a heterogeneous job). `PlacementError` when no empty cluster of `nodes` could ever hold
    them."""
    from vcli.placement import PlacementError

    largest_cpus = max(n.cpus for n in nodes)
    per_cpu = [n.memory_mb // n.cpus for n in nodes if n.cpus and n.memory_mb]
    lean_mb = min(per_cpu) if per_cpu else 0
    counts: dict[int, int] = {}
    for r in replicas:
        counts[r.pool_index] = counts.get(r.pool_index, 0) + 1
    pools = sorted(counts)
    shapes = {p: _shape(spec, p, largest_cpus, lean_mb) for p in pools}
    if len({shapes[p] for p in pools}) <= 1:
        units = [(tuple(pools), sum(counts.values()), shapes[pools[0]])] if pools else []
    else:
        units = [((p,), counts[p], shapes[p]) for p in pools]
    groups = [TaskGroup(pools=ps, tasks=n, cpus=s[0], mem_per_cpu_mb=s[1], gpus=s[2], nodes=min(n, len(nodes)))
              for ps, n, s in units]
    most_gpus = max(n.gpus for n in nodes)
    for g in groups:
        if g.gpus > most_gpus:
            raise PlacementError(f"workerpool{g.pools[0]} asks for {g.gpus} GPU(s) per replica and no node of {where} "
                                 f"has that many (most GPUs on one node: {most_gpus}).")
    need = sum(g.gpus * g.tasks for g in groups)
    have = sum(n.gpus for n in nodes)
    if need > have:
        raise PlacementError(f"the job's replicas ask for {need} GPU(s) in all; {where} has {have}.")
    _check_cpus(groups, nodes, where)
    return groups


def _check_cpus(groups: Sequence[TaskGroup], nodes: Sequence[NodeInfo], where: str) -> None:
    """`PlacementError` for replicas whose CPUs no empty cluster of `nodes` holds (the job
    pended for ever, `Waiting` with Slurm's PartitionConfig or Resources)."""
    from vcli.placement import PlacementError

    for g in groups:
        fits = sum(n.cpus // g.cpus for n in nodes)
        if fits < g.tasks:
            pools = "+".join(f"workerpool{p}" for p in g.pools)
            raise PlacementError(f"{pools}: {g.tasks} replica(s) of {g.cpus} CPU(s) each do not fit "
                                 f"{where} ({len(nodes)} node(s), {', '.join(str(n.cpus) for n in nodes[:8])} CPUs): "
                                 f"room for {fits}; use fewer replicas or a smaller machine type.")
    need, have = sum(g.tasks * g.cpus for g in groups), sum(n.cpus for n in nodes)
    if need > have:
        raise PlacementError(f"the job's replicas ask for {need} CPUs in all; {where} has {have}.")


def group_options(group: TaskGroup) -> list[str]:
    """sbatch's options sizing one component."""
    opts = [f"--ntasks={group.tasks}", f"--nodes={group.nodes}", f"--cpus-per-task={group.cpus}"]
    opts += [f"--mem-per-cpu={group.mem_per_cpu_mb}M"] if group.mem_per_cpu_mb else []
    opts += [f"--gpus-per-task={group.gpus}"] if group.gpus else []
    return opts


#: The most minutes Slurm's --time holds (a signed 32-bit count; more wrapped round: a timeout
#: of 8,166 years became a limit of 2 minutes, and Slurm killed the job).
MAX_TIME_MINUTES = 2**31 - 1


def orphan_timeout(renew_seconds: float) -> int:
    """$VCLI_SLURM_ORPHAN_TIMEOUT (default 600): seconds the holder keeps an allocation after
    the last renewal of its lease (vcli renews it every `renew_seconds`). At least 3 renewals
    (anything else is one line: `abc` was a traceback, and 0 or a few seconds ended every
    live job after 5 s)."""
    from vcli.errors import ConfigError

    raw = os.environ.get("VCLI_SLURM_ORPHAN_TIMEOUT", "").strip() or "600"
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    least = 3 * renew_seconds
    if not (math.isfinite(value) and least <= value <= 10**9):
        raise ConfigError(f"VCLI_SLURM_ORPHAN_TIMEOUT must be a number of seconds from {least:g} (vcli renews a "
                          f"job's lease every {renew_seconds:g} s) to 1e9, not [{raw[:40]}].")
    return int(value)


def time_option(timeout_seconds: float | None) -> list[str]:
    """`scheduling.timeout` as sbatch's --time (whole minutes, rounded up; none without one;
    UNLIMITED beyond what Slurm can count, some 4,000 years: vcli's own timer still ends
    the job at its timeout)."""
    if not timeout_seconds:
        return []
    minutes = max(1, math.ceil(timeout_seconds / 60))
    return [f"--time={minutes}" if minutes <= MAX_TIME_MINUTES else "--time=UNLIMITED"]


def node_slots(groups: Sequence[TaskGroup], components: Sequence[Component]) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Per component, the (node, GPU indices) slots Slurm granted: as many per node as the
    node's share of CPUs holds tasks of the component, each with its own GPUs."""
    slots = []
    for group, comp in zip(groups, components):
        out: list[tuple[str, tuple[int, ...]]] = []
        for share in comp.shares:
            for k in range(max(1, share.cpus // group.cpus)):
                gpus = tuple(share.gpus[k * group.gpus:(k + 1) * group.gpus]) if group.gpus else ()
                out.append((share.node, gpus))
        slots.append(out)
    return slots


def reserve_ports(alloc: Allocation, placements: Sequence[Placement], replicas: Sequence[ReplicaId],
                  address: Callable[[str], str]) -> dict[str, list[int]]:
    """Ports for the replicas placed on each node (`placements`, in `replicas`' order): one
    short step per node and component binds as many at once as replicas go there (so they
    differ) on the node's `address`, prints them and lets go."""
    want: dict[tuple[str, int], int] = {}
    for p, r in zip(placements, replicas):
        gi = alloc.group_of(r.pool_index)
        want[(p.host, gi)] = want.get((p.host, gi), 0) + 1
    procs = []
    for (node, gi), count in want.items():
        argv = ["srun", *alloc.step_target(gi), "--overlap", "-w", node, "-N1", "-n1", "--input=none",
                "--job-name=vcli-ports", "python3", "-S", "-c", PORTS_CODE, address(node), str(count)]
        procs.append((node, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                             env=client.client_env(), stdin=subprocess.DEVNULL)))
    got: dict[str, list[int]] = {}
    for node, proc in procs:
        try:
            out, err = proc.communicate(timeout=client.COMMAND_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise ExecutorError(f"Cannot reserve ports on Slurm node {node}: srun did not answer.") from None
        ports = [int(p) for p in out.split() if p.isdigit()]
        if proc.returncode != 0 or not ports:
            raise ExecutorError(f"Cannot reserve ports on Slurm node {node}: {client.first_error(err or out)}")
        got.setdefault(node, []).extend(ports)
    return got


def shared_files(shared_dir: str) -> str:
    """The directory on the shared filesystem holding the supervisor, node.py and the holder
    script, written once (by content hash, renamed into place: nodes never see half-written
    files; several vcli processes may write it at once)."""
    from vcli.executors import supervisor
    from vcli.executors.slurm import node

    sources = {"supervisor.py": read_text(supervisor.__file__), "node.py": read_text(node.__file__), "holder.sh": HOLDER}
    digest = hashlib.sha256(json.dumps(sources, sort_keys=True).encode()).hexdigest()[:16]
    where = os.path.join(shared_dir, "bin", digest)
    if not os.path.isdir(where):
        tmp = f"{where}.tmp{os.getpid()}"
        try:
            os.makedirs(tmp, exist_ok=True)
            for name, text in sources.items():
                with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                    f.write(text)
            os.chmod(os.path.join(tmp, "holder.sh"), 0o755)
            os.rename(tmp, where)
        except FileExistsError:
            shutil.rmtree(tmp, ignore_errors=True)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.isdir(where):
                raise ExecutorError(f"Cannot write vcli's files to the shared directory {shared_dir}: "
                                    f"{e.strerror or e}.") from None
    for sub in ("leases", "holders"):
        os.makedirs(os.path.join(shared_dir, sub), exist_ok=True)
    return where


#: The holder script: keeps the allocation until vcli scancels it, or until no vcli process
#: renewed its lease for ORPHAN seconds (then the job ends, and every step with it).
HOLDER = """#!/bin/sh
# vcli: holds this Slurm allocation for a vcli job; its replicas run as steps in it.
lease="$1"; orphan="${2:-600}"
while :; do
    sleep 5
    now=$(date +%s)
    seen=$(stat -c %Y "$lease" 2>/dev/null || echo 0)
    if [ $((now - seen)) -gt "$orphan" ]; then
        echo "vcli: no vcli process renewed $lease for ${orphan}s: ending the allocation" >&2
        exit 0
    fi
done
"""

#: Run on a node: binds COUNT ports on ADDRESS at once (so they differ), prints them, lets go.
PORTS_CODE = ("import socket,sys\nss=[]\nfor _ in range(int(sys.argv[2])):\n s=socket.socket()\n"
              " s.bind((sys.argv[1],0))\n ss.append(s)\nprint(' '.join(str(s.getsockname()[1]) for s in ss))")
