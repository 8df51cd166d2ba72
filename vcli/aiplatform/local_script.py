"""`CustomJob.from_local_script`: one local script as a job, the way gcloud's autopackaging
flags describe it (`local-package-path` = the script's directory, `script` = its name).

The process executor runs the script from a private copy of its directory, with `requirements`
installed into a cached virtual environment; `container_uri` is recorded as the executor image
(with `--executor=docker` / `init(executor="docker")`, vcli builds the image as gcloud does).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Mapping, Sequence


def script_pools(script_path: str, container_uri: str, *, args: Sequence[str] | None, requirements: Sequence[str] | None,
                 env: Mapping[str, str] | None, replica_count: int, machine_type: str, accelerator_type: str,
                 accelerator_count: int, base_output_dir: str | None) -> Any:
    """The CustomJobSpec: pool 0 one chief, pool 1 `replica_count - 1` workers, both running
    the script with `args` and `env`."""
    from vcli import codec

    _check_collections(args, requirements, env)
    path = _script_file(script_path)
    _check_replica_count(replica_count)
    chief: dict[str, Any] = {"machine-type": machine_type, "replica-count": 1, "local-package-path": os.path.dirname(path),
                             "script": os.path.basename(path), "executor-image-uri": container_uri}
    if requirements:
        chief["requirements"] = list(requirements)
    if accelerator_count and accelerator_type != "ACCELERATOR_TYPE_UNSPECIFIED":
        chief["accelerator-type"], chief["accelerator-count"] = accelerator_type, accelerator_count
    specs = [chief]
    if replica_count > 1:
        worker = {k: v for k, v in chief.items() if k in ("machine-type", "accelerator-type", "accelerator-count")}
        specs.append({**worker, "replica-count": replica_count - 1})
    spec = codec.CustomJobSpec(worker_pool_specs=codec.worker_pools_from_flags(specs))
    spec = codec.apply_args_and_command(spec, args=list(args or []), command=None)
    if env:
        spec = _with_env(spec, env)
    if base_output_dir:
        spec = replace(spec, base_output_directory=codec.resolve_output_uri(base_output_dir, ValueError))
    return spec


def _check_collections(args: Sequence[str] | None, requirements: Sequence[str] | None,
                       env: Mapping[str, str] | None) -> None:
    """TypeError unless `args` and `requirements` are None or lists of strings (not a string
    itself) and `env` is None or a mapping with string keys."""
    for name, value in (("args", args), ("requirements", requirements)):
        if isinstance(value, (str, bytes)):  # a string is a sequence of characters: --x=1 became 5 arguments
            raise TypeError(f"{name} must be a list of strings, not a string: [{value}]")
        if value is not None and (not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value)):
            raise TypeError(f"{name} must be a list of strings, not {value!r}")
    if env is not None and (not isinstance(env, Mapping) or not all(isinstance(k, str) for k in env)):
        raise TypeError(f"environment_variables must be a dict of names to values, not {env!r}")


def _script_file(script_path: str) -> str:
    """The script's absolute path (`~` expanded); TypeError when `script_path` is not a path,
    ValueError when it names no file."""
    if not isinstance(script_path, (str, os.PathLike)):
        raise TypeError(f"script_path must be a path, not {type(script_path).__name__}")
    path = os.path.abspath(os.path.expanduser(script_path))
    if not os.path.isfile(path):
        raise ValueError(f"script_path [{script_path}] is not a file")
    return path


def _check_replica_count(replica_count: int) -> None:
    """TypeError unless `replica_count` is an int (not a bool); ValueError when it is below 1."""
    if isinstance(replica_count, bool) or not isinstance(replica_count, int):
        raise TypeError(f"replica_count must be an integer, not {replica_count!r}")
    if replica_count < 1:
        raise ValueError(f"replica_count must be at least 1, not {replica_count}")


def _with_env(spec: Any, env: Mapping[str, str]) -> Any:
    """`spec` (a CustomJobSpec) with `env` as the environment of every pool's container."""
    from vcli.spec import EnvVar

    variables = tuple(EnvVar(name=k, value=str(v)) for k, v in env.items())
    pools = tuple(replace(p, container_spec=replace(p.container_spec, env=variables)) if p.container_spec else p
                  for p in spec.worker_pool_specs)
    return replace(spec, worker_pool_specs=pools)
