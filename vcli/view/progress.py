"""Long work's steps, shown while it runs: drawing a report, and whatever else takes seconds.

`Steps(what, say)` is called with each step's name. On a terminal it keeps one status line,
rewritten in place with a spinner, the step and the seconds so far (rich's status); elsewhere
(CI logs, pipes) it prints one line per step through `say`, `What: step (at N s)`, so a log
shows where the time went. On a terminal, work whose steps all come within `QUIET_SECONDS` shows nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

__all__ = ["QUIET_SECONDS", "Steps"]

#: Work shorter than this shows no status line on a terminal (a flash is noise).
QUIET_SECONDS = 0.5


class Steps:
    """A context manager; call it with each step's name (module docstring)."""

    def __init__(self, what: str, say: Callable[[str], None], *, terminal: bool | None = None) -> None:
        self.what = what
        self.say = say
        self.terminal = sys.stderr.isatty() if terminal is None else terminal
        self._began = time.monotonic()
        self._status: Any = None

    def __enter__(self) -> Steps:
        return self

    def __call__(self, step: str) -> None:
        if not self.terminal:
            self.say(f"{self.what}: {step} (at {time.monotonic() - self._began:.1f} s)")
            return
        text = f"{self.what}: {step} ({time.monotonic() - self._began:.0f} s)"
        if self._status is None:
            if time.monotonic() - self._began < QUIET_SECONDS:
                return  # the first steps of quick work: no line at all
            from rich.console import Console

            self._status = Console(stderr=True).status(text)
            self._status.start()
        else:
            self._status.update(text)

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
