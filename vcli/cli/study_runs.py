"""Running a study in this process, or handing it to a detached one: what `hp-tuning-jobs
create`, `resume`, `extend` and the runner of `create --async` share (the gcloud lines that say
so, the live table, the closing lines and the exit code).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Optional, Sequence

from vcli.cli import support
from vcli.cli.output import emit, exit_code_for, ran_seconds
from vcli.cli.support import err, interrupt_on_signals, interrupted_code
from vcli.enums import JobState

__all__ = ["emit_study", "run_in_foreground", "submit_async", "submitted_message"]


def submitted_message(study_id: str, state: Any) -> str:
    """gcloud's create message, line for line (the `describe` hint is its 5th line, the state
    its 7th), with vcli's command: notebooks scrape these lines."""
    return (f"Hyperparameter tuning job [{study_id}] submitted successfully.\n\nYour job is still active. You may "
            f"view the status of your job with the command\n\n  $ vcli hp-tuning-jobs describe {study_id}\n\n"
            f"Job State: {getattr(state, 'value', state)}")


def submit_async(study: Any, fmt: Optional[str], notices: Sequence[str] = ()) -> None:
    """Record the study and hand it to a detached `hp-tuning-jobs run-study` process."""
    from vcli.control import runner

    row = runner.submit_study(study)
    runner.spawn_runner(study.store, study.study_id, ["hp-tuning-jobs", "run-study", study.study_id],
                        secrets=runner.secret_values(study.spec.trial_job_spec))
    err(submitted_message(row.id, row.state))
    err(f"\nFollow its trials with the command\n\n  $ vcli hp-tuning-jobs stream-logs {study.study_id}")
    for notice in notices:
        err(notice)
    if fmt:
        emit_study(study.store, study.study_id, fmt)


def emit_study(store: Any, study_id: str, fmt: Optional[str]) -> None:
    from vcli.resources import hp_tuning_job_resource

    emit(hp_tuning_job_resource(store, store.get_job(study_id)), fmt, is_list=False)


def run_in_foreground(study: Any, fmt: Optional[str], *, resumed: bool = False, background: bool = False,
                      notices: Sequence[str] = (), begin: Callable[[], str] | None = None) -> int:
    """Submit (or take over: `resumed`, or `background` for create --async's runner) and run
    the study here, its table on stdout (stderr with --format); the exit code. `begin` (a study
    taken over by `extend`) records what it takes over and returns the line that says so; it is
    called where the study is claimed, so a Ctrl-C from then on cancels it."""
    import signal

    from vcli.codec import iter_parameters
    from vcli.control import interrupts, runner
    from vcli.view import make_study_view

    spec = study.spec
    interrupt_on_signals()
    # From the moment the study is recorded (or claimed) until `run()` handles Ctrl-C itself, a
    # Ctrl-C is noted and turned into a cancel: it ended vcli there, the study left QUEUED or
    # RUNNING with nobody driving it and, after a resume, its trainers running.
    with interrupts.deferred((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) as early:
        _announce(study, resumed, background, begin)
        for notice in notices:
            err(notice)
        view = make_study_view(sys.stderr if fmt else sys.stdout, study.display_name, spec.study_spec.metrics,
                               iter_parameters(spec.study_spec.parameters), spec.max_trial_count)
        if not support.state.get("user_output", True):  # --no-user-output-enabled: status lines go; WARNING and ERROR stay
            status = view.progress
            view.progress = lambda text: status(text) if text.startswith(("WARNING", "ERROR")) else None  # type: ignore[method-assign]
        run = runner.study_run(study, listener=view)
        if resumed or background:
            run.resume()
    if early.count:
        support.state["signal"] = early.signum if early.signum != signal.SIGINT else None
        interrupts.taken(early.signum)  # the next signal is a second one: noted, never raised
        study.store.request_cancel(study.study_id)  # the first turn of `run()` carries it out
    started = time.monotonic()
    try:
        state = run.run()
    except KeyboardInterrupt:
        state = None
    if state is None or early.count:
        view.close(JobState.JOB_STATE_CANCELLED)
        err(f"Hyperparameter tuning job [{study.study_id}] was cancelled (interrupted); every trial was stopped.")
        return interrupted_code()
    view.close(state)
    _report(study, run, state, time.monotonic() - started, fmt, view)
    return exit_code_for(state)


def _announce(study: Any, resumed: bool, background: bool, begin: Callable[[], str] | None = None) -> None:
    """Record the study (or claim it: `resumed`, `background`, `begin`) and say so, with what it will run."""
    from vcli.control import runner
    from vcli.control.liveness import claim_controller

    spec, study_id = study.spec, study.study_id
    if begin is not None:
        claim_controller(study.store, study_id)
        err(begin())
    elif background:
        claim_controller(study.store, study_id)
        err(f"Hyperparameter tuning job [{study_id}] runs in this background process (create --async, pid {os.getpid()}).")
    elif resumed:
        claim_controller(study.store, study_id)
        err(f"Hyperparameter tuning job [{study_id}] is resumed: running trials are re-attached, not restarted.")
    else:
        row = runner.submit_study(study)
        err(submitted_message(study_id, row.state))
    pbt = spec.study_spec.population_based_training_spec
    at_once = pbt.population_size if pbt is not None else spec.parallel_trial_count
    err(f"  {spec.max_trial_count} trial(s), up to {at_once} at once, {spec.study_spec.algorithm.value}, "
        f"seed {study.seed}, {study.execution.kind.value} executor; Ctrl-C cancels the study.")


def _report(study: Any, run: Any, state: JobState, seconds: float, fmt: Optional[str], view: Any = None) -> None:
    """The study's end: its state and error, what it found, and its resource with --format."""
    from vcli.view import study_result_lines

    msg = "" if state == JobState.JOB_STATE_SUCCEEDED else (run.error or {}).get("message", "")
    msg = "" if msg == "CANCELED" else msg  # Vertex's error text of a cancelled job says nothing the state does not
    seconds = ran_seconds(study.store.get_job(study.study_id), seconds)
    err(f"Hyperparameter tuning job [{study.study_id}] finished: {state.value} in {seconds:.1f}s." + (f" {msg}" if msg else ""))
    best = run.best_trial()
    schedule = run.strategy.schedule(run, best) if best is not None and best.final_measurement is not None else None
    for line in study_result_lines(study.spec.study_spec.metrics, best, run.optimal_trials(), schedule, run.param_specs):
        err(line)
    if view is not None and view.hidden:  # the live screen folded trials into "... N more"
        err(f"All {len(run.trials)} trials: vcli hp-tuning-jobs trials {study.study_id}")
    if fmt:
        emit_study(study.store, study.study_id, fmt)
