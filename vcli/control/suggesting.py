"""Where a study's next trials come from, without the controller ever waiting on a model.

A model-based suggester (vcli's GP, TPE, scikit-optimize) takes from tens of milliseconds to
seconds per ask, more on a machine whose cores feed its GPUs. `Apart` runs it in a worker
process of its own: the controller tells it every trial as it starts and ends, and the worker
keeps a batch of next points ready (`SuggesterBase.preview`, running trials and the batch's
earlier points counted as pending, as a batch ask counts them) before a slot frees. Polling,
early stopping and the live view never wait for it.

When a slot is free the controller takes, in this order:

1. the worker's batch, if it was computed with every trial told so far (what an ask in the
   controller would have returned: a resumed study replays to the same points);
2. after waiting up to `wait` seconds (`tuning/suggestion-wait`, default `DEFAULT_WAIT`) for
   such a batch, or at once when the worker's recent answers took longer than that: the batch
   computed before the latest trials were told ("model-ahead");
3. if there is none: random search's point ("random-fallback").

A trial started from 2 or 3 records it in `suggestedBy`. A worker that dies is started again
and told every trial again (its state is nothing but the trials, and the prior observations of a
warm start, which every worker is told first); a controller that dies takes its worker with it
(the worker ends when its pipe closes). Suggesters without a model, random search and grid
search, which answer at once, are asked in the controller.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from vcli.spec import HyperparameterTuningJobSpec, ParameterValue, StudySpec, Trial, TrialSuggestion

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from vcli.tuning.suggesters import Suggester

__all__ = ["AHEAD", "DEFAULT_WAIT", "FALLBACK", "Apart", "close", "install_hint", "study_suggester", "suggestions_for",
           "take"]

#: Seconds a free slot waits for the model's answer to the study as it stands before it takes
#: the point the model prepared ahead (property `tuning/suggestion-wait`).
DEFAULT_WAIT = 0.3
#: `suggestedBy` of a trial from a batch computed before the latest trials were told.
AHEAD = "model-ahead"
#: `suggestedBy` of a trial from random search, the model having nothing ready.
FALLBACK = "random-fallback"
#: A worker that dies this many times in a row (without answering once) fails the study.
MAX_RESTARTS = 3


def study_suggester(spec: HyperparameterTuningJobSpec, seed: int, bayesian_backend: str,
                    priors: Sequence[Trial] = ()) -> Suggester | Apart:
    """The suggester of a study (`suggestions_for`), told the prior observations of its warm
    start, if any. Raises `InvalidValueError` for a study the suggester rejects, and
    `MissingExtraError` naming the extra to install when it needs an optional package."""
    from vcli.errors import InvalidValueError, MissingExtraError
    from vcli.properties import suggestion_wait
    from vcli.tuning.suggesters import get_suggester

    try:
        suggester = get_suggester(spec.study_spec, seed=seed, bayesian_backend=bayesian_backend)
    except ValueError as e:
        raise InvalidValueError("--config", str(e)) from None
    except ImportError as e:
        raise MissingExtraError(f"The {spec.study_spec.algorithm.value} suggester"
                                f"{' with --bayesian-backend=skopt' if bayesian_backend == 'skopt' else ''}", "tune",
                                str(e.name)) from None
    wait = suggestion_wait()
    return suggestions_for(suggester, spec.study_spec, seed=seed, ahead=spec.parallel_trial_count,
                           wait=DEFAULT_WAIT if wait is None else wait, priors=priors)


def install_hint(extra: str) -> str:
    """How to add vcli's `extra` to the installation running now (`vcli.errors.install_command`)."""
    from vcli.errors import install_command

    return install_command(extra)


def suggestions_for(suggester: Suggester, study_spec: StudySpec, *, seed: int, ahead: int,
                    wait: float = DEFAULT_WAIT, priors: Sequence[Trial] = ()) -> Suggester | Apart:
    """`Apart` for a suggester whose class models the study (`models = True`: each ask costs
    a fit), else the suggester itself, asked in the controller (it answers at once); either
    told the prior observations `priors` (`SuggesterBase.prior`) before anything else."""
    cls = type(suggester)
    if not getattr(cls, "models", False):
        if priors:
            suggester.prior(priors)  # type: ignore[attr-defined]
        return suggester
    return Apart((cls.__module__, cls.__qualname__), study_spec, seed=seed, ahead=ahead, wait=wait,
                 priors=tuple(priors))


def take(suggester: Suggester | Apart, count: int, now: float) -> list[TrialSuggestion] | None:
    """Up to `count` points to start now; [] once the search space is used up; None when
    nothing is ready yet (ask again on a later tick: only `Apart` says so)."""
    return suggester.take(count, now) if isinstance(suggester, Apart) else suggester.ask(count)


def close(suggester: Suggester | Apart) -> None:
    """End the suggester's worker, if it has one."""
    if isinstance(suggester, Apart):
        suggester.close()


@dataclass
class _Batch:
    """Points the worker prepared after `version` messages."""

    version: int
    points: list[dict[str, ParameterValue]]


@dataclass
class Apart:
    """The suggester `where` = (module, class) in a worker process (module docstring).

    `ahead` points are kept ready (the study's parallelTrialCount, at most 8). The worker starts
    at the first `tell` or `take`."""

    where: tuple[str, str]
    study_spec: StudySpec
    seed: int
    ahead: int
    wait: float = DEFAULT_WAIT
    #: Prior observations (a warm start): every worker is told them before any trial.
    priors: tuple[Trial, ...] = ()
    #: Every trial told, latest state, in the order first told (a new worker is told them all).
    _trials: dict[str, Trial] = field(default_factory=dict)
    #: Points taken but not yet told as a trial (queued for capacity, or about to start).
    _taken: list[dict[str, ParameterValue]] = field(default_factory=list)
    _proc: subprocess.Popen[bytes] | None = None
    _conn: Connection | None = None
    _sent: int = 0
    _batch: _Batch | None = None
    _answered: bool = False
    _deaths: int = 0
    _waiting_since: float | None = None
    #: When each of the latest versions was sent, when the last was, and how long the worker's
    #: recent answers took from the message that asked for them (a running mean).
    _send_times: dict[int, float] = field(default_factory=dict)
    _last_send: float = 0.0
    _ask_seconds: float | None = None
    _fallback: Any = None

    def __post_init__(self) -> None:
        from vcli.tuning.suggesters.random_search import RandomSearchSuggester

        self._fallback = RandomSearchSuggester(self.study_spec, seed=self.seed)
        self.ahead = max(1, min(int(self.ahead), 8))

    # ------------------------------------------------------------------ protocol

    def tell(self, trial: Trial) -> None:
        """Tell the worker (and random search, for fallbacks). A taken point that starts as a
        trial leaves the model's state as it was (a pending point either way): a batch that
        was the model's answer stays so."""
        self._trials[trial.id] = trial
        params = dict(trial.parameters)
        neutral = params in self._taken and not trial.state.is_final()
        if params in self._taken:
            self._taken.remove(params)
        self._fallback.tell(trial)
        batch = self._batch
        fresh = batch is not None and batch.version == self._sent
        self._send(("tell", trial))
        if fresh and neutral and batch is self._batch and batch is not None:
            batch.version = self._sent

    def take(self, count: int, now: float) -> list[TrialSuggestion] | None:
        self._receive()
        batch = self._batch
        if batch is not None and batch.version == self._sent:  # the model's answer to the study as it stands
            return self._hand_out(batch.points[:count], None)
        if self._waiting_since is None:
            self._waiting_since = now
        if not self._answered or self._worth_waiting(now) or (batch is not None and not batch.points):
            return None  # first answer (the worker starting), a short wait, or exhaustion to confirm
        known = self._fallback.known_keys()
        space = self._fallback.space
        ahead = [p for p in (batch.points if batch is not None else []) if space.key(p) not in known][:count]
        out = self._hand_out(ahead, AHEAD)
        if len(out) < count:
            out += self._hand_out([dict(s.parameters) for s in self._fallback.ask(count - len(out))], FALLBACK)
        return out or None

    def _worth_waiting(self, now: float) -> bool:
        """Is the model's answer to the study as it stands expected within what is left of the
        wait? Not when its recent answers took longer (`_ask_seconds`): the slot takes the
        point prepared ahead at once rather than sit idle for the whole wait."""
        assert self._waiting_since is not None
        left = self.wait - (now - self._waiting_since)
        if left <= 0:
            return False
        return self._ask_seconds is None or self._last_send + self._ask_seconds - time.monotonic() <= left

    def close(self) -> None:
        """Tell the worker to end; kill it if it has not within 2 s."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            try:
                conn.send(("close",))
            except (OSError, ValueError):
                pass
        if proc is not None:
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------------ the worker's side of things

    def _hand_out(self, points: list[dict[str, ParameterValue]], source: str | None) -> list[TrialSuggestion]:
        """Take `points` (from the batch, or random search's): the worker holds them as pending."""
        self._waiting_since = None
        if not points:
            return []
        self._taken.extend(points)
        if source != FALLBACK:
            for p in points:
                self._fallback.hold(p)
        batch = self._batch
        fresh = batch is not None and batch.version == self._sent
        self._send(("hold", points))
        if batch is not None:
            rest = [p for p in batch.points if p not in points]
            # The fresh batch's other points are what the model would answer next: the same
            # numbering, the same pending points (these were the batch's first).
            # An empty rest is no sign of exhaustion (only the worker's own empty answer is).
            self._batch = _Batch(self._sent if fresh else batch.version, rest) if rest else None
        return [TrialSuggestion(parameters=p, suggested_by=source) for p in points]

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._conn is None:
            self._start()
        assert self._conn is not None
        try:
            self._conn.send(message)
        except (OSError, ValueError):  # the worker died: its replacement is told everything
            self._died()
            return
        self._sent += 1
        self._last_send = self._send_times[self._sent] = time.monotonic()
        self._send_times.pop(self._sent - 64, None)

    def _receive(self) -> None:
        """Read the worker's batches (the latest wins); start a new worker if it died."""
        if self._conn is None:
            self._start()
        assert self._conn is not None and self._proc is not None
        try:
            while self._conn.poll(0):
                kind, *rest = self._conn.recv()
                if kind == "error":
                    raise RuntimeError(f"the suggester failed: {rest[0]}")
                self._batch, self._answered, self._deaths = _Batch(rest[0], rest[1]), True, 0
                if (sent := self._send_times.get(rest[0])) is not None:  # how long an answer takes now
                    took = time.monotonic() - sent
                    self._ask_seconds = took if self._ask_seconds is None else (self._ask_seconds + took) / 2
        except (EOFError, OSError):
            self._died()
            return
        if self._proc.poll() is not None:
            self._died()

    def _died(self) -> None:
        self._deaths += 1
        self.close()
        if self._deaths > MAX_RESTARTS:
            raise RuntimeError(f"the suggester's worker process died {self._deaths} times in a row")
        self._start()

    def _start(self) -> None:
        """A new worker, told every trial and every taken point: the state the last one had.

        A process of its own (`python -m vcli.control.suggesting FD`), not multiprocessing's
        spawn, which runs the parent's main script again: a notebook's or a script's study."""
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        mine, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # where the suggester is found
        with theirs:
            self._proc = subprocess.Popen([sys.executable, "-m", "vcli.control.suggesting", str(theirs.fileno())],
                                          pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)  # Ctrl-C is the controller's to handle
        self._conn, self._sent, self._batch, self._send_times = Connection(mine.detach()), 0, None, {}
        messages: list[tuple[Any, ...]] = [("start", self.where, self.study_spec, self.seed, self.ahead, self.priors)]
        messages += [("tell", t) for t in self._trials.values()]
        if self._taken:
            messages.append(("hold", list(self._taken)))
        for message in messages:
            self._conn.send(message)
        self._sent = len(messages) - 1  # the versions count what changes the suggester's state
        self._last_send = self._send_times[self._sent] = time.monotonic()


def serve(conn: Connection) -> None:
    """The worker: build the suggester the first message names, then apply every message
    waiting, prepare `ahead` points for the state they leave (unless already prepared for it)
    and send them with the count of messages applied. Ends when told to, or when the
    controller's end of the socket closes (it died)."""
    _, (module, name), study_spec, seed, ahead, priors = conn.recv()
    suggester = getattr(importlib.import_module(module), name)(study_spec, seed=seed)
    if priors:
        suggester.prior(priors)
    version, prepared = 0, -1
    try:
        while True:
            if prepared == version:
                conn.poll(None)
            while conn.poll(0):
                message = conn.recv()
                if message[0] == "close":
                    return
                _apply(suggester, message)
                version += 1
            if prepared != version:
                conn.send(("batch", version, [dict(p) for p in suggester.preview(ahead)]))
                prepared = version
    except (EOFError, OSError):
        return
    except Exception as e:  # a bug in a suggester: the controller fails the study with it
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        except (OSError, ValueError):
            pass


def _apply(suggester: Any, message: tuple[Any, ...]) -> None:
    kind, payload = message
    if kind == "tell":
        suggester.tell(payload)
    else:  # "hold": points the controller took
        for p in payload:
            suggester.hold(dict(p))


if __name__ == "__main__":  # the worker process (`Apart._start`)
    from multiprocessing.connection import Connection

    serve(Connection(int(sys.argv[1])))
