"""gcloud's wide flags on every vcli group and command, in every position gcloud allows them.

gcloud accepts `--project`, `--quiet`, `--verbosity`, `--flags-file`, `--account`, ... before or
after the command group and the command (`vcli --project=p custom-jobs list`, `vcli custom-jobs
--verbosity=debug list`, `vcli custom-jobs list --project=p -q`). `GcloudGroup` and
`GcloudCommand` add these flags to every group's and command's parameters (so `--help` lists
them); each level takes its values off the parsed parameters before its callback runs and keeps
them in the invocation's context (`ctx.meta`); the command that runs then publishes them in
`vcli.cli.support.state` and prints ONE notice line naming the flags given that mean nothing on
a local run (`CLOUD_ONLY`). Never silently.

What they do here:
  - `--project` (and a command's `--region`): the project (and location) in the resource
    names this invocation prints; the default stays `local` (`support.shown`).
  - `--quiet/-q`: accepted; vcli never prompts, so it changes nothing.
  - `--verbosity`: `debug` adds tracebacks to errors; the last one given wins.
  - `--format` (anywhere: a command's own flag, also taken before the command) and
    `--flatten=KEY[,KEY]`: one output record per item of each listed list field.
  - `--flags-file=YAML_FILE`: gcloud's flags file (see `file_flags`), merged with the command
    line, which wins.
  - `--account`, `--billing-project`, `--configuration`, `--impersonate-service-account`,
    `--access-token-file`, `--log-http`, `--user-output-enabled`, `--trace-token`: accepted and
    named in the notice.

Imports only the standard library, typer and `vcli.cli.choices`/`support`; the YAML reader is
imported only when a flags file is given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, List, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from vcli.cli.choices import FlagError, VcliGroup, Verbosity, command_path
from vcli.cli.support import err, reset_state, state
from vcli.errors import ExitCode

FLAGS_FILE = "--flags-file"

#: Parameter names (of wide flags and of commands' own flags) that have no effect on a local
#: run: given on the command line or in a flags file, they are named in the notice.
CLOUD_ONLY = frozenset({
    "account", "billing_project", "configuration", "impersonate_service_account", "access_token_file",
    "log_http", "trace_token",
    "service_account", "network", "persistent_resource_id", "enable_web_access", "enable_dashboard_access",
    "kms_key", "kms_keyring", "kms_location", "kms_project", "allow_multiline_logs",
})

#: List- and dict-valued flags given once (gcloud's ArgList/ArgDict): a YAML list or mapping in
#: a flags file becomes one value, in gcloud's `^D^` syntax when an item holds a comma.
_ONE_VALUE_LISTS = frozenset({"--args", "--command", "--python-package-uris", "--labels"})


def _wide_flags(
    project: Annotated[Optional[str], typer.Option("--project", help="gcloud: the project in printed resource names (default: local).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="gcloud: disable prompts. vcli never prompts, so this changes nothing.")] = False,
    verbosity: Annotated[Optional[Verbosity], typer.Option("--verbosity", help="How much to say; debug shows tracebacks. [default: warning]")] = None,
    flags_file: Annotated[Optional[List[str]], typer.Option(FLAGS_FILE, metavar="YAML_FILE", help="gcloud: a YAML/JSON mapping of --flag: value (a list for a repeated flag); flags on the command line win.")] = None,
    account: Annotated[Optional[str], typer.Option("--account", help="gcloud: accepted; no effect on local runs.")] = None,
    billing_project: Annotated[Optional[str], typer.Option("--billing-project", help="gcloud: accepted; no effect on local runs.")] = None,
    configuration: Annotated[Optional[str], typer.Option("--configuration", help="gcloud: accepted; no effect on local runs.")] = None,
    impersonate_service_account: Annotated[Optional[str], typer.Option("--impersonate-service-account", help="gcloud: accepted; no effect on local runs.")] = None,
    access_token_file: Annotated[Optional[str], typer.Option("--access-token-file", help="gcloud: accepted; no effect on local runs.")] = None,
    log_http: Annotated[Optional[bool], typer.Option("--log-http/--no-log-http", help="gcloud: accepted; no effect on local runs.", show_default=False)] = None,
    user_output_enabled: Annotated[Optional[bool], typer.Option("--user-output-enabled/--no-user-output-enabled", help="gcloud: --no-user-output-enabled silences status lines on stderr (errors and --format output stay).", show_default=False)] = None,
    trace_token: Annotated[Optional[str], typer.Option("--trace-token", help="gcloud: accepted; no effect on local runs.")] = None,
    format_: Annotated[Optional[str], typer.Option("--format", help="gcloud: output format, e.g. json, yaml, value(name), table(...), csv(...).")] = None,
    flatten: Annotated[Optional[List[str]], typer.Option("--flatten", help="gcloud: one output record per item of these list fields, e.g. --flatten=trials.")] = None,
) -> None:
    """Declares the wide flags (typer builds the Click parameters from this signature)."""


_WIDE: list[Any] = []


def wide_params() -> list[Any]:
    """The Click parameters of the wide flags, built once and shared by every group and command."""
    if not _WIDE:
        holder = typer.Typer(add_completion=False)
        holder.command()(_wide_flags)
        _WIDE.extend(typer.main.get_command(holder).params)
    return _WIDE


@dataclass
class _Given:
    """The wide flags of this invocation, collected level by level (kept in `ctx.meta`)."""

    values: dict[str, Any] = field(default_factory=dict)
    cloud_only: dict[str, str] = field(default_factory=dict)  # parameter name -> flag as given
    files: list[str] = field(default_factory=list)


def _given(ctx: Any) -> _Given:
    return ctx.meta.setdefault("vcli.gcloud_flags", _Given())


def _from_command_line(ctx: Any, name: str) -> bool:
    return getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"


def _spelling(param: Any, value: Any, args: Sequence[str]) -> tuple[int, str]:
    """Where in `args` the flag first stands and how it was written (`--kms-key-name` or
    `--kms-key`); else (-1, its main name)."""
    names = [*param.opts, *param.secondary_opts]
    for i, arg in enumerate(args):
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if name in names:
            return i, name
    return -1, param.secondary_opts[0] if value is False and param.secondary_opts else param.opts[0]


def _take(ctx: Any, params: Sequence[Any], args: Sequence[str] = ()) -> None:
    """Move the wide flags out of `ctx.params` (the callbacks do not take them) into `_Given`,
    and note the cloud-only flags of `params` given on the command line."""
    given = _given(ctx)
    wide = {p.name for p in wide_params()}
    cloud_only: list[tuple[int, str, str]] = []
    for param in params:
        name = param.name
        if name not in ctx.params:
            continue
        value = ctx.params.pop(name) if name in wide else ctx.params[name]
        if not _from_command_line(ctx, name):
            continue
        if name == "flags_file":
            given.files.extend(value or ())
            continue
        if name in wide:
            given.values[name] = value
        if name in CLOUD_ONLY:
            cloud_only.append((*_spelling(param, value, args), name))
    for _, spelled, name in sorted(cloud_only, key=lambda c: c[0]):  # as the command line has them
        given.cloud_only[name] = spelled


def _with_wide(own: list[Any], help_option: Any) -> list[Any]:
    """`own` parameters, then the wide flags a command does not declare itself (`--format`)."""
    taken = {o for p in own for o in p.opts}
    wide = [p for p in wide_params() if not taken & set(p.opts)]
    return [*own, *wide, *([help_option] if help_option is not None else [])]


class GcloudGroup(TyperGroup):
    """A command group that also takes gcloud's wide flags (before its command's name)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _with_wide(self.params, self.get_help_option(ctx))

    def invoke(self, ctx: Any) -> Any:
        _take(ctx, self.get_params(ctx))
        return super().invoke(ctx)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The commands first; then the group's own options; the wide flags, the same on every
        group and command, as one line naming them (each command's `--help` describes them)."""
        self.format_commands(ctx, formatter)
        wide = {id(p) for p in wide_params()}
        own = [r for p in self.get_params(ctx) if id(p) not in wide and (r := p.get_help_record(ctx))]
        if own:
            with formatter.section("Options"):
                formatter.write_dl(own)
        with formatter.section("gcloud's wide flags (every command takes them)"):
            import textwrap

            text = ", ".join(p.opts[0] for p in wide_params()) + ". `vcli GROUP COMMAND --help` describes each."
            width = max(40, (formatter.width or 80) - formatter.current_indent)
            for line in textwrap.wrap(text, width, break_on_hyphens=False):  # a flag is never cut in two
                formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


class RootGroup(VcliGroup, GcloudGroup):
    """`vcli` itself: choice errors as one line (`VcliGroup`), the wide flags (`GcloudGroup`),
    and a fresh `support.state` for every invocation (tests run several in one process)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        reset_state()
        return super().main(*args, **kwargs)


class GcloudCommand(TyperCommand):
    """A command that also takes gcloud's wide flags, expands `--flags-file`, publishes the
    wide flags of the whole invocation and prints the cloud-only notice before it runs."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _with_wide(self.params, self.get_help_option(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        files, args = _pull_flags_files(args)
        files = [*_given(ctx).files, *files]
        if files and not ctx.resilient_parsing:
            args = [*self._file_args(ctx, files, args), *args]
        ctx.meta["vcli.gcloud_flags.args"] = list(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        _take(ctx, self.get_params(ctx), ctx.meta.get("vcli.gcloud_flags.args", ()))
        given = _given(ctx).values
        # `vcli --format=json custom-jobs list`: a --format given before the command is the
        # command's own, unless the command line gives one after it.
        if given.get("format_") and ctx.params.get("fmt") is None and "fmt" in ctx.params:
            ctx.params["fmt"] = given["format_"]
        from vcli.errors import VcliError

        try:
            _publish(ctx)
        except VcliError as e:  # a wide flag's value (--region): one line, its exit code
            err(f"ERROR: ({command_path(ctx)}) {e}")
            raise typer.Exit(int(e.exit_code)) from None
        return super().invoke(ctx)

    def _file_args(self, ctx: Any, files: Sequence[str], args: Sequence[str]) -> list[str]:
        """The arguments the flags files stand for, less the flags the command line gives."""
        by_flag = {o: p for p in self.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
        on_command_line = set(_given(ctx).values) | {
            by_flag[a.split("=", 1)[0]].name for a in _flag_words(args) if a.split("=", 1)[0] in by_flag
        }
        out: list[str] = []
        for flag, value in file_flags(files, path=command_path(ctx)):
            param = by_flag.get(flag)
            if param is not None and param.name in on_command_line:
                continue
            out.extend(_words(flag, value, param, command_path(ctx)))
        return out


def _publish(ctx: Any) -> None:
    """This invocation's wide flags into `support.state`; the notice on stderr."""
    given = _given(ctx)
    values = given.values
    if values.get("verbosity") is not None:
        state["verbosity"] = Verbosity(values["verbosity"]).value  # typer < 0.29 passes the word
    state["quiet"] = bool(values.get("quiet"))
    if values.get("user_output_enabled") is False:
        state["user_output"] = False
    state["flatten"] = [k for v in values.get("flatten") or () for k in v.split(",") if k]
    if values.get("project"):
        state["project"] = values["project"]
    if ctx.params.get("region"):
        from vcli.codec.flags import check_region

        state["region"] = check_region(ctx.params["region"])
    note_no_effect(list(given.cloud_only.values()))


def note_no_effect(names: list[str], where: str = "") -> None:
    """One `Note:` line naming the settings given that change nothing on a local run (none
    when `names` is empty or --verbosity is error or quieter)."""
    names = list(dict.fromkeys(names))
    if names and state["verbosity"] not in ("error", "critical", "none"):
        verb = "has" if len(names) == 1 else "have"
        err(f"Note: {where}{', '.join(names)} {verb} no effect on local runs.")


# --------------------------------------------------------------------------- --flags-file


def _flag_words(args: Sequence[str]) -> list[str]:
    out = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            out.append(arg)
    return out


def _pull_flags_files(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the `--flags-file` values among `args`, the other arguments), up to a `--`."""
    files: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg == FLAGS_FILE and i + 1 < len(args):
            files.append(args[i + 1])
            i += 2
            continue
        if arg.startswith(FLAGS_FILE + "="):
            files.append(arg[len(FLAGS_FILE) + 1:])
        else:
            rest.append(arg)
        i += 1
    return files, rest


def file_flags(files: Sequence[str], *, path: str = "vcli") -> list[tuple[str, Any]]:
    """The (flag, value) pairs of flags files, in order (a `--flags-file` inside one is expanded
    where it stands), as gcloud reads them: a YAML/JSON mapping of `--flag: value`, or a list of
    such mappings for flags given more than once. `path` names the command in errors."""
    pairs: list[tuple[str, Any]] = []
    for name in files:
        pairs.extend(_read(name, path, ()))
    return pairs


def _invalid(path: str, message: str) -> FlagError:
    return FlagError(path, f"Invalid value for [{FLAGS_FILE}]: {message}", exit_code=int(ExitCode.INVALID))


def _holds_nul(value: Any) -> bool:
    """Does a flags-file value (a scalar, or lists and mappings of them) hold a NUL character?"""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str) and "\0" in v:
            return True
    return False


def _read(name: str, path: str, seen: tuple[str, ...]) -> list[tuple[str, Any]]:
    from vcli.codec.yamlio import parse_yaml, read_text
    from vcli.errors import ConfigError

    real = os.path.realpath(os.path.expanduser(name))
    if real in seen:
        raise _invalid(path, f"[{name}] includes itself.")
    try:
        with open(real, "rb") as f:
            text = read_text(f, name, FLAGS_FILE)
    except ConfigError as e:
        raise _invalid(path, str(e).split("]: ", 1)[-1]) from None
    except IsADirectoryError:
        raise _invalid(path, f"[{name}] is a directory, not a file.") from None
    except FileNotFoundError:
        raise _invalid(path, f"file [{name}] does not exist.") from None
    except OSError as e:
        raise _invalid(path, f"cannot read [{name}]: {e.strerror}.") from None
    try:
        doc = parse_yaml(text, name, prefix="", keep_text=True)
    except ConfigError as e:
        raise _invalid(path, str(e)) from None
    pairs: list[tuple[str, Any]] = []
    for part in doc if isinstance(doc, list) else [doc]:
        if not isinstance(part, Mapping):
            raise _invalid(path, f"{name} must be a mapping of --flag: value (or a list of such mappings).")
        for flag, value in part.items():
            if not isinstance(flag, str) or not flag.startswith("-"):
                raise _invalid(path, f"{name}: [{flag}] is not a flag name (write it as --{flag}).")
            if flag == FLAGS_FILE:
                for inner in value if isinstance(value, list) else [value]:
                    pairs.extend(_read(str(inner), path, (*seen, real)))
            elif _holds_nul(value):  # argv cannot carry one; a command or argument with one fails at start
                raise _invalid(path, f"{name}: the value of [{flag}] contains a NUL character.")
            else:
                pairs.append((flag, value))
    return pairs


def _words(flag: str, value: Any, param: Any, path: str) -> list[str]:
    """The command-line words for one `flag: value` of a flags file."""
    if param is not None and getattr(param, "is_flag", False):
        if value is None or value is True:
            return [flag]
        if value is False:
            return [param.secondary_opts[0]] if param.secondary_opts else []
        raise _invalid(path, f"flag [{flag}] takes no value (true or false), not [{value}].")
    if value is None:
        raise _invalid(path, f"flag [{flag}] needs a value.")
    if isinstance(value, list) and flag not in _ONE_VALUE_LISTS:
        return [f"{flag}={_text(item)}" for item in value]  # a repeated flag: one word per item
    return [f"{flag}={_text(value)}"]


def _scalar(value: Any) -> str:
    from vcli.codec.yamlio import source_text

    return source_text(value)  # `--args: [2.10]` is 2.10, not 2.1


def _text(value: Any) -> str:
    """A YAML value as a gcloud flag value: a mapping as `k=v,...`, a list as `a,b` (`^D^`
    syntax when an item holds a comma); a list inside a mapping as `a;b` (`requirements=`)."""
    if isinstance(value, Mapping):
        items = [f"{k}={';'.join(map(_scalar, v)) if isinstance(v, list) else _scalar(v)}" for k, v in value.items()]
    elif isinstance(value, list):
        items = [_scalar(v) for v in value]
    else:
        return _scalar(value)
    if not any("," in item for item in items):
        return ",".join(items)
    delimiter = next((d for d in "|:#~!@+%" if not any(d in item for item in items)), None)
    if delimiter is None:
        return ",".join(items)
    return f"^{delimiter}^" + delimiter.join(items)
