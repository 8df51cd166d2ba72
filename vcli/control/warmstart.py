"""A study that starts from results it did not produce: `hp-tuning-jobs create --warm-start-from=SOURCE`.

SOURCE is one of:

- a vcli study of this home: its id or resource name (`projects/.../hyperparameterTuningJobs/ID`);
- a CSV file of `hp-tuning-jobs export`'s shape (`vcli.plots.export`): `param_<id>` and
  `metric_<id>` columns and, where there is one, `state` (rows other than SUCCEEDED are left out);
- an Optuna storage URL and a study name, `URL#STUDY` (`sqlite:///optuna.db#my-study`; the name
  may be left out when the storage holds one study): its COMPLETE trials.

Each trial of the source with a finite value of every metric of the new study (by metric id; an
Optuna study without metric names gives its values in the new study's metric order) is an
observation. An observation is taken when it gives, for every parameter the new study makes
active at it (a conditional parameter by its parent's value), a value inside the new study's
space: within [min, max], a whole number for an INTEGER, one of the listed values for a
DISCRETE or CATEGORICAL parameter. A parameter the source lacks altogether (one the new study
adds) is taken at its `defaultValue`, when it has one; parameters of the source that the new
study lacks are left out. Any other observation is skipped, and counted.

The observations taken are told to the suggester as prior observations (`SuggesterBase.prior`)
before it proposes anything; they are never trials of the new study (maxTrialCount and the
trial numbers do not count them). The study's record keeps them (`warmStartPriors`) and where
they came from (`warmStart`: source, observations, skipped), so a resumed or extended study
tells its suggester the same priors even once the source moved or changed.

Every problem with a source is one line naming `--warm-start-from`; optuna is imported here
alone, and only for an Optuna source.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from vcli.errors import InvalidValueError, UsageError
from vcli.spec import Algorithm, Measurement, ParameterValue, StudySpec, Trial, TrialState

if TYPE_CHECKING:
    from vcli.store import Store
    from vcli.tuning.columns import Node

__all__ = ["FLAG", "WarmStart", "prior_trial", "stored_priors", "take"]

FLAG = "--warm-start-from"
_RESOURCE = re.compile(r"projects/[^/]+/locations/[^/]+/hyperparameterTuningJobs/[^/]+")

#: One trial of a source: (its parameters as the source gives them, metric id -> value).
Observation = tuple[Mapping[str, Any], Mapping[str, Any]]


@dataclass(frozen=True)
class Source:
    """What a source holds: how it is shown, its parameter ids, its observations."""

    shown: str
    parameter_ids: tuple[str, ...]
    observations: list[Observation]


@dataclass(frozen=True)
class WarmStart:
    """The prior observations a new study takes from a source (module docstring)."""

    source: str
    priors: tuple[Trial, ...]
    skipped: int
    #: The source's parameters that the new study lacks (left out of every observation).
    ignored: tuple[str, ...] = ()
    #: The new study's parameters that the source lacks, taken at their defaultValue.
    defaulted: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """What the study's record keeps: `warmStart` (shown by describe) and the priors."""
        return {"warmStart": {"source": self.source, "observations": len(self.priors), "skipped": self.skipped},
                "warmStartPriors": [{"parameters": dict(t.parameters),
                                     "metrics": dict(t.final_measurement.metrics if t.final_measurement else {})}
                                    for t in self.priors]}

    def line(self, algorithm: Algorithm) -> str:
        """The one line `create` prints about it."""
        text = (f"Warm start from [{self.source}]: {len(self.priors)} prior observation(s) told to the suggester "
                "before its first suggestion (no trials of this study)")
        if self.skipped:
            text += f"; {self.skipped} skipped (a parameter missing, or a value outside this study's space)"
        if self.ignored:
            text += f"; parameters this study lacks, left out: {', '.join(self.ignored)}"
        if self.defaulted:
            text += f"; parameters the source lacks, at their defaultValue: {', '.join(self.defaulted)}"
        if algorithm in (Algorithm.RANDOM_SEARCH, Algorithm.GRID_SEARCH):
            text += f". {algorithm.value} uses no observations: they change none of its points"
        return text + "."


def prior_trial(number: int, parameters: Mapping[str, ParameterValue], metrics: Mapping[str, float]) -> Trial:
    """A prior observation as the suggesters take it: a SUCCEEDED trial `prior-N`."""
    return Trial(id=f"prior-{number}", parameters=dict(parameters), state=TrialState.SUCCEEDED,
                 final_measurement=Measurement(step_count=0, metrics=dict(metrics)))


def stored_priors(record: Mapping[str, Any]) -> tuple[Trial, ...]:
    """The priors a study's record keeps (none for a study without a warm start)."""
    return tuple(prior_trial(i, p.get("parameters") or {}, p.get("metrics") or {})
                 for i, p in enumerate(record.get("warmStartPriors") or (), 1))


def take(text: str, study_spec: StudySpec, open_store: Callable[[], Store]) -> WarmStart:
    """The warm start of a new study `study_spec` from the source `text` (module docstring);
    `InvalidValueError` naming the flag for a source that cannot give one."""
    if study_spec.population_based_training_spec is not None:
        raise UsageError(f"argument {FLAG}: Population Based Training starts its own population from scratch; "
                         "a warm start is for the other algorithms.")
    from vcli.tuning.space import Space

    try:
        space = Space(study_spec.parameters)
    except ValueError as e:  # what the suggester would reject too
        raise InvalidValueError("--config", str(e)) from None
    from vcli.codec import iter_parameters

    metric_ids = tuple(m.metric_id for m in study_spec.metrics)
    defaults = {p.parameter_id: p.value_spec.default_value for p in iter_parameters(study_spec.parameters)
                if p.value_spec.default_value is not None}
    return _matched(read(text, metric_ids, open_store), space, metric_ids, defaults)


def read(text: str, metric_ids: Sequence[str], open_store: Callable[[], Store]) -> Source:
    """The source `text` names: an Optuna storage (a URL), a vcli study (an id or resource
    name that is no file), else a CSV file."""
    if "://" in text:
        return _from_optuna(text, metric_ids)
    if _RESOURCE.fullmatch(text) or not (os.path.exists(text) or "/" in text or text.lower().endswith(".csv")):
        return _from_study(text, metric_ids, open_store)
    return _from_csv(text, metric_ids)


# --------------------------------------------------------------------------- sources


def _from_study(text: str, metric_ids: Sequence[str], open_store: Callable[[], Store]) -> Source:
    from vcli import codec
    from vcli.enums import JobKind
    from vcli.store import parse_job_ref

    store = open_store()
    row = store.get_job(parse_job_ref(text))
    if row is None or row.kind != JobKind.HYPERPARAMETER_TUNING_JOB.value:
        raise InvalidValueError(FLAG, f"[{text}] is neither a study of this vcli home (`vcli hp-tuning-jobs list`) nor a "
                                      "file (a CSV of `hp-tuning-jobs export`), nor an Optuna storage URL#STUDY.")
    spec = codec.study_spec_from_stored(row.record["studySpec"])
    _check_metrics(f"The study [{row.id}]", metric_ids, [m.metric_id for m in spec.metrics])
    observations: list[Observation] = [(t.parameters, t.final_measurement.metrics) for t in store.trials(row.id)
                                       if t.state == TrialState.SUCCEEDED and t.final_measurement is not None]
    return Source(row.name, tuple(p.parameter_id for p in codec.iter_parameters(spec.parameters)), observations)


def _from_csv(path: str, metric_ids: Sequence[str]) -> Source:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            columns = list(reader.fieldnames or ())
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else f"not a CSV file ({e})"
        raise InvalidValueError(FLAG, f"cannot read [{path}]: {why}.") from None
    if not columns:
        raise InvalidValueError(FLAG, f"[{path}] is empty: a CSV of `vcli hp-tuning-jobs export --to=trials.csv` starts "
                                      "with its header row.")
    _check_metrics(f"[{path}]", metric_ids, [c.removeprefix("metric_") for c in columns if c.startswith("metric_")],
                   column="metric_")
    params = tuple(c.removeprefix("param_") for c in columns if c.startswith("param_"))
    observations: list[Observation] = []
    for row in rows:
        if row.get("state") not in (None, "", TrialState.SUCCEEDED.value):
            continue
        observations.append(({p: row[f"param_{p}"] for p in params if row.get(f"param_{p}") not in (None, "")},
                             {m: row.get(f"metric_{m}") for m in metric_ids}))
    return Source(path, params, observations)


def _from_optuna(text: str, metric_ids: Sequence[str]) -> Source:
    from vcli.plots.export import masked, shown_url

    url, _, name = text.rpartition("#") if "#" in text else (text, "", "")
    shown = shown_url(url)
    _check_sqlite(url, shown)
    try:
        import optuna
    except ImportError:
        from vcli.errors import MissingExtraError

        raise MissingExtraError(f"Reading an Optuna storage ({FLAG})", "export", "optuna") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        names = optuna.study.get_all_study_names(storage=url)
        name = _study_name(names, name, shown)
        study = optuna.load_study(study_name=name, storage=url)
        trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        given = study.metric_names or list(metric_ids[:len(study.directions)])
    except InvalidValueError:
        raise
    except Exception as e:  # the storage's own errors: a bad URL, no driver, a version it cannot read
        first = (str(e).strip().splitlines() or [""])[0]
        raise InvalidValueError(FLAG, f"cannot read the Optuna storage {shown}: "
                                      f"{masked(f'{type(e).__name__}: {first}', url, _password(url))}") from None
    _check_metrics(f"The Optuna study [{name}]", metric_ids, list(given))
    observations: list[Observation] = [(t.params, dict(zip(given, t.values or ()))) for t in trials]
    params = tuple(sorted({p for t in trials for p in t.params}))
    return Source(f"{shown}#{name}", params, observations)


def _study_name(names: Sequence[str], name: str, shown: str) -> str:
    """The study `URL#NAME` names, or the storage's only one; one line otherwise."""
    listed = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
    if not name:
        if len(names) == 1:
            return names[0]
        raise InvalidValueError(FLAG, f"{shown} holds {len(names)} Optuna studies ({listed or 'none'}): name one as "
                                      f"{shown}#STUDY.")
    if name not in names:
        raise InvalidValueError(FLAG, f"{shown} has no Optuna study named [{name}] (its studies: {listed or 'none'}).")
    return name


def _check_sqlite(url: str, shown: str) -> None:
    """A SQLite storage must be a file that holds Optuna's tables: opening another creates it,
    or adds those tables to it."""
    import sqlite3

    scheme, _, rest = url.partition("://")
    if not scheme.lower().startswith("sqlite"):
        return
    path = rest.removeprefix("/").partition("?")[0]
    if not path or path == ":memory:" or not os.path.isfile(path):
        raise InvalidValueError(FLAG, f"{shown} names no SQLite file ({path or 'an in-memory database'} is not one).")
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'studies'").fetchone()
    except sqlite3.Error as e:
        raise InvalidValueError(FLAG, f"cannot read the SQLite file [{path}]: {e}.") from None
    if found is None:
        raise InvalidValueError(FLAG, f"[{path}] is a SQLite file without Optuna's tables: not an Optuna storage.")


def _password(url: str) -> str | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password
    except ValueError:
        return None


def _check_metrics(what: str, wanted: Sequence[str], have: Sequence[str], column: str = "") -> None:
    missing = [m for m in wanted if m not in have]
    if missing:
        its = ", ".join(f"{column}{m}" for m in have) or "none"
        raise InvalidValueError(FLAG, f"{what} has no {'column ' if column else 'metric '}[{column}{missing[0]}] (the value "
                                      f"of this study's metric [{missing[0]}]; its {'metric columns' if column else 'metrics'}"
                                      f": {its}).")


# --------------------------------------------------------------------------- matching


def _matched(source: Source, space: Any, metric_ids: Sequence[str], defaults: Mapping[str, Any]) -> WarmStart:
    """The observations of `source` that fit `space` (a `vcli.tuning.space.Space`), as priors;
    `defaults`: the defaultValue of the new study's parameters that have one."""
    ours = [n.parameter_id for n in space.nodes]
    if not set(ours) & set(source.parameter_ids):
        raise InvalidValueError(FLAG, f"{source.shown} shares no parameter with this study (it has: "
                                      f"{', '.join(source.parameter_ids) or 'none'}; this study: {', '.join(ours)}).")
    valued = _valued(source, metric_ids)
    defaults = {p: v for p, v in defaults.items() if p not in source.parameter_ids}
    priors = _priors(space, valued, defaults)
    if not priors:
        raise InvalidValueError(FLAG, f"none of the {len(valued)} observation(s) of {source.shown} fits this study's space "
                                      "(each lacks a parameter this study makes active, or has a value outside it).")
    used = {p for t in priors for p in t.parameters}
    return WarmStart(source.shown, priors, len(valued) - len(priors),
                     ignored=tuple(p for p in source.parameter_ids if p not in ours),
                     defaulted=tuple(p for p in ours if p in defaults and p in used))


def _priors(space: Any, valued: Sequence[tuple[Mapping[str, Any], dict[str, float]]],
            defaults: Mapping[str, Any]) -> tuple[Trial, ...]:
    """The valued observations that fit `space` (a parameter missing taken at its default), as priors."""
    fitted = [(point, values) for params, values in valued if (point := _fitted(space, {**defaults, **params})) is not None]
    return tuple(prior_trial(i, point, values) for i, (point, values) in enumerate(fitted, 1))


def _valued(source: Source, metric_ids: Sequence[str]) -> list[tuple[Mapping[str, Any], dict[str, float]]]:
    """The observations of `source` with a finite value of every metric; one line if none has."""
    valued = [(params, values) for params, given in source.observations
              if (values := _values(given, metric_ids)) is not None]
    if not valued:
        raise InvalidValueError(FLAG, f"{source.shown} has no trial with a value of [{', '.join(metric_ids)}]: nothing to "
                                      "start from.")
    return valued


def _values(metrics: Mapping[str, Any], metric_ids: Sequence[str]) -> dict[str, float] | None:
    """A finite value of every metric, or None."""
    out = {}
    for m in metric_ids:
        v = _number(metrics.get(m))
        if v is None or not math.isfinite(v):
            return None
        out[m] = v
    return out


def _fitted(space: Any, params: Mapping[str, Any]) -> dict[str, ParameterValue] | None:
    """`params` as a point of `space`: every parameter active there, each inside it; else None."""
    taken: dict[str, ParameterValue] = {}
    for col, node in enumerate(space.nodes):
        if not space.is_active(col, taken):
            continue
        value = _fit(node, params.get(node.parameter_id))
        if value is None:
            return None
        taken[node.parameter_id] = value
    return taken


def _fit(node: Node, raw: Any) -> ParameterValue | None:
    """`raw` as a value of `node`'s parameter, or None when it is none of its values."""
    from vcli.tuning.columns import CATEGORICAL, DISCRETE, INTEGER

    if raw is None or raw == "":
        return None
    if node.kind == CATEGORICAL:
        return str(raw) if str(raw) in node.values else None
    x = _number(raw)
    if x is None or not math.isfinite(x):
        return None
    if node.kind == INTEGER:
        return int(x) if x.is_integer() and node.int_lo <= x <= node.int_hi else None
    if node.kind == DISCRETE:
        return next((float(v) for v in node.values if math.isclose(v, x, rel_tol=1e-9, abs_tol=1e-12)), None)
    return x if node.lo <= x <= node.hi else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
