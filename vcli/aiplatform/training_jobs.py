"""`aiplatform.CustomTrainingJob` and `aiplatform.CustomContainerTrainingJob`, as vcli custom jobs.

On Vertex these are training pipelines: a custom job, then optionally a Model uploaded to the
registry. vcli runs the custom job and has no Model registry nor managed datasets, so:

- `run()` records and runs one custom job (`vcli custom-jobs list` shows it; `.name`,
  `.resource_name`, `.state`, `.wait_for_completion()` ... are the job's) and returns None
  where Vertex returns the uploaded `Model`;
- an argument about the model (`model_serving_container_image_uri`, `model_display_name`, ...)
  or a dataset (`dataset`, the `*_split` arguments, `bigquery_destination`) is refused with a
  ValueError naming it, before anything is recorded;
- Cloud-only arguments (service accounts, networks, boot disks, reservations, ...) are accepted
  and named once in a `Note:` line, as `CustomJob`'s are.

`CustomTrainingJob` runs one local script (`CustomJob.from_local_script`: its directory is the
package, `requirements` go into a cached virtual environment); `CustomContainerTrainingJob` runs
`command` + `args` from `container_uri` (as a process with the local executor, in the image
with `init(executor="docker")`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from vcli.aiplatform.base import _Job
from vcli.aiplatform.initializer import note_unused

__all__ = ["CustomContainerTrainingJob", "CustomTrainingJob"]

_NO_MODEL = ("vcli has no Model registry: run() uploads no model and returns None; leave it out and save "
             "the model under AIP_MODEL_DIR in the trainer")
_NO_DATASET = ("vcli has no managed datasets: read the data in the trainer (a path, or a gs:// URI under "
               "storage/gcs-root)")


def _refuse(where: str, reason: str, given: Mapping[str, Any]) -> None:
    """ValueError naming the first argument of `given` that was given (not None)."""
    for name, value in given.items():
        if value is not None:
            raise ValueError(f"{where}: {name} is not supported: {reason}.")


def _number_args(args: Sequence[Any] | None) -> Sequence[Any] | None:
    """Vertex's training jobs take numbers among `args` (`["--epochs", 3]`): as text."""
    if args is None or isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        return args
    return [str(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else a for a in args]


class _TrainingJob(_Job):
    """What both training jobs share: the model arguments refused, `run`'s arguments sorted
    into what vcli honours, refuses and notes."""

    def __init__(self, display_name: str, container_uri: str, *, model: Mapping[str, Any], project: str | None,
                 location: str | None, credentials: Any, labels: Mapping[str, str] | None,
                 training_encryption_spec_key_name: str | None, staging_bucket: str | None) -> None:
        where = f"{type(self).__name__}()"
        _refuse(where, _NO_MODEL, model)
        super().__init__(display_name, labels)
        if not isinstance(container_uri, str) or not container_uri:
            raise TypeError(f"container_uri must be a non-empty string, not {container_uri!r}")
        if staging_bucket is not None and not isinstance(staging_bucket, str):
            raise TypeError(f"staging_bucket must be a string, not {type(staging_bucket).__name__}")
        note_unused(where, project=project, location=location, credentials=credentials,
                    training_encryption_spec_key_name=training_encryption_spec_key_name)
        self.container_uri = container_uri
        self._staging_bucket = staging_bucket

    def _checked_run(self, refused_model: Mapping[str, Any], refused_data: Mapping[str, Any],
                     noted: Mapping[str, Any]) -> None:
        where = f"{type(self).__name__}.run()"
        self._not_yet_run()
        _refuse(where, _NO_MODEL, refused_model)
        _refuse(where, _NO_DATASET, refused_data)
        note_unused(where, **noted)

    def _start(self, job: Any, submit: Mapping[str, Any], sync: bool) -> None:
        """Submit the CustomJob `job` built by `run`, become it, and (`sync`) wait for its end."""
        job.submit(**submit)
        self._job_id = job._job_id
        if sync:
            self.wait()


def _run_arguments(dataset: Any, annotation_schema_uri: Any, model_display_name: Any, model_labels: Any,
                   model_id: Any, parent_model: Any, is_default_version: bool, model_version_aliases: Any,
                   model_version_description: Any, bigquery_destination: Any, splits: Mapping[str, Any],
                   enable_dashboard_access: bool, tpu_topology: Any, reservation: Mapping[str, Any]
                   ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """`run`'s model arguments, dataset arguments and Cloud-only arguments, by name."""
    model = {"model_display_name": model_display_name, "model_labels": model_labels, "model_id": model_id,
             "parent_model": parent_model, "is_default_version": None if is_default_version else False,
             "model_version_aliases": model_version_aliases, "model_version_description": model_version_description}
    data = {"dataset": dataset, "annotation_schema_uri": annotation_schema_uri,
            "bigquery_destination": bigquery_destination, **splits}
    noted = {"enable_dashboard_access": enable_dashboard_access, "tpu_topology": tpu_topology, **reservation}
    return model, data, noted


def _model_arguments(**given: Any) -> dict[str, Any]:
    return given


class CustomTrainingJob(_TrainingJob):
    """Vertex's `aiplatform.CustomTrainingJob`: one local script, run as a vcli custom job."""

    def __init__(self, display_name: str, script_path: str, container_uri: str,
                 requirements: Sequence[str] | None = None, model_serving_container_image_uri: str | None = None,
                 model_serving_container_predict_route: str | None = None,
                 model_serving_container_health_route: str | None = None,
                 model_serving_container_command: Sequence[str] | None = None,
                 model_serving_container_args: Sequence[str] | None = None,
                 model_serving_container_environment_variables: Mapping[str, str] | None = None,
                 model_serving_container_ports: Sequence[int] | None = None,
                 model_serving_container_grpc_ports: Sequence[int] | None = None,
                 model_description: str | None = None, model_instance_schema_uri: str | None = None,
                 model_parameters_schema_uri: str | None = None, model_prediction_schema_uri: str | None = None,
                 explanation_metadata: Any = None, explanation_parameters: Any = None, project: str | None = None,
                 location: str | None = None, credentials: Any = None, labels: Mapping[str, str] | None = None,
                 training_encryption_spec_key_name: str | None = None,
                 model_encryption_spec_key_name: str | None = None, staging_bucket: str | None = None) -> None:
        model = _model_arguments(
            model_serving_container_image_uri=model_serving_container_image_uri,
            model_serving_container_predict_route=model_serving_container_predict_route,
            model_serving_container_health_route=model_serving_container_health_route,
            model_serving_container_command=model_serving_container_command,
            model_serving_container_args=model_serving_container_args,
            model_serving_container_environment_variables=model_serving_container_environment_variables,
            model_serving_container_ports=model_serving_container_ports,
            model_serving_container_grpc_ports=model_serving_container_grpc_ports, model_description=model_description,
            model_instance_schema_uri=model_instance_schema_uri, model_parameters_schema_uri=model_parameters_schema_uri,
            model_prediction_schema_uri=model_prediction_schema_uri, explanation_metadata=explanation_metadata,
            explanation_parameters=explanation_parameters, model_encryption_spec_key_name=model_encryption_spec_key_name)
        super().__init__(display_name, container_uri, model=model, project=project, location=location,
                         credentials=credentials, labels=labels,
                         training_encryption_spec_key_name=training_encryption_spec_key_name,
                         staging_bucket=staging_bucket)
        self.script_path = script_path
        self.requirements = requirements

    def run(self, dataset: Any = None, annotation_schema_uri: str | None = None, model_display_name: str | None = None,
            model_labels: Mapping[str, str] | None = None, model_id: str | None = None, parent_model: str | None = None,
            is_default_version: bool = True, model_version_aliases: Sequence[str] | None = None,
            model_version_description: str | None = None, base_output_dir: str | None = None,
            service_account: str | None = None, network: str | None = None, bigquery_destination: str | None = None,
            args: Sequence[Any] | None = None, environment_variables: Mapping[str, str] | None = None,
            replica_count: int = 1, machine_type: str = "n1-standard-4",
            accelerator_type: str = "ACCELERATOR_TYPE_UNSPECIFIED", accelerator_count: int = 0,
            boot_disk_type: str = "pd-ssd", boot_disk_size_gb: int = 100, reduction_server_replica_count: int = 0,
            reduction_server_machine_type: str | None = None, reduction_server_container_uri: str | None = None,
            training_fraction_split: float | None = None, validation_fraction_split: float | None = None,
            test_fraction_split: float | None = None, training_filter_split: str | None = None,
            validation_filter_split: str | None = None, test_filter_split: str | None = None,
            predefined_split_column_name: str | None = None, timestamp_split_column_name: str | None = None,
            timeout: float | None = None, restart_job_on_worker_restart: bool = False, enable_web_access: bool = False,
            enable_dashboard_access: bool = False, tensorboard: str | None = None, sync: bool = True,
            create_request_timeout: float | None = None, disable_retries: bool = False,
            persistent_resource_id: str | None = None, tpu_topology: str | None = None, scheduling_strategy: Any = None,
            reservation_affinity_type: str | None = None, reservation_affinity_key: str | None = None,
            reservation_affinity_values: Sequence[str] | None = None, max_wait_duration: float | None = None) -> None:
        """Run the script as a custom job (chief + `replica_count - 1` workers); with `sync`, wait
        for its end (RuntimeError if it fails). Returns None: vcli uploads no Model."""
        splits = {"training_fraction_split": training_fraction_split,
                  "validation_fraction_split": validation_fraction_split, "test_fraction_split": test_fraction_split,
                  "training_filter_split": training_filter_split, "validation_filter_split": validation_filter_split,
                  "test_filter_split": test_filter_split, "predefined_split_column_name": predefined_split_column_name,
                  "timestamp_split_column_name": timestamp_split_column_name}
        reservation = {"reservation_affinity_type": reservation_affinity_type,
                       "reservation_affinity_key": reservation_affinity_key,
                       "reservation_affinity_values": reservation_affinity_values}
        self._checked_run(*_run_arguments(dataset, annotation_schema_uri, model_display_name, model_labels, model_id,
                                          parent_model, is_default_version, model_version_aliases,
                                          model_version_description, bigquery_destination, splits,
                                          enable_dashboard_access, tpu_topology, reservation))
        from vcli.aiplatform.jobs import CustomJob

        job = CustomJob.from_local_script(
            self.display_name, self.script_path, self.container_uri, args=_number_args(args),
            requirements=self.requirements, environment_variables=environment_variables, replica_count=replica_count,
            machine_type=machine_type, accelerator_type=accelerator_type, accelerator_count=accelerator_count,
            boot_disk_type=boot_disk_type, boot_disk_size_gb=boot_disk_size_gb,
            reduction_server_replica_count=reduction_server_replica_count,
            reduction_server_machine_type=reduction_server_machine_type,
            reduction_server_container_uri=reduction_server_container_uri, base_output_dir=base_output_dir,
            labels=self.labels, staging_bucket=self._staging_bucket)
        self._start(job, {"service_account": service_account, "network": network, "timeout": timeout,
                          "restart_job_on_worker_restart": restart_job_on_worker_restart,
                          "enable_web_access": enable_web_access, "tensorboard": tensorboard,
                          "create_request_timeout": create_request_timeout, "disable_retries": disable_retries,
                          "persistent_resource_id": persistent_resource_id, "scheduling_strategy": scheduling_strategy,
                          "max_wait_duration": max_wait_duration}, sync)


class CustomContainerTrainingJob(_TrainingJob):
    """Vertex's `aiplatform.CustomContainerTrainingJob`: `command` + `args` from an image, run as
    a vcli custom job."""

    def __init__(self, display_name: str, container_uri: str, command: Sequence[str] | None = None,
                 model_serving_container_image_uri: str | None = None,
                 model_serving_container_predict_route: str | None = None,
                 model_serving_container_health_route: str | None = None,
                 model_serving_container_command: Sequence[str] | None = None,
                 model_serving_container_args: Sequence[str] | None = None,
                 model_serving_container_environment_variables: Mapping[str, str] | None = None,
                 model_serving_container_ports: Sequence[int] | None = None,
                 model_serving_container_grpc_ports: Sequence[int] | None = None,
                 model_description: str | None = None, model_instance_schema_uri: str | None = None,
                 model_parameters_schema_uri: str | None = None, model_prediction_schema_uri: str | None = None,
                 explanation_metadata: Any = None, explanation_parameters: Any = None, project: str | None = None,
                 location: str | None = None, credentials: Any = None, labels: Mapping[str, str] | None = None,
                 training_encryption_spec_key_name: str | None = None,
                 model_encryption_spec_key_name: str | None = None, staging_bucket: str | None = None) -> None:
        model = _model_arguments(
            model_serving_container_image_uri=model_serving_container_image_uri,
            model_serving_container_predict_route=model_serving_container_predict_route,
            model_serving_container_health_route=model_serving_container_health_route,
            model_serving_container_command=model_serving_container_command,
            model_serving_container_args=model_serving_container_args,
            model_serving_container_environment_variables=model_serving_container_environment_variables,
            model_serving_container_ports=model_serving_container_ports,
            model_serving_container_grpc_ports=model_serving_container_grpc_ports, model_description=model_description,
            model_instance_schema_uri=model_instance_schema_uri, model_parameters_schema_uri=model_parameters_schema_uri,
            model_prediction_schema_uri=model_prediction_schema_uri, explanation_metadata=explanation_metadata,
            explanation_parameters=explanation_parameters, model_encryption_spec_key_name=model_encryption_spec_key_name)
        super().__init__(display_name, container_uri, model=model, project=project, location=location,
                         credentials=credentials, labels=labels,
                         training_encryption_spec_key_name=training_encryption_spec_key_name,
                         staging_bucket=staging_bucket)
        if command is not None and (isinstance(command, (str, bytes)) or not isinstance(command, Sequence)
                                    or not all(isinstance(c, str) for c in command)):
            raise TypeError(f"command must be a list of strings, not {command!r}")
        self.command = list(command) if command is not None else None

    def run(self, dataset: Any = None, annotation_schema_uri: str | None = None, model_display_name: str | None = None,
            model_labels: Mapping[str, str] | None = None, model_id: str | None = None, parent_model: str | None = None,
            is_default_version: bool = True, model_version_aliases: Sequence[str] | None = None,
            model_version_description: str | None = None, base_output_dir: str | None = None,
            service_account: str | None = None, network: str | None = None, bigquery_destination: str | None = None,
            args: Sequence[Any] | None = None, environment_variables: Mapping[str, str] | None = None,
            replica_count: int = 1, machine_type: str = "n1-standard-4",
            accelerator_type: str = "ACCELERATOR_TYPE_UNSPECIFIED", accelerator_count: int = 0,
            boot_disk_type: str = "pd-ssd", boot_disk_size_gb: int = 100, reduction_server_replica_count: int = 0,
            reduction_server_machine_type: str | None = None, reduction_server_container_uri: str | None = None,
            training_fraction_split: float | None = None, validation_fraction_split: float | None = None,
            test_fraction_split: float | None = None, training_filter_split: str | None = None,
            validation_filter_split: str | None = None, test_filter_split: str | None = None,
            predefined_split_column_name: str | None = None, timestamp_split_column_name: str | None = None,
            timeout: float | None = None, restart_job_on_worker_restart: bool = False, enable_web_access: bool = False,
            enable_dashboard_access: bool = False, tensorboard: str | None = None, sync: bool = True,
            create_request_timeout: float | None = None, disable_retries: bool = False,
            persistent_resource_id: str | None = None, tpu_topology: str | None = None, scheduling_strategy: Any = None,
            reservation_affinity_type: str | None = None, reservation_affinity_key: str | None = None,
            reservation_affinity_values: Sequence[str] | None = None, max_wait_duration: float | None = None) -> None:
        """Run the container's command as a custom job (chief + `replica_count - 1` workers); with
        `sync`, wait for its end (RuntimeError if it fails). Returns None: vcli uploads no Model."""
        splits = {"training_fraction_split": training_fraction_split,
                  "validation_fraction_split": validation_fraction_split, "test_fraction_split": test_fraction_split,
                  "training_filter_split": training_filter_split, "validation_filter_split": validation_filter_split,
                  "test_filter_split": test_filter_split, "predefined_split_column_name": predefined_split_column_name,
                  "timestamp_split_column_name": timestamp_split_column_name}
        reservation = {"reservation_affinity_type": reservation_affinity_type,
                       "reservation_affinity_key": reservation_affinity_key,
                       "reservation_affinity_values": reservation_affinity_values}
        self._checked_run(*_run_arguments(dataset, annotation_schema_uri, model_display_name, model_labels, model_id,
                                          parent_model, is_default_version, model_version_aliases,
                                          model_version_description, bigquery_destination, splits,
                                          enable_dashboard_access, tpu_topology, reservation))
        note_unused("CustomContainerTrainingJob.run()",
                    boot_disk_type=boot_disk_type if boot_disk_type != "pd-ssd" else None,
                    boot_disk_size_gb=boot_disk_size_gb if boot_disk_size_gb != 100 else None,
                    reduction_server_replica_count=reduction_server_replica_count,
                    reduction_server_machine_type=reduction_server_machine_type,
                    reduction_server_container_uri=reduction_server_container_uri)
        from vcli.aiplatform.jobs import CustomJob

        pools = _container_pools(self.container_uri, self.command, _number_args(args), environment_variables,
                                 replica_count, machine_type, accelerator_type, accelerator_count)
        job = CustomJob(self.display_name, pools, base_output_dir=base_output_dir, labels=self.labels,
                        staging_bucket=self._staging_bucket)
        self._start(job, {"service_account": service_account, "network": network, "timeout": timeout,
                          "restart_job_on_worker_restart": restart_job_on_worker_restart,
                          "enable_web_access": enable_web_access, "tensorboard": tensorboard,
                          "create_request_timeout": create_request_timeout, "disable_retries": disable_retries,
                          "persistent_resource_id": persistent_resource_id, "scheduling_strategy": scheduling_strategy,
                          "max_wait_duration": max_wait_duration}, sync)


def _container_pools(image: str, command: Sequence[str] | None, args: Sequence[str] | None,
                     env: Mapping[str, str] | None, replica_count: int, machine_type: str, accelerator_type: str,
                     accelerator_count: int) -> list[dict[str, Any]]:
    """Vertex's worker pool dicts: pool 0 one chief, pool 1 `replica_count - 1` workers, both
    running `command` + `args` from `image` with `env`."""
    from vcli.aiplatform.local_script import _check_collections, _check_replica_count

    _check_collections(args, None, env)
    _check_replica_count(replica_count)
    machine: dict[str, Any] = {"machine_type": machine_type}
    if accelerator_count and accelerator_type != "ACCELERATOR_TYPE_UNSPECIFIED":
        machine.update(accelerator_type=accelerator_type, accelerator_count=accelerator_count)
    container: dict[str, Any] = {"image_uri": image}
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = list(args)
    if env:
        container["env"] = [{"name": k, "value": str(v)} for k, v in env.items()]
    pools = [{"machine_spec": machine, "replica_count": 1, "container_spec": container}]
    if replica_count > 1:
        pools.append({"machine_spec": machine, "replica_count": replica_count - 1, "container_spec": container})
    return pools
