"""`vcli hosts check`: connect to hosts, collect their facts, test host-to-host reachability.

Per host (in parallel): OS, kernel, CPUs, memory, free disk under the workdir, GPUs (nvidia-smi,
mapped to Vertex accelerator types), the Docker engine's version and the configured Python.
Then every host dials a listener on every other host's TF address, as the replicas of one
multi-worker job will. Problems come back as one line each; nothing is changed on the hosts.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Mapping, Sequence

from vcli.errors import ExecutorError
from vcli.executors.ssh.link import q, run_command
from vcli.executors.ssh.trust import CONNECT_TIMEOUT, connect
from vcli.placement.gpus import vertex_gpu_type
from vcli.placement.hosts import Host, KnownHosts

__all__ = ["check_hosts", "check_reachability", "probe_host", "vertex_gpu_type"]

_PROBE_SCRIPT = r'''
wd=$1; py=$2
echo "os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -s)"
echo "kernel=$(uname -sr)"
echo "cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)"
while read -r k v rest; do [ "$k" = "MemTotal:" ] && echo "mem_kb=$v"; done </proc/meminfo
case $wd in "~") wd=$HOME ;; "~/"*) wd=$HOME/${wd#"~/"} ;; /*) ;; *) wd=$HOME/$wd ;; esac
d=$wd; while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "workdir=$wd"
echo "disk_kb=$(df -Pk "$d" 2>/dev/null | tail -n 1 | { read -r a b c f rest; echo "$f"; })"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,utilization.gpu --format=csv,noheader,nounits 2>&1 | sed 's/^/gpu=/'
else
  echo "gpu=none"
fi
if command -v docker >/dev/null 2>&1; then
  echo "docker=$(docker version --format '{{.Server.Version}}' 2>&1 | head -n 1)"
else
  echo "docker=absent"
fi
echo "python=$("$py" -c 'import sys; print(sys.version.split()[0])' 2>&1 | head -n 1)"
'''

_LISTEN = ("import socket, sys, time\n"
           "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "s.bind(('0.0.0.0', 0)); s.listen(64); print(s.getsockname()[1], flush=True)\n"
           "s.settimeout(0.5); end = time.time() + float(sys.argv[1])\n"
           "while time.time() < end:\n"
           "    try:\n"
           "        c, _ = s.accept(); c.close()\n"
           "    except OSError:\n"
           "        pass\n")
_DIAL = ("import socket, sys\n"
         "try:\n"
         "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close(); print('OK')\n"
         "except OSError as e:\n"
         "    print('FAIL', e)\n")

def _parse_probe(out: str) -> dict[str, Any]:
    facts: dict[str, Any] = {"gpus": []}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key == "gpu":
            if value != "none":
                parts = [p.strip() for p in value.split(",")]
                if len(parts) >= 5 and parts[0].isdigit():
                    facts["gpus"].append({"index": int(parts[0]), "name": parts[1], "memoryMb": parts[2],
                                          "memoryUsedMb": parts[3], "utilization": parts[4],
                                          "type": vertex_gpu_type(parts[1])})
                else:
                    facts["gpuError"] = value
        elif key:
            facts[key] = value
    return facts


def probe_host(host: Host, *, timeout: float | None = None,
               known_hosts: KnownHosts | None = None) -> tuple[dict[str, Any], list[str], Any]:
    """Connect and collect facts. Returns (resource dict, problems, client or None)."""
    res: dict[str, Any] = {"name": host.name, "address": host.address, "runtime": host.runtime}
    problems: list[str] = []
    try:
        client, _ = connect(host, timeout=timeout, known_hosts=known_hosts)
    except ExecutorError as e:
        res["status"] = "UNREACHABLE"
        problems.append(str(e))
        return res, problems, None
    started = time.monotonic()
    try:
        rc, out, err = run_command(client, f"sh -c {q(_PROBE_SCRIPT)} probe {q(host.workdir)} {q(host.python)}",
                                   timeout=60)
    except Exception as e:
        res["status"] = "ERROR"
        problems.append(f"{host.name}: probe failed: {e}")
        return res, problems, client
    res["latencyMs"] = round((time.monotonic() - started) * 1000)
    facts = _parse_probe(out)
    _machine_facts(host, facts, res, problems)
    _gpu_facts(host, facts, res, problems)
    _software_facts(host, facts, res, problems)
    res["status"] = "OK" if not problems else "PROBLEMS"
    return res, problems, client


def _machine_facts(host: Host, facts: Mapping[str, Any], res: dict[str, Any], problems: list[str]) -> None:
    """Put the probe's OS, kernel, CPUs, memory, free disk and workdir into `res`; a CPU count
    or memory size that cannot be read is left out, free disk that cannot be measured is a
    problem."""
    res["os"] = facts.get("os")
    res["kernel"] = facts.get("kernel")
    try:
        res["cpus"] = int(facts.get("cpus", ""))
    except ValueError:
        pass
    try:
        res["memoryGb"] = round(int(facts["mem_kb"]) / 1024 / 1024, 1)
    except (KeyError, ValueError):
        pass
    try:
        res["diskFreeGb"] = round(int(facts["disk_kb"]) / 1024 / 1024, 1)
    except (KeyError, ValueError):
        problems.append(f"{host.name}: cannot measure free disk space under {facts.get('workdir', host.workdir)}")
    res["workdir"] = facts.get("workdir")


def _gpu_facts(host: Host, facts: Mapping[str, Any], res: dict[str, Any], problems: list[str]) -> None:
    """Put the GPUs nvidia-smi shows into `res` (count, and when there are some their Vertex
    type, details and a summary); a failing nvidia-smi, or fewer GPUs than the host declares,
    is a problem."""
    gpus = facts["gpus"]
    res["gpus"] = len(gpus)
    if gpus:
        res["gpuType"] = gpus[0]["type"] or gpus[0]["name"]
        res["gpuDetails"] = gpus
        res["gpuSummary"] = ", ".join(
            f"{g['index']}:{g['name']} {g['memoryUsedMb']}/{g['memoryMb']}MiB {g['utilization']}%" for g in gpus)
    if facts.get("gpuError"):
        problems.append(f"{host.name}: nvidia-smi is installed but failed: {facts['gpuError']}")
    if host.gpu_count is not None and gpus and host.gpu_count > len(gpus):
        problems.append(f"{host.name}: declares {host.gpu_count} GPUs but nvidia-smi shows {len(gpus)}")


def _software_facts(host: Host, facts: Mapping[str, Any], res: dict[str, Any], problems: list[str]) -> None:
    """Put the Docker engine's version (or `absent` / `unavailable`) and the configured Python
    (or `missing`) into `res`; the runtime's own one not answering is a problem."""
    docker = facts.get("docker", "absent")
    res["docker"] = docker if re.match(r"^\d", docker or "") else ("absent" if docker == "absent" else "unavailable")
    if host.runtime == "docker" and not re.match(r"^\d", docker or ""):
        problems.append(f"{host.name}: runtime is docker but the Docker engine does not answer: {docker}")
    py = facts.get("python", "")
    if re.match(r"^\d+\.\d+", py):
        res["python"] = f"{host.python} ({py})"
    else:
        res["python"] = "missing"
        if host.runtime == "process":
            problems.append(f"{host.name}: python '{host.python}' does not run there ({py.strip() or 'no output'}); "
                            f"set it with `vcli hosts add {host.name} --python=/path/to/python`")


def check_reachability(hosts: Sequence[Host], clients: Mapping[str, Any], *, seconds: float = 20) -> list[str]:
    """Can every host open a TCP connection to every other host's TF port? One line per problem."""
    problems: list[str] = []
    names = [h.name for h in hosts if clients.get(h.name) is not None]
    if len(names) < 2:
        return problems
    by_name = {h.name: h for h in hosts}
    listeners: dict[str, tuple[Any, int]] = {}
    for name in names:
        h = by_name[name]
        try:
            chan = clients[name].get_transport().open_session(timeout=CONNECT_TIMEOUT)
            chan.settimeout(15)
            chan.exec_command(f"{q(h.python)} -c {q(_LISTEN)} {seconds:g}")
            line = b""
            while not line.endswith(b"\n"):
                data = chan.recv(64)
                if not data:
                    break
                line += data
            port = int(line.strip())
            listeners[name] = (chan, port)
        except Exception as e:
            problems.append(f"{name}: cannot start a test listener with {h.python}: {e or type(e).__name__}")
    try:
        for src in names:
            for dst, (_, port) in listeners.items():
                if src == dst:
                    continue
                target = by_name[dst].tf_address
                try:
                    rc, out, err = run_command(
                        clients[src], f"{q(by_name[src].python)} -c {q(_DIAL)} {q(target)} {port} 5", timeout=20)
                except Exception as e:
                    problems.append(f"{src}: cannot test the connection to {dst}: {e}")
                    continue
                if not out.startswith("OK"):
                    reason = (out.strip()[5:] or err.strip() or f"exit {rc}")[-200:]
                    problems.append(f"{src} cannot reach {dst} at {target}:{port} (a TF port): {reason}")
    finally:
        for chan, _ in listeners.values():
            try:
                chan.close()
            except Exception:
                pass
    return problems


def check_hosts(hosts: Sequence[Host], *, reachability: bool = True,
                known_hosts: KnownHosts | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """`vcli hosts check`: per-host facts and problem lines (probes run in parallel).

    `known_hosts` defaults to the user's files (`vcli.placement.hosts.known_hosts()`).
    """
    results: dict[str, tuple[dict[str, Any], list[str], Any]] = {}

    def one(h: Host) -> None:
        results[h.name] = probe_host(h, known_hosts=known_hosts)

    threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CONNECT_TIMEOUT * 3 + 90)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    clients: dict[str, Any] = {}
    for h in hosts:
        res, probs, client = results.get(h.name, ({"name": h.name, "address": h.address, "status": "TIMEOUT"},
                                                   [f"{h.name}: the check timed out"], None))
        rows.append(res)
        problems.extend(probs)
        if client is not None and res.get("python") not in (None, "missing"):
            clients[h.name] = client
        elif client is not None:
            client.close()
    try:
        if reachability:
            reach = check_reachability(hosts, clients)
            problems.extend(reach)
            for row in rows:
                if any(p.startswith(f"{row['name']} cannot reach") for p in reach) and row.get("status") == "OK":
                    row["status"] = "PROBLEMS"
    finally:
        for c in clients.values():
            c.close()
    return rows, problems
