"""The Vertex schema, derived from the `vcli.spec` dataclasses, and the generic codec over it.

Each message's fields come from `dataclasses.fields()` and the type hints: `foo_bar` is
`fooBar`, `tuple[X, ...]` a list, `X | None` optional, an Enum its values, a dataclass a
message, a Union of dataclasses a oneof (each member named after its message, camelCase). The
exceptions are declared in `vcli.spec` with `field(metadata=vertex(...))`, and the Vertex
fields vcli accepts but does not model in each class's `VERTEX_UNMODELED`. So a new Vertex
field is one edit in `vcli.spec`.

Three layers, each usable alone:
- `Decoder.decode_message`: a parsed YAML/JSON value -> a camelCase dict of checked Python
  values, with gcloud-like errors naming the field's path (unknown or snake_case keys,
  wrong scalar types, int64 as strings, durations, a single mapping where a list goes);
- `build`: such a dict -> the dataclass (unset fields keep their defaults);
- `to_wire`: a dataclass -> Vertex's REST shape (camelCase, int64 as strings, zero values
  left out as proto3 JSON does, except fields marked `keep_zero`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from enum import Enum
from typing import Any, Callable, Mapping, Union

from vcli.codec.yamlio import source_text
from vcli.errors import ConfigError
from vcli.spec import CustomJobSpec, HyperparameterTuningJobSpec, Vertex

#: A wire type: "str", "int64", "int32", "double", "bool", "duration", "any" (kept as given),
#: ("enum", names), ("list", Kind), ("map",) for string maps, or a message name.
Kind = Any

_NO_FACTS = Vertex()
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")
# schema scalar type -> `Decoder` method (`decode_scalar`)
_SCALAR_DECODERS = {
    "str": "_decode_str", "int64": "_decode_int", "int32": "_decode_int", "count": "_decode_count",
    "double": "_decode_double", "bool": "_decode_bool", "duration": "_decode_duration",
}


def camel(name: str) -> str:
    """snake_case -> camelCase (`boot_disk_size_gb` -> `bootDiskSizeGb`)."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def message_name(cls: type) -> str:
    return getattr(cls, "VERTEX_NAME", cls.__name__)


@dataclasses.dataclass(frozen=True)
class WireField:
    """One Vertex field of a message; `attr` is the dataclass field it fills (None: not modelled)."""

    wire: str
    kind: Kind
    attr: str | None
    facts: Vertex
    #: The Python type a value of this field is built as (the Enum, the dataclass, ...).
    py: Any = None


@dataclasses.dataclass(frozen=True)
class Message:
    name: str
    cls: type | None
    #: Every Vertex field, by camelCase name (what the decoder accepts).
    fields: Mapping[str, WireField]
    #: Modelled fields in dataclass order: attr -> its wire fields (several for a oneof).
    attrs: Mapping[str, tuple[WireField, ...]]


_MESSAGES: dict[str, Message] = {}


def message(cls_or_name: type | str) -> Message:
    """The schema of a spec dataclass (or of a message already derived, by name)."""
    if isinstance(cls_or_name, str):
        if cls_or_name not in _MESSAGES:  # by name: derive every message vcli reads first
            for root in (CustomJobSpec, HyperparameterTuningJobSpec):
                message(root)
        return _MESSAGES[cls_or_name]
    name = message_name(cls_or_name)
    if name not in _MESSAGES:
        _derive(cls_or_name)
    return _MESSAGES[name]


def _derive(cls: type) -> None:
    name = message_name(cls)
    fields: dict[str, WireField] = {}
    attrs: dict[str, tuple[WireField, ...]] = {}
    # Registered before its fields so that recursive messages (ParameterSpec) terminate.
    _MESSAGES[name] = Message(name, cls, fields, attrs)
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        facts: Vertex = f.metadata.get("vertex", _NO_FACTS)
        if facts.vcli_only:
            continue
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            facts = dataclasses.replace(facts, keep_zero=True)  # a required field is always shown
        wires = tuple(_wire_fields(camel(f.name), hints[f.name], facts, f.name))
        attrs[f.name] = wires
        for w in wires:
            fields[w.wire] = w
    for wire, typ in getattr(cls, "VERTEX_UNMODELED", {}).items():
        facts = _NO_FACTS
        if typing.get_origin(typ) is typing.Annotated:
            typ, facts = typ.__origin__, typ.__metadata__[0]
        fields[wire] = next(iter(_wire_fields(wire, typ, facts, None)))


def _wire_fields(wire: str, typ: Any, facts: Vertex, attr: str | None) -> list[WireField]:
    if facts.oneof:
        return [WireField(name, message(m).name, attr, facts, m) for name, m in facts.oneof]
    if facts.wrapper:
        msg_name, inner = facts.wrapper.split(".")
        if msg_name not in _MESSAGES:
            _MESSAGES[msg_name] = Message(msg_name, None, {inner: WireField(inner, "str", None, _NO_FACTS)}, {})
        return [WireField(facts.name or wire, msg_name, attr, facts, str)]
    typ = _strip_optional(typ)
    members = typing.get_args(typ) if _is_union(typ) else ()
    if members and all(dataclasses.is_dataclass(m) for m in members):
        return [WireField(message(m).name[:1].lower() + message(m).name[1:], message(m).name, attr, facts, m) for m in members]
    return [WireField(facts.name or wire, _kind(typ, facts), attr, facts, typ)]


def _is_union(typ: Any) -> bool:
    return typing.get_origin(typ) in (Union, types.UnionType)


def _strip_optional(typ: Any) -> Any:
    args = typing.get_args(typ)
    if _is_union(typ) and type(None) in args:
        rest = tuple(a for a in args if a is not type(None))
        return rest[0] if len(rest) == 1 else Union[rest]
    return typ


def _kind(typ: Any, facts: Vertex) -> Kind:
    if facts.choices:
        return ("enum", facts.choices)
    if typ is Any:
        return "any"
    origin = typing.get_origin(typ)
    if origin is tuple:
        return ("list", _kind(typing.get_args(typ)[0], facts))
    if origin is not None and issubclass(origin, Mapping):
        return ("map",)
    if isinstance(typ, type) and issubclass(typ, Enum):
        return ("enum", tuple(m.value for m in typ))
    if dataclasses.is_dataclass(typ):
        return message(typ).name
    if typ is bool:
        return "bool"
    if typ is int:
        return "int64" if facts.int64 else "int32"
    if typ is float:
        return "duration" if facts.duration else "count" if facts.fractional else "double"
    if typ is str:
        return "str"
    raise TypeError(f"vcli.codec.schema: no Vertex wire type for {typ!r}")


# =========================================================================== decoding


#: Modelled (recorded, shown by `describe`) but meaningless on a local run.
NO_LOCAL_EFFECT = frozenset([*(("CustomJobSpec", f) for f in (
    "serviceAccount", "network", "persistentResourceId", "tensorboard", "experiment", "experimentRun",
    "enableWebAccess", "enableDashboardAccess")),
    # Replicas use the host's disks; there is no boot disk to size.
    ("WorkerPoolSpec", "diskSpec"),
    # Vertex: "only supported by the Vertex AI Vizier service. Not supported by
    # HyperparameterTuningJob"; vcli runs the defaults as trial 1 when every active parameter
    # has one (`vcli.tuning.defaults`), and notes them otherwise.
    *((spec, "defaultValue") for spec in ("DoubleValueSpec", "IntegerValueSpec", "CategoricalValueSpec",
                                           "DiscreteValueSpec"))])
#: Fields that mean something locally for these values only: FLEX_START's wait for every
#: replica at once is vcli's gang placement (bounded by maxWaitDuration, 24 h by default);
#: SPOT, LOW_COST, STANDARD and ON_DEMAND choose how Google bills and preempts VMs.
LOCAL_EFFECT_ONLY_FOR = {("Scheduling", "strategy"): frozenset(("FLEX_START",))}


def _set(value: Any) -> bool:
    """Whether a decoded value says anything (not empty, false, or an enum's UNSPECIFIED)."""
    if isinstance(value, str) and value.endswith("_UNSPECIFIED"):
        return False
    return value not in (None, "", [], {}, False)


class Decoder:
    """Checks a parsed document against the schema the way gcloud's message decoder does.

    Errors are `ConfigError`s: "Invalid value for [--config]: SOURCE at [PATH]: MESSAGE".
    """

    def __init__(self, source: str) -> None:
        self.source = source
        #: Paths of the fields set in the document that change nothing on a local run: those
        #: vcli accepts without modelling, and `NO_LOCAL_EFFECT`'s (the CLI names them once).
        self.no_effect: list[str] = []

    def error(self, path: str, message: str) -> ConfigError:
        where = f" at [{path}]" if path else ""
        return ConfigError(f"Invalid value for [--config]: {self.source}{where}: {message}", path=path, message=message)

    def decode(self, value: Any, typ: Kind, path: str) -> Any:
        if isinstance(typ, tuple):
            kind = typ[0]
            if kind == "list":
                if value is None:
                    return []
                # gcloud wraps a single mapping or scalar given where a list is expected.
                items = value if isinstance(value, list) else [value]
                return [self.decode(v, typ[1], f"{path}[{i}]") for i, v in enumerate(items)]
            if kind == "enum":
                if not isinstance(value, str) or value not in typ[1]:
                    raise self.error(path, f"[{value}] is not one of [{', '.join(typ[1])}]")
                return value
            if kind == "map":
                if not isinstance(value, dict):
                    raise self.error(path, "expected a mapping of strings")
                return {source_text(k): source_text(v) for k, v in value.items()}
            raise AssertionError(typ)
        if typ == "any":
            return value
        if typ in _MESSAGES:
            return self.decode_message(value, typ, path)
        return self.decode_scalar(value, typ, path)

    def decode_scalar(self, value: Any, typ: str, path: str) -> Any:
        """A scalar of schema type `typ` (str, int64/int32, count, double, bool, duration)
        from a YAML/JSON value; a wrong one raises `error` naming `path`."""
        return getattr(self, _SCALAR_DECODERS[typ])(value, path)

    def _decode_str(self, value: Any, path: str) -> str:
        if isinstance(value, (dict, list)) or value is None:
            raise self.error(path, "expected a string")
        text = source_text(value)  # a number as written: `2.10` is not 2.1, `1e3` not 1000.0
        if "\0" in text:  # no command, argument, variable, label or path can hold one
            raise self.error(path, "contains a NUL character")
        return text

    def _decode_int(self, value: Any, path: str) -> int:
        if isinstance(value, bool):
            raise self.error(path, f"expected an integer, found [{value}]")
        if isinstance(value, int):
            return int(value)  # a plain int, not the document's SourceInt
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"[-+]?\d+", value.strip()):
            return int(value)
        raise self.error(path, f"expected an integer, found [{value}]")

    def _decode_count(self, value: Any, path: str) -> int | float:
        """An integer, or (vcli) a positive fraction: kept an int when whole."""
        number = self._decode_double(value, path)
        if not 0 <= number < math.inf:  # NaN too: it was "a fraction of a GPU"
            raise self.error(path, f"expected a non-negative number, found [{value}]")
        return int(number) if number.is_integer() else number

    def _decode_double(self, value: Any, path: str) -> float:
        if isinstance(value, bool):
            raise self.error(path, f"expected a number, found [{value}]")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise self.error(path, f"expected a number, found [{value}]")

    def _decode_bool(self, value: Any, path: str) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise self.error(path, f"expected true or false, found [{value}]")

    def _decode_duration(self, value: Any, path: str) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        m = _DURATION.match(value) if isinstance(value, str) else None
        if not m:
            raise self.error(path, f"expected a duration in seconds such as [8000s], found [{value}]")
        return float(m.group(1))

    def decode_message(self, value: Any, name: type | str, path: str) -> dict[str, Any]:
        """A mapping -> a camelCase dict of decoded values (`{}` for null); unknown keys fail."""
        msg = message(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping ({msg.name}), found [{value}]")
        schema = msg.fields
        out: dict[str, Any] = {}
        for key, val in value.items():
            key = str(key)
            sub = f"{path}.{key}" if path else key
            if key not in schema:
                raise self._unknown_field(msg, key, sub)
            if val is None:  # proto3 JSON: null is the field's default, not set (`medianAutomatedStoppingSpec: null`
                continue     # turned the median rule on)
            out[key] = self.decode(val, schema[key].kind, sub)
            self._note_no_effect(msg, key, out[key], sub)
        self._check_oneofs(msg, value, path)
        return out

    def _unknown_field(self, msg: Message, key: str, sub: str) -> ConfigError:
        """The error for `key` (at `sub`), not a field of `msg`: the camelCase spelling when it
        is a snake_case one, else the closest field name, and the valid fields."""
        schema = msg.fields
        if "_" in key and camel(key) in schema:
            return self.error(sub, f"keys with underscores are invalid; the field is spelled [{camel(key)}] (camelCase)")
        hint = difflib.get_close_matches(key, list(schema), n=1)
        extra = f"; did you mean [{hint[0]}]?" if hint else "."
        return self.error(sub, f"unknown field of {msg.name}{extra} Valid fields: [{', '.join(sorted(schema))}]")

    def _note_no_effect(self, msg: Message, key: str, decoded: Any, sub: str) -> None:
        """Add `sub` to `no_effect` when field `key` of `msg` is set (to `decoded`) but vcli does
        nothing with it: not modelled (and not a wrapper's inner field), listed in
        NO_LOCAL_EFFECT, or a value LOCAL_EFFECT_ONLY_FOR does not list."""
        unmodelled = msg.fields[key].attr is None and msg.cls is not None  # not a wrapper's inner field
        only_for = LOCAL_EFFECT_ONLY_FOR.get((msg.name, key))
        if (unmodelled or (msg.name, key) in NO_LOCAL_EFFECT
                or (only_for is not None and decoded not in only_for)) and _set(decoded):
            self.no_effect.append(sub)

    def _check_oneofs(self, msg: Message, value: Mapping[str, Any], path: str) -> None:
        """Refuse two members of one oneof of `msg` set in `value` (Vertex's parser does; one
        was dropped)."""
        for wires in msg.attrs.values():
            given = [w.wire for w in wires if value.get(w.wire) is not None]
            if len(wires) > 1 and len(given) > 1:
                raise self.error(path, f"only one of [{', '.join(given)}] may be set: they are one choice "
                                       f"of {msg.name}")


# =========================================================================== building


def build(cls: type, data: Mapping[str, Any], **given: Any) -> Any:
    """A decoded camelCase dict -> `cls`; `given` supplies fields the caller built itself.

    Unset fields keep the dataclass default; a required field left unset takes its type's
    zero value (proto3: "" / 0 / empty), e.g. an `env` entry without a `value`. A oneof whose
    members are not all messages (`vertex(oneof=...)`) must be given.
    """
    msg = message(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            kwargs[f.name] = given[f.name]
            continue
        for w in msg.attrs.get(f.name, ()):
            if w.wire in data:
                if w.facts.oneof:
                    raise TypeError(f"{msg.name}.{f.name}: the caller builds this oneof")
                kwargs[f.name] = _build_value(data[w.wire], w)
                break
        else:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                kwargs[f.name] = _zero(typing.get_type_hints(cls)[f.name])
    return cls(**kwargs)


def _build_value(value: Any, w: WireField) -> Any:
    if w.facts.wrapper:
        return value.get(w.facts.wrapper.split(".")[1])
    return _convert(value, _strip_optional(w.py))


def _convert(value: Any, typ: Any) -> Any:
    if typing.get_origin(typ) is tuple:
        return tuple(_convert(v, typing.get_args(typ)[0]) for v in value)
    if isinstance(typ, type) and issubclass(typ, Enum):
        return typ(value)
    if dataclasses.is_dataclass(typ):
        return build(typ, value)  # type: ignore[arg-type]
    return value


def _zero(typ: Any) -> Any:
    typ = _strip_optional(typ)
    if typing.get_origin(typ) is tuple:
        return ()
    if typ in (str, int, float, bool):
        return typ()
    raise TypeError(f"required field of type {typ!r} is missing")


# =========================================================================== encoding

#: Per-type encoders that replace the generic one: f(obj, encode) -> dict.
Overrides = Mapping[type, Callable[[Any, Callable[[Any], Any]], dict[str, Any]]]


def to_wire(obj: Any, overrides: Overrides | None = None, *, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """A spec dataclass -> Vertex's REST shape, keys in dataclass field order.

    A field is left out when it is None, or when it is zero or empty ("" / 0 / False / () /
    an `*_UNSPECIFIED` enum) unless it is required (no default) or marked `keep_zero`; a
    nested message is shown whenever set. `overrides` replaces the encoder of a type (at any depth), `exclude` drops fields
    of `obj` itself (for callers that encode them differently).
    """
    overrides = overrides or {}

    def encode(value: Any) -> Any:
        return to_wire(value, overrides)

    msg = message(type(obj))
    out: dict[str, Any] = {}
    for attr, wires in msg.attrs.items():
        if attr in exclude:
            continue
        value = getattr(obj, attr)
        if value is None:
            continue
        facts = wires[0].facts
        if facts.oneof:
            raise TypeError(f"{msg.name}.{attr}: the caller encodes this oneof")
        if len(wires) > 1:  # a oneof of messages: the member's type says which field
            wire = next(w for w in wires if type(value) is w.py)
            out[wire.wire] = _encode_value(value, wire, overrides, encode)
            continue
        if not facts.keep_zero and _is_zero(value):
            continue
        out[wires[0].wire] = _encode_value(value, wires[0], overrides, encode)
    return out


def _encode_value(value: Any, w: WireField, overrides: Overrides, encode: Callable[[Any], Any]) -> Any:
    if w.facts.wrapper:
        return {w.facts.wrapper.split(".")[1]: value}
    if isinstance(value, tuple):
        return [_encode_value(v, w, overrides, encode) for v in value]
    if dataclasses.is_dataclass(value):
        custom = overrides.get(type(value))
        return custom(value, encode) if custom else encode(value)
    if isinstance(value, Enum):
        return value.value
    if w.facts.int64:
        return str(int(value))
    if w.facts.duration:
        return format_duration(value)
    return value


def _is_zero(value: Any) -> bool:
    if isinstance(value, Enum):
        return str(value.value).endswith("_UNSPECIFIED")
    if dataclasses.is_dataclass(value):
        return False
    return value in ("", 0, False, ())


def format_duration(seconds: float) -> str:
    """Seconds -> a protobuf Duration string (`600s`, `1.5s`)."""
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds}s"
