"""Population Based Training in the study controller: members, exploits and checkpoints.

`vcli.tuning.pbt.PbtScheduler` decides (which member is in the bottom quantile, whose checkpoint it
takes, which hyperparameters it explores); this module carries the decisions out for
`StudyRun`:

- the population: `population_size` members start with the scheduler's initial
  hyperparameters (each trial's `lineage.member` says which member it trains);
- an exploit: the donor's latest checkpoint (its chief's AIP_CHECKPOINT_DIR, wherever it
  runs) is copied into a staging directory of the study, atomically (`Executor.fetch_dir`);
  only when that copy exists does the bottom trial stop (early-stopping rule "pbt") and a new
  trial of the same member start with the explored hyperparameters, its AIP_CHECKPOINT_DIR
  seeded from the copy (`ReplicaLaunch.seed_dirs`) on the host it is placed on;
- a donor without a checkpoint: the exploit is skipped with one line naming the trial.

A trial that reports its metric without a step (hypertune's `global_step`) cannot be ranked
at a step: PBT stops it as INFEASIBLE, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from vcli.cluster import output_dirs
from vcli.executors import Executor, ReplicaHandle
from vcli.spec import (
    HyperparameterTuningJobSpec,
    MetricSpec,
    ParameterValue,
    PbtLineage,
    PopulationBasedTrainingSpec,
    Trial,
)


@dataclass
class PendingTrial:
    """A trial decided but not started yet (waiting for capacity): its hyperparameters, and
    for PBT its lineage and the local copy of the checkpoint it starts from."""

    parameters: dict[str, ParameterValue]
    lineage: PbtLineage | None = None
    checkpoint: str | None = None
    #: `TrialSuggestion.suggested_by` (`vcli.control.suggesting`).
    suggested_by: str | None = None
    #: The trial whose parameters this one runs again (`vcli.control.outcomes`: a retry).
    retry_of: str | None = None


@dataclass
class Population:
    """The PBT side of one study run. `study_dir` holds the staged checkpoint copies."""

    spec: HyperparameterTuningJobSpec
    seed: int
    study_dir: Path
    base_output: str
    on_progress: Callable[[str], None] = lambda msg: None
    _warned_budget: bool = False
    _skipped: set[tuple[str, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        from vcli.tuning.pbt import PbtScheduler

        pbt_spec = self.spec.study_spec.population_based_training_spec
        assert pbt_spec is not None
        self.pbt_spec: PopulationBasedTrainingSpec = pbt_spec
        self.scheduler = PbtScheduler(self.spec.study_spec, seed=self.seed)
        self.metric_id = self.spec.study_spec.metrics[0].metric_id

    @property
    def size(self) -> int:
        return self.pbt_spec.population_size

    def initial(self, started: int) -> list[PendingTrial]:
        """The members not started yet (after `started` of them), in member order."""
        return [PendingTrial(self.scheduler.initial_parameters(m), PbtLineage(member=m))
                for m in range(started, self.size)]

    def stepless(self, trial: Trial) -> bool:
        """Did the trial report its metric without a step (hypertune's global_step)?"""
        return any(m.step_count <= 0 for m in trial.measurements)

    def review(self, trial: Trial, trials: Sequence[Trial], *, budget_left: int, executor: Executor,
               handle_of: Callable[[Trial], ReplicaHandle | None],
               refresh: Callable[[Trial], Trial]) -> tuple[PendingTrial, str] | None:
        """What to do about `trial` (running, or trained to the end while its judgement at a
        boundary waited): None (go on), or the trial that replaces it and the reason. Copies the donor's checkpoint first: no
        copy, no exploit. `refresh(t)` is `t` with every measurement it reported so far: a
        donor that trained to the end while its checkpoint was copied has nothing left to
        give a new trial (the copy holds its final state), so the exploit is dropped."""
        exploit = self.scheduler.review(trial, trials)
        if exploit is None:
            return None
        if budget_left <= 0:
            if not self._warned_budget:
                self._warned_budget = True
                self.on_progress(f"PBT: maxTrialCount ({self.spec.max_trial_count}) is reached: no more exploits; "
                                 "the members train on to the end.")
            return None
        donor = exploit.donor
        key = (donor.id, exploit.start_step)
        handle = handle_of(donor)
        staged = str(self.study_dir / "pbt" / f"from-{donor.id}-step-{exploit.start_step}-for-{trial.id}")
        copied = handle is not None and executor.fetch_dir(handle, self.checkpoint_dir(donor.id), staged)
        if not copied:
            if key not in self._skipped:
                self._skipped.add(key)
                ckpt = self.checkpoint_dir(donor.id)
                if _has_files(ckpt):  # here (local, docker): it is there, but no copy of it was whole
                    why = (f"trial {donor.id}'s checkpoint in its AIP_CHECKPOINT_DIR ({ckpt}) could not be copied "
                           "whole (it was being written at every attempt)")
                else:
                    why = (f"trial {donor.id} has no checkpoint in its AIP_CHECKPOINT_DIR ({ckpt}) to copy (a trainer "
                           "must save checkpoints there for PBT to work)")
                self.on_progress(f"WARNING: PBT: {why}: the exploit of trial {trial.id} is skipped and it trains on.")
            return None
        now = refresh(donor)
        if now.state.is_final() or (now.measurements and now.measurements[-1].step_count >= self.pbt_spec.max_step_count):
            import shutil

            shutil.rmtree(staged, ignore_errors=True)
            return None
        member = trial.lineage.member if trial.lineage else 0
        lineage = PbtLineage(member=member, parent_trial_id=donor.id, start_step=exploit.start_step,
                             inherited_parameters=dict(exploit.inherited))
        return PendingTrial(dict(exploit.parameters), lineage, staged), exploit.reason

    @staticmethod
    def resumed_from(trial: Trial) -> Trial:
        """`trial` with `lineage.start_step` set to the step its checkpoint held, as its first
        report shows (a trainer goes on from the checkpoint's step: it reports the next one).
        The donor may have saved a newer checkpoint than its last report by the time it was
        copied; the trial's own first report says which one it resumed from."""
        lin = trial.lineage
        if lin is None or lin.parent_trial_id is None or not trial.measurements:
            return trial
        step = trial.measurements[0].step_count - 1
        if step == lin.start_step:
            return trial
        return replace(trial, lineage=replace(lin, start_step=step))

    def checkpoint_dir(self, trial_id: str) -> str:
        return output_dirs(self.base_output, trial_id)["AIP_CHECKPOINT_DIR"]

    def finished(self, trial: Trial) -> bool:
        """Did the trial train to maxStepCount?"""
        m = trial.final_measurement
        return m is not None and m.step_count >= self.pbt_spec.max_step_count

    def best(self, trials: Sequence[Trial], metric: MetricSpec) -> Trial | None:
        """The best trial (`vcli.tuning.result.best_trial`) among those that trained to
        maxStepCount (among all SUCCEEDED trials if none did)."""
        from vcli.tuning.result import best_trial, final_value

        done = [t for t in trials if final_value(t, metric.metric_id) is not None]
        return best_trial([t for t in done if self.finished(t)] or done, metric)


def stored_handle(store: Any, custom_job: str | None) -> ReplicaHandle | None:
    """The chief's handle of a trial's custom job, as the store keeps it (for a donor trial
    that ended: its files stay where it ran)."""
    from vcli.store import parse_job_ref

    if not custom_job:
        return None
    rows: Mapping[str, Any] = {r.task_name: r for r in store.replicas(parse_job_ref(custom_job))}
    chief = rows.get("workerpool0-0")
    if chief is None or not chief.handle:
        return None
    return ReplicaHandle.from_json(chief.handle)


def schedule(best: Trial, trials: Mapping[str, Trial]) -> list[dict[str, Any]]:
    """The hyperparameter schedule that produced `best`: its lineage walked back to a first
    member trial, as [{"trialId", "fromStep", "toStep", "parameters"}] in training order (step
    ranges are the steps each trial trained; replaying them in order reproduces the run)."""
    chain: list[Trial] = []
    t: Trial | None = best
    while t is not None and t.id not in {c.id for c in chain}:
        chain.append(t)
        parent = t.lineage.parent_trial_id if t.lineage else None
        t = trials.get(parent) if parent else None
    chain.reverse()
    out = []
    for i, t in enumerate(chain):
        start = t.lineage.start_step if t.lineage and t.lineage.parent_trial_id else 0
        nxt = chain[i + 1].lineage if i + 1 < len(chain) else None
        end = nxt.start_step if nxt else (t.final_measurement.step_count if t.final_measurement else start)
        out.append({"trialId": t.id, "fromStep": start, "toStep": end, "parameters": dict(t.parameters)})
    return out

def seeded(plan: Any, checkpoint: str, dest: str) -> Any:
    """`plan` with the staged checkpoint copy placed at `dest` (the trial's AIP_CHECKPOINT_DIR)
    before its replicas start: once per host, by the first replica placed there."""
    hosts: set[str] = set()
    launches = []
    for launch in plan.launches:
        host = launch.placement.host or ""
        if host in hosts:
            launches.append(launch)
        else:
            hosts.add(host)
            launches.append(replace(launch, seed_dirs=((checkpoint, dest),)))
    return replace(plan, launches=tuple(launches))


def _has_files(path: str) -> bool:
    """Does the local directory `path` hold a file (at any depth)?"""
    import os

    for _, _, files in os.walk(path):
        if files:
            return True
    return False


def give_up_queued(queued: list[PendingTrial], placer: Any) -> None:
    """A study that stops launching (its time budget ran out, its goal value was reached) drops
    the trials still waiting for capacity and leaves the hosts' GPU waiting queues: it waited
    for them for ever, RUNNING, and its queue entry held other users' jobs back."""
    queued.clear()
    stop_waiting = getattr(placer, "stop_waiting", None)
    if stop_waiting is not None:
        stop_waiting()
