"""A study's trials out of vcli: a CSV or Parquet table, or an Optuna study (`hp-tuning-jobs export`).

The table has one row per trial and these columns, in order: `trial_id`, `state`, one column
per parameter (`param_<id>`, empty where a conditional parameter was inactive), one per
metric (`metric_<id>`: the final measurement's value), `final_step`, `start_time`,
`end_time`, `duration_seconds`, `infeasible_reason`, `early_stopping_rule`, and for PBT
`pbt_member`, `pbt_parent_trial_id`, `pbt_start_step`. Values keep their types (integers as
integers); CSV writes them as text, Parquet with their types.

An Optuna storage URL (`sqlite:///study.db`, any URL `optuna.storages.RDBStorage` takes)
gets a new study named after the vcli study (its id appended), one direction per metric,
every trial with its parameters and distributions, its final values, and its intermediate
values by step (the first metric's), so `optuna-dashboard` and `optuna.load_study` show it.
SUCCEEDED trials are COMPLETE, INFEASIBLE ones FAIL, running ones RUNNING.

csv is the standard library's; pyarrow and optuna are imported only for their formats, and
a missing one is one line saying what to install.
"""

from __future__ import annotations

import csv
from datetime import datetime
from typing import Any, Mapping, Sequence

from vcli.errors import UsageError
from vcli.spec import (
    CategoricalValueSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    Goal,
    IntegerValueSpec,
    ParameterSpec,
    ScaleType,
    StudySpec,
    Trial,
    TrialState,
)


def table(spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial]) -> tuple[list[str], list[list[Any]]]:
    """(column names, rows): the trial table described in the module docstring."""
    pids = [p.parameter_id for p in params]
    mids = [m.metric_id for m in spec.metrics]
    pbt = any(t.lineage is not None for t in trials)
    columns = ["trial_id", "state", *[f"param_{p}" for p in pids], *[f"metric_{m}" for m in mids], "final_step",
               "start_time", "end_time", "duration_seconds", "infeasible_reason", "early_stopping_rule"]
    if pbt:
        columns += ["pbt_member", "pbt_parent_trial_id", "pbt_start_step"]
    rows = []
    for t in trials:
        final = t.final_measurement
        row: list[Any] = [t.id, t.state.value, *[t.parameters.get(p) for p in pids],
                          *[final.metrics.get(m) if final else None for m in mids],
                          final.step_count if final else None, t.start_time, t.end_time, _duration(t),
                          t.infeasible_reason, t.early_stopping_rule]
        if pbt:
            lin = t.lineage
            row += [lin.member if lin else None, lin.parent_trial_id if lin else None,
                    lin.start_step if lin and lin.parent_trial_id else None]
        rows.append(row)
    return columns, rows


def _duration(t: Trial) -> float | None:
    if not t.start_time or not t.end_time:
        return None
    start = datetime.fromisoformat(t.start_time.replace("Z", "+00:00"))
    end = datetime.fromisoformat(t.end_time.replace("Z", "+00:00"))
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
        raise UsageError("argument --to: writing Parquet needs pyarrow: pip install pyarrow") from None
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
    """Create an Optuna study at storage `url` holding `trials`; returns its name."""
    try:
        import optuna
    except ImportError:
        raise UsageError("argument --to: exporting to an Optuna storage needs optuna: pip install optuna") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = ["maximize" if m.goal == Goal.MAXIMIZE else "minimize" for m in spec.metrics]
    study = optuna.create_study(storage=url, study_name=study_name, directions=directions)
    first = spec.metrics[0].metric_id
    for t in trials:
        state = {TrialState.SUCCEEDED: optuna.trial.TrialState.COMPLETE,
                 TrialState.INFEASIBLE: optuna.trial.TrialState.FAIL}.get(t.state, optuna.trial.TrialState.RUNNING)
        values = None
        if state == optuna.trial.TrialState.COMPLETE and t.final_measurement is not None:
            values = [t.final_measurement.metrics[m.metric_id] for m in spec.metrics]
        study.add_trial(optuna.trial.create_trial(
            state=state,
            params=dict(t.parameters),
            distributions={k: _distribution(optuna, params[k]) for k in t.parameters if k in params},
            values=values,
            intermediate_values={m.step_count: m.metrics[first] for m in t.measurements if first in m.metrics},
            user_attrs={"vcli_trial_id": t.id, **({"infeasible_reason": t.infeasible_reason} if t.infeasible_reason else {})},
        ))
    return study_name


def _distribution(optuna: Any, p: ParameterSpec) -> Any:
    v = p.value_spec
    log = p.scale_type == ScaleType.UNIT_LOG_SCALE
    if isinstance(v, DoubleValueSpec):
        return optuna.distributions.FloatDistribution(v.min_value, v.max_value, log=log)
    if isinstance(v, IntegerValueSpec):
        return optuna.distributions.IntDistribution(v.min_value, v.max_value, log=log)
    if isinstance(v, DiscreteValueSpec):
        return optuna.distributions.CategoricalDistribution(tuple(float(x) for x in v.values))
    assert isinstance(v, CategoricalValueSpec)
    return optuna.distributions.CategoricalDistribution(tuple(v.values))
