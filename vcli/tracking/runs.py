"""What goes into each MLflow run: params, tags and metrics of studies, trials and custom jobs.

Pure functions of vcli's records (no MLflow here); `vcli.tracking.study` and
`vcli.tracking.job` send what they return. Naming is documented in those modules.
"""

from __future__ import annotations

import getpass
import json
import shlex
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping, Sequence

from vcli.spec import CustomJobSpec, HyperparameterTuningJobSpec, JobState, ParameterSpec, Trial, TrialState
from vcli.tracking.sync import RunState


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


#: Tags every run vcli makes carries (MLflow's own source tags).
SOURCE_TAGS = {"mlflow.source.name": "vcli", "mlflow.source.type": "JOB", "mlflow.user": _user()}

_FINAL_TRIAL = {TrialState.SUCCEEDED.value, TrialState.INFEASIBLE.value}
_FINAL_JOB = {s.value for s in JobState if s.is_final()}


def split_found(runs: Iterable[Any]) -> tuple[RunState | None, dict[str, RunState]]:
    """Runs found by their `vcli.study_id` tag -> (the study's parent run, trial id -> run).
    Should a trial have two (never made by vcli itself), the earliest counts."""
    parent: RunState | None = None
    children: dict[str, tuple[int, RunState]] = {}
    for run in runs:
        tags = dict(run.data.tags)
        mine = {k: v for k, v in tags.items() if k.startswith("vcli.")}
        state = RunState(run_id=run.info.run_id, tags=mine, checked=False)
        trial_id = tags.get("vcli.trial_id")
        if trial_id is None:
            state.ended = tags.get("vcli.state") in _FINAL_JOB
            parent = parent or state
            continue
        state.ended = tags.get("vcli.state") in _FINAL_TRIAL
        start = run.info.start_time or 0
        if trial_id not in children or start < children[trial_id][0]:
            children[trial_id] = (start, state)
    return parent, {t: s for t, (_, s) in children.items()}


def describe_parameter(p: ParameterSpec) -> str:
    """`DOUBLE [0.0001, 0.1] UNIT_LOG_SCALE`, `CATEGORICAL [adam, sgd]`, ..."""
    v: Any = p.value_spec
    kind = type(v).__name__.removesuffix("ValueSpec").upper()
    domain = f"[{v.min_value}, {v.max_value}]" if hasattr(v, "min_value") else f"[{', '.join(str(x) for x in v.values)}]"
    scale = "" if p.scale_type.value.endswith("UNSPECIFIED") else f" {p.scale_type.value}"
    return f"{kind} {domain}{scale}"


def study_params(spec: HyperparameterTuningJobSpec) -> dict[str, str]:
    from vcli.codec import iter_parameters

    ss = spec.study_spec
    stop = ss.automated_stopping_spec
    out = {
        "algorithm": ss.algorithm.value,
        "max_trial_count": str(spec.max_trial_count),
        "parallel_trial_count": str(spec.parallel_trial_count),
        "max_failed_trial_count": str(spec.max_failed_trial_count),
        "metrics": ", ".join(f"{m.metric_id}:{m.goal.value}" for m in ss.metrics),
        "measurement_selection": ss.measurement_selection_type.value,
        "early_stopping": type(stop).__name__ if stop is not None else "none",
    }
    if ss.population_based_training_spec is not None:
        pbt = ss.population_based_training_spec
        out["pbt.population_size"] = str(pbt.population_size)
        out["pbt.perturbation_interval_steps"] = str(pbt.perturbation_interval_steps)
    out.update({f"space.{p.parameter_id}": describe_parameter(p) for p in iter_parameters(ss.parameters)})
    return out


def study_note(spec: HyperparameterTuningJobSpec) -> str:
    return (f"vcli hyperparameter tuning job: {spec.max_trial_count} trial(s), {spec.study_spec.algorithm.value}, "
            f"metric(s) {', '.join(m.metric_id for m in spec.study_spec.metrics)}. Each trial is a nested run.")


def trial_params(trial: Trial, specs: Mapping[str, ParameterSpec]) -> dict[str, str]:
    """The trial's hyperparameters as its trainer got them on the command line."""
    from vcli.codec.trial import format_value

    return {k: format_value(specs[k], v) if k in specs else str(v) for k, v in trial.parameters.items()}


def trial_tags(trial: Trial, study_id: str, parent_run_id: str | None, lineage_run: str | None) -> dict[str, str]:
    tags = {**SOURCE_TAGS, "vcli.study_id": study_id, "vcli.trial_id": trial.id, "vcli.kind": "Trial"}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    if trial.custom_job:
        tags["vcli.custom_job"] = trial.custom_job
    lin = trial.lineage
    if lin is not None:
        tags["vcli.pbt.member"] = str(lin.member)
        if lin.parent_trial_id:
            tags["vcli.pbt.parent_trial_id"] = lin.parent_trial_id
            tags["vcli.pbt.start_step"] = str(lin.start_step)
            tags["vcli.pbt.inherited_parameters"] = json.dumps(dict(lin.inherited_parameters), sort_keys=True)
            if lineage_run:
                tags["vcli.pbt.parent_run_id"] = lineage_run
    return tags


def state_tags(trial: Trial) -> dict[str, str]:
    """The tags that follow the trial's state (sent again when they change). A PBT trial's
    start step is among them: its first report corrects it when the donor had saved a newer
    checkpoint by the time it was copied (`Population.resumed_from`)."""
    tags = {"vcli.state": trial.state.value}
    if trial.lineage is not None and trial.lineage.parent_trial_id:
        tags["vcli.pbt.start_step"] = str(trial.lineage.start_step)
    for key, value in (("vcli.stop_reason", trial.stop_reason), ("vcli.early_stopping_rule", trial.early_stopping_rule),
                       ("vcli.infeasible_reason", trial.infeasible_reason)):
        if value:
            tags[key] = value
    return tags


def trial_status(trial: Trial) -> str:
    """MLflow's status for a trial that ended."""
    if trial.state == TrialState.SUCCEEDED:
        return "FINISHED"
    if (trial.infeasible_reason or "").startswith("Stopped") and "cancel" in (trial.infeasible_reason or ""):
        return "KILLED"
    return "FAILED"


def final_metrics(trial: Trial) -> list[tuple[str, float, int, int]]:
    """`final/<metric>` at the final measurement's step, and `duration_seconds`."""

    end = iso_ms(trial.end_time) or 0
    out: list[tuple[str, float, int, int]] = []
    final = trial.final_measurement
    if final is not None:
        out += [(f"final/{k}", v, end, final.step_count) for k, v in final.metrics.items()]
    start = iso_ms(trial.start_time)
    if start is not None and end:
        out.append(("duration_seconds", (end - start) / 1000.0, end, 0))
    return out


def study_end(state: JobState, best: Trial | None, optimal: Sequence[Trial], trials: Sequence[Trial],
              run_of: Callable[[str], str | None]) -> tuple[dict[str, str], list[tuple[str, float, int, int]]]:
    """The parent run's tags and metrics at the study's end."""
    import time

    now = int(time.time() * 1000)
    tags = {"vcli.state": state.value}
    metrics: list[tuple[str, float, int, int]] = [
        ("trials", float(len(trials)), now, 0),
        ("trials_succeeded", float(sum(t.state == TrialState.SUCCEEDED for t in trials)), now, 0),
        ("trials_infeasible", float(sum(t.state == TrialState.INFEASIBLE for t in trials)), now, 0),
        ("trials_stopped_early", float(sum(bool(t.early_stopping_rule) for t in trials)), now, 0)]
    if best is not None:
        tags["vcli.best_trial_id"] = best.id
        if (run := run_of(best.id)) is not None:
            tags["vcli.best_trial_run_id"] = run
        tags["vcli.best_parameters"] = json.dumps(dict(best.parameters), sort_keys=True)
        if best.final_measurement is not None:
            metrics += [(f"best/{k}", v, now, best.final_measurement.step_count)
                        for k, v in best.final_measurement.metrics.items()]
    elif optimal:
        tags["vcli.optimal_trial_ids"] = ",".join(t.id for t in optimal)
    return tags, metrics


# --------------------------------------------------------------------------- custom jobs


def job_params(spec: CustomJobSpec) -> dict[str, str]:
    """The job's args (its chief's) and, per pool, what runs there and on what."""
    out: dict[str, str] = {}
    for i, pool in enumerate(spec.worker_pool_specs):
        if pool.is_empty:
            continue
        key = f"workerpool{i}"
        cs, ps, lp = pool.container_spec, pool.python_package_spec, pool.local_package
        args = tuple(cs.args if cs else ps.args if ps else ())
        if i == 0:
            out["args"] = shlex.join(args)
        out[f"{key}.replica_count"] = str(pool.replica_count)
        out[f"{key}.machine_type"] = pool.machine_spec.machine_type
        if pool.machine_spec.accelerator_count:
            out[f"{key}.accelerator"] = f"{pool.machine_spec.accelerator_type} x {pool.machine_spec.accelerator_count:g}"
        image = (cs.image_uri if cs else "") or (ps.executor_image_uri if ps else "")
        if image:
            out[f"{key}.image_uri"] = image
        program = (shlex.join(cs.command) if cs and cs.command else "") or (ps.python_module if ps else "") or (
            (lp.python_module or lp.script or "") if lp else "")
        if program:
            out[f"{key}.program"] = program
        out[f"{key}.args"] = shlex.join(args)
    return out


def iso_ms(stamp: str | None) -> int | None:
    """An ISO 8601 time (`2026-11-26T17:26:44.123Z`) in epoch milliseconds."""
    if not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None
