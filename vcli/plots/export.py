"""A study's trials out of vcli: a CSV or Parquet table, or an Optuna study (`hp-tuning-jobs export`).

The table has one row per trial and these columns, in order: `trial_id`, `state`, one column
per parameter (`param_<id>`, empty where a conditional parameter was inactive), one per
metric (`metric_<id>`: the final measurement's value), `final_step`, `start_time`,
`end_time`, `duration_seconds`, `infeasible_reason`, `early_stopping_rule`, for PBT
`pbt_member`, `pbt_parent_trial_id`, `pbt_start_step`, then `failure_class` (USER, RESOURCE,
INFRASTRUCTURE, TIMEOUT: why an INFEASIBLE trial failed) and `retry_of` (the trial a retry
runs again), and with safe search `safe` (False beyond a safety threshold; the safety metrics
have their `metric_<id>` columns after the objectives'). Values keep their types: INTEGER
parameters and whole DISCRETE values are integers (`16`, not `16.0`: the value the trainer
received as `--batch_size=16`), other numbers floats; CSV writes them as text, Parquet with
their types.

An Optuna storage URL (`sqlite:///study.db`, any URL `optuna.storages.RDBStorage` takes)
gets a new study named after the vcli study (its id appended), one direction per metric and
the metrics' ids as its metric names (`Study.set_metric_names`), and every trial with:

* its state: SUCCEEDED is COMPLETE, or PRUNED when an early-stopping rule stopped it (PBT's
  exploits included, rule "pbt"), with the final measurement as its value(s), as Optuna's
  own pruned trials keep their last intermediate value; INFEASIBLE is FAIL; ACTIVE and
  STOPPING are RUNNING; REQUESTED is WAITING;
* its real start and end (`datetime_start`, `datetime_complete`: the stored times, as the
  naive local times Optuna itself records), so durations and optuna-dashboard's timeline
  are the study's own;
* its parameters and their distributions (whole, evenly spaced DISCRETE values as an
  `IntDistribution` with a step, other DISCRETE values as a `CategoricalDistribution`);
* its intermediate values by step (the first metric's: Optuna keeps one per step);
* user attributes `vcli_trial_id`, and where they apply `infeasible_reason`,
  `early_stopping_rule`, `stop_reason`, `pbt_member`, `pbt_parent_trial_id`, `pbt_start_step`,
  `failure_class`, `retry_of`, and with safe search `safe` and each safety metric's value
  (`metric_<id>`).

csv is the standard library's; pyarrow and optuna are imported only for their formats, and
a missing one is one line saying what to install.
"""

from __future__ import annotations

import csv
import math
import warnings
from datetime import datetime
from typing import Any, Mapping, Sequence

from vcli.errors import InvalidValueError, MissingExtraError, UsageError
from vcli.plots.data import parse_time
from vcli.spec import (
    CategoricalValueSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    Goal,
    IntegerValueSpec,
    ParameterSpec,
    ParameterValue,
    ScaleType,
    StudySpec,
    Trial,
    TrialState,
)


def table(spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial]) -> tuple[list[str], list[list[Any]]]:
    """(column names, rows): the trial table described in the module docstring."""
    pids = [p.parameter_id for p in params]
    mids = [m.metric_id for m in (*spec.metrics, *spec.safety_metrics)]
    safety = bool(spec.safety_metrics)
    pbt = any(t.lineage is not None for t in trials)
    columns = ["trial_id", "state", *[f"param_{p}" for p in pids], *[f"metric_{m}" for m in mids], "final_step",
               "start_time", "end_time", "duration_seconds", "infeasible_reason", "early_stopping_rule"]
    if pbt:
        columns += ["pbt_member", "pbt_parent_trial_id", "pbt_start_step"]
    columns += ["failure_class", "retry_of", *(["safe"] if safety else [])]
    specs = {p.parameter_id: p for p in params}
    rows = []
    for t in trials:
        final = t.final_measurement
        row: list[Any] = [t.id, t.state.value, *[typed(specs[p], t.parameters[p]) if p in t.parameters else None for p in pids],
                          *[final.metrics.get(m) if final else None for m in mids],
                          final.step_count if final else None, t.start_time, t.end_time, _duration(t),
                          t.infeasible_reason, t.early_stopping_rule]
        if pbt:
            row += _lineage(t)
        rows.append([*row, t.failure_class, t.retry_of, *([t.safe] if safety else [])])  # a FailureClass is its text
    return columns, rows


def _lineage(t: Trial) -> list[Any]:
    """A PBT trial's `pbt_member`, `pbt_parent_trial_id`, `pbt_start_step` cells."""
    lin = t.lineage
    return [lin.member if lin else None, lin.parent_trial_id if lin else None,
            lin.start_step if lin and lin.parent_trial_id else None]


def typed(p: ParameterSpec, value: ParameterValue) -> ParameterValue:
    """A parameter's value with the type a table keeps: INTEGER as int, a whole DISCRETE
    value as int (as `--<id>=16` gave it to the trainer), another number as float, a
    category as is."""
    v = p.value_spec
    if isinstance(v, IntegerValueSpec):
        return int(value)
    if isinstance(v, DiscreteValueSpec):
        f = float(value)
        return int(f) if f.is_integer() else f
    if isinstance(v, DoubleValueSpec):
        return float(value)
    return value


def _duration(t: Trial) -> float | None:
    start, end = parse_time(t.start_time), parse_time(t.end_time)
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def write_csv(path: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows([["" if v is None else v for v in row] for row in rows])


def write_parquet(path: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtraError("Writing Parquet (--to)", "export", "pyarrow") from None
    data = {c: [row[i] for row in rows] for i, c in enumerate(columns)}
    arrays = {}
    for c, values in data.items():
        try:
            arrays[c] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types (a parameter of both kinds): as text
            arrays[c] = pa.array([None if v is None else str(v) for v in values])
    pq.write_table(pa.table(arrays), path)


def to_optuna(url: str, study_name: str, spec: StudySpec, params: Mapping[str, ParameterSpec],
              trials: Sequence[Trial]) -> str:
    """Create an Optuna study at storage `url` holding `trials` (module docstring); returns
    its name. A storage that already has a study of that name is a UsageError naming it."""
    check_lasting(url)
    try:
        import optuna
    except ImportError:
        raise MissingExtraError("Exporting to an Optuna storage (--to)", "export", "optuna") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shown, password = shown_url(url), _password(url)

    def line(e: BaseException) -> str:
        return masked(_first_line(e), url, password)

    directions = ["maximize" if m.goal == Goal.MAXIMIZE else "minimize" for m in spec.metrics]
    try:
        study = optuna.create_study(storage=url, study_name=study_name, directions=directions)
    except optuna.exceptions.DuplicatedStudyError:
        raise UsageError(f"argument --to: {shown} already has an Optuna study named [{study_name}]; "
                         "delete it (optuna delete-study) or export to another storage") from None
    except Exception as e:  # the storage's own errors: a bad URL, no driver, no such directory, refused
        raise InvalidValueError("--to", f"cannot open the Optuna storage {shown}: {line(e)}") from None
    now = datetime.now()
    frozen = [_frozen(optuna, spec, params, t, number, now) for number, t in enumerate(trials)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # set_metric_names is "experimental"
            study.set_metric_names([m.metric_id for m in spec.metrics])
        study.add_trials(frozen)
    except Exception as e:  # the storage failed while writing (a full disk, a dropped connection)
        raise InvalidValueError("--to", f"writing to the Optuna storage {shown} failed: {line(e)}") from None
    return study_name


def masked(text: str, url: str, password: str | None) -> str:
    """`text` (a storage's error) with the storage URL's password as ***: in the URL, after
    `user:`, and as a word of its own when it is long enough to be told from words (every
    `p` of the driver's message became *** for the password `p`, garbling it)."""
    import re

    if not password:
        return text
    text = text.replace(url, shown_url(url)).replace(f":{password}@", ":***@")
    if len(password) >= 4:
        text = re.sub(rf"(?<![\w]){re.escape(password)}(?![\w])", "***", text)
    return text


def _password(url: str) -> str | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password
    except ValueError:
        return None


def shown_url(url: str) -> str:
    """A storage URL as vcli prints it: its password, if any, as ***."""
    password = _password(url)
    if not password:
        return url
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    return f"{scheme}{sep}{userinfo.replace(':' + password, ':***', 1)}{at}{host}"


def check_lasting(url: str) -> None:
    """Refuse an Optuna storage that keeps nothing: an in-memory SQLite database (`sqlite://`,
    `sqlite:///`, `sqlite:///:memory:`) ends with vcli, and the export reported success."""
    scheme, _, rest = url.partition("://")
    if not scheme.lower().startswith("sqlite"):
        return
    database, _, query = rest.removeprefix("/").partition("?")
    if database in ("", ":memory:") or "mode=memory" in query:
        raise UsageError(f"argument --to: [{shown_url(url)}] is an in-memory SQLite database, which ends with vcli: "
                         "name a file, such as sqlite:///optuna.db")


def _first_line(e: BaseException) -> str:
    """An exception as one line: its type and its message's first line (SQLAlchemy's run to
    dozens of lines with the SQL and a link)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _frozen(optuna: Any, spec: StudySpec, params: Mapping[str, ParameterSpec], t: Trial, number: int, now: datetime) -> Any:
    """The vcli trial `t` as an Optuna FrozenTrial (module docstring). A finished trial without
    a stored end ends at its start; a started one without a start time starts at `now`."""
    states = optuna.trial.TrialState
    state, values = _state_and_values(optuna, spec, t)
    start = _local(t.start_time)
    end = _local(t.end_time)
    if state != states.WAITING and start is None:
        start = end or now
    if state.is_finished():
        end = max(end or start, start)
    else:
        end = None
    first = spec.metrics[0].metric_id
    intermediate = {m.step_count: v for m in t.measurements if (v := _number(m.metrics.get(first))) is not None}
    kept = {k: v for k, v in t.parameters.items() if k in params}
    return optuna.trial.FrozenTrial(
        number=number, state=state, value=None, values=values,
        datetime_start=start if state != states.WAITING else None, datetime_complete=end,
        params={k: _optuna_value(params[k], v) for k, v in kept.items()},
        distributions={k: _distribution(optuna, params[k]) for k in kept},
        user_attrs=_attrs(t, spec), system_attrs={}, intermediate_values=intermediate, trial_id=number,
    )


def _state_and_values(optuna: Any, spec: StudySpec, t: Trial) -> tuple[Any, list[float] | None]:
    """The Optuna state of `t` (module docstring) and its values, one per metric, for a
    COMPLETE or PRUNED trial with a number for each (else None)."""
    states = optuna.trial.TrialState
    state = {TrialState.SUCCEEDED: states.PRUNED if t.early_stopping_rule else states.COMPLETE,
             TrialState.INFEASIBLE: states.FAIL, TrialState.REQUESTED: states.WAITING}.get(t.state, states.RUNNING)
    final = t.final_measurement
    if state not in (states.COMPLETE, states.PRUNED) or final is None:
        return state, None
    found = [_number(final.metrics.get(m.metric_id)) for m in spec.metrics]
    if all(v is not None and not math.isnan(v) for v in found):
        return state, found  # type: ignore[return-value]
    # Optuna requires the values of a COMPLETE trial; vcli's result leaves such a trial out too
    return (states.FAIL if state == states.COMPLETE else state), None


def _attrs(t: Trial, spec: StudySpec) -> dict[str, Any]:
    attrs: dict[str, Any] = {"vcli_trial_id": t.id}
    if spec.safety_metrics and t.safe is not None:  # safe search; the safety metrics' values beside
        attrs["safe"] = t.safe
        final = t.final_measurement
        attrs.update({f"metric_{m.metric_id}": final.metrics.get(m.metric_id) for m in spec.safety_metrics
                      if final is not None and m.metric_id in final.metrics})
    for key, value in (("infeasible_reason", t.infeasible_reason), ("early_stopping_rule", t.early_stopping_rule),
                       ("stop_reason", t.stop_reason), ("failure_class", t.failure_class and t.failure_class.value),
                       ("retry_of", t.retry_of)):
        if value:
            attrs[key] = value
    if t.lineage is not None:
        attrs["pbt_member"] = t.lineage.member
        if t.lineage.parent_trial_id:
            attrs["pbt_parent_trial_id"] = t.lineage.parent_trial_id
            attrs["pbt_start_step"] = t.lineage.start_step
    return attrs


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _local(iso: str | None) -> datetime | None:
    """A stored UTC time as the naive local time Optuna records (`datetime.now()`)."""
    when = parse_time(iso)
    return when.astimezone().replace(tzinfo=None) if when is not None else None


def _whole_steps(values: Sequence[float]) -> int | None:
    """The step of DISCRETE values that are whole numbers evenly spaced (8, 16, 24), else None."""
    xs = sorted(set(values))
    if len(xs) < 2 or not all(float(x).is_integer() for x in xs):
        return None
    steps = {int(b - a) for a, b in zip(xs, xs[1:])}
    return steps.pop() if len(steps) == 1 else None


def _optuna_value(p: ParameterSpec, value: ParameterValue) -> ParameterValue:
    v = p.value_spec
    if isinstance(v, IntegerValueSpec) or (isinstance(v, DiscreteValueSpec) and _whole_steps(v.values)):
        return int(value)
    return typed(p, value)


def _distribution(optuna: Any, p: ParameterSpec) -> Any:
    v = p.value_spec
    log = p.scale_type == ScaleType.UNIT_LOG_SCALE
    if isinstance(v, DoubleValueSpec):
        return optuna.distributions.FloatDistribution(v.min_value, v.max_value, log=log)
    if isinstance(v, IntegerValueSpec):
        return optuna.distributions.IntDistribution(v.min_value, v.max_value, log=log)
    if isinstance(v, DiscreteValueSpec):
        step = _whole_steps(v.values)
        if step:
            return optuna.distributions.IntDistribution(int(min(v.values)), int(max(v.values)), step=step)
        return optuna.distributions.CategoricalDistribution(tuple(int(x) if float(x).is_integer() else float(x) for x in v.values))
    assert isinstance(v, CategoricalValueSpec)
    return optuna.distributions.CategoricalDistribution(tuple(v.values))
