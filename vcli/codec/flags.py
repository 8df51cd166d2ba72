"""gcloud's dict-flag grammar and vcli's study flags: `--worker-pool-spec`, `--labels`,
`--parameter-spec`, `--metric`, durations and gcloud ArgLists.

Error texts copy gcloud's (gcloud-vertex.md §1.5). The flags' results are `vcli.spec`
worker pools or camelCase dicts that `vcli.codec.study` decodes like a `--config` file.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import replace
from typing import Any, Mapping, Sequence

from vcli.codec import gcs
from vcli.errors import InvalidValueError, UsageError
from vcli.spec import (
    ACCELERATOR_TYPES,
    ContainerSpec,
    CustomJobSpec,
    LocalPackage,
    MachineSpec,
    PythonPackageSpec,
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
        if key == "accelerator-count":  # vcli: a fraction (0.5) shares a GPU on the ray executor
            try:
                number = float(val)
            except ValueError:
                number = float("nan")
            if number != number or number in (float("inf"), float("-inf")):
                raise UsageError(f"argument {WPS_FLAG}: Invalid value [{val}] for key [{key}]: expected an integer "
                                 "(or, with --executor=ray, a fraction such as 0.5)")
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


#: A machine type is a GCE name: a lower-case letter, then letters, digits and hyphens (63 at
#: most). vcli runs any such type (its CPU/memory are known only for the catalogue's,
#: `vcli.placement.machines`); anything else is a typo or an unfilled placeholder.
_MACHINE_TYPE_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
#: More accelerators than any machine has (a2-megagpu-16g has 16).
MAX_ACCELERATOR_COUNT = 64


def _short_number(value: float) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 20 else f"{text[:12]}... ({len(text)} digits)"


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
        machine = str(spec["machine-type"])
        if not _MACHINE_TYPE_RE.match(machine):
            shown = machine if len(machine) <= 40 else machine[:40] + f"... ({len(machine)} characters)"
            raise bad(f"Key [machine-type] must be a machine type name such as n1-standard-4 (lower-case letters, "
                      f"digits and hyphens, at most 63 characters), received: [{shown}].")
        if "accelerator-count" in spec and "accelerator-type" not in spec:
            raise bad("Key [accelerator-type] required as [accelerator-count] is specified.")
        if spec.get("accelerator-count", 0) > MAX_ACCELERATOR_COUNT:
            raise bad(f"Key [accelerator-count] must be at most {MAX_ACCELERATOR_COUNT} (no machine has more), "
                      f"received: {_short_number(spec['accelerator-count'])}.")
        acc = spec.get("accelerator-type")
        if acc is not None and acc not in ACCELERATOR_TYPES:
            raise bad(f"Found invalid value of [accelerator-type]: {acc}. Available values are [{', '.join(sorted(ACCELERATOR_TYPES))}].")
        for key in _INT_KEYS:
            if key in spec and spec[key] < 1 and (key != "accelerator-count" or spec[key] <= 0):
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
    real = os.path.realpath(path)
    for key in ("script", "extra-packages", "extra-dirs"):
        for value in spec[key] if isinstance(spec.get(key), list) else [spec[key]] if key in spec else []:
            inside = os.path.realpath(os.path.join(real, value))
            outside = inside != real and not inside.startswith(real.rstrip("/") + "/")
            if outside or (key != "extra-dirs" and inside == real):
                raise bad(f"Key [{key}] must name a path inside the package '{path}' (relative to it), received: "
                          f"[{value}]; the package is what is copied or built into the image.")
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

