"""Options and arguments several commands share, declared once (typer's `Annotated` style).

Typer reads these annotations at run time, hence `Optional[...]`/`List[...]` spellings.
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from vcli.cli import complete
from vcli.enums import ExecutorKind

FORMAT_HELP = ("gcloud's NAME[ATTRIBUTES](KEY,...): json|yaml|value(...)|table(...)|csv(...)|get(...)|flattened|none, "
               "e.g. 'table(name.basename():label=ID, state, trials.len())'; see docs/pages/reference/output-and-exit-codes.md")

Format = Annotated[Optional[str], typer.Option("--format", help=FORMAT_HELP)]
Region = Annotated[Optional[str], typer.Option("--region", help="The location in printed resource names (default: local); jobs run here.")]
Filter = Annotated[Optional[str], typer.Option("--filter", help="gcloud's filter expressions, e.g. 'state=JOB_STATE_RUNNING OR displayName~^exp', '-labels.team:*'")]
SortBy = Annotated[Optional[str], typer.Option("--sort-by", help="e.g. ~createTime")]
Limit = Annotated[Optional[int], typer.Option("--limit")]
Labels = Annotated[Optional[str], typer.Option("--labels", help="KEY=VALUE,...")]
Executor = Annotated[
    Optional[ExecutorKind],
    typer.Option("--executor", help="What runs the replicas; default from $VCLI_EXECUTOR or `vcli config set executor`, else local."),
]
Hosts = Annotated[
    Optional[str],
    typer.Option("--hosts", autocompletion=complete.host_list,
                 help="Comma-separated inventory hosts to place replicas on (ssh executor)."),
]
ShmSize = Annotated[Optional[str], typer.Option("--shm-size", help="vcli: /dev/shm size for containers, e.g. 2g (NCCL).")]
ValidateOnly = Annotated[bool, typer.Option("--validate-only", help="Check and print the resolved job; launch nothing.")]
NoWait = Annotated[bool, typer.Option("--async", help="Return once the request is recorded.")]
PollingInterval = Annotated[int, typer.Option("--polling-interval", help="Accepted for gcloud compatibility; logs are followed live.")]
Config = Annotated[Optional[str], typer.Option("--config", help="CustomJobSpec YAML or JSON (`-` = stdin); flags override it.")]
Args = Annotated[Optional[List[str]], typer.Option("--args", help="Comma-separated args for every replica.")]
Command = Annotated[Optional[List[str]], typer.Option("--command", help="Comma-separated command for container pools.")]

WPS_HELP = (
    "A worker pool, repeatable (pool i = workerpool{i}): machine-type=...,replica-count=N,"
    "[accelerator-type=...,accelerator-count=N],(container-image-uri=...|executor-image-uri=...,python-module=...|"
    "local-package-path=...,python-module=...|script=...,[requirements=a;b],[extra-packages=...],[extra-dirs=...],"
    "[output-image-uri=...]). An empty value is a placeholder pool."
)
WorkerPoolSpec = Annotated[Optional[List[str]], typer.Option("--worker-pool-spec", help=WPS_HELP)]

# Flags of gcloud's create commands that configure cloud resources: recorded where Vertex keeps
# them (jobSpec / trialJobSpec) when it has the field; named in the one-line notice that they
# have no effect on local runs (`vcli.cli.gcloud_flags.CLOUD_ONLY`).
ServiceAccount = Annotated[Optional[str], typer.Option("--service-account", help="Recorded in jobSpec.serviceAccount; no effect on local runs.")]
Network = Annotated[Optional[str], typer.Option("--network", help="Recorded in jobSpec.network; no effect on local runs.")]
PersistentResourceId = Annotated[Optional[str], typer.Option("--persistent-resource-id", help="Recorded in jobSpec.persistentResourceId; no effect on local runs.")]
EnableWebAccess = Annotated[bool, typer.Option("--enable-web-access", help="Recorded in jobSpec.enableWebAccess; no effect on local runs.")]
EnableDashboardAccess = Annotated[bool, typer.Option("--enable-dashboard-access", help="Recorded in jobSpec.enableDashboardAccess; no effect on local runs.")]
RayAddress = Annotated[Optional[str], typer.Option("--ray-address", help="vcli: the Ray cluster for --executor=ray (ray://host:10001, host:6379 or auto); as RAY_ADDRESS or `vcli config set ray/address`.")]
SlurmPartition = Annotated[Optional[str], typer.Option("--slurm-partition", help="vcli: the Slurm partition for --executor=slurm; as `vcli config set slurm/partition`.")]
SlurmAccount = Annotated[Optional[str], typer.Option("--slurm-account", help="vcli: the Slurm account for --executor=slurm; as `vcli config set slurm/account`.")]
SlurmQos = Annotated[Optional[str], typer.Option("--slurm-qos", help="vcli: the Slurm QOS for --executor=slurm; as `vcli config set slurm/qos`.")]
KmsKey = Annotated[Optional[str], typer.Option("--kms-key", "--kms-key-name", help="gcloud: CMEK key for encryptionSpec; accepted, no effect on local runs.")]
KmsKeyring = Annotated[Optional[str], typer.Option("--kms-keyring", help="gcloud: with --kms-key; accepted, no effect on local runs.")]
KmsLocation = Annotated[Optional[str], typer.Option("--kms-location", help="gcloud: with --kms-key; accepted, no effect on local runs.")]
KmsProject = Annotated[Optional[str], typer.Option("--kms-project", help="gcloud: with --kms-key; accepted, no effect on local runs.")]

PageSize = Annotated[Optional[int], typer.Option("--page-size", help="gcloud: accepted; vcli lists every job at once (--limit caps the output).")]
Uri = Annotated[bool, typer.Option("--uri", help="Print only the jobs' resource names (gcloud prints their URIs).")]
AllowMultilineLogs = Annotated[bool, typer.Option("--allow-multiline-logs", help="gcloud: accepted; no effect on local runs (each log line is one record).")]

CustomJobRef = Annotated[
    str, typer.Argument(help="ID or resource name of the custom job.", autocompletion=complete.custom_job_ids)
]
StudyRef = Annotated[
    str, typer.Argument(help="ID or resource name of the tuning job.", autocompletion=complete.study_ids)
]
TaskName = Annotated[Optional[str], typer.Option("--task-name", help="Only this replica, e.g. workerpool0-0.")]


def executor_flag(value: Optional[ExecutorKind]) -> Optional[str]:
    """The `--executor` word for `vcli.control.wiring.executor_kind` (None: use the defaults)."""
    return value.value if value is not None else None


def kms_key_name(key: Optional[str], keyring: Optional[str], location: Optional[str], project: Optional[str]) -> Optional[str]:
    """gcloud's CMEK key flags -> the key's resource name (for the job's `encryptionSpec`).

    `--kms-key` is either the full name (`projects/P/locations/L/keyRings/R/cryptoKeys/K`) or
    the key id, which then needs `--kms-keyring`, `--kms-location` and `--kms-project`, as
    gcloud asks. Nothing is encrypted locally: the name is recorded, and the notice says so."""
    from vcli.errors import InvalidValueError

    if key is None:
        if keyring or location or project:
            raise InvalidValueError("--kms-key", "Must be specified with --kms-keyring, --kms-location or --kms-project.")
        return None
    if key.startswith("projects/"):
        return key
    missing = [f for f, v in (("--kms-keyring", keyring), ("--kms-location", location), ("--kms-project", project)) if not v]
    if missing:
        raise InvalidValueError("--kms-key", f"[{key}] is not a full key name (projects/P/locations/L/keyRings/R/cryptoKeys/K); "
                                f"give it in full or add {', '.join(missing)}.")
    return f"projects/{project}/locations/{location}/keyRings/{keyring}/cryptoKeys/{key}"


def executor_settings(ray_address: Optional[str], partition: Optional[str], account: Optional[str],
                      qos: Optional[str]) -> dict[str, dict[str, str]]:
    """`--ray-address` and `--slurm-partition`/`--slurm-account`/`--slurm-qos` in the shape a job's
    record keeps its executor's settings (`{"ray": {"address": ...}, "slurm": {...}}`): the kind
    builds its executor with them first, before the properties and the environment, and the
    job's record (what `--async`'s runner and `resume` read) keeps what the executor used."""
    slurm = {k: v for k, v in (("partition", partition), ("account", account), ("qos", qos)) if v}
    return {**({"ray": {"address": ray_address}} if ray_address else {}), **({"slurm": slurm} if slurm else {})}


#: `create`'s experiment tracking (see `vcli.tracking`).
TrackingUri = Annotated[Optional[str], typer.Option("--tracking-uri", help="vcli: log the job to this MLflow tracking URI (a study: a run with a nested run per trial); default $MLFLOW_TRACKING_URI, else `vcli config set tracking/uri`; `off` turns tracking off.")]
