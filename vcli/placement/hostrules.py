"""The rules a host's settings keep (`validate`): the ones `vcli hosts add` applies to its flags
and `vcli.placement.hosts.host_from_yaml` to each inventory entry. Standard library only.

Each rule is a small function that says what is wrong with one value (None: nothing); `_RULES`
lists them in the order they are checked, with the Host attribute and the flag an error names.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Callable

from vcli.errors import InvalidValueError

if TYPE_CHECKING:
    from vcli.placement.hosts import Host

__all__ = ["MAX_HOST_GPUS", "RUNTIMES", "validate"]

#: How a host runs replicas (`Host.runtime`).
RUNTIMES = ("process", "docker")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
#: The most GPUs one host may declare (a DGX has 8, a2-megagpu-16g 16); a count of 1e12 was
#: accepted, and `hosts list` then built its indices until memory ran out.
MAX_HOST_GPUS = 256
#: A host name (RFC 1123 labels, 253 characters at most), an IPv4 address, or an IPv6 one
#: (hex digits and colons, optionally bracketed); `host:22`, `http://x/y` and 10,000
#: characters were taken as host names.
_ADDRESS_RE = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
    r"|\[?[0-9A-Fa-f:.]{2,45}\]?")
#: A control character: a newline in a path or user name forged a row of `hosts list`.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _is_address(value: str) -> bool:
    """A host name, or an IP address that `ipaddress` reads (`10.0.0.999`, `::::` are not)."""
    import ipaddress

    if not _ADDRESS_RE.fullmatch(value):
        return False
    if ":" in value or re.fullmatch(r"[0-9.]+", value):
        try:
            ipaddress.ip_address(value.strip("[]"))
        except ValueError:
            return False
    return True


# Each rule of `validate`: what is wrong with a value, as the error's message (None: nothing).


def _name_problem(name: str) -> str | None:
    """A host name is letters, digits, '.', '_' or '-' (a letter or digit first), 63 at most."""
    return None if _NAME_RE.match(name) else f"[{name}] must be letters, digits, '.', '_' or '-' (max 63)"


def _runtime_problem(runtime: str) -> str | None:
    """A runtime is one of `RUNTIMES`."""
    return None if runtime in RUNTIMES else f"[{runtime}] is not one of [{', '.join(RUNTIMES)}]"


def _port_problem(port: int) -> str | None:
    """A port is 1-65535."""
    return None if 0 < port < 65536 else f"[{port}] must be 1-65535"


def _gpu_count_problem(count: int) -> str | None:
    """A GPU count is 0 to `MAX_HOST_GPUS`."""
    return None if 0 <= count <= MAX_HOST_GPUS else f"must be from 0 to {MAX_HOST_GPUS}, received {count}"


def _gpu_indices_problem(indices: tuple[int, ...]) -> str | None:
    """At most `MAX_HOST_GPUS` GPU indices, each 0-9999."""
    if len(indices) > MAX_HOST_GPUS or not all(0 <= i < 10_000 for i in indices):
        return f"at most {MAX_HOST_GPUS} GPU indices, each from 0 to 9999"
    return None


def _gpu_type_problem(gtype: str) -> str | None:
    """A GPU type is one of Vertex's accelerator types (`vcli.spec.ACCELERATOR_TYPES`)."""
    from vcli.spec import ACCELERATOR_TYPES

    return None if gtype in ACCELERATOR_TYPES else f"[{gtype}] is not one of [{', '.join(ACCELERATOR_TYPES)}]"


def _size_problem(value: float) -> str | None:
    """CPUs and memory are finite and > 0 (NaN passed `v <= 0`, and printed as invalid JSON)."""
    return None if math.isfinite(value) and value > 0 else f"must be a finite number > 0, received {value}"


def _address_problem(address: str) -> str | None:
    """An address is a host name or an IP address (`_is_address`), without a port."""
    return None if _is_address(address) else f"[{address}] is not a host name or IP address (the port is --port)"


def _control_problem(text: str) -> str | None:
    """A path or interpreter holds no control character."""
    return "must not contain control characters (newlines, tabs, escapes)" if _CONTROL_RE.search(text) else None


def _lease_dir_problem(path: str) -> str | None:
    """A GPU lease directory is an absolute path (`/` or `~`) without newlines or NULs."""
    if not path.startswith(("/", "~")) or any(c in path for c in "\n\r\0"):
        return f"[{path}] must be an absolute path on the host"
    return None


def _user_problem(user: str) -> str | None:
    """A user name (given to ssh and in `user@host`) starts with no '-' and holds no blank,
    '@', ':', quote, '$', ';' or control character; an empty one is no name (the default)."""
    if user.startswith("-") or any(c in user for c in " @:'\"`$;") or _CONTROL_RE.search(user):
        return f"[{user}] is not a user name"
    return None


#: `validate`'s rules, in the order they are checked: the Host attribute, the `hosts add` flag
#: its error names (`host_from_yaml` turns it into the entry's key), and the rule.
_RULES: tuple[tuple[str, str, Callable[[Any], str | None]], ...] = (
    ("name", "NAME", _name_problem),
    ("runtime", "--runtime", _runtime_problem),
    ("port", "--port", _port_problem),
    ("gpu_count", "--gpus", _gpu_count_problem),
    ("gpu_indices", "--gpus", _gpu_indices_problem),
    ("gpu_type", "--gpu-type", _gpu_type_problem),
    ("cpus", "--cpus", _size_problem),
    ("memory_gb", "--memory-gb", _size_problem),
    ("address", "--address", _address_problem),
    ("internal_address", "--internal-address", _address_problem),
    ("workdir", "--workdir", _control_problem),
    ("identity_file", "--identity-file", _control_problem),
    ("python", "--python", _control_problem),
    ("gpu_lease_dir", "--gpu-lease-dir", _lease_dir_problem),
    ("user", "--user", _user_problem),
)
#: The settings a host always has; any other may be unset (None), which breaks no rule.
_REQUIRED = frozenset({"name", "runtime", "port"})


def validate(host: Host) -> Host:
    """`host`, unchanged, when it keeps every rule of `_RULES` (an unset optional setting
    keeps them all); else InvalidValueError for the first rule it breaks, naming the flag
    of `hosts add` that sets it (`NAME` for the name)."""
    for attr, flag, problem in _RULES:
        value = getattr(host, attr)
        if value is None and attr not in _REQUIRED:
            continue
        message = problem(value)
        if message is not None:
            raise InvalidValueError(flag, message)
    return host
