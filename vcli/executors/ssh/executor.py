"""`SSHExecutor`: replicas as processes (or containers) on SSH hosts, over paramiko.

The executor receives everything as data: the hosts it may use, vcli's local home (the root of
the paths it maps to each host's workdir), the known_hosts files, and an optional `HostHealth`
that hears when a host dies and when it answers again (the controller layer passes the
placement scheduler there; `vcli.control.wiring` builds both).
"""

from __future__ import annotations

import os
import posixpath
import random
import threading
import time
from typing import Callable, Sequence

from vcli import packages
from vcli.errors import ExecutorError, NotFoundError
from vcli.executors import (
    ExecutorBase,
    HostHealth,
    Placement,
    ReplicaHandle,
    ReplicaLaunch,
    ReplicaStatus,
    process_argv,
    read_replica_file,
)
from vcli.executors.leases import idle_argv
from vcli.executors.ssh.code import RemoteEnv, has_code, populate, private_workdir, python_env, with_env
from vcli.executors.ssh.docker_bridge import DockerOnHosts
from vcli.executors.ssh.leases import RemoteLeases, lease_dir_of
from vcli.executors.ssh.link import HostLink, answering, q
from vcli.executors.ssh.remote import (
    FREE_PORT,
    REPLICA_TAG,
    RemoteView,
    Replica,
    attach_command,
    beat,
    beat_seconds,
    build_remote_command,
    find_replica,
    hook_exit_signal,
    install_tools,
    map_path,
    orphan_timeout,
    parse_ref,
    pump,
    remote_paths,
    remote_view,
    replica_details,
    replica_tag,
    stop_command,
    supervisor_alive,
)
from vcli.executors.ssh.sync import ship
from vcli.executors.ssh.transfer import download_dir, upload_seed_dirs
from vcli.executors.ssh.trust import CONNECT_TIMEOUT, connect
from vcli.logs import LogWriter, last_times
from vcli.placement.hosts import Host, KnownHosts

__all__ = ["SSHExecutor"]

START_TIMEOUT = float(os.environ.get("VCLI_SSH_START_TIMEOUT", "60"))
#: read_file answers for a running replica are at most this old (seconds).
READ_INTERVAL = 1.0
#: Fallback port range when the host has no Python to ask for a free port.
PORT_RANGE = (20000, 29999)
#: Seconds between reconnection attempts to a dead host.
PROBE_SECONDS = 5.0
#: How long release() waits for a replica's supervisor to finish stopping its trainer's
#: leftovers (and the wrapper to hand over the rest of the log) before stopping it outright.
RELEASE_WAIT_SECONDS = 6.0
RETRY = " Nothing was changed: resume again once the host answers."


class SSHExecutor(ExecutorBase):
    """Replicas on SSH hosts: see `vcli.executors.ssh` for security, layout and failure handling.

    `hosts` are the hosts placements and stored handles may name (for a run: the resolved
    `--hosts`; to stop replicas from stored handles: the whole inventory). `home` is vcli's local
    home: a local path under it maps to the same relative path under a host's workdir.
    `health` hears `mark_unhealthy(host, reason)` when every connection to a host died and
    `mark_healthy(host)` once it answers again.
    """

    name = "ssh"

    def __init__(self, hosts: Sequence[Host], *, home: str | os.PathLike[str], known_hosts: KnownHosts,
                 health: HostHealth | None = None) -> None:
        self._hosts = {h.name: h for h in hosts}
        self._home = os.path.abspath(os.fspath(home))
        self._known_hosts = known_hosts
        self._health = health
        self._links: dict[str, HostLink] = {}
        self._leases: dict[str, RemoteLeases] = {}
        self._replicas: dict[str, Replica] = {}
        self._lock = threading.RLock()
        #: host -> why it is down (declared dead here, not yet answering again).
        self._down: dict[str, str] = {}
        self._probing: set[str] = set()
        #: VCLI_SSH_ORPHAN_TIMEOUT: how long replicas run on without a controller renewing their lease.
        self._orphan_timeout = orphan_timeout()
        self._docker = DockerOnHosts(self._link, self._home, self.name, self._replica_leases, self._orphan_timeout)
        self._closed = threading.Event()
        self._beats: threading.Thread | None = None

    # ------------------------------------------------------------------ hosts

    def _host(self, name: str) -> Host:
        host = self._hosts.get(name)
        if host is None:
            known = ", ".join(sorted(self._hosts)) or "none"
            raise NotFoundError(f"Host [{name}] is not one of the ssh executor's hosts ({known}). "
                                "List hosts with `vcli hosts list`.")
        return host

    def _link(self, name: str) -> HostLink:
        with self._lock:
            link = self._links.get(name)
            if link is None:
                link = self._links[name] = HostLink(self._host(name), self._known_hosts, self._host_dead)
            return link

    def gpu_leases(self, name: str) -> RemoteLeases:
        """The host-wide GPU leases of host `name` (`vcli.executors.ssh.leases`): what the
        placer leases a placed replica's GPUs with, and what `start` hands to its supervisor.
        Its lease server on the host starts on first use."""
        with self._lock:
            leases = self._leases.get(name)
            if leases is None:
                leases = self._leases[name] = RemoteLeases(self._link(name), lease_dir_of(self._host(name)))
            return leases

    def _replica_leases(self, launch: ReplicaLaunch, host: Host) -> tuple[RemoteLeases, list[int | str]] | None:
        """The leases a replica's supervisor (or container keeper) is to hold: those the placer took (the
        rest are taken now; `RemoteLeases.replica_keys`). One another replica holds is an
        ExecutorError: a replica never starts on a GPU it has no lease of."""
        if not launch.placement.gpu_indices:
            return None
        leases = self.gpu_leases(host.name)
        keys = leases.replica_keys(launch, host.name)
        if leases.socket is None:
            raise ExecutorError(f"Cannot start replica {launch.task_name} on host {host.name}: its GPU lease "
                                f"server is gone.")
        return leases, keys

    def _host_dead(self, host: Host, reason: str) -> None:
        with self._lock:
            self._down[host.name] = reason
        if self._health is not None:
            self._health.mark_unhealthy(host.name, reason)
        with self._lock:
            if host.name in self._probing or self._closed.is_set():
                return
            self._probing.add(host.name)
        threading.Thread(target=self._probe_until_healthy, args=(host,), name=f"vcli-ssh-probe-{host.name}",
                         daemon=True).start()

    def _probe_until_healthy(self, host: Host) -> None:
        try:
            while not self._closed.wait(PROBE_SECONDS):
                try:
                    client, _ = connect(host, timeout=PROBE_SECONDS, known_hosts=self._known_hosts)
                except ExecutorError:
                    continue
                client.close()
                with self._lock:
                    self._down.pop(host.name, None)
                if self._health is not None:
                    self._health.mark_healthy(host.name)
                return
        finally:
            with self._lock:
                self._probing.discard(host.name)

    def _is_docker(self, launch: ReplicaLaunch) -> bool:
        return launch.placement.runtime == "docker" or self._host(launch.placement.host).runtime == "docker"

    # ------------------------------------------------------------------ contract

    def command_for(self, launch: ReplicaLaunch) -> list[str]:
        """A container's own argv on docker hosts, else the process argv with the host's python."""
        if self._is_docker(launch):
            return list(launch.argv)
        return process_argv(launch, self._host(launch.placement.host).python)

    def check(self, launches: Sequence[ReplicaLaunch]) -> None:
        """What `prepare` would refuse before it connects: unknown hosts, replicas with nothing to
        run, local packages that are not there. (A docker host's engine checks images in prepare.)"""
        for launch in launches:
            self.command_for(launch)
            if not self._is_docker(launch) and launch.workdir and not os.path.isdir(launch.workdir):
                raise ExecutorError(f"Directory '{launch.workdir}' is not found.")

    def prepare(self, launches: Sequence[ReplicaLaunch], *, cancelled: threading.Event,
                progress: Callable[[str], None]) -> list[ReplicaLaunch]:
        """Ship each process host's local package once, give every process replica with code a
        private working directory and its installs (`vcli.executors.ssh.code`); let docker
        hosts' engines prepare."""
        self.check(launches)
        out = list(launches)
        shipped: set[tuple[str, str]] = set()
        workdirs: dict[tuple[str, str, str], list[str]] = {}  # (host, package, store) -> private dirs
        by_docker_host: dict[str, list[int]] = {}
        for i, launch in enumerate(launches):
            host_name = launch.placement.host
            if self._is_docker(launch):
                by_docker_host.setdefault(host_name, []).append(i)
            elif launch.workdir:
                if cancelled.is_set():
                    return out
                if (host_name, launch.workdir) not in shipped:
                    shipped.add((host_name, launch.workdir))
                    ship(self._link(host_name), launch.workdir, progress)
                remote_out = remote_view(launch, self._link(host_name).root(), self._home).output_dir
                # `<job dir>/package` on the host, as the process executor's `<job dir>/package`.
                store = f"{posixpath.dirname(posixpath.dirname(remote_out))}/package"
                workdirs.setdefault((host_name, launch.workdir, store), []).append(private_workdir(remote_out))
        for (host_name, package, store), dirs in workdirs.items():
            if cancelled.is_set():
                return out
            populate(self._link(host_name), package, store, dirs)
        envs: dict[tuple[str, packages.Installs], RemoteEnv] = {}
        for i, launch in enumerate(launches):
            lp = launch.local_package
            if self._is_docker(launch) or cancelled.is_set():
                continue
            installs = packages.installs_for(package_uris=launch.package_uris, requirements=lp.requirements if lp else (),
                                             package_dir=launch.workdir, extra_packages=lp.extra_packages if lp else ())
            if installs:
                key = (launch.placement.host, installs)
                if key not in envs:
                    envs[key] = python_env(self._link(key[0]), installs, progress=progress,
                                           label=f" for {launch.task_name}")
                out[i] = with_env(launch, envs[key])
        for host_name, idx in by_docker_host.items():
            if cancelled.is_set():
                return out
            ready = self._docker.prepare(host_name, [launches[i] for i in idx], cancelled=cancelled, progress=progress)
            for i, launch in zip(idx, ready):
                out[i] = launch
        return out

    def reserve_port(self, placement: Placement) -> int:
        link = self._link(placement.host)
        now = time.monotonic()
        with self._lock:
            for p, t in list(link.ports.items()):
                if now - t > 120:
                    del link.ports[p]
        for _ in range(5):
            port = None
            try:
                rc, out = link.quick(f"{q(link.host.python)} -S -c {q(FREE_PORT)}", timeout=CONNECT_TIMEOUT + 10)
                if rc == 0 and out.strip().isdigit():
                    port = int(out.strip())
            except ExecutorError:
                if not link.healthy():
                    raise
            if port is None:
                port = random.randint(*PORT_RANGE)
            with self._lock:
                if port not in link.ports:
                    link.ports[port] = now
                    return port
        raise ExecutorError(f"Host {placement.host}: could not find a free port")

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        host = self._host(launch.placement.host)
        link = self._link(host.name)
        if self._is_docker(launch):
            return self._docker.start(launch, link)
        view = remote_view(launch, link.root(), self._home)
        root, env, remote_out = view.root, dict(view.env), view.output_dir
        env.setdefault("PYTHONUNBUFFERED", "1")
        # What stop, poll-from-handles and the final sweep look for on the host.
        env["VCLI_JOB_ID"] = launch.job_id
        tag = env[REPLICA_TAG] = replica_tag(launch.job_id, launch.task_name)
        mkdirs = list(view.mkdirs)
        if has_code(launch):
            # Its own copy of the package (made by prepare), never the synced tree; as the
            # image does, `python -m pkg.mod` and scripts import siblings from it.
            cwd = private_workdir(remote_out)
            mkdirs.append(cwd)
            env["PYTHONPATH"] = ":".join(p for p in (cwd, env.get("PYTHONPATH", "")) if p)
        else:
            cwd = remote_out
        secrets = {k: env.pop(k) for k in [k for k in env if k in launch.secret_env]}
        for k, v in secrets.items():
            if "\n" in v or "\r" in v:
                raise ExecutorError(f"The secret {k} contains a line break, which the ssh executor cannot pass.")
        argv = process_argv(launch, host.python)
        # The host keeps its own replica.log (the supervisor writes it; the wrapper streams it here).
        paths = remote_paths(launch, view, self._home)
        gpus = self._replica_leases(launch, host)
        if gpus:
            argv = idle_argv(launch, argv, python=host.python, gpuinfo=install_tools(link).gpuinfo, leases=gpus[0])
        command = build_remote_command(argv, env, cwd=cwd, python=host.python, tools=install_tools(link),
                                       status=paths.status, log=paths.log, tag=tag, lease=paths.lease,
                                       timeout=self._orphan_timeout,
                                       mkdirs=(*mkdirs, posixpath.dirname(paths.log)), secrets=tuple(secrets),
                                       gpu_leases=(str(gpus[0].socket), gpus[1]) if gpus else None)
        os.makedirs(launch.output_dir, exist_ok=True)
        upload_seed_dirs(link, launch, self._home)  # e.g. the checkpoint a PBT trial resumes from
        stdin = "".join(f"{k}={v}\n" for k, v in secrets.items()).encode() + b"\n" if secrets else b""
        rep = self._open(launch, link, view, command, stdin, "start")
        if gpus:  # its supervisor holds them now (a wrapper that failed took none, or lost them)
            gpus[0].handed_over(gpus[1])
        where = f"{host.name} ({host.login}@{host.address}:{host.port})"
        rep.writer.write("vcli", f"Started on {where} under supervisor {rep.supervisor} in {cwd}; outputs under "
                                 f"{posixpath.dirname(posixpath.dirname(remote_out))} on {host.name}.")
        ref = f"{rep.supervisor}@{launch.job_id}@{root}"
        self._keep(ref, rep)
        return ReplicaHandle(executor=self.name, host=host.name, ref=ref, task_name=launch.task_name,
                             details=replica_details(host.name, ref))

    def _open(self, launch: ReplicaLaunch, link: HostLink, view: RemoteView, command: str, stdin: bytes,
              what: str) -> Replica:
        """Run a wrapper command on a channel of its own, its output pumped into the replica's log;
        returns once the wrapper's handshake named the supervisor. Raises ExecutorError."""
        host = link.host
        writer = LogWriter(launch.log_path)
        try:
            conn, chan = link.open_session()
        except ExecutorError as e:
            writer.write("vcli", f"failed to {what} on {host.name}: {e}")
            writer.close()
            raise
        rep = Replica(launch=launch, link=link, conn=conn, chan=chan, writer=writer, remote_root=view.root,
                      remote_metric=view.metric_file)
        hook_exit_signal(chan, rep)
        try:
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
        except Exception as e:
            writer.close()
            chan.close()
            raise ExecutorError(f"Cannot {what} replica {launch.task_name} on host {host.name}: {e}") from None
        for stream in ("stdout", "stderr"):
            t = threading.Thread(target=pump, args=(rep, stream), name=f"vcli-ssh-{stream}-{launch.task_name}",
                                 daemon=True)
            t.start()
            rep.threads.append(t)
        deadline = time.monotonic() + START_TIMEOUT
        while not rep.started.wait(0.2):
            if time.monotonic() > deadline or not conn.alive():
                chan.close()
                writer.write("vcli", f"no answer from {host.name} while starting")
                writer.close()
                raise ExecutorError(f"Cannot {what} replica {launch.task_name} on host {host.name}: no answer "
                                    f"within {START_TIMEOUT:g}s")
        if rep.supervisor is None:
            for t in rep.threads:
                t.join(2)
            detail = "; ".join(line for line in rep.early_stderr if line.strip())[-500:] or "the remote shell exited"
            writer.close()
            chan.close()
            raise ExecutorError(f"Cannot {what} replica {launch.task_name} on host {host.name}: {detail}")
        return rep

    def _keep(self, ref: str, rep: Replica) -> None:
        """Track a replica of this controller, and renew its lease from now on (`_beat`)."""
        with self._lock:
            self._replicas[ref] = rep
            if self._beats is None and not self._closed.is_set():
                self._beats = threading.Thread(target=self._beat, name="vcli-ssh-lease", daemon=True)
                self._beats.start()

    def _beat(self) -> None:
        """Renew the lease of every replica this controller holds (see `vcli.executors.ssh.remote`)."""
        interval = beat_seconds(self._orphan_timeout)
        while not self._closed.wait(interval):
            with self._lock:
                reps = [r for r in self._replicas.values() if not r.released]
            for rep in reps:
                if not rep.chan.exit_status_ready() and rep.conn.alive():
                    beat(rep.chan)

    def adopt(self, handle: ReplicaHandle, launch: ReplicaLaunch) -> None:
        """Re-attach to a replica another (dead) controller started: follow its log on the host
        from after the last record in `launch.log_path`, report its exit, and renew its lease.
        A host that cannot be reached now is left to `poll` (which reports it)."""
        if handle.ref.startswith("docker:"):
            self._docker.adopt(handle, launch)
            return
        with self._lock:
            if handle.ref in self._replicas:
                return
        pid, job_id, root = parse_ref(handle.ref)
        link = answering(self._link(handle.host), f"re-attach to replica {launch.task_name}", self._orphan_timeout, RETRY)
        try:
            host = link.host
            view = remote_view(launch, root, self._home)
            paths = remote_paths(launch, view, self._home)
            command = attach_command(host.python, install_tools(link), job_id, pid, paths,
                                     replica_tag(job_id, launch.task_name), last_times(launch.log_path))
            rep = self._open(launch, link, view, command, b"", "re-attach")
        except ExecutorError as e:
            writer = LogWriter(launch.log_path)
            writer.write("vcli", f"cannot re-attach to the replica on {handle.host}: {e}")
            writer.close()
            return
        rep.writer.write("vcli", f"Re-attached to supervisor {pid} on {host.name} ({host.login}@{host.address}:"
                                 f"{host.port}).")
        self._keep(handle.ref, rep)

    def find(self, launch: ReplicaLaunch) -> ReplicaHandle | None:
        """The replica's supervisor on its host (by the replica's tag), an ended one (by its status
        file), else None; ExecutorError if the host cannot be reached (it may run there)."""
        link = answering(self._link(launch.placement.host), f"look for replica {launch.task_name}", self._orphan_timeout, RETRY)
        return self._docker.find(launch, link) if self._is_docker(launch) else find_replica(self.name, link, launch, self._home)

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        if handle.ref.startswith("docker:"):
            return self._docker.poll(handle)
        rep = self._replicas.get(handle.ref)
        return self._poll_foreign(handle) if rep is None else rep.status()

    def _poll_foreign(self, handle: ReplicaHandle) -> ReplicaStatus:
        """A replica another vcli process started: is its supervisor still there?"""
        pid, job_id, _ = parse_ref(handle.ref)
        # A host that cannot be reached raises: its replica may run on (it outlives its
        # controller); "exited 255" made `cancel` say it had ended on its own, and left it running.
        alive = supervisor_alive(self._link(handle.host), job_id, pid, f"reach replica {handle.task_name}",
                                 self._orphan_timeout)
        return ReplicaStatus(running=alive, message=None if alive else "the replica is gone (exit code unknown)")

    def stop(self, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        docker_handles = [h for h in handles if h.ref.startswith("docker:")]
        handles = [h for h in handles if not h.ref.startswith("docker:")]
        errors: list[str] = []

        def docker_stop(host_name: str) -> None:
            try:
                self._docker.stop(host_name, [h for h in docker_handles if h.host == host_name],
                                  grace_seconds=grace_seconds)
            except ExecutorError as e:
                errors.append(f"{host_name}: {e}")

        threads = [threading.Thread(target=docker_stop, args=(name,), daemon=True)
                   for name in sorted({h.host for h in docker_handles})]
        by_host = self._stop_targets(handles)

        def kill(host: str, job_id: str, targets: list[tuple[str, str]]) -> None:
            try:
                link = self._link(host)
                cmd = stop_command(link.host.python, install_tools(link), job_id, grace_seconds, targets)
                rc, out, err = link.run(cmd, timeout=grace_seconds + 30)
                if rc != 0:
                    errors.append(f"{host}: processes left after SIGKILL: {out.strip()} {err.strip()}")
            except ExecutorError as e:
                errors.append(str(e))

        threads += [threading.Thread(target=kill, args=(host, job, targets), daemon=True)
                    for (host, job), targets in by_host.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(grace_seconds + 40)
        self._await_exit_status(handles, seconds=5)
        for e in errors:  # each error once, in the log of the first replica this executor knows
            rep = next((r for r in map(self._replicas.get, (h.ref for h in handles)) if r is not None), None)
            if rep is not None:
                rep.writer.write("vcli", f"stop: {e}")

    def _stop_targets(self, handles: Sequence[ReplicaHandle]) -> dict[tuple[str, str], list[tuple[str, str]]]:
        """{(host, job id): [(pid, replica tag)]} of the process replicas `stop` must kill on
        their hosts. Replicas this process supervises are marked stopped by vcli; those whose
        supervisor already ended are left out, and so are those whose host is unreachable
        (their log says so)."""
        by_host: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for h in handles:
            pid, job_id, _ = parse_ref(h.ref)
            rep = self._replicas.get(h.ref)
            if rep is not None:
                rep.stopped_by_vcli = True
                if rep.chan.exit_status_ready():  # the supervisor is done: nothing of it is left
                    continue
                if not rep.conn.alive():
                    rep.writer.write("vcli", f"cannot stop the replica: host {h.host} is unreachable")
                    continue
            by_host.setdefault((h.host, job_id), []).append((pid, replica_tag(job_id, h.task_name)))
        return by_host

    def _await_exit_status(self, handles: Sequence[ReplicaHandle], *, seconds: float) -> None:
        """Up to `seconds` for the channels of `handles` to deliver the exit status and the
        last output (none for a host that is gone)."""
        deadline = time.monotonic() + seconds
        for h in handles:
            rep = self._replicas.get(h.ref)
            while rep is not None and rep.conn.alive() and not rep.chan.exit_status_ready() and time.monotonic() < deadline:
                time.sleep(0.05)

    def read_file(self, handle: ReplicaHandle, path: str) -> str | None:
        rep = self._replicas.get(handle.ref)
        _, _, root = parse_ref(handle.ref)
        local = os.path.abspath(path)
        remote = map_path(local, self._home, root)
        if handle.ref.startswith("docker:"):
            with self._lock:
                if handle.ref in self._docker.lost:
                    return None
                if os.path.basename(local) == "output.metrics" and handle.ref in self._docker.metric_files:
                    remote = self._docker.metric_files[handle.ref]
        if rep is not None:
            if local == os.path.abspath(rep.launch.metric_file):
                remote = rep.remote_metric
                if rep.released and rep.local_copy:  # copied back at release
                    return read_replica_file(local)
            cached = rep.reads.get(local)
            if cached is not None and rep.result is None and time.monotonic() - cached[0] < READ_INTERVAL:
                return cached[1]
            if not rep.conn.alive():
                return cached[1] if cached else None
        with self._lock:
            if handle.host in self._down:  # reconnecting would block for the connect timeout
                return None
        try:
            text = self._link(handle.host).read_text(remote)
        except ExecutorError:
            return None
        if rep is not None:
            rep.reads[local] = (time.monotonic(), text)
        return text

    def fetch_dir(self, handle: ReplicaHandle, path: str, dest: str) -> bool:
        """Download the replica's directory from its host (its outputs stay there after it ended
        and after `release`); any executor with the handle's host can, not only the one that
        started it. The replica is held still for the copy (`vcli.executors.ssh.hold`).
        Raises `ExecutorError` if the host cannot be reached."""
        token, job_id, root = parse_ref(handle.ref)
        link = self._link(handle.host)
        src = map_path(os.path.abspath(path), self._home, root)
        from vcli.executors.ssh.hold import held

        # The trainer tree is stopped (a container paused) between two of its writes (`hold`).
        container = token[len("docker:"):] if token.startswith("docker:") else None
        with held(link, replica_tag(job_id, handle.task_name), src, container=container):
            return download_dir(link, src, dest)

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        """Wait until each replica's supervisor has stopped its whole tree (stopping it outright
        after `RELEASE_WAIT_SECONDS`), copy the metric file back so it stays readable here, and
        close the channel; remove docker hosts' containers."""
        self._docker.release([h for h in handles if h.ref.startswith("docker:")])
        reps: list[tuple[ReplicaHandle, Replica]] = []
        for h in handles:
            if h.ref.startswith("docker:"):
                continue
            with self._lock:
                rep = self._replicas.get(h.ref)
            if rep is not None and not rep.released:
                rep.released = True
                reps.append((h, rep))
        deadline = time.monotonic() + RELEASE_WAIT_SECONDS
        while any(rep.still_there() for _, rep in reps) and time.monotonic() < deadline:
            time.sleep(0.02)
        stubborn = [h for h, rep in reps if rep.still_there()]
        if stubborn:
            self.stop(stubborn, grace_seconds=0.1)
        for h, rep in reps:
            if rep.conn.alive():  # keep a local copy of the metric file, for local readers
                rep.reads.pop(os.path.abspath(rep.launch.metric_file), None)
                text = self.read_file(h, rep.launch.metric_file)
                if text is not None:
                    try:
                        os.makedirs(os.path.dirname(rep.launch.metric_file), exist_ok=True)
                        with open(rep.launch.metric_file, "w", encoding="utf-8") as f:
                            f.write(text)
                        rep.local_copy = True
                    except OSError:
                        pass
            try:
                rep.chan.close()  # released: no more lease renewals; the wrapper ends with its supervisor
            except Exception:
                pass
            rep.conn.channels = max(0, rep.conn.channels - 1)
            for t in rep.threads:
                t.join(timeout=1)
            rep.writer.close()

    def close(self) -> None:
        self._closed.set()
        self._docker.close()
        with self._lock:
            links = list(self._links.values())
        for link in links:
            link.close()

