"""Stored rows -> Vertex REST resources (camelCase dicts), as describe/list/--format print them.

Fields are Vertex's (`name`, `displayName`, `jobSpec`, `state`, `createTime`, `startTime`,
`endTime`, `updateTime`, `labels`, `error`; for tuning jobs `studySpec`, `trialJobSpec`,
`maxTrialCount`, `parallelTrialCount`, `maxFailedTrialCount`, `trials`). vcli adds
`replicas` (where each replica ran, its address, exit code, log, start and end times), `outputDirectory`, and
for a job or study that has not ended, `controller`: the vcli process that runs it, whether it
is alive, and its last heartbeat (a job whose controller is gone is taken over with `resume`).
"""

from __future__ import annotations

from typing import Any

from vcli.enums import JobKind
from vcli.store import JobRow, Store


def _times(row: JobRow, out: dict[str, Any]) -> None:
    out["createTime"] = row.create_time
    if row.start_time:
        out["startTime"] = row.start_time
    if row.end_time:
        out["endTime"] = row.end_time
    out["updateTime"] = row.update_time


def _controller(row: JobRow, out: dict[str, Any]) -> None:
    from vcli.control.liveness import controller_alive, has_ended

    if has_ended(row) or not row.controller_pid:
        return
    ctl: dict[str, Any] = {"pid": row.controller_pid, "alive": controller_alive(row)}
    if row.heartbeat:
        from datetime import UTC, datetime

        ctl["heartbeatTime"] = datetime.fromtimestamp(row.heartbeat, UTC).isoformat(timespec="milliseconds").replace(
            "+00:00", "Z")
    out["controller"] = ctl


def stored_job(store: Store, ref: str, kind: JobKind) -> JobRow:
    """The stored job named by `ref` (an id or a resource name of `kind`'s collection, any
    project and region) of `kind`: NotFoundError if there is none, InvalidValueError if `ref`
    is neither (`../ID`, a name of the other collection). `describe`, `cancel`, ... and the
    SDK's `CustomJob.get` all look jobs up here."""
    import re

    from vcli.errors import InvalidValueError, NotFoundError
    from vcli.store import parse_job_ref

    what, group, collection, arg = (("CustomJob", "custom-jobs", "customJobs", "CUSTOM_JOB") if kind == JobKind.CUSTOM_JOB
                                    else ("HyperparameterTuningJob", "hp-tuning-jobs", "hyperparameterTuningJobs",
                                          "HP_TUNING_JOB"))
    if "/" in ref and not re.fullmatch(rf"projects/[^/]+/locations/[^/]+/{collection}/[^/]+", ref):
        raise InvalidValueError(arg, f"[{ref}] is neither a job id nor a resource name "
                                f"projects/PROJECT/locations/REGION/{collection}/ID.")
    row = store.get_job(parse_job_ref(ref))
    if row is None or row.kind != kind.value:
        raise NotFoundError(f"{what} [{ref}] was not found. List jobs with `vcli {group} list`.")
    return row


def custom_job_resource(store: Store, row: JobRow) -> dict[str, Any]:
    rec = row.record
    out: dict[str, Any] = {
        "name": row.name,
        "displayName": row.display_name,
        "jobSpec": rec.get("jobSpec", {}),
        "state": row.state.value,
    }
    _times(row, out)
    if rec.get("labels"):
        out["labels"] = rec["labels"]
    if row.error:
        out["error"] = row.error
    for key in ("failureClass", "failureCause"):  # why it FAILED (vcli.control.failures)
        if rec.get(key):
            out[key] = rec[key]
    _controller(row, out)
    if rec.get("encryptionSpec"):
        out["encryptionSpec"] = rec["encryptionSpec"]
    out["outputDirectory"] = rec.get("outputDirectory")
    if rec.get("tracking"):  # the job's MLflow run (vcli.tracking)
        from vcli.tracking import shown as tracking_shown

        out["tracking"] = tracking_shown(rec["tracking"])
    if rec.get("executor"):
        out["executor"] = rec["executor"]
    if row.parent_id:
        out["hyperparameterTuningJob"] = f"projects/local/locations/local/hyperparameterTuningJobs/{row.parent_id}"
        out["trialId"] = row.trial_id
    replicas = []
    for r in store.replicas(row.id):
        d: dict[str, Any] = {"taskName": r.task_name, "host": r.host, "state": r.state.value, "logPath": r.log_path}
        if r.address:
            d["address"] = r.address
        if r.exit_code is not None:
            d["exitCode"] = r.exit_code
        if r.message:
            d["message"] = r.message
        if r.gpus:
            d["gpus"] = r.gpus
        if r.start_time:
            d["startTime"] = r.start_time
        if r.end_time:  # when it ended, even while no controller watched (a resume records it later)
            d["endTime"] = r.end_time
        if r.handle and (shown := _handle_details(r.handle)):  # where the executor says the replica lives
            d[shown[0]] = shown[1]
        replicas.append(d)
    if replicas:
        out["replicas"] = replicas
    return out


def hp_tuning_job_resource(store: Store, row: JobRow, trials: str = "all") -> dict[str, Any]:
    """The study's Vertex resource. `trials`: "all" (Vertex's shape), "count" (`trials` holds as
    many empty placeholders as it has trials: a `list` whose output reads only `trials.len()`)
    or "none" (no `trials` nor what is computed from them: a `list` whose output reads neither);
    both read no trial record."""
    rec = row.record
    out: dict[str, Any] = {
        "name": row.name,
        "displayName": row.display_name,
        "studySpec": rec.get("studySpec", {}),
        "maxTrialCount": rec.get("maxTrialCount"),
        "parallelTrialCount": rec.get("parallelTrialCount"),
        "maxFailedTrialCount": rec.get("maxFailedTrialCount", 0),
        "trialJobSpec": rec.get("trialJobSpec", {}),
        "state": row.state.value,
    }
    _times(row, out)
    if rec.get("labels"):
        out["labels"] = rec["labels"]
    if row.error:
        out["error"] = row.error
    _controller(row, out)
    for key in ("encryptionSpec", "studyTimeout", "goalValue", "seed", "executor", "outputDirectory", "stopReason",
                "warmStart", "extensions"):
        if rec.get(key) is not None:
            out[key] = rec[key]
    if rec.get("tracking"):  # the study's MLflow runs (vcli.tracking)
        from vcli.tracking import shown as tracking_shown

        out["tracking"] = tracking_shown(rec["tracking"])
    records = store.trial_records(row.id) if trials == "all" else []
    if trials != "none":
        out["trials"] = records if trials == "all" else [{}] * sum(store.trial_states(row.id).values())
    if rec.get("bestTrialId"):
        out["bestTrialId"] = rec["bestTrialId"]
    if rec.get("pbtSchedule"):
        # PBT: the best trial's lineage as a hyperparameter schedule (steps, values), replayable.
        out["pbtSchedule"] = rec["pbtSchedule"]
    metrics = (rec.get("studySpec") or {}).get("metrics") or []
    if len(metrics) > 1 and trials == "all":
        # The result of a multi-objective study is its Pareto front, current while it runs.
        out["optimalTrialIds"] = optimal_trial_ids(records, metrics)
    return out


def optimal_trial_ids(trials: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> list[str]:
    """The ids of the Pareto-optimal SUCCEEDED trials of stored `trials` (Vertex dicts)."""
    from vcli.codec.trial import trial_from_dict
    from vcli.spec import Goal, MetricSpec
    from vcli.tuning.pareto import pareto_front

    specs = [MetricSpec(metric_id=m["metricId"], goal=Goal.MINIMIZE if m.get("goal") == "MINIMIZE" else Goal.MAXIMIZE)
             for m in metrics]
    return [t.id for t in pareto_front([trial_from_dict(d) for d in trials], specs)]


def _handle_details(handle: dict[str, Any]) -> tuple[str, dict[str, str]] | None:
    """What `describe` shows of a stored handle's details, as its kind declares it."""
    from vcli.executors.kinds import kinds

    kind = kinds().get(handle.get("executor") or "")
    return kind.described(handle.get("details") or {}) if kind is not None else None
