"""The `slurm` executor: a job (or one trial) is ONE Slurm allocation; each replica is a step in it.

Placement (`SlurmPlacer`, what `plan_job` calls): the job's replicas become one `sbatch` of a
small holder script that keeps the allocation (a heterogeneous job, one component per pool,
when the pools differ in CPUs, memory or GPUs), so Slurm gang-schedules every replica at once.
Per task: CPUs and memory from the machine type (capped at the largest node, as the SSH
scheduler caps them; memory never more per CPU than the leanest node has), GPUs from
`accelerator-count` (`--gpus-per-task`); replicas of a pool go to distinct nodes when there are
enough (`--nodes=min(replicas, nodes)`), as on Vertex where each replica is a machine.
`scheduling.timeout` becomes `--time` (whole minutes, rounded up); partition, account and QOS:
`vcli.executors.slurm.kind`. A job that pends is "no capacity now" (`NoCapacityError`: a study keeps the trial queued, and since a
study asks only for its next trial, at most `parallelTrialCount` allocations of a study are
ever in the queue); one that pends longer than `scheduling.maxWaitDuration` is cancelled with
Slurm's pending reason (`PlacementError`). Once it runs, `scontrol show job -d` tells which
nodes, CPUs and GPU indices Slurm allocated: each replica gets a `Placement` on one of those
nodes (`address` = the node's NodeAddr) with its share of the node's GPUs, and ports are
reserved on the nodes by one short step per node, so CLUSTER_SPEC/TF_CONFIG name where the
replicas really run.

Replicas: `start` runs `srun --jobid=J [--het-group=C] --overlap -w NODE -N1 -n1` in a session of
its own (so a `kill -9` of the controller leaves it, and the replica, running), whose task is
`node.py` (records the step id, sets CUDA_VISIBLE_DEVICES from the GPUs Slurm allocated) exec'ing
vcli's per-replica supervisor (`vcli/executors/supervisor.py`). The handle's ref is
`JOBID.STEPID@<status file>`: `poll` reads the supervisor's status file and asks squeue (cached,
one call a second for every replica); `stop` is `scancel --signal` of the step (TERM, the grace
period, then USR1: the supervisor kills the whole tree); `release` and `cancel` are `scancel` of
the whole job, and wait until Slurm has no trace of it in its queue. A job Slurm ended itself
(TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED) ends its replicas with Slurm's state and reason.

The allocation outlives the controller: its holder script ends the job only once no vcli
process renewed its lease file for `VCLI_SLURM_ORPHAN_TIMEOUT` seconds (default 600), so
`resume` re-attaches to the same Slurm job and an abandoned one does not hold nodes for ever.

Files: vcli's home, the job's output directory and the shared directory (`slurm/shared-dir`,
default `<vcli home>/slurm`) must be on a filesystem every node mounts at the same path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from vcli.errors import ExecutorError, InvalidValueError
from vcli.executors import (
    ExecutorBase,
    Placement,
    ReplicaHandle,
    ReplicaLaunch,
    ReplicaStatus,
    place_seed_dirs,
    process_argv,
    read_replica_file,
)
from vcli.executors.slurm import client
from vcli.executors.slurm.allocation import (
    Allocation,
    TaskGroup,
    allocation_name,
    group_options,
    node_slots,
    orphan_timeout,
    reserve_ports,
    shared_files,
    task_groups,
    time_option,
)
from vcli.executors.slurm.client import NodeInfo
from vcli.executors.slurm.status import (
    REASON_STATES,
    await_record,
    parse_ref,
    read_status,
    slurm_end,
    step_killed,
    unlink,
    write_status_once,
)

if TYPE_CHECKING:
    from vcli.spec import CustomJobSpec, ReplicaId

#: How long `start` waits for an allocation of its own (a replica nobody placed) to run.
STANDALONE_WAIT_SECONDS = 300.0
#: Seconds between renewals of an allocation's lease file (its holder's orphan clock).
LEASE_RENEW_SECONDS = 10.0
#: vcli's own `scheduling.timeout` fires this much after Slurm's `--time` would: Slurm's is in
#: whole minutes and checked every 30 s, and when it ends the job its reason is what is reported.
TIMEOUT_GRACE_SECONDS = 150.0
#: How long a replica killed by a signal vcli did not send waits for slurmctld to say why.
VERDICT_SECONDS = 5.0


class SlurmExecutor(ExecutorBase):
    """Replicas as steps of one Slurm allocation per job; see the module docstring."""

    name = "slurm"
    timeout_grace_seconds = TIMEOUT_GRACE_SECONDS

    def __init__(self, *, partition: str | None = None, account: str | None = None, qos: str | None = None,
                 shared_dir: str | os.PathLike[str] | None = None, python: str | None = None,
                 home: str | os.PathLike[str] | None = None) -> None:
        from vcli import properties

        self.partition = partition or None
        self.account = account or None
        self.qos = qos or None
        self.home = home
        self.python = python or os.environ.get("VCLI_PYTHON") or properties.get("python") or sys.executable
        self.shared_dir = os.path.abspath(os.fspath(shared_dir)) if shared_dir else os.path.join(self._home(), "slurm")
        self.orphan_timeout = orphan_timeout(LEASE_RENEW_SECONDS)
        self.queue = client.Queue()
        self.states = client.JobStates(self.queue)
        self._lock = threading.RLock()
        #: vcli job id -> its placed allocation.
        self._allocs: dict[str, Allocation] = {}
        #: placement key (a study's trial, or a job id) -> an allocation not yet placed.
        self._pending: dict[str, Allocation] = {}
        self._ports: dict[str, list[int]] = {}
        self._renewed: dict[str, float] = {}
        #: Slurm jobs some of whose steps this executor signalled (stop): their ends are vcli's.
        self._stopping: set[str] = set()
        self._nodes: tuple[float, list[NodeInfo]] | None = None
        self._bin: str | None = None
        self._ready = False

    # ------------------------------------------------------------------ cluster facts

    def settings(self) -> dict[str, str | None]:
        """What a job records of this executor (`slurm` in its record), so that `resume` uses the
        job's partition, account, QOS and shared directory, not the resuming shell's."""
        return {"partition": self.partition, "account": self.account, "qos": self.qos, "sharedDir": self.shared_dir}

    def _home(self) -> str:
        if self.home is not None:
            return os.fspath(self.home)
        from vcli.store import default_home

        return str(default_home())

    def nodes(self) -> list[NodeInfo]:
        """The partition's nodes (cached for 30 s)."""
        with self._lock:
            if self._nodes is None or time.monotonic() - self._nodes[0] > 30:
                found = client.nodes(self.partition)
                if not found:
                    where = f"partition {self.partition}" if self.partition else "the cluster"
                    raise ExecutorError(f"Slurm lists no node in {where} (sinfo).")
                self._nodes = (time.monotonic(), found)
            return self._nodes[1]

    def _address(self, node: str) -> str:
        return next((n.address for n in self.nodes() if n.name == node), node)

    def _files(self) -> str:
        """The shared directory's copy of the supervisor, node.py and the holder script."""
        if self._bin is None:
            self._bin = shared_files(self.shared_dir)
        return self._bin

    # ------------------------------------------------------------------ sizing

    def task_groups(self, replicas: Sequence[ReplicaId], spec: CustomJobSpec) -> list[TaskGroup]:
        """The allocation's components for these replicas of `spec` (`allocation.task_groups`
        on the partition's nodes)."""
        where = f"partition {self.partition}" if self.partition else "the Slurm cluster"
        return task_groups(self.nodes(), replicas, spec, where)

    def share_notice(self, spec: Any) -> str | None:
        """The Slurm job that the job (or each trial) becomes, as one `Note:` line (`create`,
        `--validate-only`): its components with their sbatch options, partition, account, QOS
        and --time. Nothing is submitted."""
        from vcli.cluster import replica_ids

        groups = self.task_groups(replica_ids(spec), spec)
        parts = []
        for g in groups:
            parts.append(f"{'+'.join(f'workerpool{p}' for p in g.pools)}: {' '.join(group_options(g))}")
        where = self._queue_options() + time_option(spec.scheduling.timeout_seconds if spec.scheduling else None)
        what = (f"a heterogeneous Slurm job of {len(groups)} components" if len(groups) > 1 else "one Slurm job")
        return (f"Note: on Slurm the job (each trial of a study) is {what} ({'; '.join(parts)})"
                f"{' ' + ' '.join(where) if where else ''}: gang-scheduled, replicas as steps in it.")

    # ------------------------------------------------------------------ allocations

    def submit(self, groups: list[TaskGroup], *, key: str, name: str, comment: str,
               timeout_seconds: float | None, max_wait: float | None) -> Allocation:
        """sbatch the holder for `groups`; the allocation is returned pending."""
        bin_dir = self._files()
        token = uuid.uuid4().hex[:12]
        lease = os.path.join(self.shared_dir, "leases", token)
        with open(lease, "w", encoding="utf-8") as f:
            f.write(f"{key}\n")
        argv = ["sbatch", "--parsable", f"--job-name={name}", "--no-requeue", "--open-mode=append",
                f"--output={os.path.join(self.shared_dir, 'holders', token + '.out')}", f"--chdir={self.shared_dir}"]
        if comment:
            argv.append(f"--comment={comment[:250]}")
        for i, g in enumerate(groups):
            argv += [":"] * bool(i) + group_options(g) + self._queue_options() + time_option(timeout_seconds)
        argv += [os.path.join(bin_dir, "holder.sh"), lease, str(self.orphan_timeout)]
        try:
            out = client.run(argv).stdout.strip()
        except ExecutorError as e:  # its lease was left behind, one per refused job
            unlink(lease)
            given = [f"--slurm-{k}={v}" for k, v in self.settings().items() if v and k in ("partition", "account", "qos")]
            raise ExecutorError(f"{e}{' (given: ' + ', '.join(given) + ')' if given else ''}") from None
        slurm_id = out.split(";")[0].strip()
        if not slurm_id.isdigit():
            raise ExecutorError(f"sbatch did not give a job id: {out[:200]}")
        self.queue.invalidate()
        return Allocation(slurm_id=slurm_id, key=key, lease=lease, groups=groups, submitted=time.monotonic(),
                          max_wait=max_wait)

    def _queue_options(self) -> list[str]:
        return [f"--{k}={v}" for k, v in (("partition", self.partition), ("account", self.account), ("qos", self.qos)) if v]

    def wait_running(self, alloc: Allocation, seconds: float) -> tuple[str, str]:
        """The allocation's (state, reason) once it runs, ended, or `seconds` passed."""
        deadline = time.monotonic() + seconds
        while True:
            self._renew(alloc.lease)
            state, reason = self.states.state(alloc.slurm_id, fresh=True)
            if state != "PENDING" or time.monotonic() >= deadline:
                return state, reason
            time.sleep(0.1)

    def placements(self, alloc: Allocation, replicas: Sequence[ReplicaId]) -> list[Placement]:
        """Placements on the nodes Slurm allocated, and ports reserved there (one step per node)."""
        alloc.components = client.show_job(alloc.slurm_id)
        if len(alloc.components) != len(alloc.groups) or not all(c.shares for c in alloc.components):
            raise ExecutorError(f"Slurm job {alloc.slurm_id} runs but scontrol does not say on which nodes.")
        slots = node_slots(alloc.groups, alloc.components)
        placements: list[Placement] = []
        used = [0] * len(slots)
        for r in replicas:
            gi = alloc.group_of(r.pool_index)
            node, gpus = slots[gi][used[gi] % len(slots[gi])]
            used[gi] += 1
            placements.append(Placement(host=node, address=self._address(node), gpu_indices=gpus))
        for node, ports in reserve_ports(alloc, placements, replicas, self._address).items():
            with self._lock:
                self._ports.setdefault(node, []).extend(ports)
        return placements

    def cancel_allocation(self, slurm_id: str, wait: float = 15.0) -> None:
        """scancel the whole job and wait (bounded) until squeue no longer lists it."""
        client.run(["scancel", slurm_id], check=False)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self.queue.invalidate()
            if self.queue.job(slurm_id) is None:
                return
            time.sleep(0.1)

    def cancel_leftovers(self, job_id: str, *, study: bool) -> list[str]:
        """`cancel_named` over the allocations of `job_id` (`vcli-JOB`; a study's trials: `vcli-STUDY-tN`)."""
        return self.cancel_named((lambda n: n.startswith(f"vcli-{job_id}-t")) if study else
                                 (lambda n: n == f"vcli-{job_id}"), pending_only=False)

    def cancel_named(self, named: Callable[[str], bool], *, pending_only: bool) -> list[str]:
        """scancel this user's Slurm jobs whose name `named` accepts (`allocation_name`) and
        that this executor does not hold; remove their leases. What a controller killed while
        its allocation pended left queued (only its memory knew the Slurm id), to run later and
        hold nodes for a job that had ended. `pending_only`: leave running ones (whose steps a
        resumed controller re-attaches). Returns the Slurm ids cancelled."""
        with self._lock:
            held = {a.slurm_id for a in (*self._allocs.values(), *self._pending.values())}
        gone = [slurm_id for slurm_id, state, name in client.own_jobs()
                if named(name) and slurm_id not in held and (state == "PENDING" or not pending_only)]
        for slurm_id in gone:
            self.cancel_allocation(slurm_id)
        if gone or not pending_only:
            self._drop_leases(named)
        return gone

    def _drop_leases(self, named: Callable[[str], bool]) -> None:
        """Remove the lease files of allocations `named` accepts that this executor does not
        hold (a holder cancelled before it ran never removes its own)."""
        with self._lock:
            mine = {a.lease for a in (*self._allocs.values(), *self._pending.values())}
        folder = os.path.join(self.shared_dir, "leases")
        try:
            tokens = os.listdir(folder)
        except OSError:
            return
        for token in tokens:
            path = os.path.join(folder, token)
            if path in mine:
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    key = f.readline().strip()
            except OSError:
                continue
            if key and named(allocation_name(key)):
                unlink(path)

    def release_job(self, job_id: str) -> None:
        """Cancel the allocation placed for vcli job `job_id` (idempotent)."""
        with self._lock:
            alloc = self._allocs.pop(job_id, None)
        if alloc is not None:
            self.cancel_allocation(alloc.slurm_id)
            unlink(alloc.lease)

    def _renew(self, lease: str) -> None:
        now = time.monotonic()
        if lease and now - self._renewed.get(lease, float("-inf")) > LEASE_RENEW_SECONDS:
            self._renewed[lease] = now
            try:
                os.utime(lease)
            except OSError:
                pass

    # ------------------------------------------------------------------ protocol

    def check(self, launches: Sequence[ReplicaLaunch]) -> None:
        for launch in launches:
            if launch.image_uri and launch.local_package is None and not launch.python_module and not launch.command:
                raise InvalidValueError(
                    "--executor", f"{launch.task_name} names container image {launch.image_uri}: the slurm executor "
                    "runs processes; run images with --executor=docker.")
            process_argv(launch, self.python)

    def command_for(self, launch: ReplicaLaunch) -> list[str]:
        return process_argv(launch, self.python)

    def ready(self, launches: Sequence[ReplicaLaunch]) -> None:
        if not self._ready:
            self.nodes()
            self._files()
            self._ready = True

    def prepare(self, launches: Sequence[ReplicaLaunch], *, cancelled: threading.Event,
                progress: Callable[[str], None]) -> list[ReplicaLaunch]:
        """The local executor's preparation (private package copy, cached Python environment)
        under vcli's home, which the nodes see at the same path (the shared filesystem)."""
        self.check(launches)
        from vcli.executors.local import LocalExecutor

        return LocalExecutor(python=self.python, home=self.home).prepare(launches, cancelled=cancelled, progress=progress)

    def reserve_port(self, placement: Placement) -> int:
        """A port reserved on the placement's node when the allocation started (else, for a
        replica on this machine, one free here)."""
        with self._lock:
            pool = self._ports.get(placement.host)
            if pool:
                return pool.pop(0)
        if placement.host.startswith("<"):
            return 0  # not placed (validation): no node yet
        from vcli.executors.local import free_port

        return free_port("127.0.0.1")

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        alloc = self._alloc_for(launch)
        gi = alloc.group_of(launch.replica.pool_index)
        nodes = [s.node for s in alloc.components[gi].shares]
        node = launch.placement.host if launch.placement.host in nodes else nodes[0]
        bin_dir = self._files()
        os.makedirs(launch.output_dir, exist_ok=True)
        place_seed_dirs(launch)  # on the shared filesystem: the node sees them at the same paths
        record = os.path.join(launch.output_dir, "replica.slurm")
        status = os.path.join(launch.output_dir, "replica.status")
        for path in (record, status):
            unlink(path)
        env = self._replica_env(launch, alloc)
        masks = [a for name in launch.secret_env for a in ("--mask", name)]
        argv = ["srun", *alloc.step_target(gi), "--overlap", "-w", node, "-N1", "-n1", "--input=none",
                f"--job-name=vcli-{launch.task_name}", f"--chdir={launch.workdir or os.getcwd()}",
                "python3", "-S", os.path.join(bin_dir, "node.py"), record, "--",
                "python3", "-S", os.path.join(bin_dir, "supervisor.py"), *masks, status, launch.log_path, "--",
                *process_argv(launch, self.python)]
        srun_log = os.path.join(launch.output_dir, "srun.log")
        with open(srun_log, "ab") as out:
            popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                     start_new_session=True, close_fds=True)
        facts = await_record(record, popen, srun_log, launch.task_name, node, self.shared_dir)
        self.queue.invalidate()
        return self._handle(launch, facts, status)

    def _handle(self, launch: ReplicaLaunch, facts: Mapping[str, Any], status: str) -> ReplicaHandle:
        """The handle of the replica whose step wrote `facts` (node.py's record)."""
        step = f"{facts['job']}.{facts['step']}"
        return ReplicaHandle(executor=self.name, host=facts["node"], ref=f"{step}@{status}", task_name=launch.task_name,
                             details={"slurmJob": facts.get("allocation") or str(facts["job"]), "step": step,
                                      "node": facts["node"], "job": launch.job_id, "lease": facts.get("lease") or "",
                                      "gpus": facts.get("gpus") or "", "partition": self.partition or "(default)",
                                      "hetGroup": str(facts.get("hetGroup") or "")})

    def find(self, launch: ReplicaLaunch) -> ReplicaHandle | None:
        """The replica's step, by the record its node.py wrote into the replica's directory."""
        try:
            with open(os.path.join(launch.output_dir, "replica.slurm"), encoding="utf-8") as f:
                facts = json.load(f)
        except (OSError, ValueError):
            return None
        return self._handle(launch, facts, os.path.join(launch.output_dir, "replica.status"))

    def _replica_env(self, launch: ReplicaLaunch, alloc: Allocation) -> dict[str, str]:
        from vcli.executors.local import REPLICA_TAG

        env = client.client_env(dict(launch.env))
        env["VCLI_SLURM_ALLOCATION"] = alloc.slurm_id
        # A heterogeneous job's step belongs to its component, a job of its own (the leader's id
        # + offset): squeue lists it as COMPONENT.STEP, while the step sees the leader's id in
        # SLURM_JOB_ID. node.py records the component's.
        gi = alloc.group_of(launch.replica.pool_index)
        if alloc.hetero and gi < len(alloc.components) and alloc.components[gi].job_id:
            env["VCLI_SLURM_STEP_JOB"] = alloc.components[gi].job_id
        if alloc.hetero:
            env["VCLI_SLURM_HET_GROUP"] = str(gi)
        env["VCLI_SLURM_LEASE"] = alloc.lease
        env["VCLI_JOB_ID"] = launch.job_id
        env[REPLICA_TAG] = f"{launch.job_id}/{launch.task_name}"
        env.setdefault("PYTHONUNBUFFERED", "1")
        if launch.placement.gpu_indices:
            env["VCLI_SLURM_GPUS"] = ",".join(map(str, launch.placement.gpu_indices))
        if launch.workdir:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (launch.workdir, os.environ.get("PYTHONPATH", "")) if p)
        if self.python != sys.executable and "PATH" not in launch.env:  # its console scripts by name
            env["PATH"] = os.pathsep.join(p for p in (os.path.dirname(self.python), env.get("PATH", "")) if p)
        return env

    def _alloc_for(self, launch: ReplicaLaunch) -> Allocation:
        """The job's placed allocation; a replica nobody placed (started directly) gets one of its own."""
        with self._lock:
            alloc = self._allocs.get(launch.job_id)
        if alloc is not None and alloc.components:
            return alloc
        from vcli.spec import CustomJobSpec, ReplicaId, WorkerPoolSpec

        spec = CustomJobSpec(worker_pool_specs=tuple(
            WorkerPoolSpec(machine_spec=launch.machine_spec, replica_count=1) for _ in range(launch.replica.pool_index + 1)))
        replica = ReplicaId(pool_index=launch.replica.pool_index, index=0)
        groups = self.task_groups([replica], spec)
        key = f"{launch.job_id}/{launch.task_name}"
        alloc = self.submit(groups, key=key, name=f"vcli-{launch.job_id}", comment=f"vcli replica {key}",
                            timeout_seconds=None, max_wait=None)
        state, reason = self.wait_running(alloc, STANDALONE_WAIT_SECONDS)
        if state != "RUNNING":
            self.cancel_allocation(alloc.slurm_id)
            raise ExecutorError(f"Slurm job {alloc.slurm_id} for replica {launch.task_name} did not run: {state} ({reason}).")
        alloc.components = client.show_job(alloc.slurm_id)
        alloc.job_id = key
        with self._lock:
            self._allocs[key] = alloc
        return alloc

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        step, status_path = parse_ref(handle.ref)
        self._renew(handle.details.get("lease", ""))
        done = read_status(status_path)
        slurm_id = handle.details.get("slurmJob", step.split(".")[0])
        if done is not None:
            return self._ended(done, slurm_id)
        state, reason = self.states.state(slurm_id)
        if state in ("RUNNING", "SUSPENDED", "CONFIGURING"):
            if self.queue.has_step(step):
                return ReplicaStatus(running=True)
            self.queue.invalidate()  # a step that just started may not be listed yet: ask again
            if self.queue.has_step(step) or (done := read_status(status_path)) is None and (
                    self._young(status_path) or self.queue.shaky()):
                return ReplicaStatus(running=True)
            if done is not None:
                return self._ended(done, slurm_id)
            killed = step_killed(step, status_path)
            if killed:
                return ReplicaStatus(running=False, exit_code=137, message=killed)
            return ReplicaStatus(running=False, message=f"its Slurm step {step} ended without an exit status")
        if state == "COMPLETING" or state in client.ACTIVE_STATES:
            return ReplicaStatus(running=True)
        done = read_status(status_path)
        if done is not None:
            return self._ended(done, slurm_id)
        return ReplicaStatus(running=False, message=slurm_end(slurm_id, state, reason))

    def _ended(self, done: Mapping[str, Any], slurm_id: str) -> ReplicaStatus:
        status = ReplicaStatus.from_record(done)
        if status.exit_code != 0:
            state, reason = self._slurm_verdict(slurm_id, killed=bool(done.get("signal")))
            if state in client.KILLED_BY_SLURM:
                message = slurm_end(slurm_id, state, reason) + (f"; {status.message}" if status.message else "")
                return replace(status, message=message)
        return status

    def _slurm_verdict(self, slurm_id: str, *, killed: bool) -> tuple[str, str]:
        """The job's state and reason once a replica of it ended non-zero, asked afresh. While
        the allocation is torn down scontrol says COMPLETING with the reason (TimeLimit,
        NodeDown), which names the state it ends in. A replica killed by a signal vcli did not
        send may be asked about before slurmctld recorded why: asked again for up to
        `VERDICT_SECONDS` (never for a replica vcli stopped itself)."""
        deadline = time.monotonic() + (VERDICT_SECONDS if killed and slurm_id not in self._stopping else 0.0)
        while True:
            state, reason = self.states.state(slurm_id, fresh=True)
            if state in client.ACTIVE_STATES and reason in REASON_STATES:
                state = REASON_STATES[reason]
            if state not in client.ACTIVE_STATES or time.monotonic() >= deadline:
                return state, reason
            time.sleep(0.25)

    @staticmethod
    def _young(status_path: str) -> bool:
        """Did the replica start within the last few seconds (squeue may not list its step yet)?"""
        try:
            return time.time() - os.path.getmtime(os.path.join(os.path.dirname(status_path), "replica.slurm")) < 5
        except OSError:
            return False

    def stop(self, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        live = [h for h in handles if self.poll(h).running]
        if not live:
            return
        self._signal(live, "TERM")
        deadline = time.monotonic() + grace_seconds
        while live and time.monotonic() < deadline:
            time.sleep(0.05)
            live = [h for h in live if read_status(parse_ref(h.ref)[1]) is None and self._step_alive(h)]
        if live:
            # The grace period is over. scancel signals every process of the step (Slurm's
            # process tracking), the supervisor included: its status is then written here.
            self._signal(live, "KILL")
        self._await_gone(handles, 10.0)
        for h in live:
            write_status_once(parse_ref(h.ref)[1], {"exitCode": 137, "signal": "SIGKILL", "endTime": time.time()})

    def _step_alive(self, handle: ReplicaHandle) -> bool:
        state, _ = self.states.state(handle.details.get("slurmJob", ""))
        return state in client.ACTIVE_STATES and state != "PENDING"

    def _signal(self, handles: Sequence[ReplicaHandle], signame: str) -> None:
        steps = [parse_ref(h.ref)[0] for h in handles]
        self._stopping.update(h.details.get("slurmJob", s.split(".")[0]) for h, s in zip(handles, steps))
        client.run(["scancel", f"--signal={signame}", *steps], check=False)

    def _await_gone(self, handles: Sequence[ReplicaHandle], seconds: float) -> None:
        """Until every step of `handles` has left squeue (its supervisor finished sweeping the
        tree); a step still there then is cancelled outright."""
        deadline = time.monotonic() + seconds
        steps = [parse_ref(h.ref)[0] for h in handles]
        while time.monotonic() < deadline:
            self.queue.invalidate()
            left = [s for s in steps if self.queue.has_step(s)]
            if not left:
                return
            time.sleep(0.1)
        client.run(["scancel", *left], check=False)

    def fetch_dir(self, handle: ReplicaHandle, path: str, dest: str) -> bool:
        """The contract's copy from the shared filesystem, with a running replica's trainer tree
        held still on its node for it (`vcli.executors.slurm.hold`): a trainer that rewrites
        its checkpoint every few milliseconds still gives a consistent copy."""
        from vcli.executors import copy_dir_atomically
        from vcli.executors.slurm.hold import held

        step, status_path = parse_ref(handle.ref)
        if read_status(status_path) is not None or not handle.details.get("node"):
            return copy_dir_atomically(path, dest)  # ended: nothing writes there any more
        alloc = handle.details.get("slurmJob") or step.split(".")[0]
        group = handle.details.get("hetGroup", "")
        target = [f"--jobid={alloc}", *([f"--het-group={group}"] if group else [])]
        tag = handle.details.get("job", "") + "/" + handle.task_name
        with held(target, handle.details["node"], tag, path):
            return copy_dir_atomically(path, dest)

    def read_file(self, handle: ReplicaHandle, path: str) -> str | None:
        return read_replica_file(path)

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        """Wait for the replicas' supervisors to finish, then scancel their jobs (the whole
        allocation: nothing of it is left on any node) and forget them."""
        if not handles:
            return
        self._await_gone([h for h in handles if read_status(parse_ref(h.ref)[1]) is not None], 10.0)
        for slurm_id in dict.fromkeys(h.details.get("slurmJob", "") for h in handles):
            if slurm_id:
                self.cancel_allocation(slurm_id)
        with self._lock:
            for h in handles:
                for key, alloc in list(self._allocs.items()):
                    if alloc.slurm_id == h.details.get("slurmJob"):
                        del self._allocs[key]
                        unlink(alloc.lease)

    def close(self) -> None:
        """Cancel allocations submitted for trials or jobs that never got them (pending ones)."""
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for alloc in pending:
            self.cancel_allocation(alloc.slurm_id, wait=5.0)
            unlink(alloc.lease)

