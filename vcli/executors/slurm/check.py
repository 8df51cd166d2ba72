"""`vcli slurm check`: can vcli use the Slurm cluster from here? Standard library only.

Asks each client command something harmless (`sinfo`, `squeue`, `scontrol ping`, `sbatch
--test-only`, `sacct`), then runs one real `srun` step on every idle node (`--immediate`, so a
busy cluster answers at once instead of queueing) that reads a file vcli just wrote into the
shared directory: that tells whether the nodes see the shared filesystem at the same path.
Lists the partitions (default marked) and each node's CPUs, memory, GPUs (gres) and state.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from vcli.errors import ExecutorError
from vcli.executors.slurm import client

#: Seconds `srun --immediate` waits for the nodes before calling them busy.
IMMEDIATE_SECONDS = 15


def report(executor: Any) -> dict[str, Any]:
    """The check's findings as one resource; `ok` is False when jobs cannot run from here."""
    commands = [_probe(name, argv) for name, argv in (
        ("sinfo", ["sinfo", "-h", "-o", "%P"]), ("squeue", ["squeue", "-h", "-o", "%i"]),
        ("scontrol", ["scontrol", "ping"]),
        ("sbatch", ["sbatch", "--test-only", "-n1", "-o", "/dev/null", "--wrap", "true",
                    *([f"--partition={executor.partition}"] if executor.partition else [])]),
        ("scancel", ["scancel", "--version"]), ("sacct", ["sacct", "-n", "-X", "-o", "JobID", "-S", "now-1hours"]))]
    out: dict[str, Any] = {"commands": commands, "partitions": [], "nodes": [], "sharedDirectory": {
        "path": executor.shared_dir, "visibleOnNodes": None, "detail": ""}}
    try:
        out["partitions"] = _partitions()
        nodes = executor.nodes()
        out["nodes"] = [{"name": n.name, "address": n.address, "cpus": n.cpus, "memoryMb": n.memory_mb, "gpus": n.gpus,
                         "state": n.state, "partitions": n.partitions} for n in sorted(nodes, key=lambda n: n.name)]
        srun, shared = _srun_on_nodes(executor, [n.name for n in nodes if n.state.rstrip("*") in ("idle", "mix")])
        commands.insert(4, srun)
        out["sharedDirectory"].update(shared)
    except ExecutorError as e:
        out["error"] = str(e)
    essential = {"sinfo", "squeue", "scontrol", "sbatch", "srun", "scancel"}
    out["ok"] = all(c["ok"] for c in commands if c["command"] in essential) and bool(out["nodes"]) \
        and out["sharedDirectory"]["visibleOnNodes"] is not False
    return out


def _probe(name: str, argv: list[str]) -> dict[str, Any]:
    try:
        res = client.run(argv, check=False, timeout=20)
    except ExecutorError as e:
        return {"command": name, "ok": False, "detail": str(e)}
    if res.returncode == 0:
        return {"command": name, "ok": True, "detail": (res.stdout.strip().splitlines() or res.stderr.strip().splitlines()
                                                        or [""])[0][:200]}
    return {"command": name, "ok": False, "detail": client.first_error(res.stderr or res.stdout)[:300]}


def _partitions() -> list[dict[str, Any]]:
    out = []
    for line in client.run(["sinfo", "-h", "-o", "%P|%a|%N"]).stdout.splitlines():
        name, avail, nodes = (line.split("|") + ["", ""])[:3]
        out.append({"name": name.rstrip("*"), "default": name.endswith("*"), "state": avail,
                    "nodes": client.expand_hostlist(nodes)})
    return out


def _srun_on_nodes(executor: Any, nodes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One step on each of `nodes` that reads a token from the shared directory."""
    if not nodes:
        return ({"command": "srun", "ok": False, "detail": "no idle node to run a step on now"},
                {"visibleOnNodes": None, "detail": "not checked: no idle node"})
    os.makedirs(executor.shared_dir, exist_ok=True)
    token = uuid.uuid4().hex
    path = os.path.join(executor.shared_dir, f"check-{token}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(token)
    try:
        argv = ["srun", f"--nodes={len(nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}",
                f"--immediate={IMMEDIATE_SECONDS}", "--job-name=vcli-check", "--time=1",
                *([f"--partition={executor.partition}"] if executor.partition else []),
                "sh", "-c", f'printf "%s %s\\n" "$SLURMD_NODENAME" "$(cat {path} 2>/dev/null)"']
        res = client.run(argv, check=False, timeout=IMMEDIATE_SECONDS + 30)
    finally:
        os.unlink(path)
    if res.returncode != 0:
        return ({"command": "srun", "ok": False, "detail": client.first_error(res.stderr or res.stdout)[:300]},
                {"visibleOnNodes": None, "detail": "not checked: srun failed"})
    seen = dict((line.split() + [""])[:2] for line in res.stdout.splitlines() if line.strip())
    blind = sorted(n for n in nodes if seen.get(n) != token)
    shared = {"visibleOnNodes": not blind,
              "detail": f"seen at the same path on {len(nodes) - len(blind)} of {len(nodes)} idle node(s)"
                        + (f"; not on {', '.join(blind)}" if blind else "")}
    return {"command": "srun", "ok": True, "detail": f"ran a step on {', '.join(sorted(seen))}"}, shared
