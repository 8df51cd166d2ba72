"""What every vcli command group shares: the global flags' state, stderr messages, signal
handling for foreground runs, and the decorator that turns errors into one gcloud-style line
and an exit code. Imports only stdlib and typer, so every `vcli.cli` module can use it.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

#: gcloud's wide flags of the current invocation (`vcli.cli.gcloud_flags` sets them):
#: verbosity, quiet, --flatten keys, and project/region when given (see `shown`).
_DEFAULTS: dict[str, Any] = {"verbosity": "warning", "quiet": False, "project": None, "region": None, "flatten": [],
                             "user_output": True, "signal": None}
state: dict[str, Any] = dict(_DEFAULTS)

#: Where vcli's jobs live in the resource names it stores.
_STORED_PREFIX = "projects/local/locations/local/"


def reset_state() -> None:
    state.clear()
    state.update(_DEFAULTS)


def shown(value: Any) -> Any:
    """`value` (a resource name, or a resource with names in it) as this invocation prints it:
    stored names are `projects/local/locations/local/...`; `--project` and `--region` put
    their values there instead."""
    project, region = state.get("project"), state.get("region")
    if not project and not region:
        return value
    prefix = f"projects/{project or 'local'}/locations/{region or 'local'}/"

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return prefix + v[len(_STORED_PREFIX):] if v.startswith(_STORED_PREFIX) else v
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value)


def err(message: str) -> None:
    """A status line on stderr; `--no-user-output-enabled` silences them (as gcloud's does)
    but never an error line (`ERROR: ...`)."""
    if state.get("user_output", True) or message.startswith("ERROR: "):
        print(message, file=sys.stderr, flush=True)


def interrupt_on_signals() -> None:
    """SIGTERM/SIGHUP to a foreground vcli act like Ctrl-C: cancel, clean up, exit, with the
    shell's code for the signal (143, 129; 130 for Ctrl-C: `interrupted_code`)."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        state["signal"] = signum
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def interrupted_code() -> int:
    """The exit code of a run that was interrupted: 128 + the signal (SIGTERM 143, SIGHUP 129),
    130 for Ctrl-C (SIGINT)."""
    return 128 + state["signal"] if state.get("signal") else 130


#: Longest part of a user's value an error line repeats, and longest error line.
_LONGEST_VALUE = 200
_LONGEST_LINE = 2000


def shorten(message: str) -> str:
    """An error line that repeats what the user gave keeps it readable and one line: control
    characters are escaped (a newline in an id split the line; an escape sequence would
    reach the terminal), a word (or a bracketed value) of more than 200 characters is cut to
    its start and its length, and the line to 2000 characters (a 10,000-character value is
    never echoed back whole)."""
    import re

    def cut(m: re.Match[str]) -> str:
        text = m.group(0)
        return f"{text[:60]}... ({len(text)} characters)"

    from vcli.logs import printable

    out = printable(message)
    out = re.sub(r"[^\s\[\],]{" + str(_LONGEST_VALUE + 1) + ",}", cut, out)
    if len(out) > _LONGEST_LINE:
        out = f"{out[:_LONGEST_LINE - 40]}... ({len(out)} characters in all)"
    return out


def command(path: str) -> Callable[[F], F]:
    """Turn VcliErrors into `ERROR: (vcli.PATH) message` and their exit code; Ctrl-C into 130.

    `--verbosity=debug` prints the traceback too.
    """

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from vcli.errors import VcliError

            try:
                return fn(*args, **kwargs)
            except VcliError as e:
                if state["verbosity"] == "debug":
                    import traceback

                    traceback.print_exc()
                err(f"ERROR: (vcli.{path}) {shorten(str(e))}")
                raise typer.Exit(int(e.exit_code)) from None
            except KeyboardInterrupt:
                err(f"ERROR: (vcli.{path}) Interrupted.")
                raise typer.Exit(interrupted_code()) from None
            except BrokenPipeError:
                # The reader went away (`| head -1`): stop quietly, as `cat` would (SIGPIPE's
                # 141); stdout is pointed at /dev/null so that Python's exit flush stays quiet.
                import os

                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise typer.Exit(128 + 13) from None

        return wrapper  # type: ignore[return-value]

    return deco
