"""Vertex-shaped input and output: `--worker-pool-spec` flags, `--config` YAML/JSON, and the
camelCase REST shape used by the store, `describe` and CLUSTER_SPEC's `job`.

This module is the only translator between Vertex's camelCase and `vcli.spec`, and the only
importer of PyYAML (lazily). Error texts copy gcloud's (gcloud-vertex.md §1.5); where gcloud
is vague (unknown YAML fields) the message names the field's full path and what is valid.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from vcli.errors import ConfigError, InvalidValueError, UsageError
from vcli.spec import is_secret
from vcli.spec import (
    ACCELERATOR_TYPES,
    Algorithm,
    CategoricalValueSpec,
    ConditionalParameterSpec,
    ContainerSpec,
    CustomJobSpec,
    DiscreteValueSpec,
    DiskSpec,
    DoubleValueSpec,
    EnvVar,
    Goal,
    HyperparameterTuningJobSpec,
    IntegerValueSpec,
    LocalPackage,
    MachineSpec,
    MeasurementSelectionType,
    MetricSpec,
    ParameterSpec,
    PythonPackageSpec,
    ScaleType,
    Scheduling,
    StudySpec,
    WorkerPoolSpec,
)

WPS_FLAG = "--worker-pool-spec"

#: gcloud's 13 keys, and only those.
WORKER_POOL_SPEC_KEYS: tuple[str, ...] = (
    "accelerator-count",
    "accelerator-type",
    "container-image-uri",
    "executor-image-uri",
    "extra-dirs",
    "extra-packages",
    "local-package-path",
    "machine-type",
    "output-image-uri",
    "python-module",
    "replica-count",
    "requirements",
    "script",
)
_INT_KEYS = ("replica-count", "accelerator-count")
_LIST_KEYS = ("requirements", "extra-packages", "extra-dirs")
_LOCAL_ONLY_KEYS = ("script", "requirements", "extra-packages", "extra-dirs", "output-image-uri")
_SOFTWARE_KEYS = ("container-image-uri", "executor-image-uri", "python-module") + _LOCAL_ONLY_KEYS


# =========================================================================== flag grammar


def split_arg_list(value: str) -> list[str]:
    """gcloud ArgList: comma-separated; `^D^` at the start switches the delimiter to D."""
    if value == "":
        return []
    delim = ","
    m = re.match(r"^\^([^^]+)\^", value)
    if m:
        delim = m.group(1)
        value = value[m.end():]
    return value.split(delim)


def parse_dict_arg(value: str, *, flag: str, valid_keys: Sequence[str]) -> dict[str, str]:
    """gcloud ArgDict: `k=v,k2=v2`; the first `=` splits key and value; keys must be valid."""
    out: dict[str, str] = {}
    for pair in split_arg_list(value):
        if pair == "":
            continue
        if "=" not in pair:
            raise UsageError(
                f"argument {flag}: Bad syntax for dict arg: [{pair}]. Please see "
                "`gcloud topic flags-file` or `gcloud topic escaping` for information on "
                "providing list or dictionary flag values with special characters."
            )
        key, _, val = pair.partition("=")
        if key not in valid_keys:
            hint = difflib.get_close_matches(key, valid_keys, n=1)
            extra = f" (did you mean [{hint[0]}]?)" if hint else ""
            raise UsageError(
                f"argument {flag}: valid keys are [{', '.join(sorted(valid_keys))}]; received: {key}{extra}"
            )
        out[key] = val
    return out


def parse_worker_pool_spec(value: str) -> dict[str, Any]:
    """One `--worker-pool-spec` value -> typed dict (gcloud's conversions; `{}` if empty)."""
    raw = parse_dict_arg(value, flag=WPS_FLAG, valid_keys=WORKER_POOL_SPEC_KEYS)
    spec: dict[str, Any] = {}
    for key, val in raw.items():
        if key in _INT_KEYS:
            try:
                spec[key] = int(val)
            except ValueError:
                raise UsageError(
                    f"argument {WPS_FLAG}: Invalid value [{val}] for key [{key}]: expected an integer"
                ) from None
        elif key in _LIST_KEYS:
            spec[key] = [v for v in val.split(";") if v]
        else:
            spec[key] = val
    return spec


def _keys(keys: Sequence[str]) -> str:
    return ", ".join(sorted(keys))


def validate_worker_pool_specs(specs: Sequence[Mapping[str, Any]]) -> None:
    """gcloud's `_ValidateWorkerPoolSpecArgs`, with its messages (exit 1)."""

    def bad(msg: str) -> InvalidValueError:
        return InvalidValueError(WPS_FLAG, msg)

    if not specs:
        return
    if not specs[0]:
        raise bad("Empty value is not allowed for the first `--worker-pool-spec` flag.")
    if len(specs) > 4:
        raise bad(f"At most 4 worker pools are supported (chief, workers, parameter servers, evaluators); received {len(specs)}.")
    has_local = "local-package-path" in specs[0]
    for i, spec in enumerate(specs):
        if not spec:
            continue
        if "machine-type" not in spec:
            raise bad("Key [machine-type] required in dict arg but not provided.")
        if "accelerator-count" in spec and "accelerator-type" not in spec:
            raise bad("Key [accelerator-type] required as [accelerator-count] is specified.")
        acc = spec.get("accelerator-type")
        if acc is not None and acc not in ACCELERATOR_TYPES:
            raise bad(f"Found invalid value of [accelerator-type]: {acc}. Available values are [{', '.join(sorted(ACCELERATOR_TYPES))}].")
        for key in _INT_KEYS:
            if key in spec and spec[key] < 1:
                raise bad(f"Key [{key}] must be a positive integer, received: {spec[key]}.")
        if i == 0 and spec.get("replica-count", 1) != 1:
            raise bad(f"The first `--worker-pool-spec` is the chief and must have replica-count=1, received: {spec['replica-count']}.")
    # As gcloud: the hardware keys of every spec are checked first, then the software keys.
    for i, spec in enumerate(specs):
        if not spec:
            continue
        if i > 0 and "local-package-path" in spec:
            raise bad("Key [local-package-path] is only allowed in the first `--worker-pool-spec` flag.")
        if i > 0 and has_local:
            found = [k for k in _SOFTWARE_KEYS if k in spec]
            if found:
                raise bad(
                    f"Keys [{_keys(found)}] are not allowed: A local package has been specified in the first "
                    "`--worker-pool-spec` flag and to be used for all workers, do not specify these keys elsewhere."
                )
            continue
        if "local-package-path" in spec:
            _validate_local_package(spec)
            continue
        # gcloud's order: the image keys first, then the keys that need a local package.
        if ("executor-image-uri" in spec) == ("container-image-uri" in spec):
            raise bad("Exactly one of keys [executor-image-uri, container-image-uri] is required.")
        if "container-image-uri" in spec and "python-module" in spec:
            raise bad("Key [python-module] is not allowed together with key [container-image-uri].")
        if "executor-image-uri" in spec and "python-module" not in spec:
            raise bad("Key [python-module] is required.")
        local_only = [k for k in _LOCAL_ONLY_KEYS if k in spec]
        if local_only:
            raise bad(
                f"Keys [{_keys(local_only)}] are not allowed: Only allow to specify together with "
                "`local-package-path` in the first `--worker-pool-spec` flag."
            )


def _validate_local_package(spec: Mapping[str, Any]) -> None:
    def bad(msg: str) -> InvalidValueError:
        return InvalidValueError(WPS_FLAG, msg)

    path = os.path.abspath(os.path.expanduser(spec["local-package-path"]))
    if not os.path.isdir(path):
        raise bad(f"Directory '{path}' is not found.")
    if "container-image-uri" in spec:
        raise bad("Key [container-image-uri] is not allowed together with key [local-package-path].")
    if ("python-module" in spec) == ("script" in spec):
        raise bad("Exactly one of keys [python-module, script] is required when `local-package-path` is specified.")
    if "script" in spec and not os.path.isfile(os.path.join(path, spec["script"])):
        raise bad(f"File '{spec['script']}' is not found under the package: '{path}'.")
    if "python-module" in spec:
        module_path = os.path.join(path, *spec["python-module"].split("."))
        if not (os.path.isfile(module_path + ".py") or os.path.isdir(module_path)):
            raise bad(f"Module '{spec['python-module']}' is not found under the package: '{path}'.")
    for pkg in spec.get("extra-packages", []):
        if not os.path.isfile(os.path.join(path, pkg)):
            raise bad(f"Package file '{pkg}' is not found under the package: '{path}'.")
    for d in spec.get("extra-dirs", []):
        if not os.path.isdir(os.path.join(path, d)):
            raise bad(f"Directory '{d}' is not found under the package: '{path}'.")
    image = spec.get("output-image-uri")
    if image is not None and not _IMAGE_REF.match(image):
        raise bad(f"'{image}' is not a valid container image uri: Unable to parse repository and tag.")


_IMAGE_REF = re.compile(r"^[a-z0-9]+([._/:-][a-zA-Z0-9_.-]+)*(@sha256:[0-9a-f]{64})?$")


def worker_pools_from_flags(specs: Sequence[Mapping[str, Any]]) -> tuple[WorkerPoolSpec, ...]:
    """Validated `--worker-pool-spec` dicts -> WorkerPoolSpecs (pool 0's local package shared)."""
    validate_worker_pool_specs(specs)
    local: LocalPackage | None = None
    if specs and "local-package-path" in specs[0]:
        s0 = specs[0]
        local = LocalPackage(
            path=os.path.abspath(os.path.expanduser(s0["local-package-path"])),
            executor_image_uri=s0.get("executor-image-uri"),
            python_module=s0.get("python-module"),
            script=s0.get("script"),
            requirements=tuple(s0.get("requirements", ())),
            extra_packages=tuple(s0.get("extra-packages", ())),
            extra_dirs=tuple(s0.get("extra-dirs", ())),
            output_image_uri=s0.get("output-image-uri"),
        )
    pools: list[WorkerPoolSpec] = []
    for spec in specs:
        if not spec:
            pools.append(WorkerPoolSpec())
            continue
        acc = spec.get("accelerator-type")
        machine = MachineSpec(
            machine_type=spec["machine-type"],
            accelerator_type=acc,
            accelerator_count=spec.get("accelerator-count", 1) if acc else 0,
        )
        pool = WorkerPoolSpec(machine_spec=machine, replica_count=spec.get("replica-count", 1))
        if local is not None:
            pool = replace(pool, local_package=local, container_spec=ContainerSpec(image_uri=local.output_image_uri or ""))
        elif "container-image-uri" in spec:
            pool = replace(pool, container_spec=ContainerSpec(image_uri=spec["container-image-uri"]))
        else:
            pool = replace(
                pool,
                python_package_spec=PythonPackageSpec(
                    executor_image_uri=spec["executor-image-uri"], python_module=spec["python-module"]
                ),
            )
        pools.append(pool)
    return tuple(pools)


def apply_args_and_command(
    spec: CustomJobSpec, *, args: Sequence[str] | None, command: Sequence[str] | None,
    python_package_uris: Sequence[str] | None = None,
) -> CustomJobSpec:
    """gcloud: `--args` replaces args on every pool; `--command` on every containerSpec."""
    pools = []
    for pool in spec.worker_pool_specs:
        if pool.container_spec is not None:
            cs = pool.container_spec
            if args is not None:
                cs = replace(cs, args=tuple(args))
            if command is not None:
                cs = replace(cs, command=tuple(command))
            pool = replace(pool, container_spec=cs)
        if pool.python_package_spec is not None:
            ps = pool.python_package_spec
            if args is not None:
                ps = replace(ps, args=tuple(args))
            if python_package_uris is not None:
                ps = replace(ps, package_uris=tuple(python_package_uris))
            pool = replace(pool, python_package_spec=ps)
        pools.append(pool)
    return replace(spec, worker_pool_specs=tuple(pools))


_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


def parse_labels(value: str | None) -> dict[str, str]:
    """`--labels=KEY=VALUE,...` with gcloud's rules for keys and values."""
    if not value:
        return {}
    out: dict[str, str] = {}
    for pair in split_arg_list(value):
        key, sep, val = pair.partition("=")
        if not sep:
            raise UsageError(f"argument --labels: Bad syntax for dict arg: [{pair}].")
        if not _LABEL_KEY.match(key):
            raise InvalidValueError("--labels", f"Only lowercase letters, digits, '_' and '-' are allowed in keys, which must start with a letter and be at most 63 characters: [{key}].")
        if not _LABEL_VALUE.match(val):
            raise InvalidValueError("--labels", f"Only lowercase letters, digits, '_' and '-' are allowed in values, at most 63 characters: [{val}].")
        out[key] = val
    return out


# =========================================================================== YAML decoding

# Field types of the Vertex messages vcli reads. A type is one of: "str", "int64", "int32",
# "double", "bool", "duration", "any" (kept as given), ("enum", names), ("list", type),
# ("map",) for string maps, or the name of another message in SCHEMAS.
Type = Any

SCHEMAS: dict[str, dict[str, Type]] = {
    "CustomJobSpec": {
        "workerPoolSpecs": ("list", "WorkerPoolSpec"),
        "scheduling": "Scheduling",
        "serviceAccount": "str",
        "network": "str",
        "reservedIpRanges": ("list", "str"),
        "baseOutputDirectory": "GcsDestination",
        "protectedArtifactLocationId": "str",
        "tensorboard": "str",
        "enableWebAccess": "bool",
        "enableDashboardAccess": "bool",
        "experiment": "str",
        "experimentRun": "str",
        "models": ("list", "str"),
        "persistentResourceId": "str",
        "pscInterfaceConfig": "any",
    },
    "WorkerPoolSpec": {
        "containerSpec": "ContainerSpec",
        "pythonPackageSpec": "PythonPackageSpec",
        "machineSpec": "MachineSpec",
        "replicaCount": "int64",
        "nfsMounts": ("list", "any"),
        "lustreMounts": ("list", "any"),
        "diskSpec": "DiskSpec",
        # vcli extension: gcloud's autopackaging keys for pool 0, kept instead of a built image.
        "localPackage": "LocalPackage",
    },
    "MachineSpec": {
        "machineType": "str",
        "acceleratorType": ("enum", ("ACCELERATOR_TYPE_UNSPECIFIED",) + ACCELERATOR_TYPES),
        "acceleratorCount": "int32",
        "gpuPartitionSize": "str",
        "tpuTopology": "str",
        "reservationAffinity": "any",
        "multihostGpuNodeCount": "int32",
    },
    "DiskSpec": {"bootDiskType": "str", "bootDiskSizeGb": "int32"},
    "ContainerSpec": {"imageUri": "str", "command": ("list", "str"), "args": ("list", "str"), "env": ("list", "EnvVar")},
    "PythonPackageSpec": {
        "executorImageUri": "str",
        "packageUris": ("list", "str"),
        "pythonModule": "str",
        "args": ("list", "str"),
        "env": ("list", "EnvVar"),
    },
    "EnvVar": {"name": "str", "value": "str"},
    "GcsDestination": {"outputUriPrefix": "str"},
    "Scheduling": {
        "timeout": "duration",
        "restartJobOnWorkerRestart": "bool",
        "disableRetries": "bool",
        "strategy": ("enum", ("STRATEGY_UNSPECIFIED", "ON_DEMAND", "LOW_COST", "STANDARD", "SPOT", "FLEX_START")),
        "maxWaitDuration": "duration",
    },
    "LocalPackage": {
        "path": "str",
        "executorImageUri": "str",
        "pythonModule": "str",
        "script": "str",
        "requirements": ("list", "str"),
        "extraPackages": ("list", "str"),
        "extraDirs": ("list", "str"),
        "outputImageUri": "str",
    },
    "HyperparameterTuningJob": {
        "displayName": "str",
        "studySpec": "StudySpec",
        "maxTrialCount": "int32",
        "parallelTrialCount": "int32",
        "maxFailedTrialCount": "int32",
        "trialJobSpec": "CustomJobSpec",
        "labels": ("map",),
        "encryptionSpec": "EncryptionSpec",
    },
    "EncryptionSpec": {"kmsKeyName": "str"},
    "StudySpec": {
        "metrics": ("list", "MetricSpec"),
        "parameters": ("list", "ParameterSpec"),
        "algorithm": ("enum", tuple(a.value for a in Algorithm)),
        "observationNoise": ("enum", ("OBSERVATION_NOISE_UNSPECIFIED", "LOW", "HIGH")),
        "measurementSelectionType": ("enum", tuple(m.value for m in MeasurementSelectionType)),
        "decayCurveStoppingSpec": "any",
        "medianAutomatedStoppingSpec": "any",
        "convexAutomatedStoppingSpec": "any",
        "convexStopConfig": "any",
        "studyStoppingConfig": "any",
    },
    "MetricSpec": {
        "metricId": "str",
        "goal": ("enum", ("GOAL_TYPE_UNSPECIFIED", "MAXIMIZE", "MINIMIZE")),
        "safetyConfig": "any",
    },
    "ParameterSpec": {
        "parameterId": "str",
        "scaleType": ("enum", tuple(s.value for s in ScaleType)),
        "doubleValueSpec": "DoubleValueSpec",
        "integerValueSpec": "IntegerValueSpec",
        "categoricalValueSpec": "CategoricalValueSpec",
        "discreteValueSpec": "DiscreteValueSpec",
        "conditionalParameterSpecs": ("list", "ConditionalParameterSpec"),
    },
    "DoubleValueSpec": {"minValue": "double", "maxValue": "double", "defaultValue": "double"},
    "IntegerValueSpec": {"minValue": "int64", "maxValue": "int64", "defaultValue": "int64"},
    "CategoricalValueSpec": {"values": ("list", "str"), "defaultValue": "str"},
    "DiscreteValueSpec": {"values": ("list", "double"), "defaultValue": "double"},
    "ConditionalParameterSpec": {
        "parameterSpec": "ParameterSpec",
        "parentDiscreteValues": "DiscreteValueCondition",
        "parentIntValues": "IntValueCondition",
        "parentCategoricalValues": "CategoricalValueCondition",
    },
    "DiscreteValueCondition": {"values": ("list", "double")},
    "IntValueCondition": {"values": ("list", "int64")},
    "CategoricalValueCondition": {"values": ("list", "str")},
}

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


class _Decoder:
    """Checks a parsed document against SCHEMAS the way gcloud's message decoder does."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, path: str, message: str) -> ConfigError:
        where = f" at [{path}]" if path else ""
        return ConfigError(f"Invalid value for [--config]: {self.source}{where}: {message}")

    def decode(self, value: Any, typ: Type, path: str) -> Any:
        if isinstance(typ, tuple):
            kind = typ[0]
            if kind == "list":
                if value is None:
                    return []
                # gcloud wraps a single mapping or scalar given where a list is expected.
                items = value if isinstance(value, list) else [value]
                return [self.decode(v, typ[1], f"{path}[{i}]") for i, v in enumerate(items)]
            if kind == "enum":
                if not isinstance(value, str) or value not in typ[1]:
                    raise self.error(path, f"[{value}] is not one of [{', '.join(typ[1])}]")
                return value
            if kind == "map":
                if not isinstance(value, dict):
                    raise self.error(path, "expected a mapping of strings")
                return {str(k): str(v) for k, v in value.items()}
            raise AssertionError(typ)
        if typ == "any":
            return value
        if typ in SCHEMAS:
            return self.decode_message(value, typ, path)
        return self.decode_scalar(value, typ, path)

    def decode_scalar(self, value: Any, typ: str, path: str) -> Any:
        if typ == "str":
            if isinstance(value, (dict, list)) or value is None:
                raise self.error(path, "expected a string")
            if isinstance(value, bool):
                return "true" if value else "false"
            return str(value)
        if typ in ("int64", "int32"):
            if isinstance(value, bool):
                raise self.error(path, f"expected an integer, found [{value}]")
            if isinstance(value, int):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str) and re.fullmatch(r"[-+]?\d+", value.strip()):
                return int(value)
            raise self.error(path, f"expected an integer, found [{value}]")
        if typ == "double":
            if isinstance(value, bool):
                raise self.error(path, f"expected a number, found [{value}]")
            if isinstance(value, (int, float)):
                return float(value)
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
            raise self.error(path, f"expected a number, found [{value}]")
        if typ == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            raise self.error(path, f"expected true or false, found [{value}]")
        if typ == "duration":
            m = _DURATION.match(str(value)) if isinstance(value, (str, int, float)) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if not m:
                raise self.error(path, f"expected a duration in seconds such as [8000s], found [{value}]")
            return float(m.group(1))
        raise AssertionError(typ)

    def decode_message(self, value: Any, name: str, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping ({name}), found [{value}]")
        schema = SCHEMAS[name]
        out: dict[str, Any] = {}
        for key, val in value.items():
            key = str(key)
            sub = f"{path}.{key}" if path else key
            if key not in schema:
                if "_" in key and _camel(key) in schema:
                    raise self.error(
                        sub, f"keys with underscores are invalid; the field is spelled [{_camel(key)}] (camelCase)"
                    )
                hint = difflib.get_close_matches(key, list(schema), n=1)
                extra = f"; did you mean [{hint[0]}]?" if hint else "."
                raise self.error(sub, f"unknown field of {name}{extra} Valid fields: [{', '.join(sorted(schema))}]")
            out[key] = self.decode(val, schema[key], sub)
        return out


def load_document(path: str, *, stdin_text: Callable[[], str] | None = None) -> tuple[Any, str]:
    """Read a YAML or JSON file (`-` = stdin); numbers like `1e-5` are numbers (YAML 1.2)."""
    import sys

    if path == "-":
        text = stdin_text() if stdin_text else sys.stdin.read()
        source = "<stdin>"
    else:
        source = path
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise ConfigError(f"Invalid value for [--config]: file [{path}] does not exist.") from None
        except OSError as e:
            raise ConfigError(f"Invalid value for [--config]: cannot read [{path}]: {e.strerror}.") from None
    return parse_yaml(text, source), source


def _yaml_loader() -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    # Plain scalars follow YAML 1.2's core schema, not PyYAML's YAML 1.1: only true/false are
    # booleans (`on`, `no`, `y` stay strings), no sexagesimal (`1:30`), octal `010` or
    # timestamps (`2024-01-01` stays a string), and `1e-5` is a float (1.1 needs a dot).
    dropped = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"}
    Loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers if tag not in dropped]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
    )

    def construct_int(loader: Any, node: Any) -> int:
        text = loader.construct_scalar(node)
        if text.startswith(("0o", "0x")):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text, 10)

    Loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
            |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
            |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
            |[-+]?\.(?:inf|Inf|INF)
            |\.(?:nan|NaN|NAN))$""",
            re.X,
        ),
        list("-+0123456789."),
    )
    return Loader


def parse_yaml(text: str, source: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"Invalid value for [--config]: {source} is not valid YAML or JSON{where}: {problem}") from None


def to_yaml(data: Any) -> str:
    """gcloud-style YAML: block style, keys sorted, unicode kept."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def str_presenter(dumper: Any, value: str) -> Any:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, str_presenter)
    return yaml.dump(data, Dumper=Dumper, default_flow_style=False, sort_keys=True, allow_unicode=True, width=1000)


# --------------------------------------------------------------------------- dict -> spec


def _env(items: Sequence[Mapping[str, Any]]) -> tuple[EnvVar, ...]:
    return tuple(EnvVar(name=e.get("name", ""), value=e.get("value", "")) for e in items)


def custom_job_spec_from_dict(d: Mapping[str, Any], decoder: _Decoder, path: str = "") -> CustomJobSpec:
    """A decoded `CustomJobSpec` dict -> spec, with the checks gcloud leaves to the API."""
    pools = []
    for i, p in enumerate(d.get("workerPoolSpecs", [])):
        ppath = f"{path}workerPoolSpecs[{i}]"
        if not p:
            pools.append(WorkerPoolSpec())
            continue
        ms = p.get("machineSpec", {})
        if not ms.get("machineType"):
            raise decoder.error(f"{ppath}.machineSpec.machineType", "required field is missing")
        acc = ms.get("acceleratorType")
        if acc == "ACCELERATOR_TYPE_UNSPECIFIED":
            acc = None
        machine = MachineSpec(
            machine_type=ms["machineType"],
            accelerator_type=acc,
            accelerator_count=ms.get("acceleratorCount", 1 if acc else 0),
        )
        count = p.get("replicaCount", 1)
        if count < 1:
            raise decoder.error(f"{ppath}.replicaCount", f"must be a positive integer, found [{count}]")
        if i == 0 and count != 1:
            raise decoder.error(f"{ppath}.replicaCount", f"the first worker pool is the chief and must have 1 replica, found [{count}]")
        local = None
        if "localPackage" in p:
            lp = p["localPackage"]
            local = LocalPackage(
                path=os.path.abspath(os.path.expanduser(lp.get("path", "."))),
                executor_image_uri=lp.get("executorImageUri"),
                python_module=lp.get("pythonModule"),
                script=lp.get("script"),
                requirements=tuple(lp.get("requirements", ())),
                extra_packages=tuple(lp.get("extraPackages", ())),
                extra_dirs=tuple(lp.get("extraDirs", ())),
                output_image_uri=lp.get("outputImageUri"),
            )
        cs = p.get("containerSpec")
        ps = p.get("pythonPackageSpec")
        if (cs is None) == (ps is None) and local is None:
            raise decoder.error(
                ppath, "Exactly one of fields [pythonPackageSpec, containerSpec] is required for a [workerPoolSpecs] in the YAML config file."
            )
        disk = p.get("diskSpec")
        pools.append(
            WorkerPoolSpec(
                machine_spec=machine,
                replica_count=count,
                disk_spec=DiskSpec(
                    boot_disk_type=disk.get("bootDiskType", "pd-ssd"), boot_disk_size_gb=disk.get("bootDiskSizeGb", 100)
                ) if disk is not None else None,
                container_spec=ContainerSpec(
                    image_uri=cs.get("imageUri", ""),
                    command=tuple(cs.get("command", ())),
                    args=tuple(cs.get("args", ())),
                    env=_env(cs.get("env", ())),
                ) if cs is not None else (ContainerSpec() if local is not None and ps is None else None),
                python_package_spec=PythonPackageSpec(
                    executor_image_uri=ps.get("executorImageUri", ""),
                    package_uris=tuple(ps.get("packageUris", ())),
                    python_module=ps.get("pythonModule", ""),
                    args=tuple(ps.get("args", ())),
                    env=_env(ps.get("env", ())),
                ) if ps is not None else None,
                local_package=local,
            )
        )
    if pools and pools[0].is_empty:
        raise decoder.error(f"{path}workerPoolSpecs[0]", "the first worker pool (the chief) must not be empty")
    if len(pools) > 4:
        raise decoder.error(f"{path}workerPoolSpecs", f"at most 4 worker pools are supported, found {len(pools)}")
    sched = d.get("scheduling")
    scheduling = None
    if sched is not None:
        scheduling = Scheduling(
            timeout_seconds=sched.get("timeout"),
            restart_job_on_worker_restart=sched.get("restartJobOnWorkerRestart", False),
            disable_retries=sched.get("disableRetries", False),
            strategy=sched.get("strategy"),
        )
    base = d.get("baseOutputDirectory", {}).get("outputUriPrefix")
    if base is not None:
        base = resolve_output_uri(base, lambda msg: decoder.error(f"{path}baseOutputDirectory.outputUriPrefix", msg))
    return CustomJobSpec(
        worker_pool_specs=tuple(pools),
        base_output_directory=base,
        scheduling=scheduling,
        service_account=d.get("serviceAccount"),
        network=d.get("network"),
        enable_web_access=d.get("enableWebAccess", False),
        enable_dashboard_access=d.get("enableDashboardAccess", False),
        persistent_resource_id=d.get("persistentResourceId"),
        tensorboard=d.get("tensorboard"),
        experiment=d.get("experiment"),
        experiment_run=d.get("experimentRun"),
    )


def resolve_output_uri(uri: str, error: Callable[[str], Exception]) -> str:
    """`outputUriPrefix` -> an absolute local path (a path or `file://` URI; gs:// is refused)."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    elif re.match(r"^[a-z][a-z0-9+.-]*://", uri):
        raise error(
            f"[{uri}] is not a local directory: vcli writes outputs on the machines it runs on. Use a local "
            "path or a file:// URI (mount a bucket with gcsfuse and give its path to use Cloud Storage)."
        )
    return os.path.abspath(os.path.expanduser(uri))


def load_custom_job_spec(path: str) -> CustomJobSpec:
    doc, source = load_document(path)
    decoder = _Decoder(source)
    data = decoder.decode_message(doc, "CustomJobSpec", "")
    return custom_job_spec_from_dict(data, decoder)


# --------------------------------------------------------------------------- spec -> dict


def _env_to_dict(env: Sequence[EnvVar], secrets: Sequence[str] = ()) -> list[dict[str, str]]:
    return [{"name": e.name, "value": "<redacted>" if is_secret(e.name, secrets) else e.value} for e in env]


def custom_job_spec_to_dict(spec: CustomJobSpec) -> dict[str, Any]:
    """The REST (camelCase) shape of a CustomJobSpec, as `describe` and CLUSTER_SPEC.job show it."""
    pools: list[dict[str, Any]] = []
    for pool in spec.worker_pool_specs:
        if pool.is_empty:
            pools.append({})
            continue
        ms: dict[str, Any] = {"machineType": pool.machine_spec.machine_type}
        if pool.machine_spec.accelerator_type:
            ms["acceleratorType"] = pool.machine_spec.accelerator_type
            ms["acceleratorCount"] = pool.machine_spec.accelerator_count
        p: dict[str, Any] = {"machineSpec": ms, "replicaCount": str(pool.replica_count)}
        if pool.disk_spec is not None:
            p["diskSpec"] = {"bootDiskType": pool.disk_spec.boot_disk_type, "bootDiskSizeGb": pool.disk_spec.boot_disk_size_gb}
        if pool.container_spec is not None:
            cs = pool.container_spec
            c: dict[str, Any] = {}
            if cs.image_uri:
                c["imageUri"] = cs.image_uri
            if cs.command:
                c["command"] = list(cs.command)
            if cs.args:
                c["args"] = list(cs.args)
            if cs.env:
                c["env"] = _env_to_dict(cs.env)
            p["containerSpec"] = c
        if pool.python_package_spec is not None:
            ps = pool.python_package_spec
            d: dict[str, Any] = {"executorImageUri": ps.executor_image_uri, "pythonModule": ps.python_module}
            if ps.package_uris:
                d["packageUris"] = list(ps.package_uris)
            if ps.args:
                d["args"] = list(ps.args)
            if ps.env:
                d["env"] = _env_to_dict(ps.env)
            p["pythonPackageSpec"] = d
        if pool.local_package is not None:
            lp = pool.local_package
            ld: dict[str, Any] = {"path": lp.path}
            for key, val in (
                ("executorImageUri", lp.executor_image_uri),
                ("pythonModule", lp.python_module),
                ("script", lp.script),
                ("outputImageUri", lp.output_image_uri),
            ):
                if val:
                    ld[key] = val
            for key, vals in (("requirements", lp.requirements), ("extraPackages", lp.extra_packages), ("extraDirs", lp.extra_dirs)):
                if vals:
                    ld[key] = list(vals)
            p["localPackage"] = ld
        pools.append(p)
    out: dict[str, Any] = {"workerPoolSpecs": pools}
    if spec.base_output_directory:
        out["baseOutputDirectory"] = {"outputUriPrefix": spec.base_output_directory}
    if spec.scheduling is not None:
        s: dict[str, Any] = {}
        if spec.scheduling.timeout_seconds is not None:
            s["timeout"] = _fmt_duration(spec.scheduling.timeout_seconds)
        if spec.scheduling.restart_job_on_worker_restart:
            s["restartJobOnWorkerRestart"] = True
        if spec.scheduling.disable_retries:
            s["disableRetries"] = True
        if spec.scheduling.strategy:
            s["strategy"] = spec.scheduling.strategy
        out["scheduling"] = s
    for key, val in (
        ("serviceAccount", spec.service_account),
        ("network", spec.network),
        ("persistentResourceId", spec.persistent_resource_id),
        ("tensorboard", spec.tensorboard),
        ("experiment", spec.experiment),
        ("experimentRun", spec.experiment_run),
    ):
        if val:
            out[key] = val
    if spec.enable_web_access:
        out["enableWebAccess"] = True
    if spec.enable_dashboard_access:
        out["enableDashboardAccess"] = True
    return out


def custom_job_spec_from_stored(data: Mapping[str, Any]) -> CustomJobSpec:
    """Inverse of `custom_job_spec_to_dict` (for records read back from the store)."""
    return custom_job_spec_from_dict(_Decoder("<store>").decode_message(dict(data), "CustomJobSpec", ""), _Decoder("<store>"))


def _fmt_duration(seconds: float) -> str:
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds}s"


def format_number(value: float) -> str:
    """JSON-safe rendering of a float (inf/nan as strings, as proto JSON does)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return json.dumps(value)


# =========================================================================== studies


def _value_spec_from_dict(p: Mapping[str, Any], decoder: _Decoder, path: str) -> tuple[Any, str]:
    kinds = [k for k in ("doubleValueSpec", "integerValueSpec", "categoricalValueSpec", "discreteValueSpec") if k in p]
    if len(kinds) != 1:
        raise decoder.error(
            path, "exactly one of [doubleValueSpec, integerValueSpec, categoricalValueSpec, discreteValueSpec] is required"
        )
    kind = kinds[0]
    v = p[kind]
    vpath = f"{path}.{kind}"
    if kind in ("doubleValueSpec", "integerValueSpec"):
        for key in ("minValue", "maxValue"):
            if key not in v:
                raise decoder.error(f"{vpath}.{key}", "required field is missing")
        if v["minValue"] > v["maxValue"]:
            raise decoder.error(vpath, f"minValue ({v['minValue']}) must not be greater than maxValue ({v['maxValue']})")
        if kind == "doubleValueSpec":
            if not (math.isfinite(v["minValue"]) and math.isfinite(v["maxValue"])):
                raise decoder.error(vpath, "minValue and maxValue must be finite numbers")
            return DoubleValueSpec(min_value=v["minValue"], max_value=v["maxValue"], default_value=v.get("defaultValue")), kind
        return IntegerValueSpec(min_value=v["minValue"], max_value=v["maxValue"], default_value=v.get("defaultValue")), kind
    if kind == "categoricalValueSpec":
        values = v.get("values", [])
        if not values:
            raise decoder.error(f"{vpath}.values", "must list at least one value")
        if len(set(values)) != len(values):
            raise decoder.error(f"{vpath}.values", "values must be unique")
        return CategoricalValueSpec(values=tuple(values), default_value=v.get("defaultValue")), kind
    values = v.get("values", [])
    if not values:
        raise decoder.error(f"{vpath}.values", "must list at least one value")
    if len(values) > 1000:
        raise decoder.error(f"{vpath}.values", "at most 1000 values are allowed")
    for a, b in zip(values, values[1:]):
        if not b - a >= 1e-10:
            raise decoder.error(f"{vpath}.values", f"values must be increasing and at least 1e-10 apart ([{a}] then [{b}])")
    return DiscreteValueSpec(values=tuple(values), default_value=v.get("defaultValue")), kind


def _parameter_from_dict(p: Mapping[str, Any], decoder: _Decoder, path: str, seen: set[str]) -> ParameterSpec:
    pid = p.get("parameterId")
    if not pid:
        raise decoder.error(f"{path}.parameterId", "required field is missing")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", pid):
        raise decoder.error(f"{path}.parameterId", f"[{pid}] may only contain letters, digits, '_', '-' and '.' (it becomes --{pid}=VALUE)")
    if pid in seen:
        raise decoder.error(f"{path}.parameterId", f"duplicate parameterId [{pid}]")
    seen.add(pid)
    value_spec, kind = _value_spec_from_dict(p, decoder, path)
    scale = ScaleType(p.get("scaleType", ScaleType.SCALE_TYPE_UNSPECIFIED.value))
    if kind == "categoricalValueSpec" and scale != ScaleType.SCALE_TYPE_UNSPECIFIED:
        raise decoder.error(f"{path}.scaleType", "must be unset for a categorical parameter")
    if scale in (ScaleType.UNIT_LOG_SCALE, ScaleType.UNIT_REVERSE_LOG_SCALE):
        low = value_spec.values[0] if isinstance(value_spec, DiscreteValueSpec) else value_spec.min_value  # type: ignore[union-attr]
        if low <= 0:
            raise decoder.error(f"{path}.scaleType", f"{scale.value} needs a strictly positive domain, but the lower bound is {low}")
    children = []
    for j, c in enumerate(p.get("conditionalParameterSpecs", [])):
        cpath = f"{path}.conditionalParameterSpecs[{j}]"
        parents = [k for k in ("parentDiscreteValues", "parentIntValues", "parentCategoricalValues") if k in c]
        if len(parents) != 1:
            raise decoder.error(cpath, "exactly one of [parentCategoricalValues, parentDiscreteValues, parentIntValues] is required")
        expected = {
            "categoricalValueSpec": "parentCategoricalValues",
            "discreteValueSpec": "parentDiscreteValues",
            "integerValueSpec": "parentIntValues",
        }.get(kind)
        if expected is None:
            raise decoder.error(cpath, "a DOUBLE parameter cannot have conditional children")
        if parents[0] != expected:
            raise decoder.error(f"{cpath}.{parents[0]}", f"the parent [{pid}] is {kind}: use [{expected}]")
        values = c[parents[0]].get("values", [])
        if not values:
            raise decoder.error(f"{cpath}.{parents[0]}.values", "must list at least one parent value")
        for val in values:
            if not _in_domain(value_spec, val):
                raise decoder.error(f"{cpath}.{parents[0]}.values", f"[{val}] is not in the domain of the parent parameter [{pid}]")
        if "parameterSpec" not in c:
            raise decoder.error(f"{cpath}.parameterSpec", "required field is missing")
        child = _parameter_from_dict(c["parameterSpec"], decoder, f"{cpath}.parameterSpec", seen)
        children.append(ConditionalParameterSpec(parameter_spec=child, parent_values=tuple(values)))
    return ParameterSpec(parameter_id=pid, value_spec=value_spec, scale_type=scale, conditional_parameter_specs=tuple(children))


def _in_domain(spec: Any, value: Any) -> bool:
    if isinstance(spec, CategoricalValueSpec):
        return value in spec.values
    if isinstance(spec, DiscreteValueSpec):
        return any(abs(float(value) - v) < 1e-9 for v in spec.values)
    if isinstance(spec, IntegerValueSpec):
        return spec.min_value <= int(value) <= spec.max_value
    return False


def study_spec_from_dict(d: Mapping[str, Any], decoder: _Decoder, path: str = "studySpec") -> StudySpec:
    metrics = []
    for i, m in enumerate(d.get("metrics", [])):
        mid = m.get("metricId", "")
        mpath = f"{path}.metrics[{i}].metricId"
        if not mid:
            raise decoder.error(mpath, "required field is missing")
        if re.search(r"\s", mid):
            raise decoder.error(mpath, f"metricId [{mid}] must not contain whitespace")
        goal = m.get("goal", "GOAL_TYPE_UNSPECIFIED")
        metrics.append(MetricSpec(metric_id=mid, goal=Goal.MINIMIZE if goal == "MINIMIZE" else Goal.MAXIMIZE))
    if not metrics:
        raise decoder.error(f"{path}.metrics", "at least one metric is required")
    if len(metrics) > 1:
        raise decoder.error(f"{path}.metrics", "vcli optimises exactly one metric; list the one to optimise")
    params: list[ParameterSpec] = []
    seen: set[str] = set()
    for i, p in enumerate(d.get("parameters", [])):
        params.append(_parameter_from_dict(p, decoder, f"{path}.parameters[{i}]", seen))
    if not params:
        raise decoder.error(f"{path}.parameters", "at least one parameter is required")
    algorithm = Algorithm(d.get("algorithm", Algorithm.ALGORITHM_UNSPECIFIED.value))
    spec = StudySpec(
        metrics=tuple(metrics),
        parameters=tuple(params),
        algorithm=algorithm,
        measurement_selection_type=MeasurementSelectionType(
            d.get("measurementSelectionType", MeasurementSelectionType.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED.value)
        ),
    )
    check_algorithm(spec, lambda msg: decoder.error(f"{path}.algorithm", msg))
    return spec


def check_algorithm(spec: StudySpec, error: Callable[[str], Exception]) -> None:
    """GRID_SEARCH needs INTEGER, CATEGORICAL or DISCRETE parameters only (as Vertex says)."""
    if spec.algorithm != Algorithm.GRID_SEARCH:
        return
    for p in iter_parameters(spec.parameters):
        if isinstance(p.value_spec, DoubleValueSpec):
            raise error(
                f"GRID_SEARCH needs every parameter to be INTEGER, CATEGORICAL or DISCRETE, but [{p.parameter_id}] is DOUBLE "
                "(use a discreteValueSpec with the values to try)"
            )


def iter_parameters(params: Sequence[ParameterSpec]) -> list[ParameterSpec]:
    """Every parameter, conditional children included, depth first."""
    out: list[ParameterSpec] = []
    for p in params:
        out.append(p)
        out.extend(iter_parameters([c.parameter_spec for c in p.conditional_parameter_specs]))
    return out


def hp_tuning_job_from_document(doc: Any, source: str) -> tuple[HyperparameterTuningJobSpec, str | None, dict[str, str]]:
    """A `HyperparameterTuningJob` document -> (spec, displayName, labels)."""
    decoder = _Decoder(source)
    data = decoder.decode_message(doc, "HyperparameterTuningJob", "")
    if "studySpec" not in data:
        raise decoder.error("studySpec", "required field is missing")
    if "trialJobSpec" not in data:
        raise decoder.error("trialJobSpec", "required field is missing")
    study = study_spec_from_dict(data["studySpec"], decoder)
    trial_job = custom_job_spec_from_dict(data["trialJobSpec"], decoder, "trialJobSpec.")
    if not trial_job.worker_pool_specs:
        raise decoder.error("trialJobSpec.workerPoolSpecs", "at least one worker pool is required")
    spec = HyperparameterTuningJobSpec(
        study_spec=study,
        trial_job_spec=trial_job,
        max_trial_count=data.get("maxTrialCount", 1),
        parallel_trial_count=data.get("parallelTrialCount", 1),
        max_failed_trial_count=data.get("maxFailedTrialCount", 0),
    )
    for key in ("maxTrialCount", "parallelTrialCount"):
        if key in data and data[key] < 1:
            raise decoder.error(key, f"must be a positive integer, found [{data[key]}]")
    if data.get("maxFailedTrialCount", 0) < 0:
        raise decoder.error("maxFailedTrialCount", "must not be negative")
    return spec, data.get("displayName"), data.get("labels", {})


def study_spec_to_dict(spec: StudySpec) -> dict[str, Any]:
    def param(p: ParameterSpec) -> dict[str, Any]:
        d: dict[str, Any] = {"parameterId": p.parameter_id}
        v = p.value_spec
        if isinstance(v, DoubleValueSpec):
            d["doubleValueSpec"] = {"minValue": v.min_value, "maxValue": v.max_value}
        elif isinstance(v, IntegerValueSpec):
            d["integerValueSpec"] = {"minValue": str(v.min_value), "maxValue": str(v.max_value)}
        elif isinstance(v, CategoricalValueSpec):
            d["categoricalValueSpec"] = {"values": list(v.values)}
        else:
            d["discreteValueSpec"] = {"values": list(v.values)}
        if p.scale_type != ScaleType.SCALE_TYPE_UNSPECIFIED:
            d["scaleType"] = p.scale_type.value
        if p.conditional_parameter_specs:
            kids = []
            for c in p.conditional_parameter_specs:
                if isinstance(v, CategoricalValueSpec):
                    parent = {"parentCategoricalValues": {"values": list(c.parent_values)}}
                elif isinstance(v, DiscreteValueSpec):
                    parent = {"parentDiscreteValues": {"values": [float(x) for x in c.parent_values]}}
                else:
                    parent = {"parentIntValues": {"values": [str(int(x)) for x in c.parent_values]}}
                kids.append({"parameterSpec": param(c.parameter_spec), **parent})
            d["conditionalParameterSpecs"] = kids
        return d

    return {
        "metrics": [{"metricId": m.metric_id, "goal": m.goal.value} for m in spec.metrics],
        "parameters": [param(p) for p in spec.parameters],
        "algorithm": spec.algorithm.value,
        "measurementSelectionType": spec.measurement_selection_type.value,
    }


def study_spec_from_stored(data: Mapping[str, Any]) -> StudySpec:
    decoder = _Decoder("<store>")
    return study_spec_from_dict(decoder.decode_message(dict(data), "StudySpec", "studySpec"), decoder)


# =========================================================================== study flags (vcli extension)

PARAMETER_SPEC_KEYS = ("parameter-id", "type", "min", "max", "values", "scale", "parent", "parent-values")
METRIC_KEYS = ("metric-id", "goal")
_SCALES = {
    "linear": "UNIT_LINEAR_SCALE",
    "log": "UNIT_LOG_SCALE",
    "reverse-log": "UNIT_REVERSE_LOG_SCALE",
    "unspecified": "SCALE_TYPE_UNSPECIFIED",
}
_TYPES = ("double", "integer", "categorical", "discrete")


def _num(text: str, flag: str, key: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidValueError(flag, f"Key [{key}] must be a number, received: {text}.") from None


def parameter_spec_from_flag(value: str) -> tuple[dict[str, Any], str | None, list[str]]:
    """`--parameter-spec=parameter-id=lr,type=double,min=1e-4,max=0.1,scale=log` -> a
    camelCase ParameterSpec dict, plus its parent id and parent values when conditional.

    `type` may be left out: `values` of numbers -> discrete, other `values` -> categorical,
    integer `min`/`max` -> integer, other `min`/`max` -> double. `values` are `;`-separated.
    """
    flag = "--parameter-spec"
    raw = parse_dict_arg(value, flag=flag, valid_keys=PARAMETER_SPEC_KEYS)
    pid = raw.get("parameter-id")
    if not pid:
        raise InvalidValueError(flag, "Key [parameter-id] required in dict arg but not provided.")
    values = [v for v in raw.get("values", "").split(";") if v] if "values" in raw else None
    kind = raw.get("type")
    if kind is not None and kind not in _TYPES:
        raise InvalidValueError(flag, f"Key [type] must be one of [{', '.join(_TYPES)}], received: {kind}.")
    if kind is None:
        if values is not None:
            try:
                [float(v) for v in values]
                kind = "discrete"
            except ValueError:
                kind = "categorical"
        elif re.fullmatch(r"[-+]?\d+", raw.get("min", "x")) and re.fullmatch(r"[-+]?\d+", raw.get("max", "x")):
            kind = "integer"
        else:
            kind = "double"
    d: dict[str, Any] = {"parameterId": pid}
    if kind in ("double", "integer"):
        for key in ("min", "max"):
            if key not in raw:
                raise InvalidValueError(flag, f"Key [{key}] is required for a {kind} parameter [{pid}].")
        lo, hi = _num(raw["min"], flag, "min"), _num(raw["max"], flag, "max")
        if kind == "integer":
            if not (lo.is_integer() and hi.is_integer()):
                raise InvalidValueError(flag, f"Keys [min, max] of integer parameter [{pid}] must be integers.")
            d["integerValueSpec"] = {"minValue": int(lo), "maxValue": int(hi)}
        else:
            d["doubleValueSpec"] = {"minValue": lo, "maxValue": hi}
    elif kind == "categorical":
        d["categoricalValueSpec"] = {"values": values or []}
    else:
        d["discreteValueSpec"] = {"values": [_num(v, flag, "values") for v in values or []]}
    if "scale" in raw:
        if raw["scale"] not in _SCALES:
            raise InvalidValueError(flag, f"Key [scale] must be one of [{', '.join(_SCALES)}], received: {raw['scale']}.")
        d["scaleType"] = _SCALES[raw["scale"]]
    elif kind != "categorical":
        d["scaleType"] = "UNIT_LINEAR_SCALE"
    parent = raw.get("parent")
    parent_values = [v for v in raw.get("parent-values", "").split(";") if v]
    if parent and not parent_values:
        raise InvalidValueError(flag, f"Key [parent-values] is required with [parent] for parameter [{pid}].")
    if parent_values and not parent:
        raise InvalidValueError(flag, f"Key [parent] is required with [parent-values] for parameter [{pid}].")
    return d, parent, parent_values


def parameters_from_flags(values: Sequence[str]) -> list[dict[str, Any]]:
    """All --parameter-spec flags -> camelCase parameters, children nested under parents."""
    parsed = [parameter_spec_from_flag(v) for v in values]
    by_id = {d["parameterId"]: d for d, _, _ in parsed}
    top: list[dict[str, Any]] = []
    for d, parent, parent_values in parsed:
        if parent is None:
            top.append(d)
            continue
        if parent not in by_id:
            raise InvalidValueError("--parameter-spec", f"[{d['parameterId']}] names parent [{parent}], which no --parameter-spec defines.")
        p = by_id[parent]
        if "categoricalValueSpec" in p:
            cond = {"parentCategoricalValues": {"values": parent_values}}
        elif "discreteValueSpec" in p:
            cond = {"parentDiscreteValues": {"values": [_num(v, "--parameter-spec", "parent-values") for v in parent_values]}}
        elif "integerValueSpec" in p:
            cond = {"parentIntValues": {"values": [int(_num(v, "--parameter-spec", "parent-values")) for v in parent_values]}}
        else:
            raise InvalidValueError("--parameter-spec", f"[{parent}] is a double parameter and cannot be a parent of [{d['parameterId']}].")
        p.setdefault("conditionalParameterSpecs", []).append({"parameterSpec": d, **cond})
    return top


def metric_from_flag(value: str) -> dict[str, Any]:
    """`--metric=metric-id=accuracy,goal=maximize` -> a camelCase MetricSpec dict."""
    raw = parse_dict_arg(value, flag="--metric", valid_keys=METRIC_KEYS)
    if not raw.get("metric-id"):
        raise InvalidValueError("--metric", "Key [metric-id] required in dict arg but not provided.")
    goal = raw.get("goal", "maximize").upper()
    if goal not in ("MAXIMIZE", "MINIMIZE"):
        raise InvalidValueError("--metric", f"Key [goal] must be maximize or minimize, received: {raw['goal']}.")
    return {"metricId": raw["metric-id"], "goal": goal}


def parse_duration(text: str, flag: str) -> float:
    """`90`, `90s`, `30m`, `2h` -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise InvalidValueError(flag, f"expected a duration such as 600s, 30m or 2h, received: {text}.")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def hp_tuning_document(
    *,
    config: str | None,
    parameter_specs: Sequence[str] | None,
    metrics: Sequence[str] | None,
    worker_pool_specs: Sequence[str] | None,
    algorithm: str | None,
) -> tuple[Any, str]:
    """The HyperparameterTuningJob document from --config and/or the vcli study flags."""
    from vcli.spec import CustomJobSpec

    doc: dict[str, Any] = {}
    source = "<flags>"
    if config:
        loaded, source = load_document(config)
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"Invalid value for [--config]: {source}: expected a HyperparameterTuningJob mapping")
        doc = dict(loaded or {})
    if parameter_specs:
        doc.setdefault("studySpec", {})
        doc["studySpec"] = {**(doc["studySpec"] or {}), "parameters": parameters_from_flags(parameter_specs)}
    if metrics:
        doc.setdefault("studySpec", {})
        doc["studySpec"] = {**(doc["studySpec"] or {}), "metrics": [metric_from_flag(m) for m in metrics]}
    if worker_pool_specs:
        pools = worker_pools_from_flags([parse_worker_pool_spec(v) for v in worker_pool_specs])
        trial = dict(doc.get("trialJobSpec") or {})
        trial["workerPoolSpecs"] = custom_job_spec_to_dict(CustomJobSpec(worker_pool_specs=pools))["workerPoolSpecs"]
        doc["trialJobSpec"] = trial
    if algorithm:
        choices = ("algorithm-unspecified", "grid-search", "random-search")
        if algorithm not in choices:
            raise UsageError(f"argument --algorithm: Invalid choice: '{algorithm}'. Valid choices are [{', '.join(choices)}].")
        if "studySpec" in doc:
            doc["studySpec"] = {**(doc["studySpec"] or {}), "algorithm": algorithm.replace("-", "_").upper()}
    if not config and not (parameter_specs and metrics and worker_pool_specs):
        raise UsageError(
            "argument --config: Must be specified, unless the study is given by flags: "
            "--parameter-spec (one or more), --metric and --worker-pool-spec."
        )
    return doc, source
