"""What every early-stopping rule is: the `StoppingRule` protocol, and the `RuleType` each rule
module registers (its flag word, its studySpec key, its spec class, how to build, describe and
check it), from which the codec, the `--early-stopping` flag and its help are derived."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from vcli.spec import AutomatedStoppingSpec, MetricSpec, StudySpec, Trial

__all__ = ["FieldError", "RuleType", "StoppingRule"]

#: `error(field, message)` builds the exception for a bad field of the stopping spec (its
#: YAML name, camelCase; "" for the spec as a whole).
FieldError = Callable[[str, str], Exception]


class StoppingRule(Protocol):
    """Decides whether a running trial should stop early.

    ``review(trial, trials)`` returns None (keep running) or a one-line human reason. It never
    mutates the trials. Decisions depend only on the trials given, except for the rung
    bookkeeping of "asha"/"hyperband" documented on `AshaRule`.
    """

    name: str

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None: ...


def _no_check(stop: Any, study: StudySpec, error: FieldError) -> None:
    return None


@dataclass(frozen=True)
class RuleType:
    """One early-stopping rule, as the rest of vcli sees it.

    `name` is the `--early-stopping` word; `key` the studySpec key of Vertex's oneof (vcli's
    own rules add theirs); `spec` the dataclass that key decodes to; `flag_keys` the
    `--early-stopping=NAME,KEY=VALUE` keys (kebab-case of the spec's fields). `build(spec,
    metric)` makes the rule (ValueError for bounds that make no sense), `describe(spec)` is
    one line for logs and `describe`, `check(spec, study, error)` validates the spec against
    the study with the YAML field names (the codec calls it; raise `error(field, message)`).
    """

    name: str
    key: str
    spec: type
    flag_keys: tuple[str, ...]
    build: Callable[[Any, MetricSpec], StoppingRule]
    describe: Callable[[Any], str]
    check: Callable[[Any, StudySpec, FieldError], None] = _no_check

    def unit(self, spec: AutomatedStoppingSpec) -> str:
        return "seconds" if spec.use_elapsed_duration else "steps"
