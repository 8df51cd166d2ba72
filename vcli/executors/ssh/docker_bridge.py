"""The Docker runtime on SSH hosts (`runtime: docker` in the inventory).

The replica runs through vcli's Docker executor against the host's own engine: a private local
UNIX socket forwards each engine connection to `docker system dial-stdio` on the host over the
same verified SSH connection (the Docker SDK's own ssh:// transport would bypass vcli's
known_hosts and identity file). Output/metric/AIP_* paths are mapped to the host's workdir
(`remote.remote_view`) and bind-mounted there; images must exist on the host's engine, be
pullable from a registry, or be built there (autopackaging streams the build context over SSH).
Needs the docker CLI (>= 18.09) on the host and the login user in its docker group.

A container's GPU leases live on the host as a process replica's do: once it started, the
wrapper's `keep` (`vcli.executors.ssh.wrapper`) takes them over from the controller's lease
server and holds them in a keeper on the host that waits for the container to stop. The
keeper also watches the container's own lease file, which the controller touches every few
seconds (`renew`): once nobody renewed it for VCLI_SSH_ORPHAN_TIMEOUT seconds, it stops the
container, as a process replica's wrapper stops its tree.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import replace
from typing import Any, Callable, Sequence

from vcli.errors import ExecutorError
from vcli.executors import ReplicaHandle, ReplicaLaunch, ReplicaStatus
from vcli.executors.ssh.link import HostLink, qargv
from vcli.executors.ssh.remote import (
    beat_seconds,
    install_tools,
    map_path,
    parse_ref,
    remote_paths,
    remote_view,
    replica_details,
)
from vcli.executors.ssh.transfer import upload_dir
from vcli.logs import LogWriter

__all__ = ["DockerBridge", "DockerOnHosts"]


class DockerBridge:
    """A private local UNIX socket whose every connection is `docker system dial-stdio` run on
    the host over the link's verified SSH connection, so the Docker SDK (and vcli's Docker
    executor) talks to the host's engine with vcli's host-key checking, identity file and
    timeouts. Needs the docker CLI (>= 18.09) on the host and the login user in its docker group.
    """

    def __init__(self, link: HostLink) -> None:
        import tempfile

        self.link = link
        self.dir = tempfile.mkdtemp(prefix="vcli-docker-ssh-")
        os.chmod(self.dir, 0o700)
        self.path = os.path.join(self.dir, "engine.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, name=f"vcli-docker-bridge-{link.host.name}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                local, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(local,), daemon=True).start()

    def _serve(self, local: socket.socket) -> None:
        try:
            conn, chan = self.link.open_session()
            chan.exec_command("docker system dial-stdio")
        except Exception:  # the SDK sees a closed connection and reports it
            local.close()
            return

        def up() -> None:
            try:
                while True:
                    data = local.recv(65536)
                    if not data:
                        chan.shutdown_write()
                        return
                    chan.sendall(data)
            except Exception:
                chan.close()

        t = threading.Thread(target=up, daemon=True)
        t.start()
        try:
            while True:
                data = chan.recv(65536)
                if not data:
                    break
                conn.touch()
                local.sendall(data)
        except Exception:
            pass
        finally:
            try:
                local.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            t.join(5)
            local.close()
            chan.close()
            conn.channels = max(0, conn.channels - 1)

    def close(self) -> None:
        self._closed = True
        try:
            self._server.close()
        finally:
            try:
                os.unlink(self.path)
                os.rmdir(self.dir)
            except OSError:
                pass


def _remote_docker_executor(base_url: str, keep_leases: Callable[[ReplicaLaunch, str], None]) -> Any:
    from vcli.executors.docker import DockerExecutor

    class RemoteDockerExecutor(DockerExecutor):
        #: The output dirs are paths on the host: not to be created on this machine (honoured by
        #: DockerExecutor.start when it checks this attribute).
        create_local_dirs = False

        def _keep_leases(self, launch: ReplicaLaunch, cid: str, leases: Sequence[Any] | None = None) -> None:
            keep_leases(launch, cid)  # on the host, not by a keeper on this machine

    return RemoteDockerExecutor(base_url=base_url)


#: (the host's lease server, the replica's GPU indices), or None for a replica with no GPU;
#: `SSHExecutor._replica_leases`. Raises ExecutorError when one is held by another replica.
LeasesOf = Callable[[ReplicaLaunch, Any], "tuple[Any, tuple[int, ...]] | None"]


class DockerOnHosts:
    """The container replicas of an SSH executor: one Docker executor per host, over a bridge.

    Handles keep the SSH executor's name and carry `docker:<container id>@JOB@ROOT` as ref;
    the host's Docker executor sees its own handles (`inner`). A host whose connections all died
    answers exit code 255 for its containers (their state there is unknown) and is not asked again.
    """

    def __init__(self, link: Callable[[str], HostLink], home: str, executor_name: str,
                 leases: LeasesOf | None = None, orphan_timeout: float = 600.0) -> None:
        self._link = link
        self._leases = leases
        self._orphan_timeout = orphan_timeout
        #: container id -> (host, its lease file there): what the controller renews (`renew`).
        self.guarded: dict[str, tuple[str, str]] = {}
        self._renewing: threading.Thread | None = None
        self._closed = threading.Event()
        self._home = home
        self._name = executor_name
        self._lock = threading.RLock()
        self._engines: dict[str, tuple[DockerBridge, Any]] = {}
        #: ref -> the metric file's path on the host (read_file maps the local one to it).
        self.metric_files: dict[str, str] = {}
        #: ref -> the final status of a container whose host was lost.
        self.lost: dict[str, ReplicaStatus] = {}

    def engine(self, host_name: str) -> Any:
        """The Docker executor bound to `host_name`'s engine (through an SSH bridge)."""
        with self._lock:
            entry = self._engines.get(host_name)
            if entry is None:
                bridge = DockerBridge(self._link(host_name))
                entry = self._engines[host_name] = (
                    bridge, _remote_docker_executor(f"unix://{bridge.path}", self.keep_leases))
            return entry[1]

    def _remote(self, launch: ReplicaLaunch, link: HostLink) -> tuple[ReplicaLaunch, Any]:
        view = remote_view(launch, link.root(), self._home)  # idempotent for launches already mapped
        seeds = tuple((src, map_path(os.path.abspath(dest), self._home, view.root)) for src, dest in launch.seed_dirs)
        return replace(launch, env=view.env, output_dir=view.output_dir, metric_file=view.metric_file,
                       mounts=view.mounts, seed_dirs=seeds), view

    def prepare(self, host_name: str, launches: Sequence[ReplicaLaunch], *, cancelled: threading.Event,
                progress: Callable[[str], None]) -> list[ReplicaLaunch]:
        """Create the replicas' directories on the host and let its engine prepare (build/pull)."""
        docker_ex = self.engine(host_name)
        link = self._link(host_name)
        mapped = [self._remote(launch, link) for launch in launches]
        dirs = sorted({d for _, view in mapped for d in view.mkdirs})
        rc, err = link.quick(f"mkdir -p -- {qargv(dirs)}", timeout=30)
        if rc != 0:
            raise ExecutorError(f"Host {host_name}: cannot create {dirs[0]}: {err.strip()}")
        progress(f"Using the Docker engine of {host_name} over SSH.")
        return docker_ex.prepare([remote for remote, _ in mapped], cancelled=cancelled, progress=progress)

    def start(self, launch: ReplicaLaunch, link: HostLink) -> ReplicaHandle:
        host = link.host
        remote, view = self._remote(launch, link)
        # On the host, beside what the container bind-mounts; the engine's executor (which
        # creates nothing on this machine) then mounts the destinations `host_dirs` names.
        for src, dest in remote.seed_dirs:
            upload_dir(link, src, dest)
        if self._leases is not None:
            self._leases(launch, host)  # before the container exists: a GPU another replica holds is refused
        try:
            inner = self.engine(host.name).start(remote)
        except PermissionError as e:
            raise ExecutorError(
                f"Cannot start replica {launch.task_name} on {host.name}'s Docker engine: the Docker executor tried to "
                f"create the host's directory {e.filename} on this machine (it needs to honour "
                "`create_local_dirs = False`).") from None
        ref = f"docker:{inner.ref}@{launch.job_id}@{view.root}"
        with self._lock:
            self.metric_files[ref] = view.metric_file
        w = LogWriter(launch.log_path)
        w.write("vcli", f"Started on {host.name} ({host.login}@{host.address}:{host.port}) as container "
                        f"{inner.ref[:12]} of the host's Docker engine; outputs under {view.root}/jobs on {host.name}.")
        w.close()
        return ReplicaHandle(executor=self._name, host=host.name, ref=ref, task_name=launch.task_name,
                             details=replica_details(host.name, ref))

    def find(self, launch: ReplicaLaunch, link: HostLink) -> ReplicaHandle | None:
        """The replica's container on the host's engine (`DockerExecutor.find`), if it was started."""
        remote, view = self._remote(launch, link)
        inner = self.engine(link.host.name).find(remote)
        if inner is None:
            return None
        ref = f"docker:{inner.ref}@{launch.job_id}@{view.root}"
        with self._lock:
            self.metric_files[ref] = view.metric_file
        return ReplicaHandle(executor=self._name, host=link.host.name, ref=ref, task_name=launch.task_name,
                             details=replica_details(link.host.name, ref))

    def keep_leases(self, launch: ReplicaLaunch, cid: str) -> None:
        """Start the keeper of container `cid` (just started on its host; `wrapper.py keep`): it
        holds the container's GPU leases, taken over from the controller's lease server, and
        stops the container once no controller renewed its lease for VCLI_SSH_ORPHAN_TIMEOUT
        seconds (a container whose controller died ran on for good). Raises ExecutorError
        (the Docker executor then removes the container)."""
        link = self._link(launch.placement.host)
        host = link.host
        if launch.placement.gpu_share:
            raise ExecutorError(f"Cannot start replica {launch.task_name} on host {host.name}: a share of a GPU runs "
                                "as a process there (its runtime is docker; give the host `runtime: process`)")
        gpus = self._leases(launch, host) if self._leases is not None else None
        lease = self._lease_path(launch, link)
        socket_name, indices = (str(gpus[0].socket), gpus[1]) if gpus else ("-", ())
        command = qargv([host.python, "-S", install_tools(link).wrapper, "keep", socket_name,
                         ",".join(str(i) for i in indices), cid, launch.job_id, launch.task_name, lease,
                         f"{self._orphan_timeout:g}", "3"])
        rc, out, err = link.run(command, timeout=60)
        pid = next((line.split()[1] for line in out.splitlines() if line.startswith("VCLI-KEEPER ")), None)
        if rc != 0 or pid is None:
            detail = err.strip().splitlines()[-1:] or [f"exit status {rc}"]
            held = f"hold the GPU lease(s) {list(indices)} of" if indices else "start the keeper of"
            raise ExecutorError(f"Cannot {held} replica {launch.task_name} on host {host.name}: {detail[0]}")
        if gpus:
            gpus[0].handed_over(indices)
        self._guard(cid, host.name, lease)

    def _guard(self, cid: str, host_name: str, lease: str) -> None:
        """Renew container `cid`'s lease from now on (a thread, started with the first one)."""
        with self._lock:
            self.guarded[cid] = (host_name, lease)
            if self._renewing is None and not self._closed.is_set():
                self._renewing = threading.Thread(target=self._renew_while_open, name="vcli-ssh-docker-lease",
                                                  daemon=True)
                self._renewing.start()

    def _renew_while_open(self) -> None:
        while not self._closed.wait(beat_seconds(self._orphan_timeout)):
            self.renew()

    def _lease_path(self, launch: ReplicaLaunch, link: HostLink) -> str:
        _, view = self._remote(launch, link)
        return remote_paths(launch, view, self._home).lease

    def renew(self) -> None:
        """Renew the lease of every container this controller holds, one command per host (a
        host that does not answer is simply not renewed)."""
        by_host: dict[str, list[str]] = {}
        with self._lock:
            for host_name, lease in self.guarded.values():
                by_host.setdefault(host_name, []).append(lease)
        for host_name, leases in by_host.items():
            link = self._link(host_name)
            if not link.lost():
                try:
                    link.quick(f"touch -c -- {qargv(leases)}", timeout=20)
                except ExecutorError:
                    pass

    def adopt(self, handle: ReplicaHandle, launch: ReplicaLaunch) -> None:
        """Stream an adopted container's output into its local log again (the host's engine
        executor does it, after the last line already there)."""
        link = self._link(handle.host)
        remote, view = self._remote(launch, link)
        with self._lock:
            self.metric_files[handle.ref] = view.metric_file
        self._guard(self.inner(handle).ref, handle.host, remote_paths(launch, view, self._home).lease)
        try:
            self.engine(handle.host).adopt(self.inner(handle), remote)
        except ExecutorError as e:
            self._mark_lost(handle, ReplicaStatus(running=False, exit_code=255, message=f"host {handle.host}: {e}"))

    @staticmethod
    def inner(handle: ReplicaHandle) -> ReplicaHandle:
        """The host's Docker executor's own handle for a container replica."""
        token, _, _ = parse_ref(handle.ref)
        return ReplicaHandle(executor="docker", host=handle.host, ref=token[len("docker:"):], task_name=handle.task_name)

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        with self._lock:
            lost = self.lost.get(handle.ref)
        if lost is not None:
            return lost
        link = self._link(handle.host)
        if link.lost():
            host = link.host
            msg = (f"lost contact with host {host.name} ({host.address}): no answer over SSH; the container's state "
                   "there is unknown and the host is marked unhealthy")
            return self._mark_lost(handle, ReplicaStatus(running=False, exit_code=255, message=msg))
        try:
            return self.engine(handle.host).poll(self.inner(handle))
        except ExecutorError as e:
            return self._mark_lost(handle, ReplicaStatus(running=False, exit_code=255, message=f"host {handle.host}: {e}"))

    def _mark_lost(self, handle: ReplicaHandle, status: ReplicaStatus) -> ReplicaStatus:
        with self._lock:
            self.lost[handle.ref] = status
        return status

    def stop(self, host_name: str, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        """Stop this host's containers (nothing to do on a lost host). Raises ExecutorError."""
        if self._link(host_name).lost():
            return
        self.engine(host_name).stop([self.inner(h) for h in handles], grace_seconds=grace_seconds)

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        with self._lock:
            for h in handles:
                self.guarded.pop(self.inner(h).ref, None)
        for host_name in sorted({h.host for h in handles}):
            if self._link(host_name).lost():
                continue
            try:
                self.engine(host_name).release([self.inner(h) for h in handles if h.host == host_name])
            except ExecutorError:
                pass  # the host went away meanwhile: its containers stay for `docker rm`

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            bridges = [b for b, _ in self._engines.values()]
        for b in bridges:
            b.close()
