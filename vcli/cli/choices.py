"""The flags that take one of a fixed set of words, and how a wrong word is reported.

Each choice flag is typed with an Enum, so `--help` lists the words and shell completion
offers them. Typer (Click) rejects a wrong word itself, before the command runs; `VcliGroup`
turns that rejection into vcli's one line, `ERROR: (vcli.GROUP.COMMAND) argument --flag: ...`,
with the usage exit code 2, in the words gcloud (argparse) uses for the flag. Imports only
the standard library, typer and `vcli.spec` (dataclasses and enums).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from enum import Enum
from typing import IO, Any

import typer
from typer.core import TyperGroup

from vcli.enums import Algorithm, ExecutorKind, MeasurementSelectionType
from vcli.errors import ExitCode

#: `--algorithm`, in gcloud's spelling (the study's `algorithm` lower-cased with hyphens), one
#: word per `vcli.enums.Algorithm` (Vertex's three, then vcli's TPE and Population Based Training).
AlgorithmFlag = Enum(  # type: ignore[misc]
    "AlgorithmFlag", {a.name: a.flag_word() for a in Algorithm}, type=str, module=__name__)


class MeasurementSelection(str, Enum):
    """`--measurement-selection`: which measurement of a trial is its final one."""

    LAST = "last"
    BEST = "best"

    def spec_value(self) -> MeasurementSelectionType:
        if self is MeasurementSelection.BEST:
            return MeasurementSelectionType.BEST_MEASUREMENT
        return MeasurementSelectionType.LAST_MEASUREMENT


class BayesianBackend(str, Enum):
    """`--bayesian-backend`: vcli's own Gaussian process, or scikit-optimize's."""

    GP = "gp"
    SKOPT = "skopt"


class Verbosity(str, Enum):
    """`--verbosity`, gcloud's levels; `debug` prints tracebacks with errors."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"
    NONE = "none"


def _argparse(flag: str, choices: Sequence[str]) -> Callable[[str], str]:
    """gcloud's wording for a bad choice: choices sorted, in brackets."""
    return lambda value: f"argument {flag}: Invalid choice: '{value}'. Valid choices are [{', '.join(sorted(choices))}]."


def _values(enum: type[Enum]) -> list[str]:
    return [m.value for m in enum]


#: flag -> the message for a bad value; these texts are what vcli printed before the flags
#: were typed (`--executor` keeps argparse's own wording, as `vcli.control.wiring` uses it).
CHOICE_MESSAGES: dict[str, Callable[[str], str]] = {
    "--executor": lambda value: f"argument --executor: invalid choice: '{value}' (choose from {', '.join(_values(ExecutorKind))})",
    "--algorithm": _argparse("--algorithm", _values(AlgorithmFlag)),
    "--measurement-selection": _argparse("--measurement-selection", _values(MeasurementSelection)),
    "--bayesian-backend": _argparse("--bayesian-backend", _values(BayesianBackend)),
    "--verbosity": _argparse("--verbosity", _values(Verbosity)),
}


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The last value given for `flag` in `argv` (`--flag=V` or `--flag V`), as the parser takes it."""
    value = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
        elif arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def command_path(ctx: Any) -> str:
    """`vcli.custom-jobs.create` for the context of `vcli custom-jobs create` (however vcli was started)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return ".".join(["vcli", *reversed(names)])


class FlagError(typer.BadParameter):
    """A bad flag value found while parsing (a wrong word for a choice flag, an unreadable
    `--flags-file`), shown as vcli's one error line; exit 2 unless `exit_code` says otherwise."""

    exit_code = int(ExitCode.USAGE)

    def __init__(self, path: str, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        if exit_code is not None:
            self.exit_code = exit_code

    def format_message(self) -> str:
        return self.message

    def show(self, file: IO[Any] | None = None) -> None:
        """One line; a long value the user gave is cut (`support.shorten`), as in vcli's own
        errors: click repeats it whole (a 10,000-character `--max-trial-count`)."""
        from vcli.cli.support import shorten

        print(f"ERROR: ({self.path}) {shorten(self.message)}", file=file or sys.stderr, flush=True)


#: Click's UsageError (the base of BadParameter): typer bundles Click privately, so it is
#: reached through the public BadParameter rather than imported.
_UsageError: type[Exception] = typer.BadParameter.__mro__[1]


class VcliGroup(TyperGroup):
    """The root command group: renders Click's rejection of a choice flag as `FlagError`.

    Click checks choices while it parses a (sub)command's arguments, which happens inside the
    root group's `make_context` (the global flags) and `invoke` (every subcommand), so those two
    are where its `BadParameter` is caught. Click's other usage errors (an unknown flag or
    command, a missing argument) become one line too, with the usage exit code.
    """

    _argv: Sequence[str] = ()

    def main(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().main(args, *rest, **kwargs)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except _UsageError as e:
            raise self._one_line(e) from None

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _UsageError as e:
            raise self._one_line(e) from None

    def _one_line(self, e: Any) -> Any:
        if isinstance(e, typer.BadParameter):
            choice = self._choice_error(e)
            if choice is not e:
                return choice
        return self._usage_error(e)

    def _usage_error(self, e: Any) -> Any:
        """Click's other usage errors (an unknown flag, a missing argument) as one line, in
        gcloud's words where gcloud has them (`unrecognized arguments: --bogus`)."""
        if isinstance(e, FlagError) or e.ctx is None:
            return e
        if type(e).__name__ == "NoSuchOption":
            hint = f" (did you mean {' or '.join(sorted(e.possibilities or ())[:3])}?)" if e.possibilities else ""
            message = f"unrecognized arguments: {e.option_name}{hint}"
        elif type(e).__name__ == "NoArgsIsHelpError":  # `vcli`, `vcli custom-jobs`: gcloud's words, not the help
            names = ", ".join(sorted(n for n, c in getattr(e.ctx.command, "commands", {}).items() if not c.hidden))
            message = f"Command name argument expected. Available: {names}"
        elif type(e).__name__ == "MissingParameter" and getattr(getattr(e, "param", None), "param_type_name", "") == "argument":
            message = f"argument {e.param.name.upper()}: Must be specified."  # gcloud's words for a positional
        else:
            message = e.format_message()
        message += f" (see `{e.ctx.command_path} --help`)"
        return FlagError(command_path(e.ctx), message)

    def _choice_error(self, e: typer.BadParameter) -> typer.BadParameter:
        if isinstance(e, FlagError) or e.param is None:
            return e
        flag = next((o for o in e.param.opts if o in CHOICE_MESSAGES), None)
        value = flag_value(self._argv, flag) if flag else None
        if flag is None or value is None:
            return e
        return FlagError(command_path(e.ctx), CHOICE_MESSAGES[flag](value))
