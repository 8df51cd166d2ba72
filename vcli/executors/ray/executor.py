"""The `ray` executor: a job's replicas gang-placed on a Ray cluster, each supervised there.

Placement: `RayPlacer` (what `plan_job` calls) turns a job's replicas into one Ray placement
group, one bundle per replica (CPUs from the machine type, capped at the largest node as the
SSH scheduler does, memory likewise, and shared out when the job asks for more than the whole
cluster has: `RayExecutor._bundles`; GPUs from `accelerator-count`, a fraction too), strategy SPREAD (distinct nodes when they
have room, as on Vertex where each replica is its own VM). All bundles are reserved at once or
none: a job that no empty cluster could hold fails at once (`PlacementError`), one that does
not fit now raises `NoCapacityError` (a study keeps the trial queued). A replica's
`Placement` is `host=<Ray node id>, address=<node IP>`; `reserve_port` asks a task pinned to
that node for a port free there, so CLUSTER_SPEC/TF_CONFIG name where the replica really runs.

Replicas: `start` creates a named, detached Ray actor (`vcli.executors.ray.node.
ReplicaSupervisor`) in the replica's bundle; it runs the trainer's own argv under vcli's
per-replica supervisor on its node, with CUDA_VISIBLE_DEVICES set from the GPUs Ray assigned.
The handle's ref is the actor's name (namespace `vcli`), so `cancel` from another terminal
finds it. A replica's node that dies takes the actor with it: `poll` then reports the replica
ended, with a message naming the lost actor/node, within one poll. A whole cluster that goes
away (its GCS refusing connections for LOST_AFTER_SECONDS: `reach.ClusterWatch`) ends every
replica with a message naming it, and no call into Ray is made while the GCS refuses: Ray would
block in it and end this process 60 s later, the job's end never recorded.

Files: a replica on this machine (its node IP is an address of this machine) writes its log straight into
`launch.log_path`; on another node (or with VCLI_RAY_STREAM_LOGS=1) the actor writes a node-local log and `poll`,
`stop` and `release` copy its new whole lines into `launch.log_path` (`adopt` resumes the copy after a controller
restart). Code (`prepare`: the local package snapshot and its Python environment), output, checkpoint and metric
paths are used as they are: replicas on other machines need them on a filesystem shared at the same paths (NFS and
the like); metric files are read back through the actor.

Container images are refused (`check`): Ray runs processes here; images run with --executor=docker (or an SSH host's
docker runtime).

`import ray` happens only in this package, lazily, when the executor first talks to the cluster.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any, Callable, Sequence

from vcli.errors import ExecutorError, InvalidValueError, MissingExtraError
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
from vcli.executors import supervisor as _supervisor
from vcli.executors.ray.fit import never_fits, short_of, show, totals
from vcli.executors.ray.reach import LOST_AFTER_SECONDS, RECHECK_SECONDS, ClusterLost, ClusterWatch, bounded, check_reachable

#: Ray namespace of vcli's actors and placement groups.
NAMESPACE = "vcli"
#: How long `place` waits for a placement group before calling the cluster full for now.
PLACE_WAIT_SECONDS = 1.0
#: Seconds a call to a replica's actor may take before it counts as unanswered.
CALL_TIMEOUT_SECONDS = 30.0
#: How long a replica's actor may take to copy a directory (a checkpoint) for `fetch_dir`.
FETCH_TIMEOUT_SECONDS = 600.0
#: Argv word the node replaces by its own interpreter (the driver's path may not exist there).
NODE_PYTHON = "@node-python@"


class RayExecutor(ExecutorBase):
    """Replicas as supervised processes on the nodes of a Ray cluster at `address`."""

    name = "ray"

    def __init__(self, address: str | None = None, *, python: str | None = None,
                 home: str | os.PathLike[str] | None = None) -> None:
        #: `ray://host:10001`, `host:port` of the GCS, or `auto` (the cluster on this machine).
        self.address = address or "auto"
        #: The interpreter for `python -m` / `.py` entrypoints; default: each node's own.
        self.python = python or os.environ.get("VCLI_PYTHON") or NODE_PYTHON
        self.home = home
        self._groups: dict[str, tuple[Any, dict[str, int], list[dict[str, float]]]] = {}
        #: ref -> (local log path, byte offset copied so far) for replicas on other machines.
        self._streams: dict[str, tuple[str, int]] = {}
        self._actors: dict[str, Any] = {}  # ref -> actor handle: one GCS lookup per replica, not per poll
        self._recent_ports: dict[tuple[str, int], float] = {}
        self._lock = threading.RLock()
        self._connected_here = False
        self._actor_class: Any = None
        self._port_task: Any = None
        self._watch = ClusterWatch(self.address)

    def settings(self) -> dict[str, Any]:
        """The cluster a job's record keeps, so that `resume` and `--async`'s runner reach it."""
        return {"address": self.address}

    # ------------------------------------------------------------------ connection

    def _ray(self) -> Any:
        """The `ray` module, connected to the cluster (once per process). Raises ClusterLost once
        the cluster's GCS has refused connections for LOST_AFTER_SECONDS (waits meanwhile): a
        call into Ray then would block until Ray ends this process (`reach.ClusterWatch`)."""
        try:
            import ray
        except ImportError:
            raise MissingExtraError("The ray executor", "ray", "Ray") from None
        if ray.is_initialized():
            self._await_cluster()  # before: `check_reachable` says what is wrong at once
        with self._lock:
            if not ray.is_initialized():
                check_reachable(self.address)  # Ray itself retries an unreachable GCS without bound
                try:
                    ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False,
                             logging_level="ERROR", configure_logging=False)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    raise ExecutorError(f"Cannot connect to the Ray cluster at {self.address}: {first}") from None
                self._connected_here = True
            if self._actor_class is None:
                from ray import cloudpickle

                from vcli.executors.ray import node

                # Nodes need Ray, not vcli: the actor's module travels by value.
                cloudpickle.register_pickle_by_value(node)
                self._actor_class = ray.remote(node.ReplicaSupervisor)
                self._port_task = ray.remote(node.free_port)
        return ray

    def _await_cluster(self) -> None:
        """Return once the cluster's GCS answers; raise ClusterLost once it counts as lost."""
        deadline = time.monotonic() + LOST_AFTER_SECONDS + 2 * RECHECK_SECONDS
        while not self._watch.answering():
            why = self._watch.lost()
            if why is not None or time.monotonic() > deadline:
                raise ClusterLost(why or f"the Ray cluster at {self.address} does not answer")
            time.sleep(RECHECK_SECONDS)

    def _get(self, ref: Any, timeout: float) -> Any:
        """`ray.get(ref, timeout=timeout)`, waited for in slices that check the cluster is still
        there (raising ClusterLost when it is not)."""
        ray = self._ray()
        from ray.exceptions import GetTimeoutError

        deadline = time.monotonic() + timeout
        while not ray.wait([ref], timeout=max(0.0, min(1.0, deadline - time.monotonic())))[0]:
            if time.monotonic() >= deadline:
                raise GetTimeoutError(f"no answer within {timeout:.0f} s")
            self._await_cluster()
        return ray.get(ref)

    # ------------------------------------------------------------------ placement

    def placer(self) -> RayPlacer:
        return RayPlacer(self)

    def place(self, replicas: Sequence[Any], spec: Any, job_id: str) -> list[Placement]:
        """Reserve one bundle per replica at once; see the module docstring."""
        ray = self._ray()
        return bounded(self._watch, self._place, ray, replicas, spec, job_id)  # type: ignore[no-any-return]

    def _place(self, ray: Any, replicas: Sequence[Any], spec: Any, job_id: str) -> list[Placement]:
        from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

        from vcli.placement import NoCapacityError, PlacementError

        nodes = [n for n in ray.nodes() if n.get("Alive")]
        bundles, _ = self._bundles(replicas, spec, nodes)
        why = never_fits(bundles, nodes, [r.task_name for r in replicas])
        if why:
            raise PlacementError(f"Job {job_id} can never fit on the Ray cluster at {self.address}: {why}")
        self.release_group(job_id)  # planned again (print-env, then create): start afresh
        asks = ", ".join(f"{r.task_name}: {show(b)}" for r, b in zip(replicas, bundles))
        # A queued trial asks again on every controller tick: when the cluster's free total
        # already falls short, say so from the GCS's view (a millisecond) rather than create a
        # group and wait PLACE_WAIT_SECONDS for it. The view may lag; either way a stale answer
        # costs one tick, or falls through to the wait below.
        free = ray.available_resources()
        if any(sum(b.get(k, 0.0) for b in bundles) > free.get(k, 0.0) + 1e-9 for k in {k for b in bundles for k in b}):
            raise NoCapacityError(f"The Ray cluster has no room for job {job_id} now ({asks}).")
        pg = placement_group(bundles, strategy="SPREAD", name=f"vcli-{job_id}", lifetime="detached")
        ready, _ = ray.wait([pg.ready()], timeout=PLACE_WAIT_SECONDS)
        if not ready:
            remove_placement_group(pg)
            raise NoCapacityError(f"The Ray cluster has no room for job {job_id} now ({asks}).")
        by_bundle = placement_group_table(pg)["bundles_to_node_id"]
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in nodes}
        with self._lock:
            self._groups[job_id] = (pg, {r.task_name: i for i, r in enumerate(replicas)}, bundles)
        return [Placement(host=by_bundle[i], address=ips.get(by_bundle[i], "127.0.0.1")) for i in range(len(replicas))]

    def _bundles(self, replicas: Sequence[Any], spec: Any, nodes: list[dict[str, Any]]) -> tuple[list[dict[str, float]], str | None]:
        """The job's bundles, and a note when its CPUs and memory were shared out: a job whose
        machine types ask for more CPUs or memory than the whole cluster has (the README's
        two-replica demo on a one-node `ray start --head`) runs anyway, as with the local
        executor, each replica asking for an equal share that fits a node beside its
        neighbours (GPUs are never shared out)."""
        largest = {k: max((n["Resources"].get(k, 0.0) for n in nodes), default=0.0) for k in ("CPU", "memory")}
        bundles = [self._bundle(r, spec, largest) for r in replicas]
        if not nodes or not short_of(bundles, nodes, ("CPU", "memory")):
            return bundles, None
        per_node = -(-len(bundles) // len(nodes))  # SPREAD: at most this many on one node
        smallest = {k: min(n["Resources"].get(k, 0.0) for n in nodes) for k in ("CPU", "memory")}
        shared = []
        for b in bundles:
            b = dict(b)
            for key in ("CPU", "memory"):
                if key in b and smallest[key] > 0:
                    share = smallest[key] / per_node
                    b[key] = min(b[key], float(int(share)) if key == "memory" else round(share, 2))
            shared.append(b)
        asked = totals(bundles)
        note = (f"Note: the machine types ask for {show(asked)} in all and the Ray cluster has "
                f"{show(totals([n['Resources'] for n in nodes], keys=asked))}: each replica asks for at most "
                f"{show({k: max(b.get(k, 0.0) for b in shared) for k in asked if k in ('CPU', 'memory')})} "
                "(its processes share the node, as with the local executor).")
        return shared, note

    def share_notice(self, spec: Any) -> str | None:
        """The note `place` would act on for a job of `spec` now (None: nothing shared out)."""
        from vcli.cluster import replica_ids

        ray = self._ray()
        nodes = [n for n in bounded(self._watch, ray.nodes) if n.get("Alive")]
        return self._bundles(replica_ids(spec), spec, nodes)[1]

    @staticmethod
    def _bundle(replica: Any, spec: Any, largest: dict[str, float]) -> dict[str, float]:
        """CPUs and memory from the machine type, GPUs (a fraction too) from accelerator-count.
        A machine type larger than any node means "a whole node" (as the SSH scheduler caps it):
        CPUs and memory are capped at the largest node's."""
        from vcli.placement import machine_resources

        if spec is None:
            return {"CPU": 1.0}
        ms = spec.worker_pool_specs[replica.pool_index].machine_spec
        cpus, memory_gib = machine_resources(ms.machine_type)
        bundle = {"CPU": max(1.0, min(cpus, largest["CPU"]) if cpus else 1.0)}
        if memory_gib and largest["memory"]:
            bundle["memory"] = float(int(min(memory_gib * 2**30, largest["memory"])))
        if ms.accelerator_count:
            bundle["GPU"] = float(ms.accelerator_count)
        return bundle

    def release_group(self, job_id: str) -> None:
        """Give a job's placement group back to Ray (its bundles' actors go with it); one this
        executor did not create is looked up by its name. Idempotent."""
        with self._lock:
            group = self._groups.pop(job_id, None)
        import ray
        from ray.util.placement_group import get_placement_group, remove_placement_group

        if group is None and not ray.is_initialized():
            return  # never connected: this process placed nothing and must not start Ray to look
        try:
            self._await_cluster()  # a GCS that refuses for a moment must not leave the group reserved
            pg = group[0] if group is not None else bounded(self._watch, get_placement_group, f"vcli-{job_id}")
            bounded(self._watch, remove_placement_group, pg)
        except Exception:  # no such group (never placed, or already removed), or the cluster is gone
            pass

    # ------------------------------------------------------------------ protocol

    def check(self, launches: Sequence[ReplicaLaunch]) -> None:
        for launch in launches:
            if launch.image_uri and launch.local_package is None and not launch.python_module:
                raise InvalidValueError(
                    "--executor", f"{launch.task_name} names container image {launch.image_uri}: the ray executor "
                    "runs processes; run images with --executor=docker.")
            process_argv(launch, self.python)

    def command_for(self, launch: ReplicaLaunch) -> list[str]:
        return process_argv(launch, self.python)

    def ready(self, launches: Sequence[ReplicaLaunch]) -> None:
        self._ray()

    def prepare(self, launches: Sequence[ReplicaLaunch], *, cancelled: threading.Event,
                progress: Callable[[str], None]) -> list[ReplicaLaunch]:
        """The local executor's preparation (private package copy, cached Python environment),
        on this machine's filesystem: replicas on other nodes need it shared at the same paths."""
        self.check(launches)
        from vcli.executors.local import LocalExecutor

        python = self.python if self.python != NODE_PYTHON else sys.executable
        return LocalExecutor(python=python, home=self.home).prepare(launches, cancelled=cancelled, progress=progress)

    def reserve_port(self, placement: Placement) -> int:
        """A port free on the replica's node now (asked on that node), never handed out twice
        within a minute."""
        if not _is_node_id(placement.host):
            from vcli.executors.local import free_port

            return free_port(placement.address)
        self._ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = self._port_task.options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=placement.host, soft=False))
        for _ in range(20):
            try:
                port = int(self._get(task.remote(placement.address), CALL_TIMEOUT_SECONDS))
            except Exception as e:  # the node is gone or unreachable
                raise ExecutorError(f"Cannot reserve a port on Ray node {placement.address}: {_gist(e)}") from None
            with self._lock:
                now = time.monotonic()
                self._recent_ports = {k: t for k, t in self._recent_ports.items() if now - t < 60}
                if (placement.host, port) not in self._recent_ports:
                    self._recent_ports[(placement.host, port)] = now
                    return port
        raise ExecutorError(f"Cannot find a free TCP port on Ray node {placement.address}.")

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        ray = self._ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        from vcli.executors.local import REPLICA_TAG

        argv = process_argv(launch, self.python)
        tag = f"{launch.job_id}/{launch.task_name}"
        env = {**launch.env, "VCLI_JOB_ID": launch.job_id, REPLICA_TAG: tag}
        env.setdefault("PYTHONUNBUFFERED", "1")
        if launch.workdir:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (launch.workdir, os.environ.get("PYTHONPATH", "")) if p)
        os.makedirs(launch.output_dir, exist_ok=True)
        place_seed_dirs(launch)  # shared filesystem: the replica sees them at the same paths
        with self._lock:
            group = self._groups.get(launch.job_id)
        options: dict[str, Any] = {"num_cpus": 0}
        if group is not None and launch.task_name in group[1]:
            index = group[1][launch.task_name]
            bundle = group[2][index]
            options = {"num_cpus": bundle.get("CPU", 0.0), "num_gpus": bundle.get("GPU", 0.0),
                       "scheduling_strategy": PlacementGroupSchedulingStrategy(
                           placement_group=group[0], placement_group_bundle_index=index)}
        elif _is_node_id(launch.placement.host):
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=launch.placement.host, soft=False)
        name = _actor_name(launch)
        log_here = self._writes_here(launch.placement.address)
        actor = bounded(self._watch, self._actor_class.options(name=name, namespace=NAMESPACE, lifetime="detached",
                                                        max_restarts=0, max_concurrency=4, **options).remote)
        try:
            facts = self._get(actor.start.remote(
                argv=argv, env=env,
                cwd=launch.workdir, output_dir=launch.output_dir, log_path=launch.log_path if log_here else None,
                masks=list(launch.secret_env), supervisor_source=_supervisor_source(), tag=tag,
            ), CALL_TIMEOUT_SECONDS * 4)
        except Exception as e:  # actor could not be scheduled or start failed
            try:
                self._await_cluster()
                bounded(self._watch, ray.kill, actor)
            except Exception:  # the cluster is gone, and the actor with it
                pass
            raise ExecutorError(f"Cannot start replica {launch.task_name} on Ray: {_gist(e)}") from None
        with self._lock:
            self._actors[name] = actor
            if not log_here:
                self._streams[name] = (launch.log_path, 0)
        return _handle(launch, facts)

    def find(self, launch: ReplicaLaunch) -> ReplicaHandle | None:
        """The replica's actor, by its name, once it started the replica (its handle, as `start`
        gives it). An actor created but not started yet (its controller died in between) is
        ended, for `start` to create it again; None then, and when there is none."""
        ray = self._ray()
        try:
            actor = bounded(self._watch, ray.get_actor, _actor_name(launch), namespace=NAMESPACE)
        except ValueError:
            return None
        try:
            facts = self._get(actor.facts.remote(), CALL_TIMEOUT_SECONDS)
        except ClusterLost:
            raise
        except Exception:  # its node (and the actor) died
            return None
        if facts is None:
            bounded(self._watch, ray.kill, actor)
            return None
        with self._lock:
            self._actors[_actor_name(launch)] = actor
        return _handle(launch, facts)

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        if not self._watch.answering():  # not a call into Ray: see `_ray`
            why = self._watch.lost()
            return ReplicaStatus(running=True) if why is None else ReplicaStatus(running=False, message=why)
        from ray.exceptions import GetTimeoutError

        try:
            actor = self._actor(handle)
            if actor is None:
                return ReplicaStatus(running=False, message="its Ray actor is gone (the node was lost or it was stopped)")
            status = self._get(actor.poll.remote(), CALL_TIMEOUT_SECONDS)
        except ClusterLost:
            return ReplicaStatus(running=False, message=self._watch.lost() or "its Ray cluster does not answer")
        except GetTimeoutError:
            return ReplicaStatus(running=True)  # a slow node is not a lost one
        except Exception as e:  # RayActorError and kin: the node or actor died
            self._actors.pop(handle.ref, None)
            return ReplicaStatus(running=False, message=f"its Ray actor died (node {handle.details.get('node', handle.host)} "
                                                        f"lost?): {_gist(e)}")
        self._pull_log(handle, actor)
        if status is None:
            return ReplicaStatus(running=True)
        if status.get("exitCode") is None:
            return ReplicaStatus(running=False, message=str(status.get("message") or "the replica is gone"))
        return ReplicaStatus.from_record(status)

    def stop(self, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        pending = []
        try:
            for handle in handles:
                actor = self._actor(handle)
                if actor is not None:
                    pending.append((handle, actor, actor.stop.remote(grace_seconds)))
        except ClusterLost:
            return  # its replicas went with it
        for handle, actor, ref in pending:
            try:
                self._get(ref, grace_seconds + CALL_TIMEOUT_SECONDS)
            except Exception:  # a dead actor's supervisor stops with it (--stop-with-parent)
                continue
            self._pull_log(handle, actor)

    def read_file(self, handle: ReplicaHandle, path: str) -> str | None:
        try:
            actor = self._actor(handle)
            if actor is not None:
                return self._get(actor.read_file.remote(path), CALL_TIMEOUT_SECONDS)  # type: ignore[no-any-return]
        except Exception:  # the node or cluster is gone: the shared filesystem may still have it
            pass
        return read_replica_file(path)

    def fetch_dir(self, handle: ReplicaHandle, path: str, dest: str) -> bool:
        """Copied by the replica's actor on its node, the trainer held still for it (see
        `ReplicaSupervisor.fetch_dir`); once the actor is gone (the replica released), from
        the shared filesystem as it is."""
        from vcli.executors import copy_dir_atomically

        try:
            actor = self._actor(handle)
            if actor is not None:
                return bool(self._get(actor.fetch_dir.remote(path, dest), FETCH_TIMEOUT_SECONDS))
        except Exception:  # the actor, its node or the cluster went away: what the filesystem holds
            pass
        return copy_dir_atomically(path, dest)

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        """Copy the last log lines, end the replicas' actors, and give their jobs' placement
        groups back (found by name when another process placed them: `cancel` after a
        controller died must not leave the cluster's resources reserved)."""
        for handle in handles:
            try:
                actor = self._actor(handle)
            except ClusterLost:
                actor = None  # the cluster is gone, and the actor with it
            if actor is None:
                continue
            self._pull_log(handle, actor)
            try:
                self._get(actor.cleanup.remote(), CALL_TIMEOUT_SECONDS)
                bounded(self._watch, self._ray().kill, actor)
            except Exception:  # its node (or cluster) is gone, and its files with it; or already dead
                pass
            with self._lock:
                self._streams.pop(handle.ref, None)
                self._actors.pop(handle.ref, None)
        for job_id in {h.details.get("job", "") for h in handles} - {""}:
            self.release_group(job_id)

    def adopt(self, handle: ReplicaHandle, launch: ReplicaLaunch) -> None:
        """Go on copying a replica's node-local log from where the local copy ends (the local
        file holds exactly the bytes copied so far, so its size is the node file's offset)."""
        node_ip = handle.details.get("node", "")
        if not node_ip or self._writes_here(node_ip):
            return  # its actor writes `launch.log_path` itself
        try:
            offset = os.path.getsize(launch.log_path)
        except OSError:
            offset = 0
        with self._lock:
            self._streams[handle.ref] = (launch.log_path, offset)

    def close(self) -> None:
        for job_id in list(self._groups):
            self.release_group(job_id)
        if self._connected_here:
            import ray

            if self._watch.lost() is None:  # shutting down with the GCS gone blocks until Ray ends us
                ray.shutdown()
            self._connected_here = False

    # ------------------------------------------------------------------ internals

    def _writes_here(self, node_ip: str) -> bool:
        """May a replica on `node_ip` write this machine's files directly? Yes when the IP is
        this machine's, unless $VCLI_RAY_STREAM_LOGS=1 (raylets in containers on this host see
        another filesystem at the same IP): then logs are streamed as from another machine."""
        return os.environ.get("VCLI_RAY_STREAM_LOGS") != "1" and _is_this_machine(node_ip)

    def _actor(self, handle: ReplicaHandle) -> Any:
        """The replica's actor (None: gone), looked up once (`_actors`; `poll` drops one that died)."""
        ray = self._ray()
        with self._lock:
            if (actor := self._actors.get(handle.ref)) is not None:
                return actor
        try:
            actor = bounded(self._watch, ray.get_actor, handle.ref, namespace=NAMESPACE)
        except ValueError:
            return None
        with self._lock:
            return self._actors.setdefault(handle.ref, actor)

    def _pull_log(self, handle: ReplicaHandle, actor: Any) -> None:
        """Append the node-local log's new whole lines to the launch's log file."""
        with self._lock:
            stream = self._streams.get(handle.ref)
        if stream is None:
            return
        path, offset = stream
        try:
            data, new_offset = self._get(actor.read_log.remote(offset), CALL_TIMEOUT_SECONDS)
        except Exception:  # the node or cluster is gone: what was copied is all there is
            return
        if data:
            with open(path, "ab") as f:
                f.write(data)
        with self._lock:
            self._streams[handle.ref] = (path, new_offset)


class RayPlacer:
    """The `plan_job` placer of a `RayExecutor`: a placement group per job, released at its end."""

    def __init__(self, executor: RayExecutor) -> None:
        self.executor = executor
        self._anon = 0

    def __call__(self, replicas: Sequence[Any], spec: Any = None, job_id: str | None = None,
                 **_: Any) -> list[Placement]:
        if job_id is None:
            self._anon += 1
            job_id = f"anonymous-{self._anon}"
        return self.executor.place(replicas, spec, job_id)

    def release(self, job_id: str) -> None:
        self.executor.release_group(job_id)

    def hold(self, job_id: str, replicas: Sequence[Any], spec: Any, placements: Sequence[Any]) -> None:
        """Nothing to do: the job's placement group is detached, so Ray still holds it for the
        job after its controller died; `release` finds it by name."""


def _actor_name(launch: ReplicaLaunch) -> str:
    return f"vcli-{launch.job_id}-{launch.task_name}"


def _handle(launch: ReplicaLaunch, facts: dict[str, Any]) -> ReplicaHandle:
    """The handle of the replica of `launch` that its actor started (`node.ReplicaSupervisor.start`'s `facts`)."""
    return ReplicaHandle(executor="ray", host=facts["nodeId"], ref=_actor_name(launch), task_name=launch.task_name,
                         details={"job": launch.job_id, "node": facts["nodeIp"], "gpus": ",".join(facts["gpuIds"]),
                                  "nodeLog": facts["logPath"]})


def _is_node_id(host: str) -> bool:
    return len(host) == 56 and all(c in "0123456789abcdef" for c in host)


_SUPERVISOR_SOURCE: str | None = None


def _supervisor_source() -> str:
    global _SUPERVISOR_SOURCE
    if _SUPERVISOR_SOURCE is None:
        with open(os.path.abspath(_supervisor.__file__), encoding="utf-8") as f:
            _SUPERVISOR_SOURCE = f.read()
    return _SUPERVISOR_SOURCE


def _is_this_machine(address: str) -> bool:
    """Is `address` one of this machine's own (a replica there can write our files)?"""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False


def _gist(e: BaseException) -> str:
    """The informative part of a Ray error: its last line (Ray prepends tracebacks)."""
    text = str(e).strip()
    return text.splitlines()[-1] if text else type(e).__name__
