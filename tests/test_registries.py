"""The early-stopping registry (`vcli.tuning.stopping.RULES`) is the one list of rules: the
codec's studySpec keys, the `--early-stopping` words and keys and its help come from it, every
registered rule decodes from YAML and from the flag, and a rule added to it is built,
described and checked through it (a toy rule, registered for the test only)."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Sequence

import pytest

from tests.helpers import vcli
from vcli.codec.schema import message_name
from vcli.codec.study import EARLY_STOPPING_RULES, STOPPING_KEYS, early_stopping_from_flag
from vcli.spec import AutomatedStoppingSpec, Goal, Measurement, MetricSpec, StudySpec, Trial, TrialState
from vcli.tuning import stopping
from vcli.tuning.stopping.base import RuleType


def test_every_registered_rule_is_a_studyspec_key_a_flag_word_and_in_the_help(tmp_path: Path) -> None:
    members = typing.get_args(AutomatedStoppingSpec)
    assert [rule.spec for rule in stopping.RULES.values()] == list(members)
    for name, rule in stopping.RULES.items():
        wire = message_name(rule.spec)
        assert rule.key == wire[:1].lower() + wire[1:], f"{name}: {rule.key} is not how the codec names {wire}"
        fields = {f.name.replace("_", "-") for f in dataclasses.fields(rule.spec)}
        assert set(rule.flag_keys) <= fields, f"{name}: flag keys {rule.flag_keys} not fields of {rule.spec}"
        assert early_stopping_from_flag(name) == (rule.key, {})
    assert STOPPING_KEYS == tuple(r.key for r in stopping.RULES.values())
    assert set(EARLY_STOPPING_RULES) == set(stopping.RULE_NAMES)
    help_text = vcli(tmp_path, "hp-tuning-jobs", "create", "--help", timeout=60).stdout
    unwrapped = "".join(help_text.split())  # the help wraps inside the word list
    assert "none|" + "|".join(stopping.RULE_NAMES) + "[,KEY=VALUE...]" in unwrapped
    from vcli.cli.hp_tuning_jobs import _EARLY_STOPPING_HELP

    keys = _EARLY_STOPPING_HELP.partition("(keys: ")[2].rstrip(").").split(", ")
    assert sorted(keys) == sorted({k for rule in stopping.RULES.values() for k in rule.flag_keys})


@dataclasses.dataclass(frozen=True, kw_only=True)
class _ToySpec:
    use_elapsed_duration: bool = False
    threshold: float = 1.0


class _ToyRule:
    """Stops a trial whose last value is above the threshold (minimising)."""

    name = "toy"

    def __init__(self, metric: MetricSpec, spec: _ToySpec) -> None:
        self.metric, self.threshold = metric.metric_id, spec.threshold

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None:
        last = trial.measurements[-1].metrics.get(self.metric) if trial.measurements else None
        return f"toy rule: {last} > {self.threshold}" if last is not None and last > self.threshold else None


def _toy_check(spec: _ToySpec, study: StudySpec, error: stopping.FieldError) -> None:
    if spec.threshold <= 0:
        raise error("threshold", f"must be positive, found [{spec.threshold}]")


TOY = RuleType(name="toy", key="toyStoppingSpec", spec=_ToySpec, flag_keys=("threshold",),
               build=lambda spec, metric: _ToyRule(metric, spec), describe=lambda spec: f"toy rule (above {spec.threshold})",
               check=_toy_check)


def test_a_rule_added_to_the_registry_is_built_described_and_checked_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(stopping.RULES, "toy", TOY)
    metric = MetricSpec(metric_id="loss", goal=Goal.MINIMIZE)
    rule = stopping.stopping_rule(_ToySpec(threshold=0.5), metric)
    assert stopping.describe_rule(_ToySpec(threshold=0.5)) == "toy rule (above 0.5)"
    trial = Trial(id="1", state=TrialState.ACTIVE, parameters={},
                  measurements=(Measurement(step_count=1, metrics={"loss": 0.9}),))
    assert rule.review(trial, [trial]) == "toy rule: 0.9 > 0.5"
    study = dataclasses.replace(_study(), automated_stopping_spec=_ToySpec(threshold=-1.0))  # type: ignore[arg-type]

    def error(field: str, message: str) -> Exception:
        return ValueError(f"{field}: {message}")

    with pytest.raises(ValueError, match=r"threshold: must be positive, found \[-1.0\]"):
        stopping.check_rule(study, error)
    monkeypatch.delitem(stopping.RULES, "toy")
    with pytest.raises(ValueError, match="unknown automated stopping spec"):
        stopping.stopping_rule(_ToySpec(), metric)


def _study() -> StudySpec:
    from vcli.spec import DoubleValueSpec, ParameterSpec

    return StudySpec(metrics=(MetricSpec(metric_id="loss", goal=Goal.MINIMIZE),),
                     parameters=(ParameterSpec(parameter_id="lr", value_spec=DoubleValueSpec(min_value=0.1, max_value=1.0)),))


# ----------------------------------------------------------------------------- algorithms


def test_every_algorithm_has_a_flag_word_and_a_suggester(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--algorithm` and the codec's choices come from `vcli.enums.Algorithm`; each algorithm
    but Vertex's default (the Bayesian backends) has a suggester in the registry, which
    `get_suggester` builds; a suggester registered for the test is built through it."""
    from vcli.cli.choices import AlgorithmFlag
    from vcli.enums import Algorithm
    from vcli.tuning import suggesters

    assert [f.value for f in AlgorithmFlag] == [a.flag_word() for a in Algorithm]
    assert set(suggesters.SUGGESTERS) | {Algorithm.ALGORITHM_UNSPECIFIED} == set(Algorithm)
    study = _study()
    for algorithm in suggesters.SUGGESTERS:
        if algorithm == Algorithm.GRID_SEARCH:
            continue  # a DOUBLE parameter is refused by grid search (the codec says so first)
        got = suggesters.get_suggester(dataclasses.replace(study, algorithm=algorithm), seed=1)
        assert got.ask(1), algorithm

    class Toy:
        def __init__(self, spec: StudySpec, seed: int | None = None) -> None:
            self.spec = spec

        def ask(self, count: int) -> list:
            return []

        def tell(self, trial: Trial) -> None:
            pass

    import sys
    import types

    module = types.ModuleType("vcli_test_toy_suggester")
    module.Toy = Toy  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(suggesters.SUGGESTERS, Algorithm.TPE, (module.__name__, "Toy"))
    assert isinstance(suggesters.get_suggester(dataclasses.replace(study, algorithm=Algorithm.TPE)), Toy)


def test_config_help_names_every_property() -> None:
    """`vcli config set --help` lists the properties without importing them; it names them all."""
    from vcli import properties
    from vcli.cli.config import PROPERTY_NAMES

    assert PROPERTY_NAMES.split(", ") == list(properties.KNOWN)
