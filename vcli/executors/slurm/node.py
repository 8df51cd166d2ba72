"""The first thing a replica's Slurm step runs on its node. Standard library only, run by path.

    python3 -S node.py RECORD_FILE -- SUPERVISOR_ARGV...

It writes RECORD_FILE (on the shared filesystem) atomically: `{"job": SLURM_JOB_ID, "step":
SLURM_STEP_ID, "node": SLURMD_NODENAME, "pid": PID, "gpus": ...}`, which is how the controller
learns the step's id (to signal or cancel exactly this replica) and where it runs. Then it sets
CUDA_VISIBLE_DEVICES from `VCLI_SLURM_GPUS` (the GPU indices Slurm allocated to the job on this
node, split between its replicas by the controller) when that is set, and execs the
supervisor in place (same pid: the step's task is the supervisor).
"""

from __future__ import annotations

import json
import os
import sys


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print("usage: node.py RECORD_FILE -- ARGV...", file=sys.stderr)
        return 2
    record, argv = args[0], args[2:]
    gpus = os.environ.get("VCLI_SLURM_GPUS")
    if gpus is not None:
        # What Slurm allocated (its own variable, when the cluster sets one, names the same
        # GPUs for the whole job on the node; this is this replica's share of them).
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    # A heterogeneous job's component is a job of its own: its id names the step in squeue.
    facts = {"job": os.environ.get("VCLI_SLURM_STEP_JOB") or os.environ.get("SLURM_JOB_ID", ""), "step": os.environ.get("SLURM_STEP_ID", ""),
             "node": os.environ.get("SLURMD_NODENAME", ""), "pid": os.getpid(),
             "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "slurmGpus": os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_JOB_GPUS"),
             "allocation": os.environ.get("VCLI_SLURM_ALLOCATION", ""), "lease": os.environ.get("VCLI_SLURM_LEASE", ""),
             "hetGroup": os.environ.get("VCLI_SLURM_HET_GROUP", "")}
    tmp = f"{record}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(facts, f)
    os.replace(tmp, record)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"vcli: cannot run the replica's supervisor {argv[0]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
