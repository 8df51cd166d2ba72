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

#: Global flags of the current invocation (set by the app callback).
state: dict[str, Any] = {"verbosity": "warning"}


def err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def interrupt_on_signals() -> None:
    """SIGTERM/SIGHUP to a foreground vcli act like Ctrl-C: cancel, clean up, exit."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def command(path: str) -> Callable[[F], F]:
    """Turn VcliErrors into `ERROR: (vcli.PATH) message` and their exit code; Ctrl-C into 130.

    `--verbosity=debug` prints the traceback too.
    """

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from vcli.errors import ExitCode, VcliError

            try:
                return fn(*args, **kwargs)
            except VcliError as e:
                if state["verbosity"] == "debug":
                    import traceback

                    traceback.print_exc()
                err(f"ERROR: (vcli.{path}) {e}")
                raise typer.Exit(int(e.exit_code)) from None
            except KeyboardInterrupt:
                err(f"ERROR: (vcli.{path}) Interrupted.")
                raise typer.Exit(int(ExitCode.INTERRUPTED)) from None

        return wrapper  # type: ignore[return-value]

    return deco
