"""Where the controllers meet tracking (`vcli.control.runner` calls these).

`study_tracker` and `job_tracker` return None when the job's record has no `tracking` (off),
without importing MLflow; else an opened tracker (MLflow imported, its thread started). A
tracker that cannot even start (MLflow missing on a `resume`, a broken install) is one
WARNING line and None: the job runs untracked.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from vcli.errors import StoreError


def _persister(store: Any, job_id: str) -> Callable[[dict[str, Any]], None]:
    """Records a tracker's settings and run ids as the job's `tracking` (controller thread)."""

    def persist(tracking: dict[str, Any]) -> None:
        try:
            row = store.get_job(job_id)
            if row is None or row.record.get("tracking") == tracking:
                return
            store.update_job(job_id, record={**row.record, "tracking": tracking})
        except StoreError:
            pass  # the controller meets the store's failure itself and says so

    return persist


def _opened(tracker: Any, say: Callable[[str], None]) -> Any:
    """`tracker`, opened; None (and one WARNING line) when its store cannot be opened: a
    local store that this user cannot open is found without importing MLflow, and the
    opening itself is bounded (`vcli.tracking.backend.open_backend`)."""
    from vcli.tracking import store_problem

    problem = store_problem(str(tracker.settings["uri"]))
    if problem is not None:
        say(f"WARNING: MLflow tracking at {tracker.target} cannot start ({problem}); the job runs untracked.")
        return None
    try:
        tracker.open()
    except Exception as e:  # an import that fails: tracking must not stop the job
        why = str(e).splitlines()[0] if str(e) else ""
        say(f"WARNING: MLflow tracking at {tracker.target} cannot start ({type(e).__name__}: {why}); the job runs "
            "untracked.")
        return None
    return tracker


def study_tracker(store: Any, study_id: str, display_name: str, spec: Any, record: dict[str, Any],
                  say: Callable[[str], None]) -> Any:
    """The study's tracker (`vcli.tracking.study.StudyTracker`), or None."""
    settings = record.get("tracking")
    if not settings:
        return None
    from vcli.tracking.study import StudyTracker

    tracker = StudyTracker(settings, study_id=study_id, display_name=display_name, spec=spec, say=say,
                           persist=_persister(store, study_id), stored=store.trials(study_id))
    return _opened(tracker, say)


def job_tracker(store: Any, job_id: str, spec: Any, record: dict[str, Any], say: Callable[[str], None]) -> Any:
    """The custom job's tracker (`vcli.tracking.job.JobTracker`), or None."""
    settings = record.get("tracking")
    if not settings:
        return None
    from vcli.tracking.job import JobTracker

    row = store.get_job(job_id)
    tracker = JobTracker(settings, job_id=job_id, display_name=row.display_name if row else job_id, spec=spec, say=say,
                         persist=_persister(store, job_id))
    return _opened(tracker, say)


@contextmanager
def tracked_job(job: Any, say: Callable[[str], None]) -> Iterator[None]:
    """Around the run of a submitted custom job (`vcli.control.runner.PlannedJob`): with
    tracking on, its run is made (or found again) and `job.plan` gives the chief its variables
    before the block; once the block ends, however it ends, the run gets the job's end."""
    tracker = job_tracker(job.store, job.job_id, job.spec, job.record, say)
    if tracker is not None:
        job.plan = tracker.prepare(job.plan)
    try:
        yield
    finally:
        if tracker is not None and (row := job.store.get_job(job.job_id)) is not None:
            tracker.finish(row.state, job.store.replicas(job.job_id), row.error)
