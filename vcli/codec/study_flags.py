"""`hp-tuning-jobs create`'s flags applied to the study document: one call from the CLI.

`study_request(doc, source, flags)` decodes the HyperparameterTuningJob document (built from
--config and the study-shaping flags by `hp_tuning_document`), applies the flags that override
its values, checks them, and returns the spec with the notices to print. Errors in a part of
the document a flag wrote name that flag, not the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from vcli.codec import (
    STOPPING_KEYS,
    apply_args_and_command,
    check_display_name,
    hp_tuning_job_from_document,
    parse_duration,
    split_arg_list,
)
from vcli.errors import ConfigError, InvalidValueError, UsageError
from vcli.spec import ConvexAutomatedStoppingSpec, HyperparameterTuningJobSpec, MeasurementSelectionType
from vcli.tuning.defaults import default_configuration

__all__ = ["StudyFlags", "StudyRequest", "study_request"]


@dataclass(frozen=True)
class StudyFlags:
    """The flags of `create` that change the study document (None: keep the document's value).
    `algorithm_flag` and `early_stopping_flag` say whether those flags wrote the document's
    algorithm and stopping spec (so that their errors name the flag)."""

    display_name: str | None = None
    max_trial_count: int | None = None
    parallel_trial_count: int | None = None
    max_failed_trial_count: int | None = None
    args: list[str] | None = None
    command: list[str] | None = None
    measurement_selection: MeasurementSelectionType | None = None
    study_timeout: str | None = None
    goal_value: float | None = None
    algorithm_flag: bool = False
    early_stopping_flag: bool = False
    #: The document parts --metric, --parameter-spec and --worker-pool-spec wrote.
    metric_flag: bool = False
    parameter_flag: bool = False
    worker_pool_flag: bool = False


@dataclass(frozen=True)
class StudyRequest:
    """A checked study: its spec, display name and labels from the document, the document's
    keys that mean nothing here (`no_effect`) and lines to print (`notices`)."""

    spec: HyperparameterTuningJobSpec
    display_name: str
    labels: Mapping[str, str]
    no_effect: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


def study_request(doc: Mapping[str, Any], source: str, flags: StudyFlags) -> StudyRequest:
    """Decode `doc` and apply `flags`. Raises ConfigError/InvalidValueError/UsageError naming
    the key or flag at fault."""
    no_effect: list[str] = []
    try:
        spec, file_name, labels = hp_tuning_job_from_document(doc, source, no_effect)
    except ConfigError as e:
        raise _flag_error(e, flags) from None
    name = flags.display_name or file_name
    if not name:
        raise UsageError("argument --display-name: Must be specified.")
    check_display_name(str(name))
    notices: list[str] = []
    spec = apply_study_flags(spec, flags, notices)
    pbt = spec.study_spec.population_based_training_spec
    asked = flags.parallel_trial_count if flags.parallel_trial_count is not None else doc.get("parallelTrialCount")
    if pbt is not None and asked is not None and asked != pbt.population_size:
        notices.append(f"WARNING: parallelTrialCount ({asked}) has no effect with Population Based Training: its "
                       f"populationSize ({pbt.population_size}) members train at once.")
    if pbt is None and default_configuration(spec.study_spec.parameters) is not None:
        no_effect = [k for k in no_effect if not k.endswith(".defaultValue")]  # trial 1 runs them
    return StudyRequest(spec, name, labels, no_effect, notices)


def _flag_error(error: ConfigError, flags: StudyFlags) -> Exception:
    """Where a flag wrote the part of the document `error` is about, the error names the flag."""
    path, message = error.path, error.message
    if flags.early_stopping_flag and any(path.startswith(f"studySpec.{k}") for k in STOPPING_KEYS):
        key = path.split(".")[2] if path.count(".") >= 2 else ""
        key = "".join(f"-{c.lower()}" if c.isupper() else c for c in key)  # the flag's spelling
        return InvalidValueError("--early-stopping", f"{key}: {message}" if key else message)
    if flags.algorithm_flag and path == "studySpec.algorithm":
        return InvalidValueError("--algorithm", message)
    # Two --metric flags of one id were "Invalid value for [--config]: <flags> at ...".
    for wrote, prefix, flag in ((flags.metric_flag, "studySpec.metrics", "--metric"),
                                (flags.parameter_flag, "studySpec.parameters", "--parameter-spec"),
                                (flags.worker_pool_flag, "trialJobSpec.workerPoolSpecs", "--worker-pool-spec")):
        if wrote and (path == prefix or path.startswith((prefix + ".", prefix + "["))):
            return InvalidValueError(flag, f"[{path}]: {message}")
    return error


def apply_study_flags(spec: HyperparameterTuningJobSpec, flags: StudyFlags, notices: list[str]) -> HyperparameterTuningJobSpec:
    """`spec` with the study flags applied and checked; warnings and notes go to `notices`."""
    _check_counts(flags)
    if flags.args is not None or flags.command is not None:
        joined = None if flags.args is None else [a for v in flags.args for a in split_arg_list(v)]
        cmd = None if flags.command is None else [a for v in flags.command for a in split_arg_list(v)]
        spec = replace(spec, trial_job_spec=apply_args_and_command(spec.trial_job_spec, args=joined, command=cmd))
    if flags.measurement_selection is not None:
        spec = replace(spec, study_spec=replace(spec.study_spec, measurement_selection_type=flags.measurement_selection))
    spec = replace(
        spec,
        max_trial_count=_pick(flags.max_trial_count, spec.max_trial_count),
        parallel_trial_count=_pick(flags.parallel_trial_count, spec.parallel_trial_count),
        max_failed_trial_count=_pick(flags.max_failed_trial_count, spec.max_failed_trial_count),
        study_timeout_seconds=_study_timeout(flags.study_timeout),
        goal_value=flags.goal_value,
    )
    _check_goal_value(spec)
    if spec.parallel_trial_count > spec.max_trial_count:
        notices.append(f"WARNING: parallelTrialCount ({spec.parallel_trial_count}) is greater than maxTrialCount "
                       f"({spec.max_trial_count}); running at most {spec.max_trial_count} trials at once.")
        spec = replace(spec, parallel_trial_count=spec.max_trial_count)
    notices.extend(_convex_notes(spec))
    return spec


def _study_timeout(text: str | None) -> float | None:
    """--study-timeout in seconds (None: no budget); an empty value or a zero budget is
    refused (both meant "no budget", silently)."""
    if text is None:
        return None
    if not text.strip():
        raise InvalidValueError("--study-timeout", "must not be empty: give a duration such as 2h, or leave the flag out.")
    seconds = parse_duration(text, "--study-timeout")
    if not seconds > 0:
        raise InvalidValueError("--study-timeout", f"must be longer than 0s; received: {text}.")
    return seconds


def _pick(flag: int | None, current: int) -> int:
    return flag if flag is not None else current


def _check_counts(flags: StudyFlags) -> None:
    """The trial counts gcloud checks: at least 1 trial and slot; failures not negative."""
    for flag, value in (("--max-trial-count", flags.max_trial_count), ("--parallel-trial-count", flags.parallel_trial_count)):
        if value is not None and value < 1:
            raise InvalidValueError(flag, f"Value must be greater than or equal to 1; received: {value}.")
    if flags.max_failed_trial_count is not None and flags.max_failed_trial_count < 0:
        raise InvalidValueError("--max-failed-trial-count", f"Value must not be negative; received: {flags.max_failed_trial_count}.")


def _check_goal_value(spec: HyperparameterTuningJobSpec) -> None:
    """A goal value is one metric's finite threshold: refused with several metrics."""
    metrics = spec.study_spec.metrics
    if spec.goal_value is not None and not math.isfinite(spec.goal_value):  # nan is never reached: silently ignored
        raise InvalidValueError("--goal-value", f"must be a finite number; received: {spec.goal_value}.")
    if spec.goal_value is not None and len(metrics) > 1:
        raise InvalidValueError("--goal-value", f"a goal value needs a single metric, but the study optimises "
                                f"{len(metrics)} ({', '.join(m.metric_id for m in metrics)}): "
                                "with several metrics the result is a Pareto front, not one value to reach.")


def _convex_notes(spec: HyperparameterTuningJobSpec) -> list[str]:
    """Vertex's convex-stopping keys vcli accepts but does not need: said, never silently ignored."""
    stop = spec.study_spec.automated_stopping_spec
    if not isinstance(stop, ConvexAutomatedStoppingSpec):
        return []
    unused = [name for name, value in (("learningRateParameterName", stop.learning_rate_parameter_name),
                                       ("updateAllStoppedTrials", stop.update_all_stopped_trials)) if value]
    if not unused:
        return []
    return [f"Note: convexAutomatedStoppingSpec.{' and '.join(unused)} {'have' if len(unused) > 1 else 'has'} no effect "
            "here: vcli's convex rule extrapolates each trial's own curve (no learning rate needed) and never rewrites "
            "a stopped trial's measurements."]
