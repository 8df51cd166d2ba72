"""Ctrl-C while a controller winds down: noted, never raised.

The first Ctrl-C (or SIGTERM, SIGHUP) cancels a job or study; the controller then stops its
replicas and writes their final states. A Ctrl-C raised in the middle of that (a third one,
0.1 s after the second) escaped the handler and left the job CANCELLING and its trials
STOPPING for good, with nobody to finish them. While `deferred()` is active, they only set a flag, which the
wind-down loop reads (`again()`) to kill the replicas at once instead of after the grace
period. Only the main thread receives signals; elsewhere (an SDK job in a thread) it is a
no-op and a KeyboardInterrupt cannot arrive.

A foreground vcli raises KeyboardInterrupt once (`raise_once`): a signal that arrives while
that first one unwinds to the wind-down, before `deferred()` took the signals over, is noted
too (`deferred()` counts it), never raised. Two signals 0-5 ms apart at start-up ended vcli
with "cancelled" while nothing had been stopped: the job PENDING, its trainers running.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator


class Deferred:
    """How many Ctrl-Cs arrived since the last `again()`, and the first signal's number (its
    code is the exit code: Ctrl-C then SIGTERM 5 ms later exited 143)."""

    def __init__(self) -> None:
        self.count = 0
        self.signum = 0

    def note(self, signum: int = 0, *_: Any) -> None:
        self.count += 1
        self.signum = self.signum or signum

    def again(self) -> bool:
        """True once per batch of Ctrl-Cs that arrived since the last call."""
        hit, self.count = self.count > 0, 0
        return hit


#: Signals that arrived after `raise_once`'s handler raised its KeyboardInterrupt.
_after_first = Deferred()
_raised: list[int] = []


def raise_once(on_first: Callable[[int], None] = lambda signum: None) -> Callable[[int, Any], None]:
    """A signal handler that raises KeyboardInterrupt for the first signal (after calling
    `on_first` with its number), and only notes the ones after it (see the module docstring).
    Making one starts afresh: nothing raised yet."""
    _raised.clear()
    _after_first.count = _after_first.signum = 0

    def handler(signum: int, frame: Any) -> None:
        if _raised:
            _after_first.note(signum)
            return
        _raised.append(signum)
        on_first(signum)
        raise KeyboardInterrupt

    return handler


def taken(signum: int) -> None:
    """A signal that a `deferred` block noted counts as `raise_once`'s first: later ones are
    only noted (a third signal after a study's start-up deferred two raised KeyboardInterrupt
    in the run, and its number became the exit code)."""
    if not _raised:
        _raised.append(signum)


#: What a wind-down defers: Ctrl-C, and SIGTERM and SIGHUP where they raise KeyboardInterrupt as
#: Ctrl-C does (a foreground vcli: `cli.support.interrupt_on_signals`). A second SIGTERM 50 ms
#: after the first (a process manager signalling vcli, then its group) ended vcli mid-wind-down,
#: the job CANCELLING for good and a trainer that ignores SIGTERM still running.
WIND_DOWN = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def deferred(signals: tuple[int, ...] = WIND_DOWN) -> Iterator[Deferred]:
    """`signals` set a flag instead of raising KeyboardInterrupt, until the block ends. Of the
    default ones, a SIGTERM or SIGHUP whose handler is the system's (an SDK program that set
    none) keeps it: the process ends as it would have."""
    flag = Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    if signals is WIND_DOWN:
        signals = tuple(sig for sig in signals if sig == signal.SIGINT or callable(signal.getsignal(sig)))
    previous = {sig: signal.signal(sig, flag.note) for sig in signals}
    if _after_first.count:  # signals that came before these handlers: a second Ctrl-C all the same
        flag.note(_after_first.signum)
        _after_first.count = _after_first.signum = 0
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
