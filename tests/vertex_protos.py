"""Google's own Vertex AI v1 messages, read from the `google-cloud-aiplatform` wheel without
importing it (its dependency tree would clash with TensorFlow's and Ray's protobuf pins).

The wheel's `google/cloud/aiplatform_v1/types/*.py` declare each message as a proto-plus class
(`name: str = proto.Field(proto.STRING, number=1)`); `read_wheel` parses them with `ast` into
`Proto` messages and enums. `.ci/test.sh` downloads the wheel (`pip download --no-deps`) into
`.ci/cache/`, or $VCLI_AIPLATFORM_WHEEL names one.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The API versions read: v1 (what gcloud ai uses), v1beta1 (gcloud beta ai, the SDK's preview).
VERSIONS = ("v1", "v1beta1")


@dataclass
class ProtoField:
    name: str            # snake_case, as declared
    kind: str            # STRING, INT64, MESSAGE, ENUM, ...
    repeated: bool = False
    map: bool = False
    ref: str | None = None  # a message's or enum's name, as written (e.g. "StudySpec.MetricSpec")
    output_only: bool = False


@dataclass
class Proto:
    messages: dict[str, dict[str, ProtoField]] = field(default_factory=dict)
    enums: dict[str, set[str]] = field(default_factory=dict)

    def resolve(self, ref: str, scope: str) -> str:
        """The qualified name `ref` means inside message `scope` (proto's nested lookup)."""
        ref = ref.split(".", 1)[1] if ref.split(".", 1)[0].islower() and "." in ref else ref  # module alias
        parts = scope.split(".")
        for i in range(len(parts), -1, -1):
            candidate = ".".join([*parts[:i], ref])
            if candidate in self.messages or candidate in self.enums:
                return candidate
        return ref


def wheel_path() -> str:
    given = os.environ.get("VCLI_AIPLATFORM_WHEEL")
    if given:
        return given
    found = sorted(glob.glob(str(REPO / ".ci" / "cache" / "google_cloud_aiplatform-*.whl")))
    if not found:
        raise FileNotFoundError("no google-cloud-aiplatform wheel: run .ci/test.sh (it downloads it into .ci/cache/) "
                                "or set VCLI_AIPLATFORM_WHEEL")
    return found[-1]


def read_wheel(version: str = "v1", path: str | None = None) -> Proto:
    """The messages and enums of `google.cloud.aiplatform_<version>.types`."""
    proto = Proto()
    types = f"google/cloud/aiplatform_{version}/types/"
    with zipfile.ZipFile(path or wheel_path()) as z:
        for name in z.namelist():
            if name.startswith(types) and name.endswith(".py") and not name.endswith("__init__.py"):
                tree = ast.parse(z.read(name).decode("utf-8"))
                for node in tree.body:
                    if isinstance(node, ast.ClassDef):
                        _class(proto, node, "")
    return proto


def _base(node: ast.ClassDef) -> str:
    for b in node.bases:
        if isinstance(b, ast.Attribute) and isinstance(b.value, ast.Name) and b.value.id == "proto":
            return b.attr
    return ""


def _output_only(doc: str | None) -> set[str]:
    """Fields whose documentation starts `Output only.` (the Attributes section)."""
    out = set()
    for m in re.finditer(r"^\s+(\w+) \([^)]*\):\n\s+(.*)$", doc or "", re.M):
        if m.group(2).strip().lower().startswith("output only"):
            out.add(m.group(1))
    return out


def _class(proto: Proto, node: ast.ClassDef, outer: str) -> None:
    qual = f"{outer}.{node.name}" if outer else node.name
    kind = _base(node)
    if kind == "Enum":
        proto.enums[qual] = {t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets
                             if isinstance(t, ast.Name)}
        return
    if kind != "Message":
        return
    fields: dict[str, ProtoField] = {}
    output_only = _output_only(ast.get_docstring(node))
    for stmt in node.body:
        if isinstance(stmt, ast.ClassDef):
            _class(proto, stmt, qual)
            continue
        target, value = (stmt.target, stmt.value) if isinstance(stmt, ast.AnnAssign) else (None, None)
        if not (isinstance(target, ast.Name) and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
            continue
        ctor = value.func.attr
        if ctor not in ("Field", "RepeatedField", "MapField"):
            continue
        kinds = [a.attr for a in value.args if isinstance(a, ast.Attribute)]
        kw = {k.arg: k.value for k in value.keywords}
        ref = None
        for key in ("message", "enum"):
            if key in kw:
                ref = ast.unparse(kw[key]).strip("'\"")
        kind_ = kinds[-1] if ctor == "MapField" else (kinds[0] if kinds else "")
        fields[target.id] = ProtoField(target.id, kind_, repeated=ctor == "RepeatedField", map=ctor == "MapField",
                                       ref=ref, output_only=target.id in output_only)
    proto.messages[qual] = fields
