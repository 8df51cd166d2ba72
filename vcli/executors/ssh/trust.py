"""Host-key trust and connecting: nothing is sent to a host whose key is not known.

Host keys are checked against the user's OpenSSH known_hosts and vcli's own known_hosts
(`vcli.placement.hosts.KnownHosts`). An unknown key is refused with its type and SHA256 fingerprint and
the command that accepts it (`vcli hosts add NAME --accept-new-host-key`, which appends it to
vcli's file); a changed key is refused loudly. Nothing is ever added silently.

paramiko is imported here (and only through `paramiko()`), lazily: `pip install 'vcli[ssh]'`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
from pathlib import Path
from typing import Any

from vcli.errors import ExecutorError, MissingExtraError
from vcli.placement.hosts import Host, KnownHosts

__all__ = [
    "CONNECT_TIMEOUT",
    "ChangedHostKeyError",
    "HostKeyError",
    "UnknownHostKeyError",
    "accept_host_key",
    "connect",
    "fingerprint",
    "known_host_name",
    "paramiko",
]

#: Seconds for the TCP connect, the SSH banner, authentication and opening a channel.
CONNECT_TIMEOUT = float(os.environ.get("VCLI_SSH_CONNECT_TIMEOUT", "10"))
#: paramiko's own keepalive interval (the connection pool adds a heartbeat on top).
KEEPALIVE_SECONDS = 4


def paramiko() -> Any:
    """The paramiko module, or one line saying which extra to install."""
    try:
        import paramiko as mod
    except ImportError:  # pragma: no cover - depends on the installation
        raise MissingExtraError("The ssh executor", "ssh", "paramiko") from None
    import logging

    log = logging.getLogger("paramiko")
    if not log.handlers:  # its transport threads log tracebacks; vcli reports one line instead
        log.addHandler(logging.NullHandler())
    return mod


class HostKeyError(ExecutorError):
    """The host's key could not be verified; nothing was sent to it."""


class UnknownHostKeyError(HostKeyError):
    def __init__(self, host: Host, key_type: str, fp: str, accept_hint: str | None = None) -> None:
        self.host, self.key_type, self.fingerprint = host, key_type, fp
        hint = accept_hint or f"vcli hosts add {host.name} --accept-new-host-key"
        super().__init__(
            f"Host key of {host.name} ({hostport(host)}) is not known: the host offered the {key_type} key "
            f"{fp}. vcli never accepts keys silently. Check the fingerprint on the host "
            f"(`ssh-keygen -lf /etc/ssh/ssh_host_{_key_file_kind(key_type)}_key.pub`), then accept it with: {hint}"
        )


class ChangedHostKeyError(HostKeyError):
    def __init__(self, host: Host, key_type: str, fp: str, known_fp: str, where: str) -> None:
        self.key_type, self.fingerprint, self.known_fingerprint = key_type, fp, known_fp
        super().__init__(
            f"HOST KEY CHANGED for {host.name} ({hostport(host)}): it offered {key_type} {fp}, but {where} "
            f"records {known_fp}. Someone may be intercepting the connection (or the host was reinstalled); "
            f"vcli refused to connect. If the change is expected, remove the old key with "
            f"`ssh-keygen -f {where} -R '{known_host_name(host.address, host.port)}'` and accept the new one with "
            f"`vcli hosts add {host.name} --accept-new-host-key`."
        )


def hostport(host: Host) -> str:
    return f"{host.login}@{host.address}:{host.port}"


def _key_file_kind(key_type: str) -> str:
    return {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "rsa-sha2-512": "rsa", "rsa-sha2-256": "rsa"}.get(
        key_type, "ecdsa" if key_type.startswith("ecdsa") else "*")


def fingerprint(key: Any) -> str:
    """OpenSSH's `SHA256:<base64>` fingerprint of a paramiko public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_host_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _default_known_hosts() -> KnownHosts:
    """The user's files, for callers that pass none (`vcli hosts add/check`)."""
    from vcli.placement.hosts import known_hosts

    return known_hosts()


def _recorded_key(host: Host, key_type: str, known: KnownHosts) -> tuple[str, str] | None:
    """(fingerprint, file) of the key recorded for the host (same type first), if any."""
    pm = paramiko()
    name = known_host_name(host.address, host.port)
    fallback = None
    for path in known.files:
        if not path.exists():
            continue
        try:
            keys = pm.HostKeys(str(path)).lookup(name)
        except (OSError, pm.SSHException):
            continue
        if not keys:
            continue
        for ktype in keys.keys():
            if ktype == key_type:
                return fingerprint(keys[ktype]), str(path)
            fallback = fallback or (fingerprint(keys[ktype]), str(path))
    return fallback


def _record_host_key(host: Host, key: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="ascii") as f:
        f.write(f"{known_host_name(host.address, host.port)} {key.get_name()} {key.get_base64()}\n")
    return path


def _make_policy(host: Host, accept_into: Path | None, accepted: list[Any]) -> Any:
    pm = paramiko()

    class _Policy(pm.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            if accept_into is None:
                raise UnknownHostKeyError(host, key.get_name(), fingerprint(key))
            _record_host_key(host, key, accept_into)
            accepted.append(key)

    return _Policy()


def connect(host: Host, *, accept_new_host_key: bool = False, timeout: float | None = None,
            known_hosts: KnownHosts | None = None) -> tuple[Any, Any | None]:
    """An authenticated paramiko SSHClient for `host`, plus the key accepted now (if any).

    `known_hosts` defaults to the user's files (`vcli.placement.hosts.known_hosts()`); a new key is
    recorded (in `known_hosts.vcli`) only with `accept_new_host_key`. Raises
    UnknownHostKeyError / ChangedHostKeyError / ExecutorError with one clear line. The client
    is closed whenever connecting fails (sshd would otherwise keep the pre-auth connection
    until LoginGraceTime).
    """
    pm = paramiko()
    known = known_hosts if known_hosts is not None else _default_known_hosts()
    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    client = pm.SSHClient()
    accepted: list[Any] = []
    try:
        _load_known_hosts(client, known)
        client.set_missing_host_key_policy(_make_policy(host, known.vcli if accept_new_host_key else None, accepted))
        kwargs = _identity_kwargs(host)
        client.connect(
            hostname=host.address, port=host.port, username=host.login, timeout=timeout,
            banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout, **kwargs,
        )
        client.get_transport().set_keepalive(KEEPALIVE_SECONDS)
        return client, (accepted[0] if accepted else None)
    except HostKeyError:
        client.close()
        raise
    except pm.BadHostKeyException as e:
        client.close()
        recorded = _recorded_key(host, e.key.get_name(), known)
        known_fp, where = recorded if recorded else (fingerprint(e.expected_key), "known_hosts")
        raise ChangedHostKeyError(host, e.key.get_name(), fingerprint(e.key), known_fp, where) from None
    except pm.AuthenticationException as e:
        client.close()
        how = f"identity file {host.identity_file}" if host.identity_file else "ssh-agent / ~/.ssh/id_* keys"
        raise ExecutorError(f"Host {host.name} ({hostport(host)}): authentication failed with {how}: {e}") from None
    except (pm.SSHException, OSError, EOFError) as e:
        client.close()
        raise ExecutorError(f"Cannot connect to host {host.name} ({hostport(host)}): "
                            f"{_unreachable_reason(e, host, timeout)}") from None
    except BaseException:
        client.close()
        raise


def _load_known_hosts(client: Any, known: KnownHosts) -> None:
    """Load each existing file of `known` into the paramiko `client`; ExecutorError naming the
    file that cannot be read."""
    pm = paramiko()
    for path in known.files:
        if path.exists():
            try:
                client.load_system_host_keys(str(path))
            except (OSError, pm.SSHException) as e:
                raise ExecutorError(f"Cannot read known_hosts file {path}: {e}") from None


def _identity_kwargs(host: Host) -> dict[str, Any]:
    """paramiko's connect arguments for the host's identity file (that key only: no agent, no
    ~/.ssh/id_*); none when it names no file. ExecutorError when the file is missing or not a
    regular file."""
    if not host.identity_file:
        return {}
    key_file = os.path.expanduser(host.identity_file)
    if not os.path.exists(key_file):
        raise ExecutorError(f"Host {host.name}: identity file {host.identity_file} does not exist.")
    if not os.path.isfile(key_file):
        raise ExecutorError(f"Host {host.name}: identity file {host.identity_file} is not a file.")
    return {"key_filename": key_file, "look_for_keys": False, "allow_agent": False}


def _unreachable_reason(e: BaseException, host: Host, timeout: float) -> str:
    """Why connecting to `host` failed with `e` (an SSHException, OSError or EOFError), in
    words: a timeout, every address refusing (no sshd?), the addresses' errors, a port that
    never speaks SSH, else the exception's own text."""
    pm = paramiko()
    reason = "timed out" if isinstance(e, socket.timeout) else (str(e) or type(e).__name__)
    if isinstance(e, pm.ssh_exception.NoValidConnectionsError):  # "[Errno None] Unable to connect to port..."
        errors = list(e.errors.values())
        return (f"connection refused (no sshd listening on port {host.port}?)"
                if errors and all(isinstance(x, ConnectionRefusedError) for x in errors)
                else "; ".join(sorted({getattr(x, "strerror", None) or str(x) for x in errors})) or reason)
    if reason == "No existing session" or reason.startswith("Error reading SSH protocol banner"):
        # paramiko's words for a port that accepts connections and never speaks SSH
        return f"no SSH answer within {timeout:g} s (a hung sshd, or another service on port {host.port}?)"
    return reason


def accept_host_key(host: Host, *, timeout: float | None = None,
                    known_hosts: KnownHosts | None = None) -> tuple[str, str, bool]:
    """Connect, recording the host's key in vcli's known_hosts if it is new.

    Returns (key type, fingerprint, newly accepted). A changed key is still refused.
    """
    client, key = connect(host, accept_new_host_key=True, timeout=timeout, known_hosts=known_hosts)
    try:
        server_key = client.get_transport().get_remote_server_key()
        return server_key.get_name(), fingerprint(server_key), key is not None
    finally:
        client.close()
