"""The Vertex replica environment: CLUSTER_SPEC, TF_CONFIG, AIP_* and friends (pure).

Shapes follow Vertex AI (reference: gcloud-vertex.md §5):
- CLUSTER_SPEC on every replica: `cluster` maps `workerpoolN` to `host:port` per replica
  (empty pools absent), `environment: cloud`, `task{type: workerpoolN, index[, trial]}`, `job`.
- TF_CONFIG only when the job has more than one replica: pools 0-2 are `chief`, `worker`,
  `ps`; pool 3 replicas are `evaluator` tasks and never appear in `cluster`.
- AIP_MODEL_DIR / AIP_CHECKPOINT_DIR / AIP_TENSORBOARD_LOG_DIR under the base output
  directory (`<base>/<trial_id>/...` for trials), CLOUD_ML_TRIAL_ID for trials, and a
  CLOUD_ML_HP_METRIC_FILE private to each replica so parallel replicas never clobber it.
- MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK as Vertex sets them for PyTorch: WORLD_SIZE counts
  the replicas of pools 0 and 1 (nodes), RANK is the node rank (chief 0, worker i -> i+1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from vcli.spec import CustomJobSpec, ReplicaId


def replica_ids(spec: CustomJobSpec) -> list[ReplicaId]:
    """Every replica vcli starts, pool by pool, in index order.

    A Reduction Server pool (`WorkerPoolSpec.is_reduction_server`) is left out: its image is
    Google's, it runs no training code, and without Google's NCCL plugin in the workers'
    image nothing would talk to it. The workers all-reduce among themselves instead (plain
    NCCL/gRPC: the same results, without the bandwidth saving), and since nothing listens at
    its addresses, CLUSTER_SPEC and TF_CONFIG leave its pool out too.
    """
    return [
        ReplicaId(pool_index=p, index=i)
        for p, pool in enumerate(spec.worker_pool_specs)
        if not pool.is_reduction_server
        for i in range(pool.replica_count)
    ]


@dataclass(frozen=True, kw_only=True)
class ClusterLayout:
    """The reserved `host:port` of every replica, keyed by task name (`workerpool1-0`)."""

    addresses: Mapping[str, str]
    replicas: tuple[ReplicaId, ...]

    def pool_addresses(self, pool_index: int) -> list[str]:
        return [self.addresses[r.task_name] for r in self.replicas if r.pool_index == pool_index]


def cluster_spec(layout: ClusterLayout, replica: ReplicaId, job: Mapping[str, Any], trial_id: str | None) -> dict[str, Any]:
    """CLUSTER_SPEC for one replica, as a JSON-ready dict."""
    pools = sorted({r.pool_index for r in layout.replicas})
    task: dict[str, Any] = {"type": f"workerpool{replica.pool_index}", "index": replica.index}
    if trial_id is not None:
        task["trial"] = trial_id
    return {
        "cluster": {f"workerpool{p}": layout.pool_addresses(p) for p in pools},
        "environment": "cloud",
        "task": task,
        "job": dict(job),
    }


def tf_config(layout: ClusterLayout, replica: ReplicaId, job: Mapping[str, Any], trial_id: str | None) -> dict[str, Any] | None:
    """TF_CONFIG for one replica, or None for a single-replica job (Vertex sets none)."""
    if len(layout.replicas) <= 1:
        return None
    cluster: dict[str, list[str]] = {}
    for pool_index, task_type in enumerate(("chief", "worker", "ps")):
        addresses = layout.pool_addresses(pool_index)
        if addresses:
            cluster[task_type] = addresses
    task: dict[str, Any] = {"type": replica.task_type, "index": replica.index}
    if trial_id is not None:
        task["trial"] = trial_id
    return {"cluster": cluster, "environment": "cloud", "task": task, "job": dict(job)}


def output_dirs(base_output_directory: str, trial_id: str | None) -> dict[str, str]:
    """AIP_* directories under a local base directory (`/<trial_id>/` inside for trials)."""
    base = base_output_directory.rstrip("/")
    if trial_id is not None:
        base = f"{base}/{trial_id}"
    return {
        "AIP_MODEL_DIR": f"{base}/model/",
        "AIP_CHECKPOINT_DIR": f"{base}/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{base}/logs/",
    }


def pytorch_env(layout: ClusterLayout, replica: ReplicaId) -> dict[str, str]:
    """MASTER_ADDR/PORT, WORLD_SIZE, RANK for multi-replica jobs (nodes = pools 0 and 1)."""
    if len(layout.replicas) <= 1 or replica.pool_index > 1:
        return {}
    chief = layout.pool_addresses(0) or layout.pool_addresses(1)
    host, _, port = chief[0].rpartition(":")
    nodes = len(layout.pool_addresses(0)) + len(layout.pool_addresses(1))
    rank = replica.index if replica.pool_index == 0 else len(layout.pool_addresses(0)) + replica.index
    return {"MASTER_ADDR": host, "MASTER_PORT": port, "WORLD_SIZE": str(nodes), "RANK": str(rank)}


def replica_env(
    *,
    layout: ClusterLayout,
    replica: ReplicaId,
    job: Mapping[str, Any],
    job_id: str,
    trial_id: str | None,
    base_output_directory: str,
    metric_file: str,
    gpu_indices: Sequence[int] | None = None,
    user_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The complete environment vcli adds for one replica (on top of the runtime's own).

    `user_env` (containerSpec.env / pythonPackageSpec.env) comes first so that Vertex's
    variables win, as on Vertex. `gpu_indices` None means "the host declares no GPUs":
    CUDA_VISIBLE_DEVICES is then left alone; otherwise it lists exactly the given GPUs.
    """
    env: dict[str, str] = dict(user_env or {})
    env["CLUSTER_SPEC"] = json.dumps(cluster_spec(layout, replica, job, trial_id))
    tf = tf_config(layout, replica, job, trial_id)
    if tf is not None:
        env["TF_CONFIG"] = json.dumps(tf)
    env.update(output_dirs(base_output_directory, trial_id))
    env["CLOUD_ML_HP_METRIC_FILE"] = metric_file
    env["CLOUD_ML_JOB_ID"] = job_id
    if trial_id is not None:
        env["CLOUD_ML_TRIAL_ID"] = trial_id
    env.update(pytorch_env(layout, replica))
    if gpu_indices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
    env["VCLI_JOB_ID"] = job_id
    env["VCLI_TASK_NAME"] = replica.task_name
    return env
