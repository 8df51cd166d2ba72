"""Which replicas get the MLflow variables, and how they reach them.

The rule: the chief (workerpool0-0, the replica whose exit ends the job and whose metrics a
trial reads) gets MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME and MLFLOW_RUN_ID, so a trainer
that calls `mlflow.log_metric` or `mlflow.autolog()` logs into its trial's (or job's) run, as
Vertex autologging does. Other replicas get none of them: under data-parallel training every
worker runs the same code, and N writers of one run would log every step N times (log from the
chief, or from `RANK == 0`). Every replica gets back MLflow's own HTTP time bounds
(`vcli.tracking.backend.replica_env`), which the controller narrowed for itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping


def with_tracking_env(plan: Any, chief: Mapping[str, str] | None) -> Any:
    """`plan` (a `JobPlan`) with `chief` added to workerpool0-0's environment and MLflow's HTTP
    bounds to every replica's; a restart's new plan (`replan`) gets the same."""
    from vcli.tracking.backend import replica_env

    every = replica_env()

    def apply(p: Any) -> Any:
        launches = tuple(
            replace(launch, env={**launch.env, **every,
                                 **(dict(chief or {}) if _is_chief(launch) else {})})
            for launch in p.launches)
        replan = p.replan
        return replace(p, launches=launches, replan=(lambda: apply(replan())) if replan is not None else None)

    return apply(plan)


def _is_chief(launch: Any) -> bool:
    return bool(launch.replica.pool_index == 0 and launch.replica.index == 0)
