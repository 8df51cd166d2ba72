"""Ctrl-C while a controller winds down: noted, never raised.

The first Ctrl-C cancels a job or study; the controller then stops its replicas and writes
their final states. A Ctrl-C raised in the middle of that (a third one, 0.1 s after the
second) escaped the handler and left the job CANCELLING and its trials STOPPING for good,
with nobody to finish them. While `deferred()` is active, SIGINT only sets a flag, which the
wind-down loop reads (`again()`) to kill the replicas at once instead of after the grace
period. Only the main thread receives signals; elsewhere (an SDK job in a thread) it is a
no-op and a KeyboardInterrupt cannot arrive.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator


class Deferred:
    """How many Ctrl-Cs arrived since the last `again()` (and the last signal's number)."""

    def __init__(self) -> None:
        self.count = 0
        self.signum = 0

    def note(self, signum: int = 0, *_: Any) -> None:
        self.count += 1
        self.signum = signum

    def again(self) -> bool:
        """True once per batch of Ctrl-Cs that arrived since the last call."""
        hit, self.count = self.count > 0, 0
        return hit


@contextmanager
def deferred(signals: tuple[int, ...] = (signal.SIGINT,)) -> Iterator[Deferred]:
    """`signals` (SIGINT by default) set a flag instead of raising KeyboardInterrupt, until the
    block ends."""
    flag = Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {sig: signal.signal(sig, flag.note) for sig in signals}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
