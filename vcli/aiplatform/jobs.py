"""`aiplatform.CustomJob` and `aiplatform.HyperparameterTuningJob`, run by vcli's controllers.

A job made here is recorded in vcli's store and run by a detached vcli process (the runner of
`create --async`), exactly as the CLI runs one: it appears in `vcli custom-jobs list` and the
dashboard, `vcli ... describe/stream-logs/cancel` work on it, and it outlives the notebook's
kernel, as a Vertex job outlives the notebook that submitted it. `run(sync=True)` waits for
it (printing its state changes on stderr) and raises `RuntimeError("Job failed with: ...")`
when it FAILED or was CANCELLED, as Vertex's SDK does; `run(sync=False)` and `submit()` return
once it is recorded; `wait()` waits. Ctrl-C while waiting stops the waiting, not the job
(`cancel()` stops the job).

Arguments that only mean something in Google Cloud (credentials, networks, service accounts,
boot disks, ...) are accepted and named once in a `Note:` line (`vcli.aiplatform.initializer`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from vcli.aiplatform.base import _as_value_error, _camel, _decode_custom_job, _Job, _output_dir, _say, _scheduling
from vcli.aiplatform.initializer import config, note_unused
from vcli.enums import JobKind

__all__ = ["CustomJob", "HyperparameterTuningJob"]

class CustomJob(_Job):
    """Vertex's `aiplatform.CustomJob`: `CustomJob(display_name, worker_pool_specs, ...)` then
    `run()`. `worker_pool_specs` are dicts as Vertex's samples write them (snake_case or
    camelCase keys)."""

    def __init__(self, display_name: str, worker_pool_specs: Sequence[Mapping[str, Any]],
                 base_output_dir: str | None = None, project: str | None = None, location: str | None = None,
                 credentials: Any = None, labels: Mapping[str, str] | None = None,
                 encryption_spec_key_name: str | None = None, staging_bucket: str | None = None,
                 persistent_resource_id: str | None = None) -> None:
        super().__init__(display_name, labels)
        note_unused("CustomJob()", project=project, location=location, credentials=credentials,
                    encryption_spec_key_name=encryption_spec_key_name, persistent_resource_id=persistent_resource_id)
        base_output_dir = _output_dir(base_output_dir, staging_bucket)
        if isinstance(worker_pool_specs, (str, bytes, Mapping)) or not isinstance(worker_pool_specs, Sequence):
            raise TypeError(f"worker_pool_specs must be a list of dicts, one per pool, not {type(worker_pool_specs).__name__}")
        if not worker_pool_specs:  # the CLI refuses it too; run() then waited for ever on a job of no replicas
            raise ValueError("worker_pool_specs is empty: give at least the chief's pool")
        self._doc: dict[str, Any] = {"workerPoolSpecs": _camel(list(worker_pool_specs))}
        if base_output_dir:
            self._doc["baseOutputDirectory"] = {"outputUriPrefix": base_output_dir}
        with _as_value_error():
            self.job_spec = _decode_custom_job(self._doc, f"<aiplatform.CustomJob {display_name}>")

    def _restore(self, record: Mapping[str, Any]) -> None:
        """`job_spec` from the stored jobSpec (None if vcli's codec no longer reads it), so a job
        got back can be a study's `custom_job`."""
        from vcli.errors import VcliError

        try:
            self.job_spec = _decode_custom_job(record.get("jobSpec") or {}, f"<aiplatform.CustomJob {self.display_name}>")
        except VcliError:
            self.job_spec = None

    @classmethod
    def from_local_script(cls, display_name: str, script_path: str, container_uri: str, enable_autolog: bool = False,
                          args: Sequence[str] | None = None, requirements: Sequence[str] | None = None,
                          environment_variables: Mapping[str, str] | None = None, replica_count: int = 1,
                          machine_type: str = "n1-standard-4", accelerator_type: str = "ACCELERATOR_TYPE_UNSPECIFIED",
                          accelerator_count: int = 0, boot_disk_type: str = "pd-ssd", boot_disk_size_gb: int = 100,
                          reduction_server_replica_count: int = 0, reduction_server_machine_type: str | None = None,
                          reduction_server_container_uri: str | None = None, base_output_dir: str | None = None,
                          **kwargs: Any) -> CustomJob:
        """A job that runs one local script (its directory is the package, as gcloud's
        `local-package-path`): pool 0 one chief, pool 1 `replica_count - 1` workers."""
        from vcli.aiplatform.local_script import script_pools

        note_unused("CustomJob.from_local_script()", enable_autolog=enable_autolog,
                    boot_disk_type=boot_disk_type if boot_disk_type != "pd-ssd" else None,
                    boot_disk_size_gb=boot_disk_size_gb if boot_disk_size_gb != 100 else None,
                    reduction_server_replica_count=reduction_server_replica_count,
                    reduction_server_machine_type=reduction_server_machine_type,
                    reduction_server_container_uri=reduction_server_container_uri)
        job = cls.__new__(cls)
        _Job.__init__(job, display_name, kwargs.pop("labels", None))
        bucket = kwargs.pop("staging_bucket", None)
        note_unused("CustomJob.from_local_script()", **kwargs)
        from vcli.codec import custom_job_spec_to_dict

        with _as_value_error():
            spec = script_pools(script_path, container_uri, args=args, requirements=requirements,
                                env=environment_variables, replica_count=replica_count, machine_type=machine_type,
                                accelerator_type=accelerator_type, accelerator_count=accelerator_count,
                                base_output_dir=_output_dir(base_output_dir, bucket))
            # checked as CustomJob(worker_pool_specs=...) and --config are: an env name `A=B` or
            # a NUL in an argument was recorded, killed the job's runner and left run() waiting
            job.job_spec = _decode_custom_job(custom_job_spec_to_dict(spec), f"<aiplatform.CustomJob {display_name}>")
        return job

    def run(self, service_account: str | None = None, network: str | None = None, timeout: float | None = None,
            restart_job_on_worker_restart: bool = False, enable_web_access: bool = False,
            experiment: str | None = None, experiment_run: str | None = None, tensorboard: str | None = None,
            sync: bool = True, create_request_timeout: float | None = None, disable_retries: bool = False,
            persistent_resource_id: str | None = None, scheduling_strategy: Any = None,
            max_wait_duration: float | None = None) -> None:
        """Submit the job, then (`sync=True`) wait for its end."""
        self.submit(service_account=service_account, network=network, timeout=timeout,
                    restart_job_on_worker_restart=restart_job_on_worker_restart, enable_web_access=enable_web_access,
                    experiment=experiment, experiment_run=experiment_run, tensorboard=tensorboard,
                    create_request_timeout=create_request_timeout, disable_retries=disable_retries,
                    persistent_resource_id=persistent_resource_id, scheduling_strategy=scheduling_strategy,
                    max_wait_duration=max_wait_duration)
        if sync:
            self.wait()

    def submit(self, *, service_account: str | None = None, network: str | None = None, timeout: float | None = None,
               restart_job_on_worker_restart: bool = False, enable_web_access: bool = False,
               experiment: str | None = None, experiment_run: str | None = None, tensorboard: str | None = None,
               create_request_timeout: float | None = None, disable_retries: bool = False,
               persistent_resource_id: str | None = None, scheduling_strategy: Any = None,
               max_wait_duration: float | None = None) -> None:
        """Record the job and hand it to a detached vcli runner; returns at once."""
        from dataclasses import replace

        from vcli.codec import Decoder
        from vcli.codec.schema import build
        from vcli.spec import Scheduling

        self._not_yet_run()
        for name, value in (("experiment", experiment), ("experiment_run", experiment_run)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string, not {type(value).__name__}")
        tracked = self._tracking(self.display_name, experiment, experiment_run)
        note_unused("CustomJob.run()", service_account=service_account, network=network,
                    enable_web_access=enable_web_access, tensorboard=tensorboard,
                    create_request_timeout=create_request_timeout, persistent_resource_id=persistent_resource_id,
                    experiment=None if tracked else experiment, experiment_run=None if tracked else experiment_run)
        sched = _scheduling(timeout, restart_job_on_worker_restart, disable_retries, scheduling_strategy,
                            max_wait_duration)
        spec = self.job_spec
        if sched:
            decoder = Decoder("<aiplatform.CustomJob.run>")
            with _as_value_error():
                spec = replace(spec, scheduling=build(Scheduling, decoder.decode_message(sched, Scheduling, "scheduling")))
        spec = replace(spec, experiment=experiment or config["experiment"], experiment_run=experiment_run,
                       service_account=service_account, network=network, enable_web_access=enable_web_access)
        self._submit_spec(spec, tracked)

    def _submit_spec(self, spec: Any, tracked: Any) -> None:
        from vcli.control import runner
        from vcli.control.notices import launch_notices

        job = runner.plan_custom_job(spec, executor=config["executor"], hosts=None, shm_size=None, labels=self.labels,
                                     leases=False)
        try:
            if tracked:
                job.record["tracking"] = tracked
            for notice in launch_notices(job.execution.kind, job.spec, auto=job.execution.auto):
                _say(notice)
            runner.submit_custom_job(job, self.display_name)
            runner.spawn_runner(job.store, job.job_id, ["custom-jobs", "run-job", job.job_id],
                                secrets=runner.secret_values(job.spec))
        finally:
            job.close()
        self._created(job.job_id)


_ALGORITHMS = {None: "ALGORITHM_UNSPECIFIED", "grid": "GRID_SEARCH", "random": "RANDOM_SEARCH", "tpe": "TPE"}
_SELECTIONS = {"best": "BEST_MEASUREMENT", "last": "LAST_MEASUREMENT"}


def _selection(value: str | None) -> str:
    """Vertex's measurementSelectionType for the SDK's `measurement_selection` ("best" or
    "last"; None: unspecified, which is LAST); anything else is refused, as Vertex's SDK does
    (it became "unspecified", that is LAST, where the default is BEST)."""
    if value is None:
        return "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"
    try:
        return _SELECTIONS[str(value).lower()]
    except KeyError:
        raise ValueError(f"measurement_selection must be 'best' or 'last', not {value!r}") from None


class HyperparameterTuningJob(_Job):
    """Vertex's `aiplatform.HyperparameterTuningJob`: a study whose trials run `custom_job`."""

    _kind = JobKind.HYPERPARAMETER_TUNING_JOB
    _collection = "hyperparameterTuningJobs"
    _noun = "HyperparameterTuningJob"
    _group = "hp-tuning-jobs"

    def __init__(self, display_name: str, custom_job: CustomJob, metric_spec: Mapping[str, str],
                 parameter_spec: Mapping[str, Any], max_trial_count: int, parallel_trial_count: int,
                 max_failed_trial_count: int = 0, search_algorithm: str | None = None,
                 measurement_selection: str | None = "best", project: str | None = None,
                 location: str | None = None, credentials: Any = None, labels: Mapping[str, str] | None = None,
                 encryption_spec_key_name: str | None = None) -> None:
        from vcli.codec import custom_job_spec_to_dict

        super().__init__(display_name, labels)
        note_unused("HyperparameterTuningJob()", project=project, location=location, credentials=credentials,
                    encryption_spec_key_name=encryption_spec_key_name)
        if not isinstance(custom_job, CustomJob):
            raise TypeError(f"custom_job must be an aiplatform.CustomJob, not {type(custom_job).__name__}")
        if not isinstance(metric_spec, Mapping) or not metric_spec:
            raise TypeError(f"metric_spec must be a dict of metric ids to 'maximize' or 'minimize', not {metric_spec!r}")
        if not isinstance(parameter_spec, Mapping):
            raise TypeError(f"parameter_spec must be a dict of parameter ids to specs, not {type(parameter_spec).__name__}")
        if search_algorithm not in _ALGORITHMS:
            raise ValueError(f"search_algorithm must be one of {list(_ALGORITHMS)}, not {search_algorithm!r}")
        for pid, p in parameter_spec.items():
            if not hasattr(p, "to_dict"):  # an AttributeError from inside vcli before
                raise TypeError(f"parameter_spec must map parameter ids to hyperparameter_tuning specs "
                                f"(DoubleParameterSpec, ...), not {pid!r}: {type(p).__name__}")
        self._doc = {
            "displayName": display_name,
            "studySpec": {
                "metrics": [{"metricId": k, "goal": str(v).upper()} for k, v in metric_spec.items()],
                "parameters": [p.to_dict(pid) for pid, p in parameter_spec.items()],
                "algorithm": _ALGORITHMS[search_algorithm],
                "measurementSelectionType": _selection(measurement_selection),
            },
            "trialJobSpec": custom_job_spec_to_dict(custom_job.job_spec),
            "maxTrialCount": max_trial_count,
            "parallelTrialCount": parallel_trial_count,
            "maxFailedTrialCount": max_failed_trial_count,
        }

    def run(self, service_account: str | None = None, network: str | None = None, timeout: float | None = None,
            restart_job_on_worker_restart: bool = False, enable_web_access: bool = False,
            tensorboard: str | None = None, sync: bool = True, create_request_timeout: float | None = None,
            disable_retries: bool = False, scheduling_strategy: Any = None,
            max_wait_duration: float | None = None) -> None:
        """Submit the study (each trial a custom job), then (`sync=True`) wait for its end."""
        self._not_yet_run()
        note_unused("HyperparameterTuningJob.run()", service_account=service_account, network=network,
                    enable_web_access=enable_web_access, tensorboard=tensorboard,
                    create_request_timeout=create_request_timeout)
        doc = dict(self._doc)
        sched = _scheduling(timeout, restart_job_on_worker_restart, disable_retries, scheduling_strategy,
                            max_wait_duration)
        if sched:
            doc["trialJobSpec"] = {**doc["trialJobSpec"], "scheduling": sched}
        self._submit_doc(doc)
        if sync:
            self.wait()

    def _submit_doc(self, doc: Mapping[str, Any]) -> None:
        from vcli.codec.study_flags import StudyFlags, study_request
        from vcli.control import runner

        with _as_value_error():
            request = study_request(doc, f"<aiplatform.HyperparameterTuningJob {self.display_name}>", StudyFlags())
        for notice in request.notices:
            _say(notice)
        trial_job = request.spec.trial_job_spec
        tracked = self._tracking(self.display_name, trial_job.experiment, trial_job.experiment_run)
        study = runner.plan_study(request.spec, display_name=self.display_name, labels=self.labels, seed=None,
                                  bayesian_backend="gp", executor=config["executor"], hosts=None, shm_size=None,
                                  leases=False)
        try:
            if tracked:
                study.record["tracking"] = tracked
            runner.submit_study(study)
            runner.spawn_runner(study.store, study.study_id, ["hp-tuning-jobs", "run-study", study.study_id],
                                secrets=runner.secret_values(study.spec.trial_job_spec))
        finally:
            study.close()
        self._created(study.study_id)

    @property
    def trials(self) -> list[Any]:
        """The study's trials so far, in Vertex's `Trial` shape (`vcli.aiplatform.trials`)."""
        from vcli.aiplatform.trials import Trial

        self._row()
        return [Trial.from_dict(d) for d in self._store().trial_records(str(self._job_id))]
