"""The study codec: Vertex's `StudySpec` and `HyperparameterTuningJob` to and from `vcli.spec`,
and the HyperparameterTuningJob document that `--config` and the study flags describe.

The shape comes from `vcli.codec.schema`; this module adds Vertex's rules on values (bounds,
scales, conditional parents in the parent's domain, GRID_SEARCH's parameter types) and the one
shape the schema cannot map: a child's parent values, which Vertex wraps in a message chosen
by the parent's type (`parentIntValues`, ...) and vcli keeps as a plain tuple.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping, Sequence

from vcli.codec.flags import (
    label_problem,
    metric_from_flag,
    parameters_from_flags,
    parse_worker_pool_spec,
    worker_pools_from_flags,
)
from vcli.codec.job import JOB_OVERRIDES, custom_job_spec_from_dict, custom_job_spec_to_dict
from vcli.codec.schema import Decoder, build, to_wire
from vcli.codec.yamlio import load_document, refuse_whole_resource
from vcli.errors import ConfigError, UsageError
from vcli.logs import printable
from vcli.spec import (
    Algorithm,
    CategoricalValueSpec,
    ConditionalParameterSpec,
    CustomJobSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    Goal,
    HyperparameterTuningJobSpec,
    IntegerValueSpec,
    MetricSpec,
    ParameterSpec,
    ScaleType,
    StudySpec,
    iter_parameters,
)
from vcli.tuning.stopping import RULES, check_rule

_VALUE_SPECS = {
    "doubleValueSpec": DoubleValueSpec,
    "integerValueSpec": IntegerValueSpec,
    "categoricalValueSpec": CategoricalValueSpec,
    "discreteValueSpec": DiscreteValueSpec,
}
#: A parent's value spec -> the field its children's parent values travel in, and their form.
_PARENT_VALUES: dict[type, tuple[str, Callable[[Any], Any]]] = {
    CategoricalValueSpec: ("parentCategoricalValues", lambda x: x),
    DiscreteValueSpec: ("parentDiscreteValues", float),
    IntegerValueSpec: ("parentIntValues", lambda x: str(int(x))),
}

# --------------------------------------------------------------------------- dict -> spec


def _value_spec_from_dict(p: Mapping[str, Any], decoder: Decoder, path: str) -> tuple[Any, str]:
    """The parameter's one value spec at `path` and its field name (`doubleValueSpec`, ...),
    checked by `_VALUE_CHECKS`; a ConfigError (via `decoder`) when there is not exactly one."""
    kinds = [k for k in _VALUE_SPECS if k in p]
    if len(kinds) != 1:
        raise decoder.error(
            path, "exactly one of [doubleValueSpec, integerValueSpec, categoricalValueSpec, discreteValueSpec] is required"
        )
    kind = kinds[0]
    v = p[kind]
    _VALUE_CHECKS[kind](v, decoder, f"{path}.{kind}")
    return build(_VALUE_SPECS[kind], v), kind


def _check_bounds(v: Mapping[str, Any], decoder: Decoder, vpath: str) -> None:
    """A range's minValue and maxValue are both set, in order."""
    for key in ("minValue", "maxValue"):
        if key not in v:
            raise decoder.error(f"{vpath}.{key}", "required field is missing")
    if v["minValue"] > v["maxValue"]:
        raise decoder.error(vpath, f"minValue ({v['minValue']}) must not be greater than maxValue ({v['maxValue']})")


def _check_integer_range(v: Mapping[str, Any], decoder: Decoder, vpath: str) -> None:
    """An integerValueSpec: ordered bounds, each an int64, at most 2^53 apart."""
    _check_bounds(v, decoder, vpath)
    for key in ("minValue", "maxValue"):
        if not -(2**63) <= int(v[key]) < 2**63:  # Vertex's int64; 1e30 was stored as 1000000000000000019884624838656
            raise decoder.error(f"{vpath}.{key}", f"must be a 64-bit integer (-2^63 to 2^63-1), found [{v[key]}]")
    if int(v["maxValue"]) - int(v["minValue"]) > 2**53:  # beyond, neighbours share a double: grid search skipped 512 at a time
        raise decoder.error(vpath, "maxValue - minValue must be at most 2^53 (9007199254740992): vcli's "
                            "suggesters place integers in double precision")


def _check_double_range(v: Mapping[str, Any], decoder: Decoder, vpath: str) -> None:
    """A doubleValueSpec: ordered, finite bounds whose difference is finite too."""
    _check_bounds(v, decoder, vpath)
    if not (math.isfinite(v["minValue"]) and math.isfinite(v["maxValue"])):
        raise decoder.error(vpath, "minValue and maxValue must be finite numbers")
    if not math.isfinite(v["maxValue"] - v["minValue"]):  # -1.7e308..1.7e308: every trial got 1.7e308
        raise decoder.error(vpath, "maxValue - minValue must be a finite number (the range overflows a double)")


def _check_categories(v: Mapping[str, Any], decoder: Decoder, vpath: str) -> None:
    """A categoricalValueSpec: at least one value, all unique, none with a control character."""
    values = v.get("values", [])
    if not values:
        raise decoder.error(f"{vpath}.values", "must list at least one value")
    if len(set(values)) != len(values):
        raise decoder.error(f"{vpath}.values", "values must be unique")
    for j, value in enumerate(values):  # a newline forged trial-event lines; every trial's argv carries it
        if re.search(r"[\x00-\x1f\x7f]", str(value)):
            raise decoder.error(f"{vpath}.values[{j}]", f"must not contain control characters, found [{printable(str(value))}]")


def _check_discrete(v: Mapping[str, Any], decoder: Decoder, vpath: str) -> None:
    """A discreteValueSpec: 1 to 1000 values, increasing and at least 1e-10 apart."""
    values = v.get("values", [])
    if not values:
        raise decoder.error(f"{vpath}.values", "must list at least one value")
    if len(values) > 1000:
        raise decoder.error(f"{vpath}.values", "at most 1000 values are allowed")
    for a, b in zip(values, values[1:]):
        if not b - a >= 1e-10:
            raise decoder.error(f"{vpath}.values", f"values must be increasing and at least 1e-10 apart ([{a}] then [{b}])")


#: Each value spec's field -> the check of its content (raises the decoder's ConfigError).
_VALUE_CHECKS: dict[str, Callable[[Mapping[str, Any], Decoder, str], None]] = {
    "doubleValueSpec": _check_double_range,
    "integerValueSpec": _check_integer_range,
    "categoricalValueSpec": _check_categories,
    "discreteValueSpec": _check_discrete,
}


def _parameter_from_dict(p: Mapping[str, Any], decoder: Decoder, path: str, seen: set[str]) -> ParameterSpec:
    """One parameterSpec (and its conditional children) at `path`; `seen`: the parameterIds
    so far in the study (children included), which gains this one's."""
    pid = _parameter_id(p, decoder, path, seen)
    value_spec, kind = _value_spec_from_dict(p, decoder, path)
    scale = _scale_type(p, value_spec, kind, decoder, path)
    children = tuple(
        _conditional_from_dict(c, pid, value_spec, kind, decoder, f"{path}.conditionalParameterSpecs[{j}]", seen)
        for j, c in enumerate(p.get("conditionalParameterSpecs", []))
    )
    return build(ParameterSpec, p, parameter_id=pid, value_spec=value_spec, scale_type=scale, conditional_parameter_specs=children)


def _parameter_id(p: Mapping[str, Any], decoder: Decoder, path: str, seen: set[str]) -> str:
    """The parameterId at `path`: set, usable as a trainer flag (--ID=VALUE), not in `seen`."""
    pid = p.get("parameterId")
    if not pid:
        raise decoder.error(f"{path}.parameterId", "required field is missing")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", pid):
        raise decoder.error(f"{path}.parameterId", f"[{pid}] may only contain letters, digits, '_', '-' and '.' (it becomes --{pid}=VALUE)")
    if pid in seen:
        raise decoder.error(f"{path}.parameterId", f"duplicate parameterId [{pid}]")
    seen.add(pid)
    return pid


def _scale_type(p: Mapping[str, Any], value_spec: Any, kind: str, decoder: Decoder, path: str) -> ScaleType:
    """The parameter's scaleType: unset for a categorical, a positive domain for a log scale."""
    scale = ScaleType(p.get("scaleType", ScaleType.SCALE_TYPE_UNSPECIFIED.value))
    if kind == "categoricalValueSpec" and scale != ScaleType.SCALE_TYPE_UNSPECIFIED:
        raise decoder.error(f"{path}.scaleType", "must be unset for a categorical parameter")
    if scale in (ScaleType.UNIT_LOG_SCALE, ScaleType.UNIT_REVERSE_LOG_SCALE):
        low = value_spec.values[0] if isinstance(value_spec, DiscreteValueSpec) else value_spec.min_value
        if low <= 0:
            raise decoder.error(f"{path}.scaleType", f"{scale.value} needs a strictly positive domain, but the lower bound is {low}")
    return scale


def _conditional_from_dict(c: Mapping[str, Any], pid: str, value_spec: Any, kind: str, decoder: Decoder,
                           cpath: str, seen: set[str]) -> ConditionalParameterSpec:
    """One conditionalParameterSpec (at `cpath`) of parent `pid`: the parent-values field that
    matches the parent's kind, values in its domain, and the child parameter."""
    parents = [k for k in ("parentDiscreteValues", "parentIntValues", "parentCategoricalValues") if k in c]
    if len(parents) != 1:
        raise decoder.error(cpath, "exactly one of [parentCategoricalValues, parentDiscreteValues, parentIntValues] is required")
    expected = _PARENT_VALUES[type(value_spec)][0] if type(value_spec) in _PARENT_VALUES else None
    if expected is None:
        raise decoder.error(cpath, "a DOUBLE parameter cannot have conditional children")
    if parents[0] != expected:
        raise decoder.error(f"{cpath}.{parents[0]}", f"the parent [{pid}] is {kind}: use [{expected}]")
    values = c[parents[0]].get("values", [])
    if not values:
        raise decoder.error(f"{cpath}.{parents[0]}.values", "must list at least one parent value")
    for val in values:
        if not _in_domain(value_spec, val):
            raise decoder.error(f"{cpath}.{parents[0]}.values", f"[{val}] is not in the domain of the parent parameter [{pid}]")
    if "parameterSpec" not in c:
        raise decoder.error(f"{cpath}.parameterSpec", "required field is missing")
    child = _parameter_from_dict(c["parameterSpec"], decoder, f"{cpath}.parameterSpec", seen)
    return ConditionalParameterSpec(parameter_spec=child, parent_values=tuple(values))


def _in_domain(spec: Any, value: Any) -> bool:
    if isinstance(spec, CategoricalValueSpec):
        return value in spec.values
    if isinstance(spec, DiscreteValueSpec):
        return any(abs(float(value) - v) < 1e-9 for v in spec.values)
    if isinstance(spec, IntegerValueSpec):
        return spec.min_value <= int(value) <= spec.max_value
    return False


def _metric_from_dict(m: Mapping[str, Any], decoder: Decoder, path: str) -> MetricSpec:
    """One `metrics[]` entry (`path` is its own, `studySpec.metrics[0]`); a `safetyConfig`
    makes it a safety metric, whose threshold is required and whose fraction lies in [0, 1]."""
    mid = m.get("metricId", "")
    if not mid:
        raise decoder.error(f"{path}.metricId", "required field is missing")
    if re.search(r"\s", mid):
        raise decoder.error(f"{path}.metricId", f"metricId [{mid}] must not contain whitespace")
    goal = m.get("goal", "GOAL_TYPE_UNSPECIFIED")
    metric = build(MetricSpec, m, metric_id=mid, goal=Goal.MINIMIZE if goal == "MINIMIZE" else Goal.MAXIMIZE)
    safety = metric.safety_config
    if safety is None:
        return metric
    threshold = safety.safety_threshold
    if threshold is None:
        raise decoder.error(f"{path}.safetyConfig.safetyThreshold", "required field is missing: a safety metric needs "
                            f"the threshold between safe and unsafe values of [{mid}]")
    if not math.isfinite(threshold):
        raise decoder.error(f"{path}.safetyConfig.safetyThreshold", f"must be a finite number, found [{threshold}]")
    fraction = safety.desired_min_safe_trials_fraction
    if fraction is not None and not 0.0 <= fraction <= 1.0:
        raise decoder.error(f"{path}.safetyConfig.desiredMinSafeTrialsFraction",
                            f"must be between 0.0 and 1.0 (a fraction of the trials), found [{fraction}]")
    return metric


def _metrics_from_dict(d: Mapping[str, Any], decoder: Decoder, path: str) -> tuple[tuple[MetricSpec, ...], tuple[MetricSpec, ...]]:
    """(the objectives, the safety metrics) of `studySpec.metrics`, in their order."""
    metrics = [_metric_from_dict(m, decoder, f"{path}.metrics[{i}]") for i, m in enumerate(d.get("metrics", []))]
    if not metrics:
        raise decoder.error(f"{path}.metrics", "at least one metric is required")
    ids = [m.metric_id for m in metrics]
    for i, mid in enumerate(ids):
        if mid in ids[:i]:
            raise decoder.error(f"{path}.metrics[{i}].metricId", f"metricId [{mid}] is listed twice; metric ids must be unique")
    objectives = tuple(m for m in metrics if m.safety_config is None)
    safety = tuple(m for m in metrics if m.safety_config is not None)
    if not objectives:
        raise decoder.error(f"{path}.metrics", f"every metric has a safetyConfig ({', '.join(ids)}); a safety metric "
                            "constrains the search, so add an objective metric (one without safetyConfig)")
    return objectives, safety


def study_spec_from_dict(d: Mapping[str, Any], decoder: Decoder, path: str = "studySpec") -> StudySpec:
    metrics, safety = _metrics_from_dict(d, decoder, path)
    params: list[ParameterSpec] = []
    seen: set[str] = set()
    for i, p in enumerate(d.get("parameters", [])):
        params.append(_parameter_from_dict(p, decoder, f"{path}.parameters[{i}]", seen))
    if not params:
        raise decoder.error(f"{path}.parameters", "at least one parameter is required")
    spec = build(StudySpec, d, metrics=metrics, parameters=tuple(params), safety_metrics=safety)
    check_algorithm(spec, lambda msg: decoder.error(f"{path}.algorithm", msg))
    if spec.algorithm == Algorithm.POPULATION_BASED_TRAINING or spec.population_based_training_spec is not None:
        from vcli.tuning.pbt import check_pbt

        check_pbt(spec, lambda field, msg: decoder.error(f"{path}.{'populationBasedTrainingSpec.' + field if field else 'algorithm'}", msg))
        if len(spec.metrics) > 1 or spec.safety_metrics:
            raise decoder.error(f"{path}.metrics", "Population Based Training ranks members by one metric; keep one "
                                "(and no safetyConfig: PBT does not search safely)")
        if spec.automated_stopping_spec is not None:
            raise decoder.error(f"{path}.algorithm", "Population Based Training stops and replaces members itself; "
                                "remove the automated stopping spec")
    if spec.automated_stopping_spec is not None:
        key = next(k for k in STOPPING_KEYS if k in d)
        check_stopping(spec, lambda field, msg: decoder.error(f"{path}.{key}{'.' + field if field else ''}", msg))
    return spec


#: The studySpec keys of the automated stopping oneof (Vertex's three, then vcli's own), from
#: the rules' registry (`vcli.tuning.stopping.RULES`).
STOPPING_KEYS = tuple(rule.key for rule in RULES.values())


def check_stopping(spec: StudySpec, error: Callable[[str, str], Exception]) -> None:
    """An automated stopping spec must make sense: one metric to judge by, bounds in order
    (each rule's own `check`). `error(field, message)` builds the exception; field "" means
    the spec as a whole."""
    check_rule(spec, error)


def check_algorithm(spec: StudySpec, error: Callable[[str], Exception]) -> None:
    """GRID_SEARCH needs INTEGER, CATEGORICAL or DISCRETE parameters only (as Vertex says)."""
    if spec.algorithm != Algorithm.GRID_SEARCH:
        return
    for p in iter_parameters(spec.parameters):
        if isinstance(p.value_spec, DoubleValueSpec):
            raise error(
                f"GRID_SEARCH needs every parameter to be INTEGER, CATEGORICAL or DISCRETE, but [{p.parameter_id}] is DOUBLE "
                "(use a discreteValueSpec with the values to try)"
            )


def hp_tuning_job_from_document(doc: Any, source: str, no_effect: list[str] | None = None,
                                ) -> tuple[HyperparameterTuningJobSpec, str | None, dict[str, str]]:
    """A `HyperparameterTuningJob` document -> (spec, displayName, labels). The paths of the
    fields it sets that change nothing locally are appended to `no_effect`."""
    decoder = Decoder(source)
    data = decoder.decode_message(doc, HyperparameterTuningJobSpec, "")
    if "studySpec" not in data:
        raise decoder.error("studySpec", "required field is missing")
    if "trialJobSpec" not in data:
        raise decoder.error("trialJobSpec", "required field is missing")
    study = study_spec_from_dict(data["studySpec"], decoder)
    trial_job = custom_job_spec_from_dict(data["trialJobSpec"], decoder, "trialJobSpec.")
    if not trial_job.worker_pool_specs:
        raise decoder.error("trialJobSpec.workerPoolSpecs", "at least one worker pool is required")
    spec = build(HyperparameterTuningJobSpec, data, study_spec=study, trial_job_spec=trial_job)
    for key in ("maxTrialCount", "parallelTrialCount"):
        if key in data and data[key] < 1:
            raise decoder.error(key, f"must be a positive integer, found [{data[key]}]")
    pbt = study.population_based_training_spec
    if pbt is not None and spec.max_trial_count < pbt.population_size:
        raise decoder.error("maxTrialCount", f"Population Based Training needs at least populationSize "
                            f"({pbt.population_size}) trials, found [{spec.max_trial_count}]; each exploit adds a trial, "
                            "so give room for them (e.g. 4 x populationSize)")
    if data.get("maxFailedTrialCount", 0) < 0:
        raise decoder.error("maxFailedTrialCount", "must not be negative")
    if problem := label_problem(data.get("labels") or {}):
        raise decoder.error("labels", problem)
    if no_effect is not None:  # displayName and labels are returned, so they are used
        no_effect.extend(p for p in decoder.no_effect if p not in ("displayName", "labels"))
    return spec, data.get("displayName"), data.get("labels", {})


def study_spec_from_stored(data: Mapping[str, Any]) -> StudySpec:
    """Inverse of `study_spec_to_dict` (for records read back from the store)."""
    decoder = Decoder("<store>")
    return study_spec_from_dict(decoder.decode_message(dict(data), StudySpec, "studySpec"), decoder)



# --------------------------------------------------------------------------- spec -> dict


def _parameter_to_dict(p: ParameterSpec, encode: Callable[[Any], Any]) -> dict[str, Any]:
    d = to_wire(p, _STUDY_OVERRIDES, exclude=("conditional_parameter_specs",))
    if p.conditional_parameter_specs:
        field, form = _PARENT_VALUES.get(type(p.value_spec), _PARENT_VALUES[IntegerValueSpec])
        d["conditionalParameterSpecs"] = [
            {"parameterSpec": _parameter_to_dict(c.parameter_spec, encode), field: {"values": [form(x) for x in c.parent_values]}}
            for c in p.conditional_parameter_specs
        ]
    return d


def _study_to_dict(spec: StudySpec, encode: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """A StudySpec's REST shape: its safety metrics are `metrics` entries, after the objectives."""
    d = to_wire(spec, _PARAMETER_OVERRIDES)
    if spec.safety_metrics:
        d["metrics"] = d["metrics"] + [to_wire(m) for m in spec.safety_metrics]
    return d


_PARAMETER_OVERRIDES: dict[type, Callable[..., Any]] = {ParameterSpec: _parameter_to_dict}
_STUDY_OVERRIDES: dict[type, Callable[..., Any]] = {**_PARAMETER_OVERRIDES, StudySpec: _study_to_dict}


def study_spec_to_dict(spec: StudySpec) -> dict[str, Any]:
    """The REST (camelCase) shape of a StudySpec, as the store and `describe` hold it."""
    return _study_to_dict(spec)


def hp_tuning_job_to_dict(spec: HyperparameterTuningJobSpec) -> dict[str, Any]:
    """The REST shape of a HyperparameterTuningJob's inputs (vcli's own limits left out)."""
    return to_wire(spec, {**JOB_OVERRIDES, **_STUDY_OVERRIDES})


# --------------------------------------------------------------------------- the document


def hp_tuning_document(
    *,
    config: str | None,
    parameter_specs: Sequence[str] | None,
    metrics: Sequence[str] | None,
    worker_pool_specs: Sequence[str] | None,
    algorithm: str | None,
    early_stopping: str | None = None,
    loaded: tuple[Any, str] | None = None,
) -> tuple[Any, str]:
    """The HyperparameterTuningJob document from --config and/or the vcli study flags (a flag
    replaces the config's field), and its source's name. Errors come in the flags' order:
    the config, --parameter-spec, --metric, --worker-pool-spec, --algorithm, --early-stopping,
    then a missing --config. `loaded`: --config's document and source, read already (a Katib
    Experiment converted, `vcli.codec.katib`)."""
    doc, source = _config_document(config, loaded) if config else ({}, "<flags>")
    if parameter_specs:
        _set_study_field(doc, "parameters", parameters_from_flags(parameter_specs))
    if metrics:
        _set_study_field(doc, "metrics", [metric_from_flag(m) for m in metrics])
    if worker_pool_specs:
        pools = worker_pools_from_flags([parse_worker_pool_spec(v) for v in worker_pool_specs])
        trial = dict(doc.get("trialJobSpec") or {})
        trial["workerPoolSpecs"] = custom_job_spec_to_dict(CustomJobSpec(worker_pool_specs=pools))["workerPoolSpecs"]
        doc["trialJobSpec"] = trial
    if algorithm:
        word = _algorithm_enum(algorithm)
        if "studySpec" in doc:  # none: the decoder names the missing studySpec
            _set_study_field(doc, "algorithm", word)
    if early_stopping is not None:
        study = {k: v for k, v in (doc.get("studySpec") or {}).items() if k not in STOPPING_KEYS}
        rule = early_stopping_from_flag(early_stopping)
        if rule is not None:
            study[rule[0]] = rule[1]
        doc["studySpec"] = study
    if not config and not (parameter_specs and metrics and worker_pool_specs):
        raise UsageError(
            "argument --config: Must be specified, unless the study is given by flags: "
            "--parameter-spec (one or more), --metric and --worker-pool-spec."
        )
    return doc, source


def _config_document(config: str, read: tuple[Any, str] | None = None) -> tuple[dict[str, Any], str]:
    """--config's mapping (a copy; {} for an empty file) and its source's name (`read`: the
    document and source read already)."""
    loaded, source = read if read is not None else load_document(config)
    refuse_whole_resource(loaded, source, "HyperparameterTuningJob")
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"Invalid value for [--config]: {source}: expected a HyperparameterTuningJob mapping")
    return dict(loaded or {}), source


def _set_study_field(doc: dict[str, Any], key: str, value: Any) -> None:
    """doc's studySpec (created if absent or null) with `key` set to `value`."""
    doc["studySpec"] = {**(doc.get("studySpec") or {}), key: value}


def _algorithm_enum(flag_word: str) -> str:
    """--algorithm's word (`random-search`) -> the studySpec enum name (`RANDOM_SEARCH`)."""
    choices = tuple(a.flag_word() for a in Algorithm)
    if flag_word not in choices:
        raise UsageError(f"argument --algorithm: Invalid choice: '{flag_word}'. Valid choices are [{', '.join(choices)}].")
    return flag_word.replace("-", "_").upper()


#: `--early-stopping` rule words -> (studySpec key, the keys the flag may set after the word).
EARLY_STOPPING_RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    name: (rule.key, rule.flag_keys) for name, rule in RULES.items()}


def early_stopping_from_flag(value: str) -> tuple[str, dict[str, Any]] | None:
    """`--early-stopping=asha,reduction-factor=3,max-step-count=27` -> ("ashaStoppingSpec", {...});
    `none` -> None (the flag removes the config's stopping spec)."""
    from vcli.codec.flags import parse_dict_arg
    from vcli.errors import InvalidValueError

    word, _, rest = value.partition(",")
    word = word.strip().lower()
    if word == "none":
        if rest:
            raise InvalidValueError("--early-stopping", f"[none] takes no settings, received: [{rest}].")
        return None
    if word not in EARLY_STOPPING_RULES:
        raise InvalidValueError("--early-stopping", f"Unknown rule [{word}]; valid rules are "
                                f"[{', '.join(['none', *EARLY_STOPPING_RULES])}], optionally followed by ,KEY=VALUE settings.")
    key, allowed = EARLY_STOPPING_RULES[word]
    raw = parse_dict_arg(rest, flag="--early-stopping", valid_keys=allowed) if rest else {}
    spec: dict[str, Any] = {}
    for k, v in raw.items():
        camel_key = re.sub(r"-(\w)", lambda m: m.group(1).upper(), k)
        if k == "use-elapsed-duration":
            if v.lower() not in ("true", "false"):
                raise InvalidValueError("--early-stopping", f"Key [{k}] must be true or false, received: {v}.")
            spec[camel_key] = v.lower() == "true"
        elif k == "learning-rate-parameter-name":
            spec[camel_key] = v
        else:
            try:
                spec[camel_key] = int(v)
            except ValueError:
                raise InvalidValueError("--early-stopping", f"Key [{k}] must be an integer, received: {v}.") from None
    return key, spec
