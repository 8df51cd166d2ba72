"""The Vertex schema is derived from the `vcli.spec` dataclasses: every field of the job and
study specs reaches the wire and comes back, unknown fields fail with their path, and a new
field needs nothing but its declaration."""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from typing import Any, ClassVar, Mapping

import pytest

from vcli import codec
from vcli.codec import schema
from vcli.errors import ConfigError
from vcli.spec import (
    Algorithm,
    AshaStoppingSpec,
    CategoricalValueSpec,
    ConditionalParameterSpec,
    ContainerSpec,
    ConvexAutomatedStoppingSpec,
    CustomJobSpec,
    DecayCurveAutomatedStoppingSpec,
    DiscreteValueSpec,
    DiskSpec,
    DoubleValueSpec,
    EnvVar,
    Goal,
    HyperbandStoppingSpec,
    HyperparameterTuningJobSpec,
    IntegerValueSpec,
    LocalPackage,
    MachineSpec,
    MeasurementSelectionType,
    MedianAutomatedStoppingSpec,
    MetricSpec,
    ParameterSpec,
    PopulationBasedTrainingSpec,
    PythonPackageSpec,
    SafetyMetricConfig,
    ScaleType,
    Scheduling,
    StudySpec,
    WorkerPoolSpec,
    vertex,
)


def full_job(tmp_path) -> CustomJobSpec:
    env = (EnvVar(name="MODE", value="fast"), EnvVar(name="EMPTY", value=""))
    chief = WorkerPoolSpec(
        machine_spec=MachineSpec(machine_type="n1-standard-8", accelerator_type="NVIDIA_L4", accelerator_count=2),
        replica_count=1,
        disk_spec=DiskSpec(boot_disk_type="pd-standard", boot_disk_size_gb=250),
        container_spec=ContainerSpec(image_uri="trainer:1", command=("python3", "-m", "t"), args=("--a=1",), env=env),
        python_package_spec=PythonPackageSpec(
            executor_image_uri="py:3", python_module="t.task", package_uris=("/p.tar.gz",), args=("--b",), env=env
        ),
        local_package=LocalPackage(
            path=str(tmp_path), executor_image_uri="py:3", python_module="t.task", script="t.py", output_image_uri="out:1",
            requirements=("numpy",), extra_packages=("x.whl",), extra_dirs=("data",),
        ),
    )
    worker = WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1"), replica_count=3, container_spec=ContainerSpec(image_uri="w:1"))
    return CustomJobSpec(
        worker_pool_specs=(chief, WorkerPoolSpec(), worker),
        base_output_directory=str(tmp_path / "out"),
        scheduling=Scheduling(timeout_seconds=90.5, restart_job_on_worker_restart=True, disable_retries=True, strategy="SPOT",
                              max_wait_seconds=1800.0),
        service_account="sa@x",
        network="net",
        persistent_resource_id="pr",
        tensorboard="tb",
        experiment="exp",
        experiment_run="run",
        enable_web_access=True,
        enable_dashboard_access=True,
    )


def full_study() -> StudySpec:
    child = ParameterSpec(parameter_id="momentum", value_spec=DoubleValueSpec(min_value=0.0, max_value=0.9, default_value=0.5))
    grandchild = ParameterSpec(parameter_id="beta", value_spec=CategoricalValueSpec(values=("a", "b"), default_value="b"))
    units = ParameterSpec(
        parameter_id="units",
        value_spec=DiscreteValueSpec(values=(16.0, 32.0, 64.0), default_value=32.0),
        scale_type=ScaleType.UNIT_LOG_SCALE,
        conditional_parameter_specs=(ConditionalParameterSpec(parameter_spec=grandchild, parent_values=(32.0,)),),
    )
    return StudySpec(
        metrics=(MetricSpec(metric_id="loss", goal=Goal.MINIMIZE),),
        parameters=(
            ParameterSpec(
                parameter_id="optimizer",
                value_spec=CategoricalValueSpec(values=("adam", "sgd"), default_value="adam"),
                conditional_parameter_specs=(ConditionalParameterSpec(parameter_spec=child, parent_values=("sgd",)),),
            ),
            ParameterSpec(
                parameter_id="layers",
                value_spec=IntegerValueSpec(min_value=1, max_value=8, default_value=2),
                scale_type=ScaleType.UNIT_LINEAR_SCALE,
                conditional_parameter_specs=(ConditionalParameterSpec(parameter_spec=units, parent_values=(2, 3)),),
            ),
        ),
        algorithm=Algorithm.RANDOM_SEARCH,
        measurement_selection_type=MeasurementSelectionType.BEST_MEASUREMENT,
        automated_stopping_spec=ConvexAutomatedStoppingSpec(
            max_step_count=100, min_step_count=5, min_measurement_count=3, learning_rate_parameter_name="momentum",
            use_elapsed_duration=True, update_all_stopped_trials=True,
        ),
        safety_metrics=(MetricSpec(metric_id="memory_gb", goal=Goal.MINIMIZE, safety_config=SafetyMetricConfig(
            safety_threshold=40.0, desired_min_safe_trials_fraction=0.9)),),
    )


def full_hp_job(tmp_path) -> HyperparameterTuningJobSpec:
    return HyperparameterTuningJobSpec(
        study_spec=full_study(), trial_job_spec=full_job(tmp_path), max_trial_count=9, parallel_trial_count=3, max_failed_trial_count=2
    )


def field_coverage(obj: Any, seen: dict[str, bool]) -> dict[str, bool]:
    """Class.field -> whether some instance in `obj` (at any depth) sets it off its default."""
    for f in dataclasses.fields(obj):
        if f.metadata.get("vertex", schema.Vertex()).vcli_only and f.name != "safety_metrics":  # those travel in `metrics`
            continue
        value = getattr(obj, f.name)
        if f.default is not dataclasses.MISSING:
            is_set = value != f.default
        elif f.default_factory is not dataclasses.MISSING:
            is_set = value != f.default_factory()
        else:
            is_set = True
        key = f"{type(obj).__name__}.{f.name}"
        seen[key] = seen.get(key, False) or is_set
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                field_coverage(item, seen)
    return seen


def full_pbt_study() -> StudySpec:
    """PBT excludes automated stopping: its spec is set on a study of its own."""
    return dataclasses.replace(
        full_study(), algorithm=Algorithm.POPULATION_BASED_TRAINING, automated_stopping_spec=None, safety_metrics=(),
        population_based_training_spec=PopulationBasedTrainingSpec(
            population_size=3, perturbation_interval_steps=2, quantile_fraction=0.5, resample_probability=0.1,
            perturbation_factors=(0.5, 2.0), max_step_count=10),
    )


def test_a_pbt_study_round_trips_every_field():
    spec = full_pbt_study()
    wire = codec.study_spec_to_dict(spec)
    assert wire["algorithm"] == "POPULATION_BASED_TRAINING"
    assert wire["populationBasedTrainingSpec"]["maxStepCount"] == "10"
    assert codec.study_spec_from_stored(wire) == spec


def test_the_examples_set_every_field(tmp_path):
    # A field added to a spec dataclass fails here until the examples give it a value, so
    # the round trips below cover it too.
    spec = full_hp_job(tmp_path)
    coverage = field_coverage(full_pbt_study(), field_coverage(spec, {}))
    assert [name for name, is_set in coverage.items() if not is_set] == []
    assert len(coverage) > 50


def test_custom_job_spec_round_trips_every_field(tmp_path):
    job = full_job(tmp_path)
    wire = codec.custom_job_spec_to_dict(job)
    assert codec.custom_job_spec_from_stored(wire) == job
    # The wire shape is Vertex's: camelCase, int64 as a string, a duration, a GcsDestination.
    assert wire["workerPoolSpecs"][2]["replicaCount"] == "3"
    assert wire["scheduling"]["timeout"] == "90.5s"
    assert wire["baseOutputDirectory"] == {"outputUriPrefix": str(tmp_path / "out")}
    assert wire["workerPoolSpecs"][0]["diskSpec"] == {"bootDiskType": "pd-standard", "bootDiskSizeGb": 250}
    assert wire["workerPoolSpecs"][1] == {}


def test_hyperparameter_tuning_job_round_trips_every_field(tmp_path):
    spec = full_hp_job(tmp_path)
    wire = codec.hp_tuning_job_to_dict(spec)
    back, display_name, labels = codec.hp_tuning_job_from_document(wire, "t.yaml")
    assert back == spec and display_name is None and labels == {}
    assert codec.study_spec_from_stored(codec.study_spec_to_dict(spec.study_spec)) == spec.study_spec
    layers = wire["studySpec"]["parameters"][1]
    assert layers["integerValueSpec"] == {"minValue": "1", "maxValue": "8", "defaultValue": "2"}
    assert layers["conditionalParameterSpecs"][0]["parentIntValues"] == {"values": ["2", "3"]}
    # vcli's own study limits are not Vertex fields: they never reach the wire.
    assert not {"studyTimeoutSeconds", "goalValue", "seed"} & set(wire)


@pytest.mark.parametrize(
    "stopping, key",
    [
        (MedianAutomatedStoppingSpec(use_elapsed_duration=True), "medianAutomatedStoppingSpec"),
        (DecayCurveAutomatedStoppingSpec(use_elapsed_duration=True), "decayCurveStoppingSpec"),
        (AshaStoppingSpec(reduction_factor=4, min_step_count=2, max_step_count=32, use_elapsed_duration=True), "ashaStoppingSpec"),
        (HyperbandStoppingSpec(reduction_factor=2, min_step_count=3, max_step_count=48, use_elapsed_duration=True),
         "hyperbandStoppingSpec"),
    ],
)
def test_every_stopping_spec_round_trips_under_its_vertex_key(stopping, key):
    spec = dataclasses.replace(full_study(), automated_stopping_spec=stopping)
    assert all(field_coverage(stopping, {}).values())  # the example sets every field
    wire = codec.study_spec_to_dict(spec)
    assert key in wire and not {"convexAutomatedStoppingSpec"} & set(wire)
    assert codec.study_spec_from_stored(wire) == spec


def test_a_null_field_is_not_set_as_in_vertex():
    """proto3 JSON reads null as the field's default: `medianAutomatedStoppingSpec: null` turned
    the median rule on, `hyperbandStoppingSpec: null` was an error, and a null next to a rule
    was refused as two rules at once."""
    wire = {k: v for k, v in codec.study_spec_to_dict(full_study()).items() if not k.endswith("StoppingSpec")}
    assert codec.study_spec_from_stored({**wire, "medianAutomatedStoppingSpec": None}).automated_stopping_spec is None
    assert codec.study_spec_from_stored({**wire, "hyperbandStoppingSpec": None}).automated_stopping_spec is None
    both = {**wire, "hyperbandStoppingSpec": None, "decayCurveStoppingSpec": {"useElapsedDuration": True}}
    assert codec.study_spec_from_stored(both).automated_stopping_spec == DecayCurveAutomatedStoppingSpec(
        use_elapsed_duration=True)
    with pytest.raises(ConfigError, match="unknown field"):
        codec.study_spec_from_stored({**wire, "medianStoppingSpec": None})  # a misspelt key is still refused


def test_secret_env_values_are_redacted_on_the_wire(tmp_path):
    job = full_job(tmp_path)
    pool = dataclasses.replace(
        job.worker_pool_specs[0], container_spec=ContainerSpec(image_uri="t", env=(EnvVar(name="API_TOKEN", value="s3"),))
    )
    wire = codec.custom_job_spec_to_dict(dataclasses.replace(job, worker_pool_specs=(pool,)))
    assert wire["workerPoolSpecs"][0]["containerSpec"]["env"] == [{"name": "API_TOKEN", "value": "<redacted>"}]


@pytest.mark.parametrize(
    "mutate, path, message",
    [
        (
            lambda d: d["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"].update(imageUrl="x"),
            "trialJobSpec.workerPoolSpecs[0].containerSpec.imageUrl",
            "unknown field of ContainerSpec; did you mean [imageUri]? Valid fields: [args, command, env, imageUri]",
        ),
        (
            lambda d: d["studySpec"]["parameters"][1]["conditionalParameterSpecs"][0].update(parentValues=[2]),
            "studySpec.parameters[1].conditionalParameterSpecs[0].parentValues",
            "unknown field of ConditionalParameterSpec; did you mean [parentIntValues]? Valid fields: "
            "[parameterSpec, parentCategoricalValues, parentDiscreteValues, parentIntValues]",
        ),
        (
            lambda d: d["trialJobSpec"]["baseOutputDirectory"].update(output_uri_prefix="/x"),
            "trialJobSpec.baseOutputDirectory.output_uri_prefix",
            "keys with underscores are invalid; the field is spelled [outputUriPrefix] (camelCase)",
        ),
        (
            lambda d: d.update(goalValue=0.9),
            "goalValue",
            "unknown field of HyperparameterTuningJob",
        ),
    ],
)
def test_unknown_fields_are_rejected_with_their_path(tmp_path, mutate, path, message):
    doc = codec.hp_tuning_job_to_dict(full_hp_job(tmp_path))
    mutate(doc)
    with pytest.raises(ConfigError) as e:
        codec.hp_tuning_job_from_document(doc, "t.yaml")
    assert str(e.value).startswith(f"Invalid value for [--config]: t.yaml at [{path}]: {message}")


class Colour(str, Enum):
    COLOUR_UNSPECIFIED = "COLOUR_UNSPECIFIED"
    RED = "RED"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CodecProbeInner:
    colour: Colour = Colour.COLOUR_UNSPECIFIED


@dataclasses.dataclass(frozen=True, kw_only=True)
class CodecProbe:
    """A message declared only as a dataclass: the codec must need nothing else."""

    VERTEX_UNMODELED: ClassVar[Mapping[str, Any]] = {"legacyKnob": str}

    display_name: str
    step_count: int = dataclasses.field(default=0, metadata=vertex(int64=True))
    wait_seconds: float | None = dataclasses.field(default=None, metadata=vertex(name="maxWait", duration=True))
    tags: tuple[str, ...] = ()
    inner: CodecProbeInner | None = None
    local_only: bool = dataclasses.field(default=False, metadata=vertex(vcli_only=True))


def test_a_new_message_needs_only_its_dataclass():
    msg = schema.message(CodecProbe)
    assert {w: f.kind for w, f in msg.fields.items()} == {
        "displayName": "str",
        "stepCount": "int64",
        "maxWait": "duration",
        "tags": ("list", "str"),
        "inner": "CodecProbeInner",
        "legacyKnob": "str",
    }
    decoder = schema.Decoder("p.yaml")
    data = decoder.decode_message(
        {"displayName": "n", "stepCount": "12", "maxWait": "30s", "tags": "one", "inner": {"colour": "RED"}, "legacyKnob": "k"},
        CodecProbe,
        "",
    )
    probe = schema.build(CodecProbe, data)
    assert probe == CodecProbe(display_name="n", step_count=12, wait_seconds=30.0, tags=("one",), inner=CodecProbeInner(colour=Colour.RED))
    assert schema.to_wire(probe) == {
        "displayName": "n", "stepCount": "12", "maxWait": "30s", "tags": ["one"], "inner": {"colour": "RED"}
    }
    # Zero values are left out (proto3 JSON), required fields and set messages are not.
    assert schema.to_wire(CodecProbe(display_name="", inner=CodecProbeInner())) == {"displayName": "", "inner": {}}
    with pytest.raises(ConfigError, match=r"at \[localOnly\]: unknown field of CodecProbe"):
        decoder.decode_message({"localOnly": True}, CodecProbe, "")
    with pytest.raises(ConfigError, match=r"at \[inner.colour\]: \[BLUE\] is not one of \[COLOUR_UNSPECIFIED, RED\]"):
        decoder.decode_message({"inner": {"colour": "BLUE"}}, CodecProbe, "")


@pytest.mark.parametrize(
    ("typ", "value", "expected"),
    [
        ("str", "abc", "abc"), ("str", 12, "12"), ("str", True, "true"), ("str", 1.5, "1.5"),
        ("int64", 7, 7), ("int64", 7.0, 7), ("int64", " -3 ", -3), ("int64", "+4", 4), ("int32", "12", 12),
        ("count", 3, 3), ("count", "3", 3), ("count", 2.0, 2), ("count", 0.5, 0.5), ("count", "0.25", 0.25),
        ("double", 1, 1.0), ("double", "1e-5", 1e-5), ("double", 2.5, 2.5),
        ("bool", True, True), ("bool", "TRUE", True), ("bool", "false", False),
        ("duration", "8000s", 8000.0), ("duration", "1.5s", 1.5), ("duration", 30, 30.0), ("duration", 0.5, 0.5),
    ],
)
def test_a_scalar_field_takes_what_gcloud_takes(typ, value, expected):
    got = schema.Decoder("p.yaml").decode_scalar(value, typ, "a.b")
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("typ", "value", "message"),
    [
        ("str", None, "expected a string"), ("str", [1], "expected a string"), ("str", {"a": 1}, "expected a string"),
        ("int64", True, r"expected an integer, found \[True\]"), ("int64", 1.5, r"expected an integer, found \[1.5\]"),
        ("int32", "1e3", r"expected an integer, found \[1e3\]"), ("int64", None, "expected an integer"),
        ("count", -1, r"expected a non-negative number, found \[-1\]"), ("count", math.nan, r"expected a non-negative number, found \[nan\]"),
        ("count", math.inf, r"expected a non-negative number, found \[inf\]"), ("count", "x", r"expected a number, found \[x\]"),
        ("double", False, r"expected a number, found \[False\]"), ("double", "fast", r"expected a number, found \[fast\]"),
        ("double", [1.0], "expected a number"),
        ("bool", "yes", r"expected true or false, found \[yes\]"), ("bool", 1, r"expected true or false, found \[1\]"),
        ("duration", "8000", r"expected a duration in seconds such as \[8000s\], found \[8000\]"),
        ("duration", True, "expected a duration"), ("duration", "-5s", "expected a duration"),
        ("duration", {"seconds": 5}, "expected a duration"),
    ],
)
def test_a_wrong_scalar_is_one_error_naming_its_path(typ, value, message):
    with pytest.raises(ConfigError, match=r"p\.yaml at \[a\.b\]: " + message):
        schema.Decoder("p.yaml").decode_scalar(value, typ, "a.b")
