"""Vertex-shaped input and output: `--worker-pool-spec` flags, `--config` YAML/JSON, and the
camelCase REST shape used by the store, `describe` and CLUSTER_SPEC's `job`.

This package is the only translator between Vertex's camelCase and `vcli.spec`:
- `flags`: gcloud's dict-flag grammar (`--worker-pool-spec`, `--labels`) and the study flags;
- `yamlio`: reading `--config` documents and writing YAML (the only PyYAML importer, lazily);
- `schema`: the Vertex schema derived from the `vcli.spec` dataclasses, its decoder (errors
  name the field's path) and the generic dict <-> dataclass codec;
- `job`, `study`, `trial`: the CustomJobSpec, StudySpec/HyperparameterTuningJob and Trial codecs;
- `gcs`: gs:// locations mapped to a local storage root (`storage/gcs-root`).

Error texts copy gcloud's (gcloud-vertex.md §1.5); where gcloud is vague (unknown YAML
fields) the message names the field's full path and what is valid.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each name is imported from its module on first use (PEP 562): the package itself imports
# nothing, so `to_yaml` for a listing costs PyYAML, not the data model's dataclasses (~50 ms).
_EXPORTS = {
    "METRIC_KEYS": "vcli.codec.flags",
    "PARAMETER_SPEC_KEYS": "vcli.codec.flags",
    "WORKER_POOL_SPEC_KEYS": "vcli.codec.flags",
    "WPS_FLAG": "vcli.codec.flags",
    "apply_args_and_command": "vcli.codec.flags",
    "check_display_name": "vcli.codec.flags",
    "metric_from_flag": "vcli.codec.flags",
    "parameter_spec_from_flag": "vcli.codec.flags",
    "parameters_from_flags": "vcli.codec.flags",
    "parse_dict_arg": "vcli.codec.flags",
    "parse_duration": "vcli.codec.flags",
    "parse_labels": "vcli.codec.flags",
    "parse_worker_pool_spec": "vcli.codec.flags",
    "split_arg_list": "vcli.codec.flags",
    "validate_worker_pool_specs": "vcli.codec.flags",
    "worker_pools_from_flags": "vcli.codec.flags",
    "gcs_mappings": "vcli.codec.gcs",
    "gcs_notice": "vcli.codec.gcs",
    "storage_root": "vcli.codec.gcs",
    "custom_job_spec_from_dict": "vcli.codec.job",
    "custom_job_spec_from_stored": "vcli.codec.job",
    "custom_job_spec_to_dict": "vcli.codec.job",
    "load_custom_job_spec": "vcli.codec.job",
    "placeholder_notices": "vcli.codec.job",
    "resolve_output_uri": "vcli.codec.job",
    "Decoder": "vcli.codec.schema",
    "EARLY_STOPPING_RULES": "vcli.codec.study",
    "STOPPING_KEYS": "vcli.codec.study",
    "check_algorithm": "vcli.codec.study",
    "check_stopping": "vcli.codec.study",
    "hp_tuning_document": "vcli.codec.study",
    "hp_tuning_job_from_document": "vcli.codec.study",
    "hp_tuning_job_to_dict": "vcli.codec.study",
    "iter_parameters": "vcli.codec.study",
    "study_spec_from_dict": "vcli.codec.study",
    "study_spec_from_stored": "vcli.codec.study",
    "study_spec_to_dict": "vcli.codec.study",
    "load_document": "vcli.codec.yamlio",
    "parse_yaml": "vcli.codec.yamlio",
    "to_yaml": "vcli.codec.yamlio",
    "CustomJobSpec": "vcli.spec",
    "HyperparameterTuningJobSpec": "vcli.spec",
    "StudySpec": "vcli.spec",
    "WorkerPoolSpec": "vcli.spec",
    "is_secret": "vcli.spec",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # the same names, for type checkers and editors
    from vcli.codec.flags import (
        METRIC_KEYS,
        PARAMETER_SPEC_KEYS,
        WORKER_POOL_SPEC_KEYS,
        WPS_FLAG,
        apply_args_and_command,
        check_display_name,
        metric_from_flag,
        parameter_spec_from_flag,
        parameters_from_flags,
        parse_dict_arg,
        parse_duration,
        parse_labels,
        parse_worker_pool_spec,
        split_arg_list,
        validate_worker_pool_specs,
        worker_pools_from_flags,
    )
    from vcli.codec.gcs import gcs_mappings, gcs_notice, storage_root
    from vcli.codec.job import (
        custom_job_spec_from_dict,
        custom_job_spec_from_stored,
        custom_job_spec_to_dict,
        load_custom_job_spec,
        placeholder_notices,
        resolve_output_uri,
    )
    from vcli.codec.schema import Decoder
    from vcli.codec.study import (
        EARLY_STOPPING_RULES,
        STOPPING_KEYS,
        check_algorithm,
        check_stopping,
        hp_tuning_document,
        hp_tuning_job_from_document,
        hp_tuning_job_to_dict,
        iter_parameters,
        study_spec_from_dict,
        study_spec_from_stored,
        study_spec_to_dict,
    )
    from vcli.codec.yamlio import load_document, parse_yaml, to_yaml
    from vcli.spec import CustomJobSpec, HyperparameterTuningJobSpec, StudySpec, WorkerPoolSpec, is_secret

__all__ = [
    "EARLY_STOPPING_RULES",
    "STOPPING_KEYS",
    "check_stopping",
    "METRIC_KEYS",
    "PARAMETER_SPEC_KEYS",
    "WORKER_POOL_SPEC_KEYS",
    "WPS_FLAG",
    "CustomJobSpec",
    "Decoder",
    "HyperparameterTuningJobSpec",
    "StudySpec",
    "WorkerPoolSpec",
    "apply_args_and_command",
    "check_display_name",
    "check_algorithm",
    "custom_job_spec_from_dict",
    "custom_job_spec_from_stored",
    "custom_job_spec_to_dict",
    "gcs_mappings",
    "gcs_notice",
    "placeholder_notices",
    "hp_tuning_document",
    "hp_tuning_job_from_document",
    "hp_tuning_job_to_dict",
    "is_secret",
    "iter_parameters",
    "load_custom_job_spec",
    "load_document",
    "metric_from_flag",
    "parameter_spec_from_flag",
    "parameters_from_flags",
    "parse_dict_arg",
    "parse_duration",
    "parse_labels",
    "parse_worker_pool_spec",
    "parse_yaml",
    "resolve_output_uri",
    "split_arg_list",
    "storage_root",
    "study_spec_from_dict",
    "study_spec_from_stored",
    "study_spec_to_dict",
    "to_yaml",
    "validate_worker_pool_specs",
    "worker_pools_from_flags",
]
