"""What every vcli command group shares: the global flags' state, stderr messages, signal
handling for foreground runs, and the decorator that turns errors into one gcloud-style line
and an exit code. Imports only stdlib and typer, so every `vcli.cli` module can use it.
"""

from __future__ import annotations

import errno
import functools
import sys
from typing import Any, Callable, NoReturn, TypeVar

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


#: How long a running job's or study's controller waits for a store another process keeps
#: locked before it gives up (and fails the job): SQLite's own 30 s stopped running trainers.
STORE_LOCK_PATIENCE_SECONDS = 600.0


class LossyStream:
    """A console stream whose reader may go away (`create ... | head -1`) or whose disk may
    fill (`> /dev/full`): the first write that fails points its file descriptor at /dev/null
    and nothing after it fails. A job's controller must never die of its console: it did,
    mid-job, leaving the job RUNNING with nobody driving it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        #: The error that lost the console, if one did.
        self.lost: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except OSError as e:
            self._lose(e)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self._lose(e)
            try:
                self._stream.flush()  # what was buffered goes to /dev/null now
            except OSError:
                pass

    def _lose(self, error: OSError) -> None:
        if self.lost is None:
            self.lost = error
            import os

            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
            except (OSError, ValueError):
                pass
            if error.errno != errno.EPIPE and self is not sys.stderr:  # a reader that left wants no more
                err(f"WARNING: (vcli) the output cannot be written ({error.strerror}); the run goes on without it.")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def keep_console() -> None:
    """From now on a failing stdout or stderr never ends this process (`LossyStream`)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, LossyStream):
            setattr(sys, name, LossyStream(stream))


def interrupt_on_signals() -> None:
    """SIGTERM/SIGHUP to a foreground vcli act like Ctrl-C: cancel, clean up, exit, with the
    shell's code for the signal (143, 129; 130 for Ctrl-C: `interrupted_code`). A foreground
    run also keeps going when its console stops taking output (`keep_console`), and when
    another process keeps vcli's store locked for up to 10 minutes (`wait_out_locks`)."""
    import signal

    from vcli.control.interrupts import raise_once
    from vcli.store_tx import wait_out_locks

    keep_console()
    wait_out_locks(STORE_LOCK_PATIENCE_SECONDS)

    def first(signum: int) -> None:
        state["signal"] = None if signum == signal.SIGINT else signum

    # Ctrl-C too: only the first signal raises (`raise_once`), so its code is the exit code.
    handler = raise_once(first)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
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


#: Errors of a write to a stream that cannot take more (a full disk, a dead terminal). vcli's
#: own files report these as StoreError (exit 7) before they get this far.
OUTPUT_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO))


def _quiet_stdout() -> None:
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


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
                _quiet_stdout()
                raise typer.Exit(128 + 13) from None
            except OSError as e:
                if e.errno not in OUTPUT_ERRNOS:
                    internal_error(path, e)
                _quiet_stdout()  # stdout on a full disk (`> /dev/full`): one line, not a traceback
                err(f"ERROR: (vcli.{path}) cannot write the output: {e.strerror or e}.")
                raise typer.Exit(1) from None
            except Exception as e:
                from typer._click.exceptions import ClickException  # typer carries its own Click

                if isinstance(e, (typer.Exit, typer.Abort, ClickException)):
                    raise  # an exit code or usage error the command chose
                internal_error(path, e)

        return wrapper  # type: ignore[return-value]

    return deco


def whole_writes() -> None:
    """Give stdout and stderr a buffered layer when they have none: under PYTHONUNBUFFERED (the
    Dockerfile sets it) the text layer wrote straight to the file, and a pipe whose reader went
    away took the first 64 KiB of a big `--format=json`, the rest was dropped silently and vcli
    exited 0. A buffered layer writes everything or raises BrokenPipeError (exit 141).
    Line-buffered, so lines still go out as they are printed."""
    import io

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        raw = getattr(stream, "buffer", None)
        if isinstance(stream, io.TextIOWrapper) and isinstance(raw, io.RawIOBase):
            setattr(sys, name, io.TextIOWrapper(io.BufferedWriter(raw), encoding=stream.encoding, errors=stream.errors,
                                                line_buffering=True))


def internal_error(path: str, error: BaseException) -> NoReturn:
    """A bug in vcli (an exception nothing expected): one line naming it and the file that
    keeps its traceback (`$VCLI_HOME/crashes/`, else the temp folder), exit 70; the job or
    study it ran was stopped and recorded FAILED by its controller. `--verbosity=debug`
    prints the traceback too."""
    import traceback

    text = traceback.format_exc()
    if state["verbosity"] == "debug":
        sys.stderr.write(text)
    where = _keep_traceback(text)
    kept = f"; its traceback is in {where}" if where else ""
    err(f"ERROR: (vcli.{path}) internal error, a bug in vcli: {type(error).__name__}: {shorten(str(error))}{kept}")
    raise typer.Exit(70) from None


def _keep_traceback(text: str) -> str | None:
    import os
    import tempfile
    import time

    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{os.urandom(3).hex()}.txt"
    try:
        from vcli.store import default_home

        folder = default_home() / "crashes"
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = str(folder / name)
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
        return path
    except Exception:  # the home is what failed, perhaps: the temp folder then
        try:
            fd, path = tempfile.mkstemp(prefix="vcli-crash-", suffix=".txt")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            return path
        except OSError:
            return None
