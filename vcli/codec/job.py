"""The CustomJobSpec codec: Vertex's camelCase `CustomJobSpec` to and from `vcli.spec`.

The shape comes from `vcli.codec.schema` (derived from the dataclasses); this module adds
what the schema cannot say: the checks gcloud leaves to the API, Vertex's defaults where
they differ from the dataclasses' (a non-empty pool has 1 replica, an accelerator type
implies 1 accelerator), local paths (gs:// mapped by `vcli.codec.gcs`), the redaction of
secret env values on output, and the Vertex-only shape that CLUSTER_SPEC's `job` carries.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any, Callable, Mapping

from vcli.codec import gcs
from vcli.codec.pool_checks import MAX_REPLICA_COUNT, module_name_problem
from vcli.codec.schema import Decoder, build, to_wire
from vcli.codec.yamlio import load_document, refuse_whole_resource
from vcli.spec import ContainerSpec, CustomJobSpec, EnvVar, LocalPackage, MachineSpec, WorkerPoolSpec, is_secret

#: Vertex's EnvVar.name: "Must be a valid C identifier" (the API refuses others; a process
#: environment cannot hold a name with `=`, and an empty one failed the replica at start).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Vertex's limit on a container's or package's `env` (gcloud-vertex.md §3).
MAX_ENV_VARS = 100

# --------------------------------------------------------------------------- dict -> spec


def custom_job_spec_from_dict(d: Mapping[str, Any], decoder: Decoder, path: str = "") -> CustomJobSpec:
    """A decoded `CustomJobSpec` dict -> spec, with the checks gcloud leaves to the API."""
    pools = [
        _pool_from_dict(p, i, decoder, f"{path}workerPoolSpecs[{i}]") if p else WorkerPoolSpec()
        for i, p in enumerate(d.get("workerPoolSpecs", []))
    ]
    if pools and pools[0].is_empty:
        raise decoder.error(f"{path}workerPoolSpecs[0]", "the first worker pool (the chief) must not be empty")
    if len(pools) > 4:
        raise decoder.error(f"{path}workerPoolSpecs", f"at most 4 worker pools are supported, found {len(pools)}")
    base = d.get("baseOutputDirectory", {}).get("outputUriPrefix")
    if base is not None:
        base = resolve_output_uri(base, lambda msg: decoder.error(f"{path}baseOutputDirectory.outputUriPrefix", msg))
    return build(CustomJobSpec, d, worker_pool_specs=tuple(pools), base_output_directory=base)


def _pool_from_dict(p: Mapping[str, Any], i: int, decoder: Decoder, ppath: str) -> WorkerPoolSpec:
    """The non-empty worker pool `i` (at `ppath`) -> spec: its machine, its replica count, one
    of containerSpec / pythonPackageSpec (or vcli's localPackage alone, built into an image),
    gs:// paths mapped, its env and python module checked."""
    machine = _machine_from_dict(p.get("machineSpec", {}), decoder, ppath)
    count = _replica_count(p, i, decoder, ppath)
    local = None
    if "localPackage" in p:
        lp = p["localPackage"]
        local = build(LocalPackage, lp, path=os.path.abspath(os.path.expanduser(lp.get("path", "."))))
    cs = p.get("containerSpec")
    ps = p.get("pythonPackageSpec")
    if (cs is None) == (ps is None) and local is None:
        raise decoder.error(
            ppath, "Exactly one of fields [pythonPackageSpec, containerSpec] is required for a [workerPoolSpecs] in the YAML config file."
        )
    given: dict[str, Any] = {"machine_spec": machine, "replica_count": count, "local_package": local}
    if local is not None and cs is None and ps is None:
        given["container_spec"] = ContainerSpec()  # the image is built from the local package
    pool = _map_gcs(build(WorkerPoolSpec, p, **given), decoder, ppath)
    _check_env(pool, decoder, ppath)
    module = pool.python_package_spec.python_module if pool.python_package_spec else ""
    if module and (problem := module_name_problem(module)):
        raise decoder.error(f"{ppath}.pythonPackageSpec.pythonModule", problem)
    return pool


def _machine_from_dict(ms: Mapping[str, Any], decoder: Decoder, ppath: str) -> MachineSpec:
    """A pool's machineSpec -> spec: machineType required; an unspecified accelerator type is
    none, and a type without a count means 1 accelerator (Vertex's default)."""
    if not ms.get("machineType"):
        raise decoder.error(f"{ppath}.machineSpec.machineType", "required field is missing")
    acc = ms.get("acceleratorType")
    if acc == "ACCELERATOR_TYPE_UNSPECIFIED":
        acc = None
    return build(MachineSpec, ms, accelerator_type=acc, accelerator_count=ms.get("acceleratorCount", 1 if acc else 0))


def _replica_count(p: Mapping[str, Any], i: int, decoder: Decoder, ppath: str) -> int:
    """Pool `i`'s replicaCount (1 when unset): positive, 1 for the chief (pool 0), at most
    MAX_REPLICA_COUNT."""
    count: int = p.get("replicaCount", 1)
    if count < 1:
        raise decoder.error(f"{ppath}.replicaCount", f"must be a positive integer, found [{count}]")
    if i == 0 and count != 1:
        raise decoder.error(f"{ppath}.replicaCount", f"the first worker pool is the chief and must have 1 replica, found [{count}]")
    if count > MAX_REPLICA_COUNT:
        raise decoder.error(f"{ppath}.replicaCount", f"must be at most {MAX_REPLICA_COUNT} (vcli starts a process or "
                            f"container per replica), found [{count}]")
    return count


def _check_env(pool: WorkerPoolSpec, decoder: Decoder, ppath: str) -> None:
    """Vertex's rules for a pool's environment variables: at most MAX_ENV_VARS, each named
    by a C identifier."""
    for key, spec in (("containerSpec", pool.container_spec), ("pythonPackageSpec", pool.python_package_spec)):
        env = spec.env if spec is not None else ()
        if len(env) > MAX_ENV_VARS:
            raise decoder.error(f"{ppath}.{key}.env", f"at most {MAX_ENV_VARS} variables, found {len(env)}")
        for j, var in enumerate(env):
            if not _ENV_NAME.fullmatch(var.name):
                raise decoder.error(f"{ppath}.{key}.env[{j}].name", "must be a C identifier (letters, digits and "
                                    f"underscores, not starting with a digit), found [{var.name}]")


def _map_gcs(pool: WorkerPoolSpec, decoder: Decoder, ppath: str) -> WorkerPoolSpec:
    """gs:// in packageUris -> local paths under the storage root; in args/command -> /gcs paths."""
    cs, ps = pool.container_spec, pool.python_package_spec
    if cs is not None:
        cs = replace(cs, command=gcs.map_args(cs.command), args=gcs.map_args(cs.args))
    if ps is not None:
        uris = []
        for i, uri in enumerate(ps.package_uris):
            if uri.startswith(gcs.SCHEME):
                try:
                    uri = gcs.local_path(uri)
                except ValueError as e:
                    raise decoder.error(f"{ppath}.pythonPackageSpec.packageUris[{i}]", str(e)) from None
            uris.append(uri)
        ps = replace(ps, package_uris=tuple(uris), args=gcs.map_args(ps.args))
    return replace(pool, container_spec=cs, python_package_spec=ps)


def resolve_output_uri(uri: str, error: Callable[[str], Exception]) -> str:
    """`outputUriPrefix` -> an absolute local path: a path, a `file://` URI, or a `gs://` URI
    (mapped under the storage root, `vcli.codec.gcs`); other schemes are refused."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    elif uri.startswith(gcs.SCHEME):
        try:
            return gcs.local_path(uri)
        except ValueError as e:
            raise error(str(e)) from None
    elif re.match(r"^[a-z][a-z0-9+.-]*://", uri):
        raise error(
            f"[{uri}] is not a local directory: vcli writes outputs on the machines it runs on. Use a local "
            "path, a file:// URI or a gs:// URI (mapped under `vcli config get storage/gcs-root`)."
        )
    return os.path.abspath(os.path.expanduser(uri))


def load_custom_job_spec(path: str, no_effect: list[str] | None = None) -> CustomJobSpec:
    """A `--config` file (`-` = stdin) holding a CustomJobSpec -> the spec. The paths of the
    fields it sets that change nothing locally are appended to `no_effect`."""
    doc, source = load_document(path)
    refuse_whole_resource(doc, source, "CustomJob")
    decoder = Decoder(source)
    data = decoder.decode_message(doc, CustomJobSpec, "")
    spec = custom_job_spec_from_dict(data, decoder)
    if no_effect is not None:
        no_effect.extend(decoder.no_effect)
    return spec


def custom_job_spec_from_stored(data: Mapping[str, Any]) -> CustomJobSpec:
    """Inverse of `custom_job_spec_to_dict` (for records read back from the store)."""
    decoder = Decoder("<store>")
    return custom_job_spec_from_dict(decoder.decode_message(dict(data), CustomJobSpec, ""), decoder)


# --------------------------------------------------------------------------- spec -> dict


def _machine_to_dict(ms: MachineSpec, encode: Callable[[Any], Any]) -> dict[str, Any]:
    # Vertex pairs the two: the count shows with a type (even 0) and never without one.
    d = {"machineType": ms.machine_type, **encode(ms)}
    d.pop("acceleratorCount", None)
    if ms.accelerator_type:
        d["acceleratorCount"] = ms.accelerator_count
    return d


def _env_var_to_dict(e: EnvVar, encode: Callable[[Any], Any]) -> dict[str, Any]:
    # Records and CLUSTER_SPEC are shown and stored: secret values never reach them.
    return {"name": e.name, "value": "<redacted>" if is_secret(e.name) else e.value}


def _pool_to_dict(pool: WorkerPoolSpec, encode: Callable[[Any], Any]) -> dict[str, Any]:
    # A placeholder pool (1-3 may be skipped) is `{}`, whatever its fields hold.
    return {} if pool.is_empty else encode(pool)


#: Where the job's REST shape is not the generic one (`vcli.codec.schema.to_wire`).
JOB_OVERRIDES = {MachineSpec: _machine_to_dict, EnvVar: _env_var_to_dict, WorkerPoolSpec: _pool_to_dict}


def _vertex_pool_to_dict(pool: WorkerPoolSpec, encode: Callable[[Any], Any]) -> dict[str, Any]:
    # Vertex's WorkerPoolSpec only: no `localPackage`, and no placeholder `containerSpec` that
    # stands for an image vcli builds from it (an empty message Vertex would refuse).
    if pool.is_empty:
        return {}
    d = encode(replace(pool, local_package=None))
    if d.get("containerSpec") == {}:
        del d["containerSpec"]
    return d


#: The overrides of CLUSTER_SPEC's `job`: what a trainer on Vertex would read, nothing of vcli's.
VERTEX_ONLY_OVERRIDES = {**JOB_OVERRIDES, WorkerPoolSpec: _vertex_pool_to_dict}


def custom_job_spec_to_dict(spec: CustomJobSpec, *, vertex_only: bool = False) -> dict[str, Any]:
    """The REST (camelCase) shape of a CustomJobSpec, as `describe` and the store show it.

    `vertex_only=True` is Vertex's CustomJobSpec alone, for CLUSTER_SPEC's and TF_CONFIG's
    `job`: vcli's own fields (`localPackage`, the empty `containerSpec` of an autopackaged
    pool) are left out, so trainers see what they would see on Vertex.
    """
    return to_wire(spec, VERTEX_ONLY_OVERRIDES if vertex_only else JOB_OVERRIDES)


#: An unfilled shell variable: `$IMAGE`, `${JOB_DIR}` (a script that forgot to export it, or a
#: YAML written for `envsubst`).
_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
#: Fields that name an image, a URI or a path: a `$` in them is never meant literally.
_LOCATION_SUFFIXES = ("uri", "uris", "directory", "path", "prefix")


def placeholder_notices(spec: CustomJobSpec) -> list[str]:
    """One WARNING line per image, URI or path field of the job that holds an unfilled shell
    variable (`imageUri: $IMAGE`, an output prefix `$JOB_DIR/` that would become a folder
    literally named `$JOB_DIR`). Commands, args and env values are left alone: a `$` there is
    the trainer's business."""
    import dataclasses

    out: list[str] = []

    def walk(node: Any, path: str) -> None:
        if dataclasses.is_dataclass(node):
            for f in dataclasses.fields(node):
                walk(getattr(node, f.name), f"{path}.{_camel(f.name)}" if path else _camel(f.name))
        elif isinstance(node, (list, tuple)):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")
        elif isinstance(node, str) and path.rsplit(".", 1)[-1].split("[")[0].lower().endswith(_LOCATION_SUFFIXES):
            found = _PLACEHOLDER.search(node)
            if found:
                out.append(f"WARNING: [{path}] holds {found.group(0)}, an unfilled shell variable ([{node[:200]}]): "
                           "vcli takes it literally; export the variable or write the value.")

    walk(spec, "")
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)
