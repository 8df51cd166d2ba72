"""The CustomJobSpec codec: Vertex's camelCase `CustomJobSpec` to and from `vcli.spec`.

The shape comes from `vcli.codec.schema` (derived from the dataclasses); this module adds
what the schema cannot say: the checks gcloud leaves to the API, Vertex's defaults where
they differ from the dataclasses' (a non-empty pool has 1 replica, an accelerator type
implies 1 accelerator), local paths, and the redaction of secret env values on output.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Mapping

from vcli.codec.schema import Decoder, build, to_wire
from vcli.codec.yamlio import load_document
from vcli.spec import ContainerSpec, CustomJobSpec, EnvVar, LocalPackage, MachineSpec, WorkerPoolSpec, is_secret

# --------------------------------------------------------------------------- dict -> spec


def custom_job_spec_from_dict(d: Mapping[str, Any], decoder: Decoder, path: str = "") -> CustomJobSpec:
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
        machine = build(MachineSpec, ms, accelerator_type=acc, accelerator_count=ms.get("acceleratorCount", 1 if acc else 0))
        count = p.get("replicaCount", 1)
        if count < 1:
            raise decoder.error(f"{ppath}.replicaCount", f"must be a positive integer, found [{count}]")
        if i == 0 and count != 1:
            raise decoder.error(f"{ppath}.replicaCount", f"the first worker pool is the chief and must have 1 replica, found [{count}]")
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
        pools.append(build(WorkerPoolSpec, p, **given))
    if pools and pools[0].is_empty:
        raise decoder.error(f"{path}workerPoolSpecs[0]", "the first worker pool (the chief) must not be empty")
    if len(pools) > 4:
        raise decoder.error(f"{path}workerPoolSpecs", f"at most 4 worker pools are supported, found {len(pools)}")
    base = d.get("baseOutputDirectory", {}).get("outputUriPrefix")
    if base is not None:
        base = resolve_output_uri(base, lambda msg: decoder.error(f"{path}baseOutputDirectory.outputUriPrefix", msg))
    return build(CustomJobSpec, d, worker_pool_specs=tuple(pools), base_output_directory=base)


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
    """A `--config` file (`-` = stdin) holding a CustomJobSpec -> the spec."""
    doc, source = load_document(path)
    decoder = Decoder(source)
    data = decoder.decode_message(doc, CustomJobSpec, "")
    return custom_job_spec_from_dict(data, decoder)


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


def custom_job_spec_to_dict(spec: CustomJobSpec) -> dict[str, Any]:
    """The REST (camelCase) shape of a CustomJobSpec, as `describe` and CLUSTER_SPEC.job show it."""
    return to_wire(spec, JOB_OVERRIDES)
