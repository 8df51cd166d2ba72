"""SSH "hosts" for tests: network namespaces behind a switch namespace, one sshd each.

Layout (every name carries a random suffix, so parallel runs never clash):

    vcli-<sfx>-sw     a Linux bridge `br0` (the switch). It lives in its own namespace because
                      Docker sets the root namespace's FORWARD policy to DROP and br_netfilter
                      would drop bridged frames there.
    vcli-<sfx>-c      the controller: 10.213.0.2. Run vcli in it with `cluster.ctl(argv)`.
    vcli-<sfx>-h<k>   host k: eth0 = 10.213.0.(10+k)/24 and an sshd on port 22.

Addresses exist only inside these namespaces; nothing is added to the root namespace (no
address, no link, no firewall rule). Each sshd gets a generated ed25519 host key; one client
key is authorised for root on every host. The namespaces share the machine's filesystem and
process table, so a host runs this machine's Python (with TensorFlow) and a test can read
a host's working directory directly.

Teardown (also after failures, and at interpreter exit as a last resort): kill every process
in the namespaces (replicas, sshd session children) and wait for them, stop the sshd
listeners last, delete the namespaces (which removes their veth links), and check that none
is left. Needs root, `ip` (iproute2), `sshd` and `ssh-keygen` (.ci/ssh-setup.sh installs them).
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

SUBNET = "10.213.0"
SSHD = "/usr/sbin/sshd"


def available() -> str | None:
    """None if the harness can run here, else why not (for pytest.skip)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing: run .ci/ssh-setup.sh"
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing: run .ci/ssh-setup.sh"
    try:
        import paramiko  # noqa: F401
    except ImportError:
        return "paramiko is not installed (pip install 'vcli[ssh]')"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30)


def _fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return out.split()[1]


def netns_pids(ns: str) -> list[int]:
    """Live (non-zombie) processes whose network namespace is `ns`."""
    res = _ip("netns", "pids", ns, check=False)
    pids = []
    for tok in res.stdout.split():
        if not tok.isdigit():
            continue
        try:
            with open(f"/proc/{tok}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if data[data.rfind(b")") + 2:].split()[0] == b"Z":
            continue
        pids.append(int(tok))
    return pids


def process_env(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def process_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


@dataclass
class SSHHost:
    name: str
    ns: str
    address: str
    dir: Path
    host_key: Path
    fingerprint: str = ""
    sshd: subprocess.Popen[bytes] | None = None
    log: Path = field(default_factory=Path)

    @property
    def host_key_pub(self) -> Path:
        return self.host_key.with_suffix(".pub")

    def known_hosts_line(self) -> str:
        kind, blob = self.host_key_pub.read_text().split()[:2]
        return f"{self.address} {kind} {blob}\n"


class NetnsCluster:
    """`with NetnsCluster(tmp_path, n=2) as c: ...` - see the module docstring."""

    def __init__(self, tmp: Path, n: int = 2) -> None:
        if not 1 <= n <= 9:
            raise ValueError("1..9 hosts")
        self.tmp = Path(tmp)
        self.n = n
        self.sfx = secrets.token_hex(3)
        self.switch = f"vcli-{self.sfx}-sw"
        self.ctl_ns = f"vcli-{self.sfx}-c"
        self.ctl_address = f"{SUBNET}.2"
        self.hosts: list[SSHHost] = []
        self.client_key = self.tmp / "client_key"
        self._namespaces: list[str] = []
        self._up = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> NetnsCluster:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        atexit.register(self.down)
        self.tmp.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self._add_ns(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        self._add_ns(self.ctl_ns)
        self._wire(self.ctl_ns, "c", self.ctl_address)
        _keygen(self.client_key, f"vcli-test-client-{self.sfx}")
        auth = self.tmp / "authorized_keys"
        auth.write_text(self.client_key.with_suffix(".pub").read_text())
        os.chmod(auth, 0o600)
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's compiled-in privilege separation dir
        for k in range(1, self.n + 1):
            name = f"h{k}"
            ns = f"vcli-{self.sfx}-{name}"
            self._add_ns(ns)
            address = f"{SUBNET}.{10 + k}"
            self._wire(ns, name, address)
            hdir = self.tmp / f"sshd-{name}"
            hdir.mkdir(parents=True, exist_ok=True)
            key = hdir / "ssh_host_ed25519_key"
            _keygen(key, f"vcli-test-{name}-{self.sfx}")
            host = SSHHost(name=name, ns=ns, address=address, dir=hdir, host_key=key, fingerprint=_fingerprint(
                key.with_suffix(".pub")), log=hdir / "sshd.log")
            self.hosts.append(host)
            self.start_sshd(host)
        self._up = True
        self.setup_seconds = time.monotonic() - started

    def _add_ns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _wire(self, ns: str, tag: str, address: str) -> None:
        """A veth from `ns` (eth0, with `address`) into the switch's bridge, made in place."""
        peer = f"p{self.sfx}{tag}"
        _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", peer, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", peer, "master", "br0")
        _ip("-n", self.switch, "link", "set", peer, "up")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")

    def start_sshd(self, host: SSHHost) -> None:
        cfg = host.dir / "sshd_config"
        cfg.write_text(
            f"Port 22\nListenAddress {host.address}\nHostKey {host.host_key}\nPidFile {host.dir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.tmp / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "Subsystem sftp internal-sftp\nMaxSessions 64\nMaxStartups 64:30:128\nUseDNS no\nPrintMotd no\n"
            "LogLevel INFO\n"
        )
        log = open(host.log, "ab")
        host.sshd = subprocess.Popen(["ip", "netns", "exec", host.ns, SSHD, "-D", "-e", "-f", str(cfg)],
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if "Server listening" in host.log.read_text(errors="replace"):
                return
            if host.sshd.poll() is not None:
                raise RuntimeError(f"sshd on {host.name} exited: {host.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.02)
        raise RuntimeError(f"sshd on {host.name} did not start: {host.log.read_text(errors='replace')[-2000:]}")

    def stop_sshd(self, host: SSHHost) -> None:
        """Kill the host's sshd and every session it runs (as a host crash would)."""
        for pid in netns_pids(host.ns):
            if any(a.endswith("sshd") or a.startswith("sshd") for a in process_cmdline(pid)[:1]):
                _kill(pid, signal.SIGKILL)
        if host.sshd is not None:
            _kill(host.sshd.pid, signal.SIGKILL)
            try:
                host.sshd.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def down(self) -> None:
        """Remove everything this cluster made; safe to call repeatedly."""
        if not self._namespaces:
            return
        started = time.monotonic()
        listeners = {h.sshd.pid for h in self.hosts if h.sshd is not None}
        # 1. everything but the sshd listeners (replicas, session children), then wait for them
        for _ in range(3):
            victims = [p for ns in self._namespaces for p in netns_pids(ns) if p not in listeners]
            for p in victims:
                _kill(p, signal.SIGKILL)
            if _wait_gone(victims, 5):
                break
        # 2. the listeners
        for h in self.hosts:
            if h.sshd is not None and h.sshd.poll() is None:
                _kill(h.sshd.pid, signal.SIGTERM)
                try:
                    h.sshd.wait(5)
                except subprocess.TimeoutExpired:
                    _kill(h.sshd.pid, signal.SIGKILL)
                    h.sshd.wait(5)
        # 3. the namespaces (their veths go with them)
        for ns in reversed(self._namespaces):
            for p in netns_pids(ns):
                _kill(p, signal.SIGKILL)
            _ip("netns", "del", ns, check=False)
        self._namespaces = []
        self._up = False
        self.teardown_seconds = time.monotonic() - started
        try:
            atexit.unregister(self.down)
        except Exception:
            pass

    def leftovers(self) -> list[str]:
        """Namespaces or links of this cluster that still exist (should be [] after down())."""
        names = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
        left = [n for n in names if self.sfx in n]
        links = _ip("-o", "link", "show", check=False).stdout
        left += [line.split(":")[1].strip() for line in links.splitlines() if self.sfx in line]
        return left

    # ------------------------------------------------------------------ helpers for tests

    def host(self, name: str) -> SSHHost:
        return next(h for h in self.hosts if h.name == name)

    def ctl(self, argv: Sequence[str]) -> list[str]:
        """argv run in the controller namespace."""
        return ["ip", "netns", "exec", self.ctl_ns, *argv]

    def known_hosts(self, names: Sequence[str] | None = None) -> str:
        return "".join(h.known_hosts_line() for h in self.hosts if names is None or h.name in names)

    def inventory_yaml(self, workdirs: dict[str, Path], python: str, names: Sequence[str] | None = None,
                       extra: dict[str, dict[str, object]] | None = None) -> str:
        import yaml

        hosts = {}
        for h in self.hosts:
            if names is not None and h.name not in names:
                continue
            entry: dict[str, object] = {
                "address": h.address, "port": 22, "user": "root", "identity_file": str(self.client_key),
                "runtime": "process", "workdir": str(workdirs[h.name]), "python": python,
                # The namespaces share this machine's /tmp: each host gets a lease directory of
                # its own, shared by every controller (Env) that drives it, as on real hosts.
                "gpu_lease_dir": str(self.tmp / f"{h.name}-gpu-leases"),
            }
            entry.update((extra or {}).get(h.name, {}))
            hosts[h.name] = entry
        return yaml.safe_dump({"hosts": hosts}, sort_keys=False)

    def link_down(self, name: str) -> None:
        _ip("-n", self.host(name).ns, "link", "set", "eth0", "down")

    def link_up(self, name: str) -> None:
        _ip("-n", self.host(name).ns, "link", "set", "eth0", "up")

    def pids(self, name: str) -> list[int]:
        return netns_pids(self.host(name).ns)

    def job_pids(self, name: str, job_id: str) -> list[int]:
        """Processes in host `name` that belong to vcli job `job_id` (VCLI_JOB_ID in environ)."""
        return [p for p in self.pids(name) if process_env(p).get("VCLI_JOB_ID") == job_id]


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2:].split()[0] != b"Z"


def _wait_gone(pids: Sequence[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)
