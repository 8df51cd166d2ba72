"""Write the reference pages of the docs site that restate vcli's own registries, from the
code itself, so that they cannot drift:

- `docs/pages/reference/vertex-compatibility.md`: every field of a CustomJobSpec and of a
  HyperparameterTuningJob (and their messages), from `vcli.spec`'s dataclasses as
  `vcli.codec.schema` derives Vertex's schema from them, with what vcli does with it;
- `docs/pages/reference/properties.md`: every property of `vcli config set`, from
  `vcli.properties.KNOWN` (names, values) and that module's docstring (what each sets, its
  default, the environment variable that wins over it).

    .venv/bin/python docs/gen_reference.py [--check]

`--check` writes nothing and exits 1 (naming the pages) when the pages differ from a fresh
generation: the test suite runs it, so a field or property added, renamed or re-documented
without regenerating fails CI.
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import inspect
import re
import sys
import typing
from enum import Enum
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "pages" / "reference"
sys.path.insert(0, str(REPO))

SUPPORTED, NOTED, REFUSED, EXTENSION = "supported", "noted", "refused", "vcli extension"
#: What each root message is, for the reader (the rest of the page comes from the code).
ROOT_INTROS = {
    "CustomJobSpec": "What `vcli custom-jobs create --config` takes. A whole `CustomJob` (a mapping with a "
                     "`jobSpec` key) is refused: pass the mapping under its `jobSpec`.",
    "HyperparameterTuningJob": "What `vcli hp-tuning-jobs create --config` takes. The study flags of `create` "
                               "set the same fields, and win over the file.",
}


# --------------------------------------------------------------------------- source comments


def _attribute_comments(obj: Any) -> dict[str, str]:
    """The `#:` comment lines right above each `name: ...` / `NAME = ...` line of `obj`'s
    source (a class), by name; else the trailing `# ...` comment of that line."""
    out: dict[str, str] = {}
    block: list[str] = []
    for line in inspect.getsource(obj).splitlines():
        text = line.strip()
        if text.startswith("#:"):
            block.append(text[2:].strip())
            continue
        m = re.match(r"(\w+)\s*(?::|=)", text)
        if m:
            trailing = re.search(r"\s#\s+(.*)$", text)
            if block:
                out[m.group(1)] = " ".join(block)
            elif trailing:
                out[m.group(1)] = trailing.group(1).strip()
        block = []
    return out


def _block_comments(module: Any, name: str) -> list[tuple[str, set[str]]]:
    """The module-level assignment `name`, read as (plain comment block, the string literals of
    the code lines below it up to the next block) pairs."""
    source = inspect.getsource(module)
    node = next(n for n in ast.parse(source).body
                if isinstance(n, (ast.Assign, ast.AnnAssign))
                and any(getattr(t, "id", None) == name for t in (n.targets if isinstance(n, ast.Assign) else [n.target])))
    lines = source.splitlines()[node.lineno - 1:node.end_lineno]
    out: list[tuple[str, set[str]]] = []
    block: list[str] = []
    for line in lines:
        text = line.strip()
        if text.startswith("#") and not text.startswith("#:"):
            block.append(text[1:].strip())
            continue
        if block:
            out.append((" ".join(block), set()))
            block = []
        if out:
            out[-1][1].update(re.findall(r'"(\w+)"', text))
    return out


def _doc(obj: Any) -> str:
    """A class's own docstring as one paragraph ("" for the signature dataclasses make up)."""
    text = obj.__dict__.get("__doc__") or ""
    return "" if text.startswith(obj.__name__ + "(") else " ".join(text.split())


# --------------------------------------------------------------------------- Vertex compatibility


class _Compat:
    """The matrix: messages in the order a reader meets them, each field with its status."""

    def __init__(self) -> None:
        from vcli import spec
        from vcli.codec import schema

        self.spec, self.schema = spec, schema
        self.classes = [c for c in vars(spec).values()
                        if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == spec.__name__]
        # snake_case field names as Vertex spells them, for text taken from the code
        self.camel = {f.name: schema.camel(f.name) for c in self.classes for f in dataclasses.fields(c) if "_" in f.name}
        self.comments = {c: _attribute_comments(c) for c in self.classes}
        self.no_effect_why = _block_comments(schema, "NO_LOCAL_EFFECT")
        self.vertex_facts = _attribute_comments(spec.Vertex)
        self.used_unmodelled = self._probe_used_unmodelled()
        from vcli.tuning.stopping import RULES

        self.rules = {r.key: r for r in RULES.values()}

    def text(self, s: str) -> str:
        """Text from the code with Vertex's field names (`replica_count` -> `replicaCount`)."""
        s = re.sub(r"\b[a-z]+(?:_[a-z0-9]+)+\b", lambda m: self.camel.get(m.group(0), m.group(0)), s)
        return s.replace("|", "\\|")

    def _probe_used_unmodelled(self) -> set[str]:
        """The top-level unmodelled fields of a HyperparameterTuningJob that the study keeps
        (`hp_tuning_job_from_document` does not name them as changing nothing): each is set,
        alone, in examples/hp_tuning.yaml, which is loaded as `create --config` loads it."""
        import yaml

        from vcli.codec.study import hp_tuning_job_from_document

        base = yaml.safe_load((REPO / "examples" / "hp_tuning.yaml").read_text())
        msg = self.schema.message(self.spec.HyperparameterTuningJobSpec)
        used = set()
        for wire, w in msg.fields.items():
            if w.attr is not None:
                continue
            doc = {k: v for k, v in copy.deepcopy(base).items() if k not in msg.fields or msg.fields[k].attr is not None}
            doc[wire] = self._sample(w.kind)
            no_effect: list[str] = []
            hp_tuning_job_from_document(doc, "probe", no_effect)
            if wire not in no_effect:
                used.add(wire)
        return used

    def _sample(self, kind: Any) -> Any:
        """A set value of a wire kind."""
        if isinstance(kind, tuple):
            return {"list": lambda: [self._sample(kind[1])], "enum": lambda: kind[1][-1], "map": lambda: {"k": "v"}}[kind[0]]()
        samples = {"str": "x", "int64": 1, "int32": 1, "count": 1, "double": 1.0, "bool": True, "duration": "1s", "any": {"x": 1}}
        if kind in samples:
            return samples[kind]
        first = next(iter(self.schema.message(kind).fields.values()))
        return {first.wire: self._sample(first.kind)}

    # ----------------------------------------------------------------- one field

    def type_text(self, kind: Any) -> str:
        if isinstance(kind, tuple):
            if kind[0] == "list":
                return "list of " + self.type_text(kind[1])
            if kind[0] == "map":
                return "map of strings"
            return "enum ([values](#enum-values))"
        names = {"str": "string", "int64": "int64", "int32": "int32", "double": "double", "bool": "bool",
                 "duration": "duration (`600s`)", "count": "int32 (or a fraction)", "any": "any"}
        if kind in names:
            return names[kind]
        return f"[{kind}](#{kind.lower()})"

    def field_status(self, msg: Any, w: Any, inherited: str | None) -> tuple[str, str]:
        """(status, what it means locally) of wire field `w` of message `msg`."""
        schema = self.schema
        notes: list[str] = []
        attr_comment = self.comments.get(msg.cls, {}).get(w.attr or "", "") if msg.cls else ""
        if attr_comment:
            notes.append(attr_comment)
        target = w.py if dataclasses.is_dataclass(w.py) else None
        if target is not None and _doc(target).startswith("vcli extension"):
            status = EXTENSION
        elif attr_comment.startswith("vcli extension"):
            status = EXTENSION
        elif inherited in (NOTED, EXTENSION):
            status = inherited
        elif w.attr is None and msg.cls is not None:
            if msg.name == "HyperparameterTuningJob" and w.wire in self.used_unmodelled:
                status = SUPPORTED
                notes.append("kept with the study, beside its spec")
            else:
                status = NOTED
        elif (msg.name, w.wire) in schema.NO_LOCAL_EFFECT:
            status = NOTED
            why = [c for c, strings in self.no_effect_why if w.wire in strings and msg.name in strings]
            notes.append(why[0] if why else "recorded; `describe` shows it")
        elif (msg.name, w.wire) in schema.LOCAL_EFFECT_ONLY_FOR:
            only = ", ".join(f"`{v}`" for v in sorted(schema.LOCAL_EFFECT_ONLY_FOR[(msg.name, w.wire)]))
            status = f"{SUPPORTED} ({only}); {NOTED} (others)"
            notes.append(_assignment_comment(schema, "LOCAL_EFFECT_ONLY_FOR").partition(": ")[2])
        else:
            status = SUPPORTED
        if w.facts.fractional and status == SUPPORTED:
            status = f"{SUPPORTED}; fractions: {EXTENSION}"
            notes.append(self.vertex_facts["fractional"].removeprefix("vcli: "))
        if w.wire in self.rules:
            notes.append(f"`--early-stopping={self.rules[w.wire].name}`")
        if status == EXTENSION:
            notes = [re.sub(r"^vcli extension[:,]? ", "", n) for n in notes]
        return status, "; ".join(self.text(n) for n in notes if n)

    # ----------------------------------------------------------------- the page

    def page(self) -> str:
        schema, spec = self.schema, self.spec
        roots = [spec.CustomJobSpec, spec.HyperparameterTuningJobSpec]
        order: list[Any] = []
        sections: dict[str, list[str]] = {}
        enum_rows: list[str] = []
        queue = [(schema.message(r), None) for r in roots]
        seen: set[str] = set()
        while queue:
            msg, parent_status = queue.pop(0)
            if msg.name in seen:
                continue
            seen.add(msg.name)
            order.append(msg)
            rows = ["| Field | Type | Status | Locally |", "|---|---|---|---|"]
            children = []
            for w in msg.fields.values():
                status, note = self.field_status(msg, w, parent_status)
                rows.append(f"| `{w.wire}` | {self.type_text(w.kind)} | {status} | {note} |")
                kind = w.kind
                while isinstance(kind, tuple) and kind[0] == "list":
                    kind = kind[1]
                if isinstance(kind, tuple) and kind[0] == "enum":
                    enum_rows.append(self._enum_row(msg, w, kind[1]))
                elif isinstance(kind, str) and kind in schema._MESSAGES:
                    children.append((schema.message(kind), status if status in (NOTED, EXTENSION) else parent_status))
            # children first met here are listed right after their parent's siblings
            queue = children + queue
            rows += self._vcli_only_rows(msg)
            rows += self._refused_rows(msg)
            sections[msg.name] = rows
        lines = [
            "# Vertex compatibility",
            "",
            "Generated from vcli's data model (`vcli/spec.py`) by `docs/gen_reference.py`. Every field of a",
            "`CustomJobSpec` (`vcli custom-jobs create --config`) and of a `HyperparameterTuningJob`",
            "(`vcli hp-tuning-jobs create --config`), message by message, with what vcli does with it.",
            "",
            "| Status | Meaning |",
            "|---|---|",
            f"| {SUPPORTED} | modelled and used on a local run |",
            f"| {NOTED} | accepted as Vertex's; changes nothing locally. `create` names such fields in one "
            "`Note: [--config] ...` line |",
            f"| {REFUSED} | an error (exit 1) that names the field |",
            f"| {EXTENSION} | vcli's own, not in Vertex's API |",
            "",
            "Any other key is refused with the message's valid fields; a snake_case key is refused with its",
            "camelCase spelling.",
            "",
            "Messages: " + ", ".join(f"[{m.name}](#{m.name.lower()})" for m in order) + ".",
            "",
        ]
        for msg in order:
            lines += [f"## {msg.name}", ""]
            intro = ROOT_INTROS.get(msg.name) or (_doc(msg.cls) if msg.cls is not None else "")
            if intro:
                lines += [self.text(intro).replace("\\|", "|"), ""]
            lines += sections[msg.name] + [""]
        lines += ["## Enum values", "", "The values each enum field accepts.", "",
                  "| Field | Values |", "|---|---|", *enum_rows, ""]
        return "\n".join(lines).rstrip() + "\n"

    def _enum_row(self, msg: Any, w: Any, values: tuple[str, ...]) -> str:
        py = typing.get_args(w.py) or (w.py,)
        enum = next((t for t in py if isinstance(t, type) and issubclass(t, Enum)), None)
        notes = _attribute_comments(enum) if enum is not None else {}
        shown = []
        for v in values:
            note = notes.get(v, "").rstrip(".")
            shown.append(f"`{v}`" + (f" ({self.text(note)})" if note else ""))
        return f"| {msg.name}.`{w.wire}` | {', '.join(shown)} |"

    def _vcli_only_rows(self, msg: Any) -> list[str]:
        """vcli's own fields of the dataclass that are no part of the message (a flag sets them)."""
        if msg.cls is None:
            return []
        flags = _create_flags(msg.cls)
        rows = []
        for f in dataclasses.fields(msg.cls):
            facts = f.metadata.get("vertex")
            if facts is None or not facts.vcli_only:
                continue
            flag, ctx = flags.get(f.name, (None, None))
            if flag is not None:  # what a user gives: the flag, its value, its help
                name, kind = f"`{flag.opts[0]}` (a flag)", f"`{_metavar(flag, ctx)}`"
                note = flag.help or ""
            else:
                name, note = f"`{self.schema.camel(f.name)}`", self.comments[msg.cls].get(f.name, "")
                kind = self.type_text(self.schema._kind(self.schema._strip_optional(
                    typing.get_type_hints(msg.cls)[f.name]), facts))
            note = re.sub(r"^vcli(?: extension)?: ", "", note)
            rows.append(f"| {name} | {kind} | {EXTENSION} | {self.text(note)} |")
        return rows

    def _refused_rows(self, msg: Any) -> list[str]:
        """The output-only fields of a job: a document holding one is a `describe` output."""
        if msg.name != "HyperparameterTuningJob":
            return []
        from vcli.codec.yamlio import OUTPUT_ONLY_FIELDS

        return [f"| `{name}` | | {REFUSED} | output only: Vertex fills it in; a request cannot set it |"
                for name in OUTPUT_ONLY_FIELDS]


def _assignment_comment(module: Any, name: str) -> str:
    """The `#:` comment lines right above the module-level assignment `name`."""
    lines = inspect.getsource(module).splitlines()
    at = next(i for i, line in enumerate(lines) if re.match(rf"{name}\s*[:=]", line))
    block = []
    for line in reversed(lines[:at]):
        if not line.startswith("#:"):
            break
        block.insert(0, line[2:].strip())
    return " ".join(block)


def _metavar(param: Any, ctx: Any) -> str:
    try:
        return str(param.make_metavar(ctx))
    except TypeError:  # click before 8.2
        return str(param.make_metavar())


def _create_flags(cls: type) -> dict[str, Any]:
    """The options of `vcli hp-tuning-jobs create` by the dataclass field they set (a field
    named after the option, `study_timeout_seconds` for `--study-timeout`)."""
    from vcli import spec

    if cls is not spec.HyperparameterTuningJobSpec:
        return {}
    from typer.main import get_command

    from vcli.cli import app

    root = get_command(app)
    ctx = type(root).context_class(root, info_name="vcli")
    group = root.get_command(ctx, "hp-tuning-jobs")
    create = group.get_command(type(root).context_class(group, info_name="hp-tuning-jobs", parent=ctx), "create")
    create_ctx = type(root).context_class(create, info_name="create", parent=ctx)
    out = {}
    for f in dataclasses.fields(cls):
        match = [p for p in create.params if p.name and (f.name == p.name or f.name.startswith(p.name + "_"))]
        if match:
            out[f.name] = (match[0], create_ctx)
    return out


# --------------------------------------------------------------------------- properties


def _properties_page() -> str:
    from vcli import properties

    doc = " ".join(properties.__doc__.split())
    rows = ["| Property | Values | Default | Wins over it | What it sets |", "|---|---|---|---|---|"]
    overrides = _environment_overrides(properties.KNOWN)
    for name, choices in properties.KNOWN.items():
        text = _property_text(doc, name)
        help_parts: list[str] = []
        default = ""
        env = {f"${v}" for v in overrides.get(name, ())}
        for clause in _split_clauses(text):
            clause = re.sub(r"^[\w-]+(?:\|[\w-]+)+(?::|,) ", "", clause)  # the values: KNOWN has them
            if m := re.fullmatch(r"\$(\w+) wins", clause):
                env.add(f"${m.group(1)}")
            elif clause.startswith("see "):
                continue
            elif clause.startswith("default --"):  # what the property is the default of
                help_parts.append("the " + clause)
            elif m := re.match(r"default:? (.*)", clause):
                value, _, rest = m.group(1).partition(": ")
                default = value
                if rest:
                    help_parts.append(rest)
            else:
                help_parts.append(clause)
        values = ", ".join(f"`{c}`" for c in choices) if choices else "text"
        rows.append(f"| `{name}` | {values} | {_code(default) or '-'} | {', '.join(f'`{v}`' for v in sorted(env)) or '-'} | {_code('; '.join(help_parts))} |")
    lines = [
        "# Properties",
        "",
        "Generated from `vcli/properties.py` by `docs/gen_reference.py`. vcli's settings, as `gcloud config`'s:",
        "",
        "```sh",
        "vcli config set gpu/exclude-busy false",
        "vcli config get gpu/exclude-busy",
        "vcli config list",
        "vcli config unset gpu/exclude-busy",
        "```",
        "",
        "A flag of the command wins over a property; \"Wins over it\" names the environment variable",
        "that does too.",
        "",
        *rows,
        "",
        "The file: " + _code(doc.split("Path: ", 1)[1].strip()) if "Path: " in doc else "",
    ]
    return "\n".join(lines).rstrip() + "\n"


def _environment_overrides(known: Any) -> dict[str, set[str]]:
    """Property -> the environment variables that win over it, read from vcli's code: every
    `os.environ.get(VAR) or ... properties.get(PROPERTY)` (VAR asked first). A name in an
    f-string (`f"VCLI_SLURM_{name.upper()}"` with `f"slurm/{name}"`) is bound by matching the
    property's f-string against the known properties; a constant by its import."""
    out: dict[str, set[str]] = {}
    for path in sorted((REPO / "vcli").rglob("*.py")):
        tree = ast.parse(path.read_text())
        imports = {a.asname or a.name: n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                   for a in n.names}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)):
                continue
            for i, first in enumerate(node.values):
                var = _call_arg(first, lambda f: isinstance(f.value, ast.Attribute) and f.value.attr == "environ")
                if var is None:
                    continue
                for later in node.values[i + 1:]:
                    prop = _call_arg(later, lambda f: isinstance(f.value, ast.Name) and f.value.id == "properties",
                                     bare="get" if path.name == "properties.py" else None)
                    if prop is None:
                        continue
                    for name, bound in _bindings(prop, known):
                        out.setdefault(name, set()).add(_evaluate(var, bound, imports))
    return out


def _call_arg(node: Any, receiver: Any, bare: str | None = None) -> Any:
    """The first argument of `RECEIVER.get(...)` (or of a bare `get(...)` where `bare`)."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr == "get" and receiver(f):
        return node.args[0]
    if bare and isinstance(f, ast.Name) and f.id == bare:
        return node.args[0]
    return None


def _bindings(expr: Any, known: Any) -> list[tuple[str, dict[str, str]]]:
    """The known properties `expr` (a string or an f-string) names, with the f-string's names bound."""
    if isinstance(expr, ast.Constant):
        return [(expr.value, {})] if expr.value in known else []
    if not isinstance(expr, ast.JoinedStr):
        return []
    pattern = "".join(re.escape(v.value) if isinstance(v, ast.Constant) else f"(?P<{v.value.id}>.+)"
                      for v in expr.values)
    return [(name, m.groupdict()) for name in known if (m := re.fullmatch(pattern, name))]


def _evaluate(expr: Any, bound: dict[str, str], imports: dict[str, str]) -> str:
    if isinstance(expr, ast.Name) and expr.id in imports:
        import importlib

        return str(getattr(importlib.import_module(imports[expr.id]), expr.id))
    return str(eval(compile(ast.Expression(expr), "<vcli>", "eval"), {}, dict(bound)))


def _property_text(doc: str, name: str) -> str:
    """The parenthesised text that follows `name` (alone or in a list of names) in the doc."""
    m = re.search(rf"`{re.escape(name)}`(?:,? (?:and )?`[^`]+`)* \(", doc)
    if m is None:
        raise SystemExit(f"vcli/properties.py: its docstring does not describe the property [{name}]: "
                         "say what it sets there, as `name` (what it sets; default ...)")
    depth, start = 1, m.end()
    for i in range(start, len(doc)):
        depth += {"(": 1, ")": -1}.get(doc[i], 0)
        if depth == 0:
            return doc[start:i]
    raise SystemExit(f"vcli/properties.py: unbalanced parentheses after [{name}] in its docstring")


def _split_clauses(text: str) -> list[str]:
    return [c.strip() for c in text.split("; ") if c.strip()]


def _code(text: str) -> str:
    """Plain text as Markdown: flags, $VARIABLES and paths outside `code` set as code; `|` escaped."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"(?<![\w`])(--[\w=-]+|[\w.~<>$:-]*/[\w./<>$:-]*[\w>]|\$\w+|[\w-]+\.json)", r"`\1`", parts[i])
    return "`".join(parts).replace("|", "\\|")


# --------------------------------------------------------------------------- main


def pages() -> dict[str, str]:
    """File name (under docs/pages/reference) -> Markdown of every generated page."""
    return {"vertex-compatibility.md": _Compat().page(), "properties.md": _properties_page()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the pages in the repository; write nothing")
    args = parser.parse_args()
    fresh = pages()
    if args.check:
        stale = sorted(name for name, text in fresh.items()
                       if not (OUT / name).is_file() or (OUT / name).read_text() != text)
        if stale:
            print(f"the reference is out of date: {', '.join(stale)}; run .venv/bin/python docs/gen_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    for name, text in fresh.items():
        (OUT / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
