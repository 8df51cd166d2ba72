"""The SSH executor: replicas as processes (or containers) on inventory hosts, over paramiko.

No agent and no sudo on the hosts; paramiko is imported lazily (`pip install 'vcli[ssh]'`).
Where each concern lives:

    trust.py          host keys: known_hosts checks, `connect`, `accept_host_key`, the
                      HostKeyError family (nothing is ever accepted silently)
    link.py           one host's connections: heartbeats, dead-host detection, short commands,
                      a control shell, SFTP reads; `q`/`qargv` quote every remote argument
    sync.py           shipping a local package to a host (SFTP mirror by size and mtime)
    code.py           a process replica's private working directory and its installed packages
                      on the host (`vcli.packages` run there by `workspace.py`, shipped)
    remote.py         the remote process model: every replica under the per-replica supervisor
                      (`vcli.executors.supervisor`, shipped to the host), the command that
                      starts it, log and status over the channel, stop and liveness,
                      local -> host path mapping, what a handle's `ref` and `details` hold
    wrapper.py        the remote end of a replica's channel (stdlib only, shipped to the host):
                      starts the supervisor, streams its log and the trainer's exit status,
                      keeps the replica's lease; `attach` to re-adopt it; `stop` for the executor
    transfer.py       whole directories to and from a host over SFTP, atomically: the
                      checkpoint a PBT trial starts from (`seed_dirs`) and `fetch_dir`
    docker_bridge.py  the Docker runtime on a host: vcli's Docker executor over an SSH bridge
    probe.py          `vcli hosts check`: host facts and host-to-host reachability
    executor.py       `SSHExecutor`, the `Executor` contract over all of the above

Remote layout (`workdir` of the host, default `~/.vcli`, expanded on the host):

    bin/vcli-*-<hash>.py       the supervisor and the wrapper, shipped once per version
    bin/vcli-lib-<hash>/       workspace.py with vcli.errors and vcli.packages, shipped once
    code/<package>-<hash>/     the job's local package, synced by SFTP (never a working dir)
    envs/<key>/                a Python environment with a replica's installs, once per content
    envs/files/<hash>/<name>   packageUris and other files to install, shipped by SFTP
    jobs/<job>/package/<hash>/ the job's read-only snapshot of its synced package; every
                               replica runs in `jobs/<job>/replicas/<task>/work`, a copy of it
    jobs/<job id>/...          every local path under vcli's home maps to the same relative
                               path under the workdir: replica dirs, the hypertune metric file,
                               AIP_MODEL_DIR etc. Outputs stay on the host.

Host failure: a host none of whose connections answered for `VCLI_SSH_DEAD_AFTER` seconds
(default 10) is dead: its replicas' `poll` returns exit code 255 with a message, the executor's
`HostHealth` hears `mark_unhealthy`, and a background probe reports `mark_healthy` once it
answers again. Every blocking call has a timeout, so a dead host never hangs the controller.

Controller death: remote replicas outlive their controller (as local and Docker ones do) so
that `vcli custom-jobs resume` / `hp-tuning-jobs resume` can re-adopt them (`adopt`: the log
goes on from where the local copy ends). While a controller holds a replica it renews the
replica's lease on the host every few seconds over the replica's channel; a replica whose lease
is older than `VCLI_SSH_ORPHAN_TIMEOUT` seconds (default 600) is stopped by the host itself,
whole tree included, so neither a dead controller nor a network partition leaves an orphan
running for good. `cancel` stops an orphaned job's replicas at once.
"""

from __future__ import annotations

from typing import Any

#: Where each name lives: imported on first use, so that importing the package (its `kind`
#: module, the registry) imports no executor.
_WHERE = {
    "ChangedHostKeyError": "vcli.executors.ssh.trust",
    "HostKeyError": "vcli.executors.ssh.trust",
    "SSHExecutor": "vcli.executors.ssh.executor",
    "UnknownHostKeyError": "vcli.executors.ssh.trust",
    "accept_host_key": "vcli.executors.ssh.trust",
    "build_remote_command": "vcli.executors.ssh.remote",
    "check_hosts": "vcli.executors.ssh.probe",
    "connect": "vcli.executors.ssh.trust",
    "fingerprint": "vcli.executors.ssh.trust",
}

__all__ = [
    "ChangedHostKeyError",
    "HostKeyError",
    "SSHExecutor",
    "UnknownHostKeyError",
    "accept_host_key",
    "build_remote_command",
    "check_hosts",
    "connect",
    "fingerprint",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(name)
