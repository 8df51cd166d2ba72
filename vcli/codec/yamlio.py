"""YAML/JSON documents: reading `--config` files and writing gcloud-style YAML.

The only importer of PyYAML, lazily (so `vcli --help` never loads it). Plain scalars follow
YAML 1.2's core schema, as gcloud's own loader does.
"""

from __future__ import annotations

import os
import re
from enum import Enum
from typing import Any, Callable

from vcli.errors import ConfigError

#: The largest `--config` or `--flags-file` read (bytes): a study or job document is a few
#: KiB; this bounds what `/dev/zero`, a runaway pipe or a wrong file can cost.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
#: The deepest nesting of lists and mappings accepted (Vertex's documents nest under 15).
MAX_DEPTH = 64
#: The most values (scalars, lists and mappings, each alias counted where it is used) a
#: document may hold: a job or study has a few hundred. Nine lines of aliases (`&a [x, x,
#: ...]`, `&b [*a, *a, ...]`, ...) name 387 million values, which hung every reader.
MAX_VALUES = 1_000_000


def load_document(path: str, *, stdin_text: Callable[[], str] | None = None) -> tuple[Any, str]:
    """Read a YAML or JSON file (`-` = stdin); numbers like `1e-5` are numbers (YAML 1.2).

    At most `MAX_DOCUMENT_BYTES` are read; the text must be UTF-8 (a UTF-8 or UTF-16 byte
    order mark is honoured). Anything else is one ConfigError line naming --config."""
    import sys

    if path == "-":
        source = "<stdin>"
        text = stdin_text() if stdin_text else read_text(sys.stdin.buffer, source, "--config")
    else:
        source = path
        try:
            with open(os.path.expanduser(path), "rb") as f:
                text = read_text(f, path, "--config")
        except FileNotFoundError:
            raise ConfigError(f"Invalid value for [--config]: file [{path}] does not exist.") from None
        except IsADirectoryError:
            raise ConfigError(f"Invalid value for [--config]: [{path}] is a directory, not a file.") from None
        except OSError as e:
            raise ConfigError(f"Invalid value for [--config]: cannot read [{path}]: {e.strerror}.") from None
    return parse_yaml(text, source, keep_text=True), source


def read_text(stream: Any, name: str, flag: str) -> str:
    """The text of a binary stream, read up to `MAX_DOCUMENT_BYTES` and decoded as UTF-8 (or
    UTF-16 with its byte order mark). Raises ConfigError naming `flag` and the file."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_DOCUMENT_BYTES:
            raise ConfigError(f"Invalid value for [{flag}]: {name} is larger than "
                              f"{MAX_DOCUMENT_BYTES // (1024 * 1024)} MiB; a document is a few KiB.")
    data = b"".join(chunks)
    encoding = "utf-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise ConfigError(f"Invalid value for [{flag}]: {name} is not UTF-8 text (byte 0x{data[e.start]:02x} at "
                          f"offset {e.start}).") from None


class SourceInt(int):
    """An integer plain scalar that keeps the text the document wrote (`text`): a string field
    (args, command, env values) takes that text, not the number's (`007`, `0x1F`)."""

    text = ""


class SourceFloat(float):
    """Likewise a float: `2.10`, `1e3`, `1e-400` and `1e999` in args reached the trainer as
    2.1, 1000.0, 0.0 and inf; now as written."""

    text = ""


def source_text(value: Any) -> str:
    """How the document wrote a scalar: a number's own text, else `str(value)` (true/false
    for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return getattr(value, "text", "") or str(value)


def _yaml_loader(keep_text: bool = False) -> Any:
    """vcli's YAML loader: libyaml's C parser when PyYAML has it (a 15 MB document in 3 s, not
    30), else PyYAML's own; the same YAML 1.2 resolvers and int constructor either way.
    `keep_text`: numbers are SourceInt / SourceFloat, carrying their text."""
    import yaml

    base = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader

    class Loader(base):  # type: ignore[valid-type,misc]
        pass

    # Plain scalars follow YAML 1.2's core schema, not PyYAML's YAML 1.1: only true/false are
    # booleans (`on`, `no`, `y` stay strings), no sexagesimal (`1:30`), octal `010` or
    # timestamps (`2024-01-01` stays a string), and `1e-5` is a float (1.1 needs a dot).
    dropped = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"}
    Loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers if tag not in dropped]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
    )

    def construct_int(loader: Any, node: Any) -> int:
        text = loader.construct_scalar(node)
        if len(text) > 40:  # no field holds more than 64 bits; int() refuses 4,300 digits slowly
            mark = node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(text)} digits is out of range", mark)
        number = int(text[2:], 8 if text[1] == "o" else 16) if text.startswith(("0o", "0x")) else int(text, 10)
        if not keep_text:
            return number
        out = SourceInt(number)
        out.text = text
        return out

    def construct_float(loader: Any, node: Any) -> float:
        number = base.construct_yaml_float(loader, node)
        if not keep_text:
            return number
        out = SourceFloat(number)
        out.text = loader.construct_scalar(node)
        return out

    Loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    Loader.add_constructor("tag:yaml.org,2002:float", construct_float)

    def construct_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
        # A key given twice is a mistake YAML's loaders resolve silently (the last wins): which
        # of two `replicaCount`s was meant is for the user to say. Merge keys (`<<`) may repeat
        # what they merge: only the keys written in this mapping are compared.
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = loader.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # unhashable: the base constructor says so, with its position
                    break
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key [{key}] appears twice in one mapping", key_node.start_mark)
                seen.add(key)
        return base.construct_mapping(loader, node, deep=deep)

    Loader.construct_mapping = construct_mapping
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
            |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
            |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
            |[-+]?\.(?:inf|Inf|INF)
            |\.(?:nan|NaN|NAN))$""",
            re.X,
        ),
        list("-+0123456789."),
    )
    return Loader


def parse_yaml(text: str, source: str, *, prefix: str = "Invalid value for [--config]: ", keep_text: bool = False) -> Any:
    """YAML (or JSON) text -> Python values; a syntax error, nesting deeper than MAX_DEPTH or
    more than MAX_VALUES values is one ConfigError line (`prefix`, then `source` and the
    problem, with its position where there is one). `keep_text`: numbers carry the text they
    were written as (`SourceInt`, `SourceFloat`; read with `source_text`)."""
    import yaml

    too_deep = f"{prefix}{source} nests lists or mappings more than {MAX_DEPTH} levels deep."
    try:
        doc = yaml.load(text, Loader=_yaml_loader(keep_text))  # a (C)SafeLoader subclass: no arbitrary objects
    except RecursionError:
        raise ConfigError(too_deep) from None
    except yaml.YAMLError as e:
        if "maximum nesting depth" in str(getattr(e, "problem", "") or ""):  # libyaml's own bound
            raise ConfigError(too_deep) from None
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{prefix}{source} is not valid YAML or JSON{where}: {problem}") from None
    problem = _shape_problem(doc)
    if problem is not None:
        raise ConfigError(f"{prefix}{source} {problem}")
    return doc


def _shape_problem(doc: Any) -> str | None:
    """What is wrong with the shape of a loaded document: nesting deeper than MAX_DEPTH, or
    more than MAX_VALUES values with its aliases expanded (checked iteratively, and stopped
    at the bound: the check itself never recurses nor walks an alias bomb); None if fine."""
    stack = [(doc, 1)]
    count = 1
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            count += 1
            if count > MAX_VALUES:
                return f"holds more than {MAX_VALUES:,} values once its aliases are expanded; a document has a few hundred."
            if isinstance(child, (dict, list)):
                if depth + 1 > MAX_DEPTH:
                    return f"nests lists or mappings more than {MAX_DEPTH} levels deep."
                stack.append((child, depth + 1))
    return None


def to_yaml(data: Any) -> str:
    """gcloud-style YAML: block style, keys sorted, unicode kept.

    The document's nodes are built here for the types vcli's resources hold (dicts with text
    keys, lists, text, enums, numbers, booleans, None), exactly as PyYAML's SafeDumper would
    represent them, and emitted by libyaml where PyYAML has it: a 10,000-trial study's
    `describe` spends its time there, not in PyYAML's general representer. Anything else
    goes through that representer."""
    import gc
    import io

    import yaml

    if type(data) not in (dict, list):  # a lone scalar ends with `...` in PyYAML's own emitter only
        return _to_yaml_represented(data)
    dumper_class = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    collecting = gc.isenabled()
    gc.disable()  # a tree of a million young nodes holds no cycle: collections would only rescan it
    try:
        node = _node(data, yaml.nodes)
        out = io.StringIO()
        dumper = dumper_class(out, default_flow_style=False, sort_keys=True, allow_unicode=True, width=1000)
        dumper.open()
        dumper.serialize(node)
        dumper.close()
    except _Unusual:
        return _to_yaml_represented(data)
    finally:
        if collecting:
            gc.enable()
    return out.getvalue()


class _Unusual(Exception):
    """A value `_node` does not build (PyYAML's representer then does)."""


_STR, _INT, _FLOAT = "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"


def _node(data: Any, nodes: Any) -> Any:
    """PyYAML's node for `data`, as `to_yaml`'s SafeDumper (block style, sorted keys) makes it."""
    kind = type(data)
    if kind is str:
        return nodes.ScalarNode(_STR, data, style="|" if "\n" in data else None)
    if kind is dict:
        if "" in data:  # libyaml writes an empty key as `''`, PyYAML's emitter as `? ''`
            raise _Unusual
        try:
            items = sorted(data.items())
        except TypeError:
            items = list(data.items())
        return nodes.MappingNode("tag:yaml.org,2002:map", [(_node(k, nodes), _node(v, nodes)) for k, v in items],
                                 flow_style=False)
    if kind is list:
        return nodes.SequenceNode("tag:yaml.org,2002:seq", [_node(v, nodes) for v in data], flow_style=False)
    if kind is bool:
        return nodes.ScalarNode("tag:yaml.org,2002:bool", "true" if data else "false")
    if kind is int or kind is SourceInt:
        return nodes.ScalarNode(_INT, str(int(data)))
    if kind is float or kind is SourceFloat:
        return nodes.ScalarNode(_FLOAT, _float_text(float(data)))
    if data is None:
        return nodes.ScalarNode("tag:yaml.org,2002:null", "null")
    if isinstance(data, Enum):
        text = str(data.value)
        return nodes.ScalarNode(_STR, text, style="|" if "\n" in text else None)
    raise _Unusual


def _float_text(value: float) -> str:
    """PyYAML's text of a float (SafeRepresenter.represent_float)."""
    if value != value:
        return ".nan"
    if value in (float("inf"), float("-inf")):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value).lower()
    return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text


def _to_yaml_represented(data: Any) -> str:
    """`to_yaml` through PyYAML's representer (values `_node` does not build)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def str_presenter(dumper: Any, value: str) -> Any:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, str_presenter)
    # States and kinds are str enums; their text is their value.
    Dumper.add_multi_representer(Enum, lambda dumper, value: str_presenter(dumper, str(value.value)))
    # A document's numbers kept as given (an unmodelled field's) print as numbers.
    Dumper.add_representer(SourceInt, lambda dumper, value: dumper.represent_int(int(value)))
    Dumper.add_representer(SourceFloat, lambda dumper, value: dumper.represent_float(float(value)))
    return yaml.dump(data, Dumper=Dumper, default_flow_style=False, sort_keys=True, allow_unicode=True, width=1000)


#: Fields Vertex fills in on a job it returns (`describe`, a GET), never part of a request.
OUTPUT_ONLY_FIELDS = ("name", "state", "createTime", "startTime", "endTime", "updateTime", "error", "trials",
                      "webAccessUris", "satisfiesPzs", "satisfiesPzi")


def refuse_whole_resource(doc: Any, source: str, kind: str) -> None:
    """A ConfigError naming what `doc` is when it is not the document --config takes for
    `kind` ("CustomJob": a CustomJobSpec; "HyperparameterTuningJob": that job's request), but
    a whole job: a REST request body, a `describe` output, or the other kind of job."""
    if not isinstance(doc, dict):
        return
    prefix = f"Invalid value for [--config]: {source} is "
    output_only = [k for k in OUTPUT_ONLY_FIELDS if k in doc]
    if kind == "CustomJob" and "jobSpec" in doc:
        what = "a `describe` output of a CustomJob" if output_only else "a whole CustomJob (a REST request body)"
        raise ConfigError(f"{prefix}{what}, but --config takes a CustomJobSpec: the mapping under its [jobSpec] "
                          "key (workerPoolSpecs, baseOutputDirectory, ...). Save that mapping alone and pass it; "
                          "give the display name with --display-name.")
    if kind == "HyperparameterTuningJob" and "jobSpec" in doc and "trialJobSpec" not in doc:
        raise ConfigError(f"{prefix}a CustomJob, not a HyperparameterTuningJob: run it with `vcli custom-jobs "
                          "create --config` (its [jobSpec] mapping), or write a study with studySpec and "
                          "trialJobSpec.")
    if kind == "HyperparameterTuningJob" and output_only:
        raise ConfigError(f"{prefix}a `describe` output of a HyperparameterTuningJob: it holds the output-only "
                          f"field(s) [{', '.join(output_only)}], which a request cannot set. Remove them to run "
                          "the same study again.")
