"""`--worker-pool-spec` keys and gcloud's checks of the parsed dicts (`_ValidateWorkerPoolSpecArgs`).

Each rule is a small check that returns its message when the spec breaks it, or None. The check
tables keep gcloud's order, because when a spec breaks several rules the first decides the message
(gcloud-vertex.md §1.5); `validate_worker_pool_specs` raises it as an `InvalidValueError` (exit 1).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Mapping, Sequence

from vcli.errors import InvalidValueError
from vcli.spec import ACCELERATOR_TYPES

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

#: A machine type is a GCE name: a lower-case letter, then letters, digits and hyphens (63 at
#: most). vcli runs any such type (its CPU/memory are known only for the catalogue's,
#: `vcli.placement.machines`); anything else is a typo or an unfilled placeholder.
_MACHINE_TYPE_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
#: More accelerators than any machine has (a2-megagpu-16g has 16).
MAX_ACCELERATOR_COUNT = 64
#: The most replicas of one pool: vcli starts a process or a container for each and names
#: each in CLUSTER_SPEC; a replica count of 9e18 (a typo, or a hostile file) once hung even
#: `--validate-only`, which plans every replica.
MAX_REPLICA_COUNT = 1000
_IMAGE_REF = re.compile(r"^[a-z0-9]+([._/:-][a-zA-Z0-9_.-]+)*(@sha256:[0-9a-f]{64})?$")

Spec = Mapping[str, Any]
#: A rule of one spec: its message when the spec breaks it, else None.
SpecCheck = Callable[[Spec], "str | None"]
#: A rule of the chief's local package, given the package's absolute path.
PackageCheck = Callable[[Spec, str], "str | None"]


def validate_worker_pool_specs(specs: Sequence[Mapping[str, Any]]) -> None:
    """gcloud's `_ValidateWorkerPoolSpecArgs`, with its messages (exit 1)."""
    if not specs:
        return
    problem = _spec_list_problem(specs)
    if problem is None:
        problem = _pools_problem(specs)
    if problem is not None:
        raise InvalidValueError(WPS_FLAG, problem)


def _spec_list_problem(specs: Sequence[Spec]) -> str | None:
    """The flags as a whole: the first (the chief) is not empty, and there are at most 4."""
    if not specs[0]:
        return "Empty value is not allowed for the first `--worker-pool-spec` flag."
    if len(specs) > 4:
        return f"At most 4 worker pools are supported (chief, workers, parameter servers, evaluators); received {len(specs)}."
    return None


def _pools_problem(specs: Sequence[Spec]) -> str | None:
    """The first broken rule of the non-empty specs (empty ones are pools left unused)."""
    has_local = "local-package-path" in specs[0]
    pools = [(i, spec) for i, spec in enumerate(specs) if spec]
    # As gcloud: the hardware keys of every spec are checked first, then the software keys.
    for i, spec in pools:
        problem = _first_problem(_HARDWARE_CHECKS + (_CHIEF_CHECKS if i == 0 else ()), spec)
        if problem is not None:
            return problem
    for i, spec in pools:
        problem = _software_problem(i, spec, has_local)
        if problem is not None:
            return problem
    return None


def _first_problem(checks: Sequence[SpecCheck], spec: Spec) -> str | None:
    """The message of the first check in `checks` that `spec` fails; None if it passes them all."""
    for check in checks:
        problem = check(spec)
        if problem is not None:
            return problem
    return None


def _short_number(value: float) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 20 else f"{text[:12]}... ({len(text)} digits)"


def _keys(keys: Sequence[str]) -> str:
    return ", ".join(sorted(keys))


# --------------------------------------------------------------------------- hardware keys


def _machine_type_missing(spec: Spec) -> str | None:
    """Every non-empty spec names a machine type."""
    if "machine-type" not in spec:
        return "Key [machine-type] required in dict arg but not provided."
    return None


def _machine_type_malformed(spec: Spec) -> str | None:
    """The machine type is a GCE name; a long value is cut short in the message."""
    machine = str(spec["machine-type"])
    if _MACHINE_TYPE_RE.match(machine):
        return None
    shown = machine if len(machine) <= 40 else machine[:40] + f"... ({len(machine)} characters)"
    return (f"Key [machine-type] must be a machine type name such as n1-standard-4 (lower-case letters, "
            f"digits and hyphens, at most 63 characters), received: [{shown}].")


def _accelerator_type_missing(spec: Spec) -> str | None:
    """An accelerator count comes with the accelerator type it counts."""
    if "accelerator-count" in spec and "accelerator-type" not in spec:
        return "Key [accelerator-type] required as [accelerator-count] is specified."
    return None


def _accelerator_count_too_large(spec: Spec) -> str | None:
    """At most MAX_ACCELERATOR_COUNT accelerators: more is a typo, not a machine."""
    if spec.get("accelerator-count", 0) > MAX_ACCELERATOR_COUNT:
        return (f"Key [accelerator-count] must be at most {MAX_ACCELERATOR_COUNT} (no machine has more), "
                f"received: {_short_number(spec['accelerator-count'])}.")
    return None


def _accelerator_type_unknown(spec: Spec) -> str | None:
    """The accelerator type, when given, is one of ACCELERATOR_TYPES."""
    acc = spec.get("accelerator-type")
    if acc is not None and acc not in ACCELERATOR_TYPES:
        return f"Found invalid value of [accelerator-type]: {acc}. Available values are [{', '.join(sorted(ACCELERATOR_TYPES))}]."
    return None


def _count_not_positive(spec: Spec) -> str | None:
    """Replica and accelerator counts are positive (an accelerator count below 1 is a ray fraction)."""
    for key in _INT_KEYS:
        if key in spec and spec[key] < 1 and (key != "accelerator-count" or spec[key] <= 0):
            return f"Key [{key}] must be a positive integer, received: {spec[key]}."
    return None


def _chief_replicated(spec: Spec) -> str | None:
    """The chief (the first spec) runs exactly one replica."""
    if spec.get("replica-count", 1) != 1:
        return f"The first `--worker-pool-spec` is the chief and must have replica-count=1, received: {spec['replica-count']}."
    return None


def _replica_count_too_large(spec: Spec) -> str | None:
    """At most MAX_REPLICA_COUNT replicas in one pool."""
    if spec.get("replica-count", 1) > MAX_REPLICA_COUNT:
        return (f"Key [replica-count] must be at most {MAX_REPLICA_COUNT} (vcli starts a process or container "
                f"per replica), received: {_short_number(spec['replica-count'])}.")
    return None


_HARDWARE_CHECKS: tuple[SpecCheck, ...] = (
    _machine_type_missing,
    _machine_type_malformed,
    _accelerator_type_missing,
    _accelerator_count_too_large,
    _accelerator_type_unknown,
    _count_not_positive,
    _replica_count_too_large,
)
_CHIEF_CHECKS: tuple[SpecCheck, ...] = (_chief_replicated,)


# --------------------------------------------------------------------------- software keys


def _software_problem(index: int, spec: Spec, has_local: bool) -> str | None:
    """The first broken software rule of the spec at `index`; `has_local`: the chief has a local package."""
    if index > 0 and "local-package-path" in spec:
        return "Key [local-package-path] is only allowed in the first `--worker-pool-spec` flag."
    if index > 0 and has_local:
        return _software_beside_shared_package(spec)
    if "local-package-path" in spec:
        return _local_package_problem(spec)
    return _first_problem(_IMAGE_CHECKS, spec)


def _software_beside_shared_package(spec: Spec) -> str | None:
    """With the chief's local package run by every pool, the other pools name no software."""
    found = [k for k in _SOFTWARE_KEYS if k in spec]
    if found:
        return (f"Keys [{_keys(found)}] are not allowed: A local package has been specified in the first "
                "`--worker-pool-spec` flag and to be used for all workers, do not specify these keys elsewhere.")
    return None


def _image_not_single(spec: Spec) -> str | None:
    """Without a local package, exactly one of the executor and container images is given."""
    if ("executor-image-uri" in spec) == ("container-image-uri" in spec):
        return "Exactly one of keys [executor-image-uri, container-image-uri] is required."
    return None


def _module_beside_container(spec: Spec) -> str | None:
    """A container image brings its own entry point, so no Python module."""
    if "container-image-uri" in spec and "python-module" in spec:
        return "Key [python-module] is not allowed together with key [container-image-uri]."
    return None


def _module_missing_for_executor(spec: Spec) -> str | None:
    """An executor image runs a Python module, which must be named."""
    if "executor-image-uri" in spec and "python-module" not in spec:
        return "Key [python-module] is required."
    return None


def module_name_problem(module: str) -> str | None:
    """Why `module` is not what `python -m` runs (dotted identifiers), or None. A relative
    name (`.task`), `.`, or a part starting with `/` passed the package check and failed only
    once the replica ran."""
    if all(part.isidentifier() for part in module.split(".")):
        return None
    return f"must be a Python module name (dotted identifiers, such as trainer.task), received: [{module}]"


def _module_malformed(spec: Spec) -> str | None:
    problem = module_name_problem(str(spec["python-module"])) if "python-module" in spec else None
    return f"Key [python-module] {problem}." if problem else None


def _local_only_keys_without_package(spec: Spec) -> str | None:
    """The keys that describe a local package need one."""
    local_only = [k for k in _LOCAL_ONLY_KEYS if k in spec]
    if local_only:
        return (f"Keys [{_keys(local_only)}] are not allowed: Only allow to specify together with "
                "`local-package-path` in the first `--worker-pool-spec` flag.")
    return None


# gcloud's order: the image keys first, then the keys that need a local package.
_IMAGE_CHECKS: tuple[SpecCheck, ...] = (
    _image_not_single,
    _module_beside_container,
    _module_missing_for_executor,
    _module_malformed,
    _local_only_keys_without_package,
)


# --------------------------------------------------------------------------- the chief's local package


def _local_package_problem(spec: Spec) -> str | None:
    """The first broken rule of the chief's `local-package-path` and the keys that go with it."""
    path = os.path.abspath(os.path.expanduser(spec["local-package-path"]))
    for check in _PACKAGE_CHECKS:
        problem = check(spec, path)
        if problem is not None:
            return problem
    return None


def _package_dir_missing(spec: Spec, path: str) -> str | None:
    """The package is an existing directory."""
    if not os.path.isdir(path):
        return f"Directory '{path}' is not found."
    return None


def _container_image_beside_package(spec: Spec, path: str) -> str | None:
    """The package is built into an image, so no ready-made container image."""
    if "container-image-uri" in spec:
        return "Key [container-image-uri] is not allowed together with key [local-package-path]."
    return None


def _entry_point_not_single(spec: Spec, path: str) -> str | None:
    """The package runs exactly one of a Python module and a script."""
    if ("python-module" in spec) == ("script" in spec):
        return "Exactly one of keys [python-module, script] is required when `local-package-path` is specified."
    return None


def _listed(spec: Spec, key: str) -> list[Any]:
    """A key's values: a list as it is, a single value as a list of one, an absent key as []."""
    return spec[key] if isinstance(spec.get(key), list) else [spec[key]] if key in spec else []


def _path_outside_package(spec: Spec, path: str) -> str | None:
    """`script`, `extra-packages` and `extra-dirs` name paths inside the package.

    Links are resolved first, since only the package is copied or built into the image; only
    `extra-dirs` may name the package itself.
    """
    real = os.path.realpath(path)
    for key in ("script", "extra-packages", "extra-dirs"):
        for value in _listed(spec, key):
            inside = os.path.realpath(os.path.join(real, value))
            outside = inside != real and not inside.startswith(real.rstrip("/") + "/")
            if outside or (key != "extra-dirs" and inside == real):
                return (f"Key [{key}] must name a path inside the package '{path}' (relative to it), received: "
                        f"[{value}]; the package is what is copied or built into the image.")
    return None


def _script_missing(spec: Spec, path: str) -> str | None:
    """A script is a file of the package."""
    if "script" in spec and not os.path.isfile(os.path.join(path, spec["script"])):
        return f"File '{spec['script']}' is not found under the package: '{path}'."
    return None


def _module_missing(spec: Spec, path: str) -> str | None:
    """A Python module is a `.py` file or a package directory of the package."""
    if "python-module" not in spec:
        return None
    module_path = os.path.join(path, *spec["python-module"].split("."))
    if not (os.path.isfile(module_path + ".py") or os.path.isdir(module_path)):
        return f"Module '{spec['python-module']}' is not found under the package: '{path}'."
    return None


def _extra_package_missing(spec: Spec, path: str) -> str | None:
    """Each extra package is a file of the package."""
    for pkg in spec.get("extra-packages", []):
        if not os.path.isfile(os.path.join(path, pkg)):
            return f"Package file '{pkg}' is not found under the package: '{path}'."
    return None


def _extra_dir_missing(spec: Spec, path: str) -> str | None:
    """Each extra directory is a directory of the package."""
    for d in spec.get("extra-dirs", []):
        if not os.path.isdir(os.path.join(path, d)):
            return f"Directory '{d}' is not found under the package: '{path}'."
    return None


def _output_image_invalid(spec: Spec, path: str) -> str | None:
    """The output image, when given, is a well-formed image reference."""
    image = spec.get("output-image-uri")
    if image is not None and not _IMAGE_REF.match(image):
        return f"'{image}' is not a valid container image uri: Unable to parse repository and tag."
    return None


_PACKAGE_CHECKS: tuple[PackageCheck, ...] = (
    _package_dir_missing,
    _container_image_beside_package,
    _entry_point_not_single,
    _path_outside_package,
    _script_missing,
    lambda spec, path: _module_malformed(spec),
    _module_missing,
    _extra_package_missing,
    _extra_dir_missing,
    _output_image_invalid,
)
