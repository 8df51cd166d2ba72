"""Resource keys and transforms: the part of gcloud's projection language that `--format`,
`--filter` and `--sort-by` share (`gcloud topic resource-keys`, `gcloud topic projections`).

A key is a dotted path with optional indices and trailing transform calls:
`jobSpec.workerPoolSpecs[0].machineSpec.machineType`, `trials[].id`, `trials[-1].state`,
`name.basename()`, `createTime.date('%Y-%m-%d', tz=LOCAL)`, `trials.len()`,
`firstof(displayName, name)`. A name applied to a list reaches into each item (as gcloud's
filters do), `[]` does so explicitly, and a negative index counts from the end.

Contract: `parse_key` either returns a `Key` that `Key.value` evaluates on any JSON-ready
resource without raising, or raises `UsageError` naming the flag and the construct; a
transform it does not implement is refused, never ignored.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vcli.errors import UsageError

#: The `[]` segment: every item of a list.
ALL = "[]"

_NAME = re.compile(r"[A-Za-z_][\w-]*|\d+")


@dataclass(frozen=True)
class Call:
    """One transform call: `name(positional..., keyword=value...)`."""

    name: str
    args: tuple[str, ...] = ()
    kwargs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Key:
    """A parsed resource key: path segments (names, int indices, `ALL`) and transform calls."""

    path: tuple[str | int, ...]
    calls: tuple[Call, ...] = ()
    text: str = ""

    @property
    def name(self) -> str:
        """The last name of the path ('' for a key-less call such as `firstof(...)`)."""
        names = [p for p in self.path if isinstance(p, str) and p != ALL]
        return names[-1] if names else (self.calls[0].name if self.calls else "")

    def value(self, resource: Any) -> Any:
        """The key's value in `resource` after its transforms (None where it is undefined)."""
        return apply_calls(resolve(resource, self.path), self.calls, resource)


def split_top(text: str, sep: str, maxsplit: int = -1) -> list[str]:
    """Split on `sep` outside parentheses, brackets and quotes."""
    out, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == sep and depth == 0 and (maxsplit < 0 or len(out) < maxsplit):
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return out


def unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def closing(text: str, start: int, flag: str) -> int:
    """Index of the bracket closing the one at `start` (quotes respected)."""
    pairs = {"(": ")", "[": "]"}
    stack, quote = [], ""
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")]":
            if not stack or stack.pop() != ch:
                break
            if not stack:
                return i
    raise UsageError(f"argument {flag}: unbalanced [{text[start]}] in [{text}]")


def parse_key(text: str, flag: str) -> Key:
    """`a.b[0].c.transform(args)...` -> Key; UsageError (naming `flag`) for anything else."""
    src = text.strip()
    if not src:
        raise UsageError(f"argument {flag}: empty key")
    path: list[str | int] = []
    calls: list[Call] = []
    i = 0
    while i < len(src):
        if src[i] == "[":
            j = closing(src, i, flag)
            if calls:
                raise UsageError(f"argument {flag}: [{src}]: a key after a transform is not supported")
            path.append(_index(src[i + 1:j].strip(), src, flag))
            i = j + 1
        else:
            i = _name_or_call(src, i, flag, path, calls)
        i = _separator(src, i, flag)
    if calls and calls[0].name in _KEYLESS and path:
        raise UsageError(f"argument {flag}: [{src}]: {calls[0].name}() takes keys as arguments, not after a key")
    for c in calls[1:]:
        if c.name in _KEYLESS:
            raise UsageError(f"argument {flag}: [{src}]: {c.name}() must come first")
    return Key(tuple(path), tuple(calls), src)


def _index(inner: str, src: str, flag: str) -> int | str:
    """The path element of `[inner]`: ALL for `[]`, else an integer (up to 9 digits)."""
    if inner == "":
        return ALL
    if re.fullmatch(r"-?\d{1,9}", inner):
        return int(inner)
    raise UsageError(f"argument {flag}: [{src}]: index [{inner}] must be an integer or empty")


def _name_or_call(src: str, i: int, flag: str, path: list, calls: list[Call]) -> int:
    """Read the name at src[i:]: a transform call (appended to `calls`) when `(` follows,
    else a path element (appended to `path`); the index after it."""
    m = _NAME.match(src, i)
    if not m:
        raise UsageError(f"argument {flag}: cannot parse key [{src}] at [{src[i:][:20]}]")
    name, i = m.group(), m.end()
    if i < len(src) and src[i] == "(":
        j = closing(src, i, flag)
        calls.append(_call(name, src[i + 1:j], src, flag))
        return j + 1
    if calls:
        raise UsageError(f"argument {flag}: [{src}]: a key after a transform is not supported")
    path.append(int(name) if name.isdigit() and len(name) <= 9 else name)
    return i


def _separator(src: str, i: int, flag: str) -> int:
    """Past the separator at src[i:] (`.`, or nothing before `[`); the end stays the end."""
    n = len(src)
    if i >= n:
        return i
    if src[i] == ".":
        i += 1
        if i == n or src[i] in ".[":
            raise UsageError(f"argument {flag}: cannot parse key [{src}]")
        return i
    if src[i] != "[":
        raise UsageError(f"argument {flag}: cannot parse key [{src}] at [{src[i:][:20]}]")
    return i


def _call(name: str, inner: str, src: str, flag: str) -> Call:
    spec = TRANSFORMS.get(name)
    if spec is None:
        raise UsageError(f"argument {flag}: [{src}]: transform [{name}()] is not supported; supported: "
                         + ", ".join(f"{t}()" for t in sorted(TRANSFORMS)))
    args, kwargs = [], []
    for part in split_top(inner, ","):
        part = part.strip()
        if not part:
            continue
        km = re.fullmatch(r"([A-Za-z_]+)\s*=\s*(.*)", part, re.S)
        if km and not part.startswith(("'", '"')):
            if km.group(1) not in spec.keywords:
                raise UsageError(f"argument {flag}: [{src}]: {name}() has no argument [{km.group(1)}]; "
                                 f"it takes {', '.join(spec.keywords) or 'none'}")
            kwargs.append((km.group(1), unquote(km.group(2).strip())))
        else:
            args.append(unquote(part))
    if spec.max_args is not None and len(args) > spec.max_args:
        raise UsageError(f"argument {flag}: [{src}]: {name}() takes at most {spec.max_args} positional argument(s)")
    if len(args) < spec.min_args:
        raise UsageError(f"argument {flag}: [{src}]: {name}() needs at least {spec.min_args} argument(s)")
    call = Call(name, tuple(args), tuple(kwargs))
    if spec.check:
        spec.check(call, src, flag)
    return call


def resolve(data: Any, path: tuple[str | int, ...]) -> Any:
    """The value at `path` in `data`, None where undefined. A name (or `[]`) applied to a list
    gives the list of each item's value."""
    cur = data
    for idx, seg in enumerate(path):
        if cur is None:
            return None
        if seg == ALL:
            return [resolve(item, path[idx + 1:]) for item in cur] if isinstance(cur, list) else None
        if isinstance(seg, int):
            if isinstance(cur, list) and -len(cur) <= seg < len(cur):
                cur = cur[seg]
            elif isinstance(cur, dict):
                cur = cur.get(str(seg))
            else:
                return None
        elif isinstance(cur, dict):
            cur = cur.get(seg)
        elif isinstance(cur, list):
            return [resolve(item, path[idx:]) for item in cur]
        else:
            return None
    return cur


def apply_calls(value: Any, calls: tuple[Call, ...], resource: Any) -> Any:
    for i, call in enumerate(calls):
        if call.name == "map":
            rest = calls[i + 1:]
            return None if value is None else [apply_calls(v, rest, resource) for v in _items(value)]
        spec = TRANSFORMS[call.name]
        kwargs = dict(call.kwargs)
        if value is None and not spec.takes_undefined:
            return kwargs.get("undefined") or None
        try:
            value = spec.fn(value, resource, *call.args, **kwargs)
        except (TypeError, ValueError, OverflowError, OSError, IndexError, KeyError, AttributeError):
            return kwargs.get("undefined") or None
    return value


def text(value: Any, delimiter: str = ";") -> str:
    """A value as one cell: lists `a;b`, mappings `k=v;k2=v2` (keys sorted), bools `True`."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return delimiter.join(scalar(v) for v in value)
    if isinstance(value, dict):
        return delimiter.join(f"{k}={scalar(v)}" for k, v in sorted(value.items()))
    return scalar(value)


def scalar(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
        return str(v)
    return str(v)


# --------------------------------------------------------------------------- transforms


@dataclass(frozen=True)
class Transform:
    fn: Callable[..., Any]
    keywords: tuple[str, ...] = ()
    min_args: int = 0
    max_args: int | None = None
    #: Called with an undefined (None) value too (`len`, `firstof`, `format`, `yesno`).
    takes_undefined: bool = False
    check: Callable[[Call, str, str], None] | None = None
    doc: str = ""


def _items(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value.values())
    return [value]


def _basename(value: Any, _r: Any, undefined: str = "") -> Any:
    return str(value).rstrip("/").rsplit("/", 1)[-1]


def _segment(value: Any, _r: Any, index: str = "-1", undefined: str = "") -> Any:
    parts = str(value).rstrip("/").split("/")
    i = int(index)
    return parts[i] if -len(parts) <= i < len(parts) else (undefined or None)


def _len(value: Any, _r: Any) -> int:
    if value is None:
        return 0
    return len(value) if isinstance(value, (list, dict, str)) else len(str(value))


def _join(value: Any, _r: Any, sep: str = ",", undefined: str = "") -> Any:
    return sep.join(scalar(v) for v in _items(value)) if isinstance(value, (list, dict)) else value


def _list(value: Any, _r: Any, separator: str = ",", undefined: str = "") -> Any:
    return text(value, separator) if isinstance(value, (list, dict)) else value


def _split(value: Any, _r: Any, sep: str = ",", undefined: str = "") -> Any:
    return str(value).split(sep)


def _sort(value: Any, _r: Any, attr: str = "", undefined: str = "") -> Any:
    if not isinstance(value, list):
        return value
    if attr:
        key = parse_key(attr, "--format")
        return sorted(value, key=lambda v: sort_key(key.value(v)))
    return sorted(value, key=sort_key)


def _slice(value: Any, _r: Any, op: str = ":", undefined: str = "") -> Any:
    parts = [int(p) if p.strip() else None for p in op.split(":")]
    s = slice(*parts) if len(parts) > 1 else slice(parts[0], None if parts[0] == -1 else (parts[0] or 0) + 1)
    return value[s] if isinstance(value, (list, str)) else value


def _yesno(value: Any, _r: Any, yes: str = "", no: str = "No") -> Any:
    truthy = bool(value) and str(value).lower() not in ("false", "0")
    return (yes or "Yes") if truthy else no


def _float(value: Any, _r: Any, precision: str = "6", undefined: str = "") -> Any:
    return f"{float(value):.{int(precision)}g}"


def _upper(value: Any, _r: Any, undefined: str = "") -> Any:
    return str(value).upper()


def _lower(value: Any, _r: Any, undefined: str = "") -> Any:
    return str(value).lower()


def _notnull(value: Any, _r: Any) -> Any:
    return [v for v in value if v is not None] if isinstance(value, list) else value


def _firstof(_value: Any, resource: Any, *keys: str) -> Any:
    for k in keys:
        v = parse_key(k, "--format").value(resource)
        if v not in (None, "", [], {}):
            return v
    return None


def _format(value: Any, resource: Any, fmt: str, *keys: str) -> Any:
    args = [text(parse_key(k, "--format").value(resource)) for k in keys] if keys else [text(value)]
    return fmt.format(*args)


def _extract(value: Any, _r: Any, *keys: str) -> Any:
    if not isinstance(value, dict):
        return None
    return [value.get(k) for k in keys if k in value]


def parse_time(value: Any, unit: float = 1) -> datetime:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / unit, UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _date(value: Any, _r: Any, format: str = "%Y-%m-%dT%H:%M:%S", unit: str = "1", undefined: str = "",
          tz: str = "", tz_default: str = "") -> Any:
    when = parse_time(value, float(unit))
    if when.tzinfo is None and tz_default.upper() in ("", "UTC"):
        when = when.replace(tzinfo=UTC)
    if tz.upper() == "LOCAL":
        when = when.astimezone()
    elif tz.upper() == "UTC":
        when = when.astimezone(UTC)
    elif tz:
        from zoneinfo import ZoneInfo

        when = when.astimezone(ZoneInfo(tz))
    return when.strftime(format)


def _iso(value: Any, _r: Any, undefined: str = "") -> Any:
    return parse_time(value).isoformat().replace("+00:00", "Z")


def seconds(value: Any) -> float:
    """Seconds in a number or a Vertex duration string (`"3600s"`, `"1.5s"`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    s = str(value).strip()
    return float(s[:-1] if s.endswith("s") else s)


def _duration(value: Any, resource: Any, start: str = "", end: str = "", parts: str = "3", precision: str = "3",
              unit: str = "1", undefined: str = "") -> Any:
    """ISO 8601 duration (`PT1H2M3.5S`): of the value (seconds or `"123s"`), or from the
    keys `start` to `end` (times; `end` missing means now)."""
    if start:
        t0 = parse_time(parse_key(start, "--format").value(resource))
        end_v = parse_key(end, "--format").value(resource) if end else None
        t1 = parse_time(end_v) if end_v is not None else datetime.now(UTC)
        total = (t1 - t0).total_seconds()
    else:
        total = seconds(value) / float(unit)
    if not math.isfinite(total):
        return None
    sign, total = ("-" if total < 0 else ""), abs(total)
    days, rem = divmod(total, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    fields = [(days, "D"), (hours, "H"), (minutes, "M"), (secs, "S")]
    first = next((i for i, (v, _) in enumerate(fields) if v), 3)
    out_d, out_t = "", ""
    for v, u in fields[first:first + int(parts)]:
        if u == "D":
            out_d = f"{int(v)}D"
        elif u == "S":
            s = f"{v:.{int(precision)}f}".rstrip("0").rstrip(".")
            if v or not (out_d or out_t):
                out_t += f"{s}S"
        elif v:
            out_t += f"{int(v)}{u}"
    return f"{sign}P{out_d}" + (f"T{out_t}" if out_t else "")


def _check_slice(call: Call, src: str, flag: str) -> None:
    op = call.args[0] if call.args else dict(call.kwargs).get("op", ":")
    if not re.fullmatch(r"\s*-?\d{0,9}\s*(:\s*-?\d{0,9}\s*){0,2}", op):
        raise UsageError(f"argument {flag}: [{src}]: slice() takes START:END[:STEP], e.g. slice(0:2)")
    if op.count(":") == 2 and re.fullmatch(r"-?0+", op.rsplit(":", 1)[1].strip()):  # every row blank before
        raise UsageError(f"argument {flag}: [{src}]: slice() STEP must not be zero")


def _check_zones(call: Call, src: str, flag: str) -> None:
    """`date(tz=, tz_default=)` name time zones this machine knows (LOCAL, UTC, or an IANA name):
    `tz=Mars/Olympus` printed every row blank."""
    values = dict(call.kwargs)
    for i, name in ((3, "tz"), (4, "tz_default")):
        zone = values.get(name, call.args[i] if i < len(call.args) else "").strip()
        if zone and zone.upper() not in ("LOCAL", "UTC"):
            from zoneinfo import ZoneInfo

            try:
                ZoneInfo(zone)
            except (KeyError, ValueError, OSError):  # not found (a KeyError), or not a zone name (../x)
                raise UsageError(f"argument {flag}: [{src}]: date() argument [{name}] is not a time zone: [{zone}]") from None


#: The widest field or precision `format()` accepts: `{0:>999999999}` made a 2 GB string.
FORMAT_WIDTH_MAX = 1000


def _check_format(call: Call, src: str, flag: str) -> None:
    """`format(FMT, KEY, ...)`: FMT's fields are positions (`{0}`, `{}`) among the values it
    formats, with a format spec no wider than FORMAT_WIDTH_MAX and no nested field; no
    attribute or item lookup (`{0.__class__}`), which Python's str.format would evaluate.
    The values are text, so FMT is tried on empty strings here: a spec they cannot take
    (`{0:d}`) or a missing position (`{1}` with one value) is refused before any output."""
    import string

    fmt, keys = call.args[0], call.args[1:]
    try:
        for _, name, spec, _ in string.Formatter().parse(fmt):
            if name is None:
                continue
            if name and not name.isdigit():
                raise ValueError(f"field [{{{name}}}] is not a position such as {{0}}")
            if "{" in (spec or ""):
                raise ValueError("a field inside a format spec is not supported")
            if any(len(d) > 4 or int(d) > FORMAT_WIDTH_MAX for d in re.findall(r"\d+", spec or "")):
                raise ValueError(f"widths and precisions above {FORMAT_WIDTH_MAX} are not supported")
        fmt.format(*[""] * max(1, len(keys)))
    except (ValueError, IndexError, KeyError) as e:
        raise UsageError(f"argument {flag}: [{src}]: format(): {e}") from None
    for k in keys:
        parse_key(k, flag)


def _check_ints(*names: str, negative: bool = False) -> Callable[[Call, str, str], None]:
    """Each of `names` (by keyword or position) is an integer; `negative`: may be below 0 (a
    segment index; `precision=-5` printed every row blank)."""
    pattern = r"-?\d{1,6}" if negative else r"\d{1,6}"

    def check(call: Call, src: str, flag: str) -> None:
        values = dict(call.kwargs)
        for i, name in enumerate(names):
            v = values.get(name, call.args[i] if i < len(call.args) else None)
            if v is not None and not re.fullmatch(pattern, v.strip()):
                kind = "an integer" if negative else "an integer of 0 or more"
                raise UsageError(f"argument {flag}: [{src}]: {call.name}() argument [{name}] must be {kind}")
    return check


#: gcloud transforms vcli implements (`gcloud topic projections`); every other is refused.
TRANSFORMS: dict[str, Transform] = {
    "basename": Transform(_basename, ("undefined",), max_args=1),
    "date": Transform(_date, ("format", "unit", "undefined", "tz", "tz_default"), max_args=5, check=_check_zones),
    "duration": Transform(_duration, ("start", "end", "parts", "precision", "unit", "undefined"), max_args=0,
                          takes_undefined=False, check=_check_ints("parts", "precision")),
    "extract": Transform(_extract, (), min_args=1),
    "firstof": Transform(_firstof, (), min_args=1, takes_undefined=True),
    "float": Transform(_float, ("precision", "undefined"), max_args=1, check=_check_ints("precision")),
    "format": Transform(_format, (), min_args=1, takes_undefined=True, check=_check_format),
    "iso": Transform(_iso, ("undefined",), max_args=0),
    "join": Transform(_join, ("sep", "undefined"), max_args=1),
    "len": Transform(_len, (), max_args=0, takes_undefined=True),
    "list": Transform(_list, ("separator", "undefined"), max_args=1),
    "lower": Transform(_lower, ("undefined",), max_args=0),
    "map": Transform(lambda v, _r: v, (), max_args=0),
    "notnull": Transform(_notnull, (), max_args=0),
    "segment": Transform(_segment, ("index", "undefined"), max_args=2, check=_check_ints("index", negative=True)),
    "slice": Transform(_slice, ("op", "undefined"), max_args=1, check=_check_slice),
    "sort": Transform(_sort, ("attr", "undefined"), max_args=1),
    "split": Transform(_split, ("sep", "undefined"), max_args=1),
    "upper": Transform(_upper, ("undefined",), max_args=0),
    "yesno": Transform(_yesno, ("yes", "no"), max_args=2, takes_undefined=True),
}

#: Transforms that start a key instead of following one: `firstof(a, b)`.
_KEYLESS = ("firstof",)


def sort_key(value: Any) -> tuple[int, Any]:
    """Numbers (and numeric strings such as int64 counts) by value, then text, then missing."""
    if value is None:
        return (2, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value)) if math.isfinite(value) else (1, str(value))
    s = text(value)
    try:
        f = float(s)
    except ValueError:
        return (1, s)
    return (0, f) if math.isfinite(f) else (1, s)
