"""`vcli mcp`: vcli's jobs and studies as MCP tools, served on stdin/stdout (the `mcp` extra).

Each tool is one function of `vcli.agents.jobs`; its JSON schema comes from the signature
below (types, defaults, each parameter's description) and its description from the
docstring. A `VcliError` becomes a tool error (`isError`) whose text is vcli's one-line
message, as the CLI prints it after `ERROR: (vcli.GROUP.COMMAND)`; arguments that do not match
the schema are the SDK's own tool error. Creating returns once the
job or study is recorded and handed to its detached runner (as `create --async`); nothing
here waits on a job but `cancel`, which waits for it to stop as the CLI's `cancel` does.
Tools run in worker threads, each opening the store for its call.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Callable, Literal, Optional

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from vcli import __version__
from vcli.agents import jobs
from vcli.errors import VcliError

INSTRUCTIONS = """\
vcli runs Vertex AI training (custom jobs, hyperparameter tuning jobs) on this machine and the
machines it reaches, from the same YAML as `gcloud ai custom-jobs` / `hp-tuning-jobs`. Jobs and
studies live in vcli's store (VCLI_HOME); every tool reads or changes it.

validate_custom_job / validate_hp_tuning_job check a config without running it. Create tools
(served when vcli mcp runs with --allow-write) return at once with the id: the job runs in a
background vcli process. Poll
describe_custom_job / describe_hp_tuning_job until `state` is final (JOB_STATE_SUCCEEDED,
JOB_STATE_FAILED, JOB_STATE_CANCELLED), read job_logs for the replicas' output, best_trials
for a study's result. Relative paths in a config (local-package-path) are resolved in the
server's working directory."""

JobId = Annotated[str, Field(description="The job's id (as create returned it) or its resource name.")]
StudyId = Annotated[str, Field(description="The study's id (as create returned it) or its resource name.")]
Filter = Annotated[str, Field(description="gcloud's --filter over the Vertex resource, e.g. "
                                          "`state=JOB_STATE_RUNNING` or `displayName:digits`; empty: all.")]
Limit = Annotated[int, Field(ge=1, description="At most this many, newest first.")]
Executor = Annotated[str, Field(description="Where replicas run, as --executor: local (processes), docker, ssh, ray "
                                            "or slurm; empty: vcli's default.")]
Wait = Annotated[bool, Field(description="Wait (up to 2 minutes) until the job has stopped, as `cancel` does; "
                                         "false returns once the cancel is requested.")]


def list_custom_jobs(filter: Filter = "", limit: Limit = 50,
                     include_trial_jobs: Annotated[bool, Field(description="Also the custom jobs of study trials.")] = False
                     ) -> dict[str, Any]:
    """List custom jobs, newest first: `customJobs`, each its id, name, displayName, state, times,
    and error when it failed (describe_custom_job gives the whole resource)."""
    return jobs.list_custom_jobs(filter or None, limit, include_trial_jobs)


def describe_custom_job(id: JobId) -> dict[str, Any]:
    """One custom job as Vertex's CustomJob resource (`vcli custom-jobs describe --format=json`):
    jobSpec, state, times, error, and vcli's `replicas` (each one's state, exit code, log path)
    and `controller` (the vcli process that runs it; alive=false means it is stuck until resumed
    or cancelled)."""
    return jobs.describe_custom_job(id)


def create_custom_job(
    display_name: Annotated[str, Field(description="The job's display name.")],
    config_yaml: Annotated[str, Field(description="A CustomJobSpec as YAML or JSON text (what gcloud's --config takes: "
                                                  "workerPoolSpecs, scheduling, ...); empty: none.")] = "",
    worker_pool_specs: Annotated[Optional[list[str]], Field(description="Pools in gcloud's --worker-pool-spec syntax, e.g. "
                                 "`machine-type=n1-standard-4,replica-count=1,container-image-uri=python:3.11`; "
                                 "they replace the config's pools.")] = None,
    args: Annotated[Optional[list[str]], Field(description="Arguments for every replica, as --args (each item is "
                                                           "split at commas).")] = None,
    executor: Executor = "",
) -> dict[str, Any]:
    """Create a custom job and start it in the background (`vcli custom-jobs create --async`);
    returns at once with its `id`, `state` and `notices` (settings that have no effect here).
    Give config_yaml, worker_pool_specs, or both. Follow it with describe_custom_job and
    job_logs; stop it with cancel_custom_job."""
    return jobs.create_custom_job(display_name, config_yaml or None, worker_pool_specs or (), args or (), executor or None)


def validate_custom_job(
    display_name: Annotated[str, Field(description="The job's display name.")],
    config_yaml: Annotated[str, Field(description="A CustomJobSpec as YAML or JSON text; empty: none.")] = "",
    worker_pool_specs: Annotated[Optional[list[str]], Field(description="Pools in gcloud's --worker-pool-spec syntax; "
                                                                        "they replace the config's pools.")] = None,
    args: Annotated[Optional[list[str]], Field(description="Arguments for every replica, as --args.")] = None,
    executor: Executor = "",
) -> dict[str, Any]:
    """Check a custom job without running it (`vcli custom-jobs create --validate-only`): the
    resolved CustomJob (`customJob`) and `notices`; a mistake is a tool error naming the flag
    or field. Nothing is recorded."""
    return jobs.create_custom_job(display_name, config_yaml or None, worker_pool_specs or (), args or (), executor or None,
                                  validate_only=True)


def cancel_custom_job(id: JobId, wait: Wait = True) -> dict[str, Any]:
    """Cancel a custom job (`vcli custom-jobs cancel`): its replicas are stopped and it ends
    JOB_STATE_CANCELLED; a job that has ended is left as it is. Returns its `state` afterwards
    and what the command said."""
    return jobs.cancel_custom_job(id, wait)


def job_logs(
    id: Annotated[str, Field(description="A custom job's or a study's id or resource name.")],
    lines: Annotated[int, Field(ge=1, le=jobs.MAX_LOG_LINES, description="How many of the last lines.")] = 100,
    task_name: Annotated[str, Field(description="Only this replica, e.g. workerpool0-0 (of each trial of a study), or "
                                                "trial-3/workerpool0-0; empty: every replica.")] = "",
) -> dict[str, Any]:
    """The last lines of a custom job's replica logs, or of every trial of a study, oldest first,
    as `stream-logs` prints them: `SEVERITY<TAB>time<TAB>task<TAB>message` (stderr is ERROR).
    `ended` says whether more can come."""
    return jobs.job_logs(id, lines, task_name or None)


def list_hp_tuning_jobs(filter: Filter = "", limit: Limit = 50) -> dict[str, Any]:
    """List studies (hyperparameter tuning jobs), newest first: `hyperparameterTuningJobs`, each
    its id, name, displayName, state, maxTrialCount, trialCount, trialStates (trials per state)
    and bestTrialId."""
    return jobs.list_hp_tuning_jobs(filter or None, limit)


def describe_hp_tuning_job(
    id: StudyId,
    trials: Annotated[Literal["count", "all", "none"], Field(description="count: trialCount and trialStates instead of "
                      "the trials; all: every trial (parameters, measurements, state), as Vertex; none: neither.")] = "count",
) -> dict[str, Any]:
    """One study as Vertex's HyperparameterTuningJob resource (`vcli hp-tuning-jobs describe`):
    studySpec, trialJobSpec, state, times, error, bestTrialId, and its trials as `trials` says."""
    return jobs.describe_hp_tuning_job(id, trials)


def create_hp_tuning_job(
    config_yaml: Annotated[str, Field(description="A HyperparameterTuningJob as YAML or JSON text, as gcloud's --config "
                                                  "takes it: studySpec (metrics, parameters, algorithm), trialJobSpec, "
                                                  "maxTrialCount, parallelTrialCount.")],
    display_name: Annotated[str, Field(description="Overrides the config's displayName; empty: the config's.")] = "",
    max_trial_count: Annotated[Optional[int], Field(ge=1, description="Overrides maxTrialCount.")] = None,
    parallel_trial_count: Annotated[Optional[int], Field(ge=1, description="Overrides parallelTrialCount.")] = None,
    algorithm: Annotated[str, Field(description="Overrides the algorithm, as --algorithm: random-search, grid-search, "
                                                "algorithm-unspecified (Bayesian), tpe, ...; empty: the config's.")] = "",
    seed: Annotated[Optional[int], Field(description="Makes the suggestions reproducible.")] = None,
    executor: Executor = "",
) -> dict[str, Any]:
    """Create a study and start it in the background (`vcli hp-tuning-jobs create --async`);
    returns at once with its `id`, `state` and `notices`. Follow it with describe_hp_tuning_job,
    job_logs and best_trials; stop it with cancel_hp_tuning_job."""
    return jobs.create_hp_tuning_job(config_yaml, display_name or None, max_trial_count, parallel_trial_count,
                                     algorithm or None, seed, executor or None)


def validate_hp_tuning_job(
    config_yaml: Annotated[str, Field(description="A HyperparameterTuningJob as YAML or JSON text (studySpec, "
                                                  "trialJobSpec, maxTrialCount, ...).")],
    display_name: Annotated[str, Field(description="The study's display name; empty: the config's.")] = "",
) -> dict[str, Any]:
    """Check a study without running it (`vcli hp-tuning-jobs create --validate-only`): the
    resolved HyperparameterTuningJob and `notices`; a mistake is a tool error naming the field.
    Nothing is recorded."""
    return jobs.create_hp_tuning_job(config_yaml, display_name or None, validate_only=True)


def cancel_hp_tuning_job(id: StudyId, wait: Wait = True) -> dict[str, Any]:
    """Cancel a study (`vcli hp-tuning-jobs cancel`): every running trial is stopped and it ends
    JOB_STATE_CANCELLED. Returns its `state` afterwards and what the command said."""
    return jobs.cancel_hp_tuning_job(id, wait)


def best_trials(id: StudyId, n: Annotated[int, Field(ge=1, description="How many trials.")] = 5) -> dict[str, Any]:
    """A study's best SUCCEEDED trials, best first, by the final value of its metric in its
    goal's direction; for a study of several metrics, its Pareto-optimal trials. Each trial:
    id, parameters, finalMeasurement, times. Works while the study runs."""
    return jobs.best_trials(id, n)


def hosts_gpus(hosts: Annotated[Optional[list[str]], Field(description="`local` (this machine, the default) or hosts of "
                                                                     "`vcli hosts list`.")] = None) -> dict[str, Any]:
    """Who holds each GPU (`vcli hosts gpus`): per host and GPU, FREE, HELD (by which job,
    study, trial, user, pid, since when) or BUSY (a process vcli did not start), then one
    WAITING row per job waiting for GPUs. Empty when no GPUs are declared."""
    return jobs.hosts_gpus(hosts or ())


_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_CREATE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
_CANCEL = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

#: Every tool, with what it does to the store: those that write are served with `--allow-write` only.
TOOLS: tuple[tuple[Callable[..., dict[str, Any]], ToolAnnotations], ...] = (
    (list_custom_jobs, _READ), (describe_custom_job, _READ), (validate_custom_job, _READ),
    (create_custom_job, _CREATE), (cancel_custom_job, _CANCEL), (job_logs, _READ), (list_hp_tuning_jobs, _READ),
    (describe_hp_tuning_job, _READ), (validate_hp_tuning_job, _READ), (create_hp_tuning_job, _CREATE),
    (cancel_hp_tuning_job, _CANCEL), (best_trials, _READ), (hosts_gpus, _READ),
)


def _vcli_errors(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any] | CallToolResult]:
    """`fn`, a `VcliError` it raises returned as a tool error (isError) whose text is vcli's
    one-line message alone (a `ToolError` would reach the agent behind "Error executing tool
    NAME: ")."""

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> dict[str, Any] | CallToolResult:
        from vcli.cli.support import shorten

        try:
            return fn(*args, **kwargs)
        except VcliError as e:
            return CallToolResult(content=[TextContent(type="text", text=shorten(str(e)))], is_error=True)

    return tool


def build(*, allow_write: bool = False) -> MCPServer:
    """The server with the tools of `TOOLS`: those that only read, and with `allow_write` those
    that create and cancel jobs and studies too."""
    server: MCPServer = MCPServer(name="vcli", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    for fn, hints in TOOLS:
        if allow_write or hints.read_only_hint:
            server.add_tool(_vcli_errors(fn), annotations=hints)
    return server


def serve(*, allow_write: bool = False) -> None:
    """Serve on stdin/stdout until the client closes stdin."""
    build(allow_write=allow_write).run("stdio")
