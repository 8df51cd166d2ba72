"""gcloud's dict-flag grammar and vcli's study flags: `--worker-pool-spec`, `--labels`,
`--parameter-spec`, `--metric`, durations and gcloud ArgLists.

Error texts copy gcloud's (gcloud-vertex.md §1.5). The flags' results are `vcli.spec`
worker pools or camelCase dicts that `vcli.codec.study` decodes like a `--config` file.
The `--worker-pool-spec` keys and gcloud's checks of them live in `vcli.codec.pool_checks`.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import replace
from typing import Any, Mapping, Sequence

from vcli.codec import gcs
from vcli.codec.pool_checks import (
    _INT_KEYS,
    _LIST_KEYS,
    WORKER_POOL_SPEC_KEYS,
    WPS_FLAG,
    validate_worker_pool_specs,
)

# Re-exported: the worker pool keys and checks were defined here before `pool_checks`.
from vcli.codec.pool_checks import MAX_ACCELERATOR_COUNT as MAX_ACCELERATOR_COUNT
from vcli.errors import InvalidValueError, UsageError
from vcli.spec import (
    ContainerSpec,
    CustomJobSpec,
    LocalPackage,
    MachineSpec,
    PythonPackageSpec,
    WorkerPoolSpec,
)


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
        if key == "accelerator-count":  # vcli: a fraction (0.5) is a share of a GPU
            try:
                number = float(val)
            except ValueError:
                number = float("nan")
            if number != number or number in (float("inf"), float("-inf")):
                raise UsageError(f"argument {WPS_FLAG}: Invalid value [{val}] for key [{key}]: expected an integer "
                                 "(or a share of a GPU, such as 0.5)")
            spec[key] = int(number) if number.is_integer() else number
        elif key in _INT_KEYS:
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
    """gcloud: `--args` replaces args on every pool; `--command` on every containerSpec.

    gs:// URIs are mapped as in a config (`vcli.codec.gcs`): package URIs to local paths under
    the storage root, values in args and command to `/gcs/...` (or the root without `/gcs`).
    """
    if args is not None:
        args = gcs.map_args(args)
    if command is not None:
        command = gcs.map_args(command)
    if python_package_uris is not None:
        python_package_uris = [_package_uri(u) for u in python_package_uris]
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


def _package_uri(uri: str) -> str:
    if not uri.startswith(gcs.SCHEME):
        return uri
    try:
        return gcs.local_path(uri)
    except ValueError as e:
        raise InvalidValueError("--python-package-uris", str(e)) from None


_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


#: Vertex's limit on a resource's labels.
MAX_LABELS = 64


#: Vertex's limit on a display name ("up to 128 UTF-8 characters").
MAX_DISPLAY_NAME = 128


def check_display_name(name: str) -> str:
    """`name` if Vertex would take it as a display name: at most MAX_DISPLAY_NAME characters,
    no control characters (a newline forged a row in `list`'s table, an escape sequence
    reached the terminal); else InvalidValueError naming --display-name."""
    if len(name) > MAX_DISPLAY_NAME:
        raise InvalidValueError("--display-name", f"at most {MAX_DISPLAY_NAME} characters (Vertex's limit), "
                                                  f"received {len(name)}.")
    if re.search(r"[\x00-\x1f\x7f]", name):
        raise InvalidValueError("--display-name", f"must not contain control characters (newlines, tabs, escapes), "
                                                  f"received [{name}].")
    return name


#: The regions Vertex AI serves custom jobs and tuning in (gcloud's SUPPORTED_TRAINING_REGIONS),
#: and vcli's own `local`. gcloud refuses any other `--region`; so does vcli.
TRAINING_REGIONS = (
    "africa-south1", "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2", "asia-northeast3",
    "asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2", "australia-southeast1",
    "australia-southeast2", "europe-central2", "europe-north1", "europe-north2", "europe-southwest1",
    "europe-west1", "europe-west10", "europe-west12", "europe-west2", "europe-west3", "europe-west4",
    "europe-west6", "europe-west8", "europe-west9", "me-central1", "me-central2", "me-west1",
    "northamerica-northeast1", "northamerica-northeast2", "northamerica-south1", "southamerica-east1",
    "southamerica-west1", "us-central1", "us-east1", "us-east4", "us-east5", "us-south1", "us-west1",
    "us-west2", "us-west3", "us-west4",
)


def check_region(region: str) -> str:
    """`region` if Vertex trains there (or it is `local`); else gcloud's error (exit 1)."""
    if region != "local" and region not in TRAINING_REGIONS:
        shown = region if len(region) <= 60 else region[:60] + "..."
        raise InvalidValueError("region", f"Available values are [{', '.join(('local', *TRAINING_REGIONS))}], "
                                          f"but found [{shown}].")
    return region


def label_problem(labels: Mapping[str, Any]) -> str | None:
    """What breaks Vertex's label rules in `labels` (gcloud's wording), or None."""
    if len(labels) > MAX_LABELS:
        return f"at most {MAX_LABELS} labels are allowed, found {len(labels)}."
    for key, val in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            return ("Only lowercase letters, digits, '_' and '-' are allowed in keys, which must start with a "
                    f"letter and be at most 63 characters: [{key}].")
        if not isinstance(val, str) or not _LABEL_VALUE.match(val):
            return f"Only lowercase letters, digits, '_' and '-' are allowed in values, at most 63 characters: [{val}]."
    return None


def parse_labels(value: str | None) -> dict[str, str]:
    """`--labels=KEY=VALUE,...` with gcloud's rules for keys and values."""
    if not value:
        return {}
    out: dict[str, str] = {}
    for pair in split_arg_list(value):
        key, sep, val = pair.partition("=")
        if not sep:
            raise UsageError(f"argument --labels: Bad syntax for dict arg: [{pair}].")
        out[key] = val
    if problem := label_problem(out):
        raise InvalidValueError("--labels", problem)
    return out



# =========================================================================== study flags (vcli extension)

PARAMETER_SPEC_KEYS = ("parameter-id", "type", "min", "max", "values", "scale", "parent", "parent-values")
METRIC_KEYS = ("metric-id", "goal", "safety-threshold", "min-safe-fraction")
_SCALES = {
    "linear": "UNIT_LINEAR_SCALE",
    "log": "UNIT_LOG_SCALE",
    "reverse-log": "UNIT_REVERSE_LOG_SCALE",
    "unspecified": "SCALE_TYPE_UNSPECIFIED",
}
_TYPES = ("double", "integer", "categorical", "discrete")
_PARAMETER_FLAG = "--parameter-spec"
_INTEGER_TEXT = re.compile(r"[-+]?\d+")


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
    raw = parse_dict_arg(value, flag=_PARAMETER_FLAG, valid_keys=PARAMETER_SPEC_KEYS)
    pid = _parameter_id(raw)
    values = _split_values(raw["values"]) if "values" in raw else None
    kind = _parameter_type(raw, values)
    d: dict[str, Any] = {"parameterId": pid, **_value_spec(kind, raw, values, pid)}
    scale = _scale_type(raw, kind)
    if scale is not None:
        d["scaleType"] = scale
    parent, parent_values = _parent(raw, pid)
    return d, parent, parent_values


def _split_values(text: str) -> list[str]:
    """A `;`-separated list, empty items dropped."""
    return [v for v in text.split(";") if v]


def _parameter_id(raw: Mapping[str, str]) -> str:
    """The non-empty `parameter-id`."""
    pid = raw.get("parameter-id")
    if not pid:
        raise InvalidValueError(_PARAMETER_FLAG, "Key [parameter-id] required in dict arg but not provided.")
    return pid


def _parameter_type(raw: Mapping[str, str], values: list[str] | None) -> str:
    """`type` when given (one of _TYPES), else the type inferred from `values` or `min`/`max`."""
    kind = raw.get("type")
    if kind is None:
        return _inferred_type(raw, values)
    if kind not in _TYPES:
        raise InvalidValueError(_PARAMETER_FLAG, f"Key [type] must be one of [{', '.join(_TYPES)}], received: {kind}.")
    return kind


def _inferred_type(raw: Mapping[str, str], values: list[str] | None) -> str:
    """The type a spec without `type` has, as `parameter_spec_from_flag` documents."""
    if values is not None:
        return "discrete" if _all_numbers(values) else "categorical"
    if _INTEGER_TEXT.fullmatch(raw.get("min", "x")) and _INTEGER_TEXT.fullmatch(raw.get("max", "x")):
        return "integer"
    return "double"


def _all_numbers(texts: Sequence[str]) -> bool:
    """Whether every text parses as a float."""
    try:
        for text in texts:
            float(text)
    except ValueError:
        return False
    return True


def _value_spec(kind: str, raw: Mapping[str, str], values: list[str] | None, pid: str) -> dict[str, Any]:
    """The one `*ValueSpec` entry of a `kind` parameter."""
    if kind in ("double", "integer"):
        return _range_spec(kind, raw, pid)
    if kind == "categorical":
        return {"categoricalValueSpec": {"values": values or []}}
    return {"discreteValueSpec": {"values": [_num(v, _PARAMETER_FLAG, "values") for v in values or []]}}


def _range_spec(kind: str, raw: Mapping[str, str], pid: str) -> dict[str, Any]:
    """The value spec of a double or integer parameter: `min` and `max` are required numbers
    (integers for an integer parameter)."""
    for key in ("min", "max"):
        if key not in raw:
            raise InvalidValueError(_PARAMETER_FLAG, f"Key [{key}] is required for a {kind} parameter [{pid}].")
    lo, hi = _num(raw["min"], _PARAMETER_FLAG, "min"), _num(raw["max"], _PARAMETER_FLAG, "max")
    if kind == "double":
        return {"doubleValueSpec": {"minValue": lo, "maxValue": hi}}
    if not (lo.is_integer() and hi.is_integer()):
        raise InvalidValueError(_PARAMETER_FLAG, f"Keys [min, max] of integer parameter [{pid}] must be integers.")
    exact = [int(raw[k]) if re.fullmatch(r"\s*[-+]?\d+\s*", raw[k]) else int(x) for k, x in (("min", lo), ("max", hi))]
    for key, value in zip(("min", "max"), exact):
        if not -(2**63) <= value < 2**63:  # Vertex's int64 (a float's 1e30 is not the integer written)
            raise InvalidValueError(_PARAMETER_FLAG, f"Key [{key}] of integer parameter [{pid}] must be a 64-bit "
                                    f"integer (-2^63 to 2^63-1), received: [{raw[key]}].")
    return {"integerValueSpec": {"minValue": exact[0], "maxValue": exact[1]}}


def _scale_type(raw: Mapping[str, str], kind: str) -> str | None:
    """The `scaleType` for `scale`; without it linear, except categorical parameters have none."""
    if "scale" in raw:
        if raw["scale"] not in _SCALES:
            raise InvalidValueError(_PARAMETER_FLAG, f"Key [scale] must be one of [{', '.join(_SCALES)}], received: {raw['scale']}.")
        return _SCALES[raw["scale"]]
    return None if kind == "categorical" else "UNIT_LINEAR_SCALE"


def _parent(raw: Mapping[str, str], pid: str) -> tuple[str | None, list[str]]:
    """`parent` and `parent-values`: a conditional parameter gives both, others neither."""
    parent = raw.get("parent")
    parent_values = _split_values(raw.get("parent-values", ""))
    if parent and not parent_values:
        raise InvalidValueError(_PARAMETER_FLAG, f"Key [parent-values] is required with [parent] for parameter [{pid}].")
    if parent_values and not parent:
        raise InvalidValueError(_PARAMETER_FLAG, f"Key [parent] is required with [parent-values] for parameter [{pid}].")
    return parent, parent_values


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
    metric: dict[str, Any] = {"metricId": raw["metric-id"], "goal": goal}
    if "min-safe-fraction" in raw and "safety-threshold" not in raw:
        raise InvalidValueError("--metric", "Key [min-safe-fraction] needs [safety-threshold]: a safety metric is "
                                "safe on the good side of its threshold.")
    if "safety-threshold" in raw:  # vcli: Vertex's safetyConfig (safe search), checked with the study
        safety = {"safetyThreshold": _metric_number(raw, "safety-threshold")}
        if "min-safe-fraction" in raw:
            safety["desiredMinSafeTrialsFraction"] = _metric_number(raw, "min-safe-fraction")
        metric["safetyConfig"] = safety
    return metric


def _metric_number(raw: Mapping[str, str], key: str) -> float:
    try:
        return float(raw[key])
    except ValueError:
        raise InvalidValueError("--metric", f"Key [{key}] must be a number, received: {raw[key]}.") from None


def parse_duration(text: str, flag: str) -> float:
    """`90`, `90s`, `30m`, `2h` -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise InvalidValueError(flag, f"expected a duration such as 600s, 30m or 2h, received: {text}.")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]

