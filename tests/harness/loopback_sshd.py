"""One real sshd on a loopback port, for tests that need an SSH host but no network of hosts.

`LoopbackSSHD(tmp)` generates a host key and a client key, starts `sshd -D` listening on
127.0.0.1:<free port> (root login by key only) and stops it, with every session it runs, on
exit. The executor contract suite runs the ssh executor against it; the multi-host tests use
network namespaces instead (tests/harness/netns.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def available() -> str | None:
    """None if a loopback sshd can run here, else why not (the reason is a test failure)."""
    if not os.path.exists(SSHD):
        return f"sshd not found ({SSHD}): run `bash .ci/ssh-setup.sh` (installs openssh-server)"
    if os.geteuid() != 0:
        return "the loopback sshd logs in as root: run the tests as root"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen not found: install openssh-client"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)


class LoopbackSSHD:
    """`with LoopbackSSHD(tmp) as sshd:` then `sshd.port`, `sshd.client_key`, `sshd.known_hosts_line()`."""

    def __init__(self, tmp: Path) -> None:
        self.dir = Path(tmp)
        self.port = 0
        self.client_key = self.dir / "client_key"
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.log = self.dir / "sshd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LoopbackSSHD:
        self.dir.mkdir(parents=True, exist_ok=True)
        _keygen(self.host_key, "vcli-test-loopback-host")
        _keygen(self.client_key, "vcli-test-loopback-client")
        auth = self.dir / "authorized_keys"
        auth.write_text(self.client_key.with_suffix(".pub").read_text())
        os.chmod(auth, 0o600)
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's compiled-in privilege separation dir
        self.port = _free_port()
        cfg = self.dir / "sshd_config"
        cfg.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\nPidFile {self.dir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {auth}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nSubsystem sftp internal-sftp\n"
            "MaxSessions 64\nMaxStartups 64:30:128\nUseDNS no\nPrintMotd no\nLogLevel INFO\n"
        )
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if "Server listening" in self.log.read_text(errors="replace"):
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.__exit__()
        raise RuntimeError(f"sshd did not start: {self.log.read_text(errors='replace')[-2000:]}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            # The listener and every session child are in its session; SIGKILL them all.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
            self.proc = None

    def known_hosts_line(self) -> str:
        kind, blob = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {blob}\n"
