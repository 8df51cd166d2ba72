"""What a replica's container is: its name, labels, the host directories it binds, and every
argument sent to the engine to create it (`container_create_kwargs`). Pure functions of the
launch, apart from building `docker.types` objects (the SDK is imported only there)."""

from __future__ import annotations

import os
from typing import Any

from vcli.codec import gcs
from vcli.errors import ExecutorError
from vcli.executors import ReplicaLaunch
from vcli.executors.docker.engine import docker_name
from vcli.placement.gpus import visible_devices_env

LABEL_JOB = "vcli.job"
LABEL_TRIAL = "vcli.trial"
LABEL_TASK = "vcli.task"



def container_name(launch: ReplicaLaunch) -> str:
    """`vcli-<job>-<trial or 0>-<task>`: unique because job ids are unique."""
    return docker_name(f"vcli-{launch.job_id}-{launch.trial_id or 0}-{launch.task_name}")


def container_labels(launch: ReplicaLaunch) -> dict[str, str]:
    return {
        LABEL_JOB: launch.job_id,
        LABEL_TRIAL: launch.trial_id or "",
        LABEL_TASK: launch.task_name,
    }


def storage_mounts(launch: ReplicaLaunch) -> list[Any]:
    """The storage root (gs://, `vcli.codec.gcs`) at `/gcs` and at its own path, as
    `docker.types.Mount`s, when the replica is told about a path under either; else none.

    `/gcs` is where Vertex's Cloud Storage FUSE shows buckets; the same-path view keeps the
    AIP_* directories and args that name the root itself valid inside the container. (A
    `volumes` entry cannot bind one host path twice, hence Mounts.)
    """
    root = gcs.storage_root()
    texts = (*launch.env.values(), *launch.command, *launch.args, *launch.mounts)
    if not gcs.refers_to_storage(texts, root):
        return []
    from docker.types import Mount

    return [Mount(target=gcs.FUSE_ROOT, source=root, type="bind"), Mount(target=root, source=root, type="bind")]


def host_dirs(launch: ReplicaLaunch) -> list[str]:
    """The host directories a container writes, each bind-mounted at its own path: its output
    dir, `mounts`, and its AIP_CHECKPOINT_DIR and `seed_dirs` destinations where neither those
    nor the storage root hold them (Population Based Training copies checkpoints into and out
    of them on the host, so the container must see the host's directory)."""
    dirs = [os.path.abspath(p) for p in (launch.output_dir, *launch.mounts)]
    covered = dirs + [m["Target"] for m in storage_mounts(launch)]
    checkpoint = launch.env.get("AIP_CHECKPOINT_DIR")
    for path in ([checkpoint] if checkpoint else []) + [dest for _, dest in launch.seed_dirs]:
        path = os.path.abspath(path)
        if not any(path == c or path.startswith(c.rstrip("/") + "/") for c in covered):
            dirs.append(path)
            covered.append(path)
    return list(dict.fromkeys(dirs))


def container_create_kwargs(launch: ReplicaLaunch, *, mem_limit: str | int | None = None) -> dict[str, Any]:
    """What is sent to the engine for `launch`: keyword arguments of `client.containers.create`.

    Pure apart from building `docker.types.DeviceRequest` objects for GPUs.
    """
    image = launch.image_uri or (launch.local_package.executor_image_uri if launch.local_package else None)
    if not image:
        raise ExecutorError(f"replica {launch.task_name}: no container image to run (the docker executor needs an image)")
    env = dict(launch.env)
    volumes: dict[str, dict[str, str]] = {}  # keyed by host path = container path
    for path in host_dirs(launch):
        volumes[path] = {"bind": path, "mode": "rw"}
    binds = {v["bind"] for v in volumes.values()}
    storage = [m for m in storage_mounts(launch) if m["Target"] not in binds]  # never one path twice
    kwargs: dict[str, Any] = {
        "image": image,
        "name": container_name(launch),
        "labels": container_labels(launch),
        "environment": env,
        # Host networking: TF_CONFIG / CLUSTER_SPEC hold host:port pairs that the controller
        # reserved on the host (reserve_port), exactly as for processes, and multi-host (SSH)
        # placements put host addresses there too. A private network would need name-based
        # addresses and port publishing that differ per runtime.
        "network_mode": "host",
        "volumes": volumes,
        **({"mounts": storage} if storage else {}),
        # docker-init (tini) as PID 1: forwards SIGTERM to the replica (a bare PID 1 ignores
        # it) and reaps zombies, so `stop` behaves as for a process group.
        "init": True,
        "detach": True,
    }
    entrypoint = _entrypoint(launch)
    if entrypoint:
        kwargs["entrypoint"] = entrypoint
        kwargs["command"] = list(launch.args)
    elif launch.args:
        kwargs["command"] = list(launch.args)  # the image's ENTRYPOINT with these args
    if launch.workdir:
        # A local package run on the executor image without a build: the code is mounted
        # read-only at its host path and is the working directory.
        workdir = os.path.abspath(launch.workdir)
        volumes.setdefault(workdir, {"bind": workdir, "mode": "ro"})
        kwargs["working_dir"] = workdir
    gpus = tuple(launch.placement.gpu_indices)
    if launch.placement.gpu_share and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in launch.placement.gpu_env:
        raise ExecutorError(f"Cannot start replica {launch.task_name}: this host shares GPUs with NVIDIA MPS "
                            "(gpu_sharing: mps), which vcli gives to processes only: run the job with --executor=local")
    if gpus:
        from docker.types import DeviceRequest

        # `--gpus device=0,1` (never runtime=nvidia): only these GPUs exist in the container.
        kwargs["device_requests"] = [DeviceRequest(device_ids=[str(i) for i in gpus], capabilities=[["gpu"]])]
        env.update(visible_devices_env(gpus, in_container=True))
    elif launch.placement.gpu_host:  # an engine whose default runtime is nvidia would give a CUDA image every GPU
        env.update({"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""})
    if launch.shm_size:
        kwargs["shm_size"] = launch.shm_size
    if mem_limit is not None:
        kwargs["mem_limit"] = mem_limit
        kwargs["memswap_limit"] = mem_limit  # no swap on top: over the limit means OOM
    return kwargs


def _entrypoint(launch: ReplicaLaunch) -> list[str]:
    """What runs in the container, before `launch.args`; [] = the image's own ENTRYPOINT.

    Same precedence as the process runtime (`process_argv`): an explicit command; then a
    local package run in place (not built by `prepare`: its script or module, from the
    mounted workdir); then pythonPackageSpec.pythonModule (`python3 -m`, as Vertex runs it).
    """
    if launch.command:
        return list(launch.command)
    lp = launch.local_package
    if lp is not None and lp.script:
        return (["python3"] if lp.script.endswith(".py") else ["/bin/bash"]) + [lp.script]
    module = (lp.python_module if lp is not None else None) or launch.python_module
    if module:
        return ["python3", "-m", module]
    return []
