"""vcli's Vertex schema against Google's own v1 protos (google-cloud-aiplatform's wheel).

Every field vcli accepts in a CustomJobSpec, a HyperparameterTuningJob, a StudySpec and their
children exists in Vertex's v1 API (or, for gcloud beta and preview SDK users, v1beta1) under
the same name with the same type, except the vcli extensions named below with why; and every
field of those Vertex messages that a user may set (not output-only) is accepted: modelled,
or named in the `Note:` line of fields without local effect. A new Vertex field, or a typo in
vcli's spec, fails here instead of being silently dropped or refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.vertex_protos import Proto, read_wheel
from vcli.codec import schema
from vcli.spec import CustomJobSpec, HyperparameterTuningJobSpec

#: What vcli accepts beyond Vertex, and why (anything else that differs fails the test).
EXTENSIONS = {
    "WorkerPoolSpec.localPackage": "gcloud's autopackaging flags kept as a pool (local-package-path, script, ...)",
    "MachineSpec.acceleratorCount": "a fraction of a GPU (0.5) for --executor=ray; Vertex's int32 otherwise",
    "StudySpec.algorithm": "TPE and POPULATION_BASED_TRAINING beside Vertex's algorithms",
    "StudySpec.ashaStoppingSpec": "ASHA early stopping (Ray Tune's, Katib's)",
    "StudySpec.hyperbandStoppingSpec": "Hyperband early stopping",
    "StudySpec.populationBasedTrainingSpec": "Population Based Training",
}

SCALARS = {"STRING": "str", "INT64": "int64", "INT32": "int32", "DOUBLE": "double", "FLOAT": "double", "BOOL": "bool"}


@pytest.fixture(scope="module")
def protos() -> dict[str, Proto]:
    return {"v1": read_wheel("v1"), "v1beta1": read_wheel("v1beta1")}


def _kind(proto: Proto, f: Any, scope: str) -> Any:
    """A proto field as vcli's wire kinds (`vcli.codec.schema.Kind`)."""
    if f.map:
        return ("map",)
    if f.kind in SCALARS:
        base: Any = SCALARS[f.kind]
    elif f.kind == "ENUM":
        base = ("enum", proto.resolve(f.ref, scope))
    elif f.ref == "duration_pb2.Duration":
        base = "duration"
    elif f.ref in ("struct_pb2.Struct", "struct_pb2.Value"):
        base = "any"
    else:
        base = ("message", proto.resolve(f.ref, scope))
    return ("list", base) if f.repeated else base


class _Check:
    """Walks a vcli message and Vertex's side by side, collecting what differs."""

    def __init__(self, protos: dict[str, Proto]) -> None:
        self.protos = protos
        self.differ: dict[str, str] = {}
        self.not_accepted: list[str] = []
        self.beta: list[str] = []
        self.seen: set[tuple[str, str, str]] = set()

    def walk(self, vname: str, pname: str, version: str = "v1") -> None:
        if (vname, pname, version) in self.seen:
            return
        self.seen.add((vname, pname, version))
        msg = schema.message(vname)
        proto = self.protos[version]
        pfields = {schema.camel(n): f for n, f in proto.messages[pname].items()}
        for wire, wf in msg.fields.items():
            where, at = version, pfields.get(wire)
            if at is None and version == "v1":  # a preview field (gcloud beta, the SDK's preview)
                beta = {schema.camel(n): f for n, f in self.protos["v1beta1"].messages.get(pname, {}).items()}
                where, at = "v1beta1", beta.get(wire)
                if at is not None:
                    self.beta.append(f"{vname}.{wire}")
            if at is None:
                self.differ[f"{vname}.{wire}"] = f"not a field of Vertex's {pname}"
                continue
            self.compare(f"{vname}.{wire}", wf.kind, _kind(self.protos[where], at, pname), where)
        for wire, f in pfields.items():
            if wire not in msg.fields and not f.output_only:
                self.not_accepted.append(f"{pname}.{wire}")

    def compare(self, path: str, mine: Any, theirs: Any, version: str) -> None:
        if isinstance(mine, tuple) and mine[0] == "list":
            if not (isinstance(theirs, tuple) and theirs[0] == "list"):
                self.differ[path] = f"a list in vcli, {theirs} in Vertex"
            else:
                self.compare(path, mine[1], theirs[1], version)
            return
        if mine == "any":
            return  # accepted as given (an unmodelled field): its existence is what counts
        if isinstance(mine, tuple) and mine[0] == "enum":
            if not (isinstance(theirs, tuple) and theirs[0] == "enum"):
                self.differ[path] = f"an enum in vcli, {theirs} in Vertex"
            elif extra := set(mine[1]) - self.protos[version].enums[theirs[1]]:
                self.differ[path] = f"values not in Vertex: {sorted(extra)}"
            return
        if isinstance(mine, tuple) or mine in ("str", "int64", "int32", "double", "bool", "duration"):
            if mine != theirs:
                self.differ[path] = f"{mine} in vcli, {theirs} in Vertex"
            return
        if not (isinstance(theirs, tuple) and theirs[0] == "message"):
            self.differ[path] = f"message {mine} in vcli, {theirs} in Vertex"
            return
        self.walk(mine, theirs[1], version)


def test_every_field_vcli_accepts_is_vertex_s_with_the_same_type(protos: dict[str, Proto]) -> None:
    check = _Check(protos)
    check.walk(schema.message_name(CustomJobSpec), "CustomJobSpec")
    check.walk(schema.message_name(HyperparameterTuningJobSpec), "HyperparameterTuningJob")
    assert len(check.seen) > 20  # the walk reached the children (pools, parameters, stopping specs)
    assert set(check.differ) == set(EXTENSIONS), check.differ
    # The preview fields vcli accepts are Vertex's too (same names and types, in v1beta1).
    assert set(check.beta) == {"MachineSpec.multihostGpuNodeCount", "StudySpec.convexStopConfig"}, check.beta


def test_every_field_a_user_may_set_is_accepted(protos: dict[str, Proto]) -> None:
    check = _Check(protos)
    check.walk(schema.message_name(CustomJobSpec), "CustomJobSpec")
    check.walk(schema.message_name(HyperparameterTuningJobSpec), "HyperparameterTuningJob")
    assert check.not_accepted == []


def test_the_cross_check_catches_a_field_vertex_lacks_and_one_vcli_drops(protos: dict[str, Proto]) -> None:
    """The check can fail: a made-up vcli field, a type changed, and a Vertex field removed."""
    import copy

    v1, beta = copy.deepcopy(protos["v1"]), copy.deepcopy(protos["v1beta1"])
    for version in (v1, beta):
        del version.messages["CustomJobSpec"]["network"]  # vcli's `network` is now unknown to "Vertex"
    v1.messages["Scheduling"]["timeout"].ref = "struct_pb2.Value"  # a different type
    from tests.vertex_protos import ProtoField

    v1.messages["CustomJobSpec"]["brand_new_field"] = ProtoField("brand_new_field", "STRING")
    check = _Check({"v1": v1, "v1beta1": beta})
    check.walk(schema.message_name(CustomJobSpec), "CustomJobSpec")
    assert "CustomJobSpec.network" in check.differ
    assert "Scheduling.timeout" in check.differ
    assert check.not_accepted == ["CustomJobSpec.brandNewField"]
