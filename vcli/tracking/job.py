"""A custom job as one MLflow run.

The run (named by `jobSpec.experimentRun`, else the display name, in the experiment of
`jobSpec.experiment`, else the display name) holds params `args` (the chief's) and, per pool,
`workerpoolN.replica_count`, `.machine_type`, `.accelerator`, `.image_uri`, `.program`,
`.args`; tags `vcli.job_id`, `vcli.kind=CustomJob`, `vcli.state`, `vcli.error`, and one
`vcli.exit_code.<task>` per replica that exited (`vcli.exit_code.workerpool1-0 = 1`); status
FINISHED, FAILED or KILLED as the job ended. Its chief replica gets the run
(`vcli.tracking.env`); a `resume` finds the run again (the job's record, else its tag).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence

from vcli.spec import CustomJobSpec, JobState
from vcli.tracking.sync import RUN_WAIT_SECONDS, RunState, Syncer

__all__ = ["JobTracker"]

_RUN_STATUS = {JobState.JOB_STATE_SUCCEEDED: "FINISHED", JobState.JOB_STATE_CANCELLED: "KILLED"}


class JobTracker:
    """One custom job's run. `open()`, `prepare(plan)` before the replicas start, `finish(...)`
    once the job ended; `persist(settings)` records the run's ids in the job's record."""

    def __init__(self, settings: Mapping[str, Any], *, job_id: str, display_name: str, spec: CustomJobSpec,
                 say: Callable[[str], None], persist: Callable[[dict[str, Any]], None]) -> None:
        from vcli.tracking import display_uri

        self.settings = dict(settings)
        self.job_id, self.display_name, self.spec = job_id, display_name, spec
        self._say, self._persist = say, persist
        self.run = RunState(run_id=self.settings.get("runId"))
        self.experiment_id: str | None = self.settings.get("experimentId")
        self._end: tuple[JobState, dict[str, int], str | None] | None = None
        self._lock = threading.Lock()
        self.backend: Any = None
        self.target = display_uri(str(self.settings["uri"]))
        self.syncer = Syncer(self._step, target=self.target, say=say, what="job")

    def open(self) -> None:
        from vcli.tracking.backend import open_backend

        self.backend = open_backend(str(self.settings["uri"]))
        self.syncer.start()
        self.syncer.poke()

    def prepare(self, plan: Any) -> Any:
        """`plan` with the run's variables for its chief (waited for at most
        `RUN_WAIT_SECONDS`; without a run the chief gets none, and one line says so)."""
        from vcli.tracking.env import with_tracking_env

        ready = self.syncer.wait(lambda: self.run.run_id is not None, RUN_WAIT_SECONDS)
        self._record()
        if not ready:
            self._say(f"Note: the job's MLflow run does not exist yet ({self.syncer.down or 'the tracker is slow'}): "
                      "its chief starts without MLFLOW_RUN_ID; vcli logs the job's run when the tracker answers.")
            return with_tracking_env(plan, None)
        return with_tracking_env(plan, {"MLFLOW_TRACKING_URI": str(self.settings["uri"]),
                                        "MLFLOW_EXPERIMENT_NAME": str(self.settings["experiment"]),
                                        "MLFLOW_RUN_ID": str(self.run.run_id)})

    def finish(self, state: JobState, replicas: Sequence[Any], error: Mapping[str, Any] | None) -> None:
        """Log how the job ended (`replicas`: its stored rows, with exit codes) and close."""
        codes = {r.task_name: int(r.exit_code) for r in replicas if r.exit_code is not None}
        with self._lock:
            self._end = (state, codes, (error or {}).get("message"))
        self.syncer.poke()
        in_sync = self.syncer.close()
        self._record()
        if in_sync:
            self._say(f"MLflow: experiment [{self.settings['experiment']}], run [{self.settings['runName']}] "
                      f"({self.run.run_id}) at {self.target}.")
        else:
            self._say(f"Note: MLflow tracking at {self.target} is still failing ({self.syncer.down or 'too slow'}); "
                      f"not logged: the job's {'end' if self.run.run_id else 'run'}. vcli's store has it all: "
                      f"vcli custom-jobs describe {self.job_id}.")

    def _record(self) -> None:
        current = {**self.settings, "experimentId": self.experiment_id, "runId": self.run.run_id}
        self._persist({k: v for k, v in current.items() if v is not None})

    def _step(self) -> None:
        from vcli.tracking import runs as r

        if self.experiment_id is None:
            self.experiment_id = self.backend.experiment_id(str(self.settings["experiment"]))
        if self.run.run_id is None:
            found = self.backend.runs_tagged(self.experiment_id, "vcli.job_id", self.job_id)
            if found:
                self.run = RunState(run_id=found[0].info.run_id, ended=found[0].data.tags.get("vcli.state") in _FINAL)
            else:
                self.run = RunState(run_id=self.backend.create_run(
                    self.experiment_id, name=str(self.settings["runName"]), start_ms=None,
                    tags={**r.SOURCE_TAGS, "vcli.job_id": self.job_id, "vcli.kind": "CustomJob",
                          "vcli.display_name": self.display_name, "vcli.state": JobState.JOB_STATE_RUNNING.value},
                    params=r.job_params(self.spec)))
        with self._lock:
            end = self._end
        if end is None or self.run.ended:
            return
        state, codes, message = end
        tags = {"vcli.state": state.value, **{f"vcli.exit_code.{task}": str(code) for task, code in codes.items()}}
        if message:
            tags["vcli.error"] = message
        assert self.run.run_id is not None
        self.backend.log(self.run.run_id, tags=tags)
        self.backend.end(self.run.run_id, _RUN_STATUS.get(state, "FAILED"), None)
        self.run.ended = True


_FINAL = {s.value for s in JobState if s.is_final()}
