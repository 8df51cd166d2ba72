"""The values of secret environment variables when a controller takes a job over (`resume`).

The store holds every secret value redacted (`<redacted>`), so a controller that resumes a job
or study and may start replicas must take the values from its own environment: a replica is
never started with the redacted text as its token. Replicas already running keep the values
they were started with.
"""

from __future__ import annotations

import os

from vcli.errors import UsageError
from vcli.spec import CustomJobSpec, JobState, secret_values, with_secret_values
from vcli.store import JobRow, Store


def secrets_from_environment(spec: CustomJobSpec, resumed: str) -> CustomJobSpec:
    """`spec` as stored (secret values redacted) with the values of its secret variables taken
    from this process's environment, for a controller that takes `resumed` over and will start
    replicas: the store never holds those values, so a name this shell lacks is one error line
    (exit 2), never a replica started with `<redacted>` as its token."""
    names = sorted(secret_values(spec))
    missing = [n for n in names if n not in os.environ]
    if missing:
        raise UsageError(f"{resumed} will start replicas that need the secret variable(s) [{', '.join(missing)}], whose "
                         f"values vcli never stores: set them in this shell (export {missing[0]}=...) and resume again.")
    return with_secret_values(spec, {n: os.environ[n] for n in names})


def replicas_to_start(store: Store, row: JobRow) -> bool:
    """Whether a controller taking over the recorded job `row` may start replicas: some never
    got a handle (its controller died before starting or recording them), or a failing
    replica restarts them all (`restartJobOnWorkerRestart`)."""
    from vcli import codec
    from vcli.cluster import replica_ids

    spec = codec.custom_job_spec_from_stored(row.record["jobSpec"])
    if (sched := spec.scheduling) is not None and sched.restart_job_on_worker_restart and not sched.disable_retries:
        return True
    handled = {r.task_name for r in store.replicas(row.id) if r.handle}
    return bool({r.task_name for r in replica_ids(spec)} - handled)


def study_starts_replicas(store: Store, row: JobRow, max_trial_count: int) -> bool:
    """Whether resuming the study `row` may start replicas: trials are left to start, or a
    running trial's custom job has replicas that never started (or was never recorded)."""
    from vcli.store import parse_job_ref

    trials = store.trials(row.id)
    if len(trials) < max_trial_count:
        return True
    for trial in trials:
        if trial.state.is_final():
            continue
        child = store.get_job(parse_job_ref(trial.custom_job or ""))
        if child is None or (not JobState(child.state).is_final() and replicas_to_start(store, child)):
            return True
    return False


def trial_job_spec(child: JobRow, study_trials: CustomJobSpec) -> CustomJobSpec:
    """A study trial's custom job `child` as recorded, its secret values (stored redacted) those
    of the study's trial job spec `study_trials` (as this controller holds them): the replicas
    it has yet to start (or restarts) get the real ones."""
    from vcli import codec

    return with_secret_values(codec.custom_job_spec_from_stored(child.record["jobSpec"]), secret_values(study_trials))
