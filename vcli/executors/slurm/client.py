"""The Slurm commands vcli runs, and the parsing of what they print. Standard library only.

Every command runs with a timeout (`COMMAND_TIMEOUT_SECONDS`) and the caller's environment
minus the `SLURM_*` variables that would change what sbatch/srun do (a vcli run inside an
allocation must not submit into it by accident); `SLURM_CONF` is kept. A command that is
missing, times out or fails raises `ExecutorError` with Slurm's own first error line.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

from vcli.errors import ExecutorError

#: Seconds a Slurm client command may take before it counts as unanswered.
COMMAND_TIMEOUT_SECONDS = 30.0
#: Job states in which a job holds (or is about to hold) nodes.
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
                 "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "STOPPED"}
#: Final job states in which Slurm itself ended the job: the replica's end is Slurm's doing.
KILLED_BY_SLURM = {"TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE", "BOOT_FAIL", "FAILED"}

_KEEP = {"SLURM_CONF"}


def client_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a Slurm client: ours, without the SLURM_* input variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))
           or k in _KEEP}
    env.update(extra or {})
    return env


def run(argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT_SECONDS, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client; `ExecutorError` (one line) when it cannot run, times out or fails."""
    conf = (env if env is not None else os.environ).get("SLURM_CONF")
    if conf and not os.path.exists(conf):  # Slurm's clients retry it for 60 s; vcli then blamed slurmctld
        raise ExecutorError(f"SLURM_CONF names {conf}, which does not exist: point it at the cluster's slurm.conf "
                            "(or unset it for Slurm's default).")
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                             env=env if env is not None else client_env(), stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ExecutorError(f"`{argv[0]}` is not installed here: the slurm executor needs Slurm's client commands "
                            "(Debian: apt-get install slurm-client).") from None
    except subprocess.TimeoutExpired:
        raise ExecutorError(f"`{argv[0]}` did not answer within {timeout:g}s: is slurmctld reachable?") from None
    if check and res.returncode != 0:
        raise ExecutorError(f"`{' '.join(argv[:2])}` failed: {first_error(res.stderr or res.stdout)}")
    return res


def first_error(text: str) -> str:
    """Slurm's informative line: its first `error:` line, else its first line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln:
            return ln.split("error:", 1)[1].strip()
    return lines[0] if lines else "no output"


# --------------------------------------------------------------------------- hostlists


def expand_hostlist(expr: str) -> list[str]:
    """`n[1-3,5],gpu07` -> ['n1', 'n2', 'n3', 'n5', 'gpu07'] (Slurm's hostlist syntax, one
    bracket per name, zero padding kept)."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", expr or ""):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{i:0{width}d}{suffix}")
    return out


def expand_ids(text: str) -> list[int]:
    """`0-1,5` -> [0, 1, 5]."""
    out: list[int] = []
    for r in (text or "").split(","):
        if not r.strip():
            continue
        lo, _, hi = r.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


# --------------------------------------------------------------------------- jobs


@dataclass
class NodeShare:
    """What one component of a job holds on one node."""

    node: str
    cpus: int
    gpus: list[int] = field(default_factory=list)


@dataclass
class Component:
    """One component of a (possibly heterogeneous) job, as `scontrol show job -d` tells it."""

    job_id: str
    offset: int
    state: str
    reason: str
    shares: list[NodeShare] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)


_FIELD = re.compile(r"(\w[\w/:]*)=(\S*)")


def show_job(job_id: str) -> list[Component]:
    """The job's components in offset order; [] when Slurm no longer knows the job."""
    res = run(["scontrol", "show", "job", "-d", job_id], check=False)
    if res.returncode != 0:
        if "Invalid job id" in res.stderr:
            return []
        raise ExecutorError(f"`scontrol show job {job_id}` failed: {first_error(res.stderr)}")
    return parse_show_job(res.stdout)


def parse_show_job(text: str) -> list[Component]:
    comps: list[Component] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        if not block.strip():
            continue
        fields: dict[str, str] = {}
        shares: list[NodeShare] = []
        for line in block.splitlines():
            stripped = line.strip()
            if stripped.startswith("Nodes=") and "CPU_IDs=" in stripped:
                kv = dict(_FIELD.findall(stripped))
                cpus = len(expand_ids(kv.get("CPU_IDs", "")))
                gres = kv.get("GRES", "")
                m = re.search(r"gpu[^(]*\(IDX:([^)]*)\)", gres)
                gpus = expand_ids(m.group(1)) if m and m.group(1) not in ("", "N/A") else []
                for node in expand_hostlist(kv["Nodes"]):
                    shares.append(NodeShare(node=node, cpus=cpus, gpus=list(gpus)))
                continue
            for k, v in _FIELD.findall(line):
                fields.setdefault(k, v)
        # Reason may hold spaces: take it from the line itself.
        m = re.search(r"Reason=(.*?)\s+Dependency=", block)
        reason = m.group(1) if m else fields.get("Reason", "")
        comps.append(Component(job_id=fields.get("JobId", ""), offset=int(fields.get("HetJobOffset", "0") or 0),
                               state=fields.get("JobState", ""), reason=reason, shares=shares, fields=fields))
    return sorted(comps, key=lambda c: c.offset)


def completed(job_id: str) -> tuple[str, str] | None:
    """(state, exit code) of a job Slurm has forgotten (`MinJobAge` after it ended), from its job
    completion log: `sacct --completion`, which reads `JobCompLoc` itself when the cluster sets
    `JobCompType=jobcomp/filetxt` (no slurmdbd needed; the file must be readable here). None when
    there is no such log or no record of the job."""
    try:
        res = run(["sacct", "--completion", "-j", job_id, "-n", "-P", "-o", "jobid,state,exitcode"], check=False)
    except ExecutorError:
        return None
    if res.returncode != 0:
        return None
    for line in res.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 3 and parts[0].split("+")[0] == job_id and parts[1].strip():
            return parts[1].split()[0], parts[2]
    return None


@dataclass
class NodeInfo:
    name: str
    address: str
    cpus: int
    memory_mb: int
    gpus: int
    state: str
    partitions: list[str]


def nodes(partition: str | None = None) -> list[NodeInfo]:
    """The nodes (of `partition`, or all) with their CPUs, memory, GPUs and address."""
    argv = ["sinfo", "-h", "-N", "-o", "%N|%o|%c|%m|%G|%t|%P"]
    if partition:
        argv += ["-p", partition]
    out: dict[str, NodeInfo] = {}
    for line in run(argv).stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 7:
            continue
        name, addr, cpus, mem, gres, state, part = parts[:7]
        gpus = sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:(,]+)?:(\d+)", gres))
        info = out.setdefault(name, NodeInfo(name=name, address=addr or name, cpus=int(cpus or 0),
                                             memory_mb=int(re.sub(r"\D", "", mem) or 0), gpus=gpus,
                                             state=state, partitions=[]))
        info.partitions.append(part.rstrip("*"))
    return list(out.values())


def own_jobs() -> list[tuple[str, str, str]]:
    """(Slurm job id, state, name) of every job of this user that squeue lists; a
    heterogeneous job once, by its leader's id (`%F`)."""
    out: dict[str, tuple[str, str]] = {}
    for line in run(["squeue", "-h", "--me", "-o", "%F|%T|%j"]).stdout.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3:
            out.setdefault(parts[0], (parts[1], parts[2]))
    return [(slurm_id, state, name) for slurm_id, (state, name) in out.items()]


#: How long squeue may go unanswered while jobs run before vcli gives up on Slurm (seconds).
OUTAGE_SECONDS = 600.0


class Queue:
    """A cached view of squeue: job states and live steps, asked at most every `ttl` seconds.

    A study polls every replica of every trial ten times a second; one `squeue` per second
    answers them all."""

    def __init__(self, ttl: float = 1.0) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._jobs: dict[str, tuple[str, str]] = {}
        self._steps: set[str] = set()
        self._answered = False
        #: Since when squeue fails (None: it answers), and when it answered again after failing.
        self._failing: float | None = None
        self._recovered = float("-inf")

    def refresh(self, force: bool = False) -> None:
        """Ask squeue again (at most every `ttl` s). While slurmctld does not answer (a restart,
        a failover, an RPC storm: routine on a cluster), the last answer stands, for up to
        `OUTAGE_SECONDS`, with one WARNING; one failed squeue ended a running job's controller
        and left the job RUNNING with nobody driving it."""
        with self._lock:
            if not force and time.monotonic() - self._at < self.ttl:
                return
            try:
                jobs: dict[str, tuple[str, str]] = {}
                for line in run(["squeue", "-h", "-o", "%i|%T|%r"]).stdout.splitlines():
                    parts = line.split("|")
                    if len(parts) >= 3:
                        jobs[parts[0]] = (parts[1], parts[2])
                steps = set(run(["squeue", "-h", "-s", "-o", "%i"]).stdout.split())
            except ExecutorError as e:
                self._outage(e)
                return
            if self._failing is not None:
                self._recovered = time.monotonic()
            self._jobs, self._steps, self._at, self._answered, self._failing = jobs, steps, time.monotonic(), True, None

    def shaky(self, seconds: float = 60.0) -> bool:
        """Has squeue failed now or within `seconds`? A slurmctld that just came back lists a
        running job's steps only once their nodes registered again: a step missing then is
        not an ended one."""
        return self._failing is not None or time.monotonic() - self._recovered < seconds

    def _outage(self, error: ExecutorError) -> None:
        now = time.monotonic()
        if not self._answered or (self._failing is not None and now - self._failing > OUTAGE_SECONDS):
            raise error
        if self._failing is None:
            self._failing = now
            import sys

            sys.stderr.write(f"WARNING: Slurm does not answer ({error}); vcli keeps the jobs' last known state and "
                             f"asks again, for up to {OUTAGE_SECONDS:g} s.\n")
            sys.stderr.flush()
        self._at = now  # the next ask after `ttl`, not at once

    def job(self, job_id: str) -> tuple[str, str] | None:
        """(state, reason) of a job squeue lists (a heterogeneous job by its leader: `ID+0`)."""
        self.refresh()
        return self._jobs.get(job_id) or self._jobs.get(f"{job_id}+0")

    def has_step(self, step: str) -> bool:
        self.refresh()
        return step in self._steps

    def invalidate(self) -> None:
        with self._lock:
            self._at = float("-inf")


class JobStates:
    """(state, reason) of Slurm jobs, wherever Slurm still keeps it: squeue's while the job is
    queued (the cached `queue`), then scontrol's final record (kept once final: scontrol
    forgets a job after MinJobAge), then the job completion log's."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self._final: dict[str, list[Component]] = {}
        self._completed: dict[str, tuple[str, str]] = {}

    def state(self, slurm_id: str, fresh: bool = False) -> tuple[str, str]:
        """(state, reason) of job `slurm_id`; ("GONE", why) when Slurm keeps no trace of it;
        `fresh`: squeue asked again first."""
        if fresh:
            self.queue.invalidate()
        got = self.queue.job(slurm_id)
        if got is not None and got[0] != "COMPLETING":
            return got
        comps = self._final.get(slurm_id)
        if comps is None:
            comps = show_job(slurm_id)
            if comps and comps[0].state not in ACTIVE_STATES:
                self._final[slurm_id] = comps
        if not comps:
            done = self._completed.get(slurm_id) or completed(slurm_id)
            if done is None:
                return ("GONE", "Slurm no longer knows the job, and there is no job completion log to ask")
            self._completed[slurm_id] = done
            return done[0], f"from Slurm's job completion log: ExitCode={done[1]}"
        return comps[0].state, comps[0].reason
