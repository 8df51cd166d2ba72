"""Katib `Experiment`s (`apiVersion: kubeflow.org/v1beta1`, `kind: Experiment`) as Vertex
`HyperparameterTuningJob` documents, for `hp-tuning-jobs create --config`.

`convert(doc, source)` maps what vcli honours and returns the Vertex document with what it
cannot carry: Katib's `objective.goal` (`--goal-value`), the `random_state` setting (`--seed`)
and the paths of the fields that change nothing here (one `Note:` line). What would run a
different study (another algorithm, metrics collector or trial kind, a parameter used inside
a larger value) is refused in one line naming the field.

Katib substitutes `${trialParameters.NAME}` into the trial's command; Vertex appends
`--PARAMETER_ID=VALUE` to it. A command token `--FLAG=${trialParameters.NAME}` (or `--FLAG`
then `${trialParameters.NAME}`) is removed, and the parameter it names becomes the Vertex
parameter `FLAG`, so the trainer receives the same flag with the trial's value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from vcli.codec.schema import Decoder
from vcli.codec.yamlio import source_text

API_VERSION = "kubeflow.org/v1beta1"
#: Katib's algorithmName -> the studySpec algorithm vcli runs for it.
ALGORITHMS = {"random": "RANDOM_SEARCH", "grid": "GRID_SEARCH", "bayesianoptimization": "ALGORITHM_UNSPECIFIED",
              "tpe": "TPE"}
#: A trial kind's replica specs key and its roles in Vertex's pool order (chief, workers, ps).
TRIAL_KINDS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "TFJob": ("tfReplicaSpecs", ("Chief", "Master"), ("Worker",), ("PS",)),
    "PyTorchJob": ("pytorchReplicaSpecs", ("Master",), ("Worker",), ()),
}
#: The Kubeflow operators' default container name per kind (the primary one when unnamed).
_OPERATOR_CONTAINER = {"TFJob": "tensorflow", "PyTorchJob": "pytorch"}
_PLACEHOLDER = re.compile(r"\$\{trialParameters\.([^}]*)\}")
_FLAG_VALUE = re.compile(r"^--([A-Za-z0-9_.-]+)=\$\{trialParameters\.([^}]*)\}$")
_FLAG = re.compile(r"^--([A-Za-z0-9_.-]+)$")
#: The machine type of each pool: Katib asks Kubernetes for resources, not machine types.
MACHINE_TYPE = "n1-standard-4"
#: The most values a stepped range becomes (Vertex's limit on a discreteValueSpec).
MAX_STEPS = 1000


@dataclass
class Conversion:
    """A Katib Experiment converted: the Vertex `document`, what the document cannot carry
    (`goal_value`, `seed`) and the Katib fields vcli does not honour (`ignored`)."""

    document: dict[str, Any]
    goal_value: float | None = None
    seed: int | None = None
    ignored: list[str] = field(default_factory=list)

    def note(self) -> str | None:
        """One `Note:` line naming the ignored fields, or None."""
        if not self.ignored:
            return None
        return f"Note: [--config] Katib fields vcli does not honour (ignored): {', '.join(self.ignored)}."

    def flags(self) -> list[str]:
        """The create flags that carry what the Vertex document cannot."""
        out = [f"--goal-value={self.goal_value!r}"] if self.goal_value is not None else []
        return out + ([f"--seed={self.seed}"] if self.seed is not None else [])


def is_experiment(doc: Any) -> bool:
    """Whether a loaded `--config` document is a Katib Experiment."""
    return isinstance(doc, dict) and doc.get("kind") == "Experiment" and str(doc.get("apiVersion", "")).startswith(
        "kubeflow.org/")


def convert(doc: Mapping[str, Any], source: str) -> Conversion:
    """A Katib Experiment -> its Conversion; a ConfigError (one line) for what vcli refuses."""
    d = Decoder(source)
    if doc.get("apiVersion") != API_VERSION:
        raise d.error("apiVersion", f"vcli reads Katib Experiments of {API_VERSION}, found [{doc.get('apiVersion')}]")
    out = Conversion(document={})
    _ignore_unknown(doc, ("apiVersion", "kind", "metadata", "spec"), "", out.ignored)
    meta = _mapping(doc.get("metadata"), d, "metadata")
    _ignore_unknown(meta, ("name",), "metadata", out.ignored)
    spec = _mapping(doc.get("spec"), d, "spec")
    _ignore_unknown(spec, _SPEC_KEYS, "spec", out.ignored)
    for key in ("nasConfig",):
        if key in spec:
            raise d.error(f"spec.{key}", "neural architecture search (ENAS, DARTS) is not run by vcli")
    study: dict[str, Any] = {}
    out.goal_value = _objective(_mapping(spec.get("objective"), d, "spec.objective"), d, study, out.ignored)
    out.seed = _algorithm(_mapping(spec.get("algorithm"), d, "spec.algorithm"), d, study, out.ignored)
    _early_stopping(spec.get("earlyStopping"), d, study, out.ignored)
    _metrics_collector(spec.get("metricsCollectorSpec"), d)
    parameters = [_parameter(p, d, f"spec.parameters[{i}]", study["algorithm"], out.ignored)
                  for i, p in enumerate(_list(spec.get("parameters"), d, "spec.parameters"))]
    if not parameters:
        raise d.error("spec.parameters", "at least one parameter is required")
    pools, flags = _trial_template(_mapping(spec.get("trialTemplate"), d, "spec.trialTemplate"), d, out.ignored)
    study["parameters"] = _flag_named(parameters, flags, d, out.ignored)
    out.document = {"studySpec": study, "trialJobSpec": {"workerPoolSpecs": pools}, **_counts(spec, study, d)}
    if meta.get("name"):
        out.document["displayName"] = str(meta["name"])
    return out


_SPEC_KEYS = ("objective", "algorithm", "earlyStopping", "parameters", "trialTemplate", "parallelTrialCount",
              "maxTrialCount", "maxFailedTrialCount", "metricsCollectorSpec", "nasConfig")


def _ignore_unknown(m: Mapping[str, Any], known: tuple[str, ...], path: str, ignored: list[str]) -> None:
    ignored.extend(f"{path}.{k}" if path else str(k) for k in m if k not in known)


def _mapping(value: Any, d: Decoder, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise d.error(path, f"expected a mapping, found [{source_text(value)[:80]}]")
    return value


def _list(value: Any, d: Decoder, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise d.error(path, "expected a list")
    return value


def _entries(value: Any, d: Decoder, path: str) -> list[Mapping[str, Any]]:
    """A list of mappings (`[{name: ..., value: ...}]`)."""
    return [_mapping(v, d, f"{path}[{i}]") for i, v in enumerate(_list(value, d, path))]


def _number(value: Any, d: Decoder, path: str, kind: Callable[[str], Any] = float) -> Any:
    """A Katib number, which the CRD writes as a string (`"0.01"`)."""
    try:
        number = kind(source_text(value).strip())
    except ValueError:
        raise d.error(path, f"expected a number, found [{source_text(value)[:80]}]") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise d.error(path, f"must be a finite number, found [{source_text(value)}]")
    return number


# --------------------------------------------------------------------------- the study


def _objective(obj: Mapping[str, Any], d: Decoder, study: dict[str, Any], ignored: list[str]) -> float | None:
    """objective -> studySpec.metrics and measurementSelectionType; returns objective.goal."""
    kind = str(obj.get("type", "")).lower()
    if kind not in ("maximize", "minimize"):
        raise d.error("spec.objective.type", f"must be maximize or minimize, found [{obj.get('type', '')}]")
    name = obj.get("objectiveMetricName")
    if not name:
        raise d.error("spec.objective.objectiveMetricName", "required field is missing")
    study["metrics"] = [{"metricId": str(name), "goal": kind.upper()}]
    # Katib takes the best report of a trial by default (max / min by the objective's type).
    strategies = {str(s.get("name")): str(s.get("value", "")).lower()
                  for s in _entries(obj.get("metricStrategies"), d, "spec.objective.metricStrategies")}
    best = "max" if kind == "maximize" else "min"
    strategy = strategies.pop(str(name), best)
    if strategy not in (best, "latest"):
        raise d.error("spec.objective.metricStrategies", f"[{strategy}] of [{name}] is neither the best report for "
                      f"{kind} ({best}) nor the latest: vcli takes one of those two")
    study["measurementSelectionType"] = "BEST_MEASUREMENT" if strategy == best else "LAST_MEASUREMENT"
    if obj.get("additionalMetricNames"):
        ignored.append("spec.objective.additionalMetricNames (vcli records the objective metric)")
    ignored.extend(f"spec.objective.metricStrategies[{n}]" for n in strategies)
    _ignore_unknown(obj, ("type", "goal", "objectiveMetricName", "additionalMetricNames", "metricStrategies"),
                    "spec.objective", ignored)
    return _number(obj["goal"], d, "spec.objective.goal") if obj.get("goal") is not None else None


def _settings(algo: Mapping[str, Any], d: Decoder, path: str) -> dict[str, Any]:
    return {str(s.get("name")): s.get("value") for s in _entries(algo.get("algorithmSettings"), d, f"{path}.algorithmSettings")}


def _algorithm(algo: Mapping[str, Any], d: Decoder, study: dict[str, Any], ignored: list[str]) -> int | None:
    """algorithm -> studySpec.algorithm; returns the `random_state` setting (the seed)."""
    name = str(algo.get("algorithmName", ""))
    if name not in ALGORITHMS:
        hint = " (for Hyperband: random with `--early-stopping=hyperband`)" if name == "hyperband" else ""
        raise d.error("spec.algorithm.algorithmName", f"[{name}] is not run by vcli; it runs "
                      f"{', '.join(ALGORITHMS)}{hint}")
    study["algorithm"] = ALGORITHMS[name]
    settings = _settings(algo, d, "spec.algorithm")
    seed = settings.pop("random_state", None)
    ignored.extend(f"spec.algorithm.algorithmSettings[{k}]" for k in settings)
    _ignore_unknown(algo, ("algorithmName", "algorithmSettings"), "spec.algorithm", ignored)
    return _number(seed, d, "spec.algorithm.algorithmSettings[random_state]", int) if seed is not None else None


def _early_stopping(value: Any, d: Decoder, study: dict[str, Any], ignored: list[str]) -> None:
    """earlyStopping medianstop -> studySpec.medianAutomatedStoppingSpec; others are refused."""
    if value is None:
        return
    stop = _mapping(value, d, "spec.earlyStopping")
    name = stop.get("algorithmName")
    if name != "medianstop":
        raise d.error("spec.earlyStopping.algorithmName", f"[{name}] is not run by vcli; it runs medianstop "
                      "(or `--early-stopping=` asha, hyperband, decay-curve, convex)")
    study["medianAutomatedStoppingSpec"] = {}
    settings = _settings(stop, d, "spec.earlyStopping")
    fixed = [k for k in ("min_trials_required", "start_step") if settings.pop(k, None) is not None]
    if fixed:
        ignored.append(f"spec.earlyStopping.algorithmSettings[{', '.join(fixed)}] (vcli's median rule waits for "
                       "5 completed trials and 2 reports of the trial)")
    ignored.extend(f"spec.earlyStopping.algorithmSettings[{k}]" for k in settings)
    _ignore_unknown(stop, ("algorithmName", "algorithmSettings"), "spec.earlyStopping", ignored)


def _metrics_collector(value: Any, d: Decoder) -> None:
    """Only Katib's default collector, StdOut, is read (stdout lines `NAME=VALUE`)."""
    spec = _mapping(value, d, "spec.metricsCollectorSpec")
    kind = _mapping(spec.get("collector"), d, "spec.metricsCollectorSpec.collector").get("kind", "StdOut")
    if kind != "StdOut":
        raise d.error("spec.metricsCollectorSpec.collector.kind", f"[{kind}] is not read by vcli: it reads the "
                      "trial's stdout lines `NAME=VALUE` (Katib's StdOut) or cloudml-hypertune reports")
    if "source" in spec:
        raise d.error("spec.metricsCollectorSpec.source", "vcli reads stdout lines `NAME=VALUE` (optionally "
                      "followed by ` step=N`); remove the source and its custom metricsFormat")


def _parameter(p: Any, d: Decoder, path: str, algorithm: str, ignored: list[str]) -> dict[str, Any]:
    """One Katib parameter -> a Vertex parameterSpec (named by its Katib name for now)."""
    p = _mapping(p, d, path)
    name = p.get("name")
    if not name:
        raise d.error(f"{path}.name", "required field is missing")
    space = _mapping(p.get("feasibleSpace"), d, f"{path}.feasibleSpace")
    kind = p.get("parameterType")
    spath = f"{path}.feasibleSpace"
    if kind in ("categorical", "discrete"):
        values = _list(space.get("list"), d, f"{spath}.list")
        if kind == "categorical":
            spec: dict[str, Any] = {"categoricalValueSpec": {"values": [source_text(v) for v in values]}}
        else:
            spec = {"discreteValueSpec": {"values": sorted(_number(v, d, f"{spath}.list[{i}]") for i, v in enumerate(values))}}
    elif kind in ("double", "int"):
        spec = _range(space, kind, d, spath, algorithm, ignored)
    else:
        raise d.error(f"{path}.parameterType", f"must be double, int, discrete or categorical, found [{kind}]")
    _ignore_unknown(space, ("min", "max", "step", "list", "distribution"), spath, ignored)
    _ignore_unknown(p, ("name", "parameterType", "feasibleSpace"), path, ignored)
    return {"parameterId": str(name), **spec}


def _range(space: Mapping[str, Any], kind: str, d: Decoder, spath: str, algorithm: str,
           ignored: list[str]) -> dict[str, Any]:
    """A double or int feasibleSpace: a range, or with a step the values on it (a grid needs them)."""
    number: Callable[[str], Any] = float if kind == "double" else int
    for key in ("min", "max"):
        if space.get(key) is None:
            raise d.error(f"{spath}.{key}", "required field is missing")
    low, high = _number(space["min"], d, f"{spath}.min", number), _number(space["max"], d, f"{spath}.max", number)
    spec: dict[str, Any] = {f"{'double' if kind == 'double' else 'integer'}ValueSpec": {"minValue": low, "maxValue": high}}
    distribution = str(space.get("distribution", "uniform"))
    if distribution == "logUniform":
        spec["scaleType"] = "UNIT_LOG_SCALE"
    elif distribution != "uniform":
        ignored.append(f"{spath}.distribution ({distribution}: vcli samples the range uniformly)")
    step = _number(space["step"], d, f"{spath}.step", number) if space.get("step") is not None else None
    if step is None:
        if kind == "double" and algorithm == "GRID_SEARCH":
            raise d.error(f"{spath}.step", "grid needs a step for a double parameter (the values to try)")
        return spec
    if not step > 0:
        raise d.error(f"{spath}.step", f"must be positive, found [{step}]")
    count = int(math.floor((high - low) / step + 1e-9)) + 1
    if count > MAX_STEPS:
        if algorithm == "GRID_SEARCH":
            raise d.error(f"{spath}.step", f"makes {count} values; a grid parameter takes at most {MAX_STEPS}")
        ignored.append(f"{spath}.step ({count} values: vcli searches the whole range)")
        return spec
    if kind == "int" and step == 1:
        return spec
    values = [round(low + i * step, 12) for i in range(count)]
    return {"discreteValueSpec": {"values": values}, **({"scaleType": spec["scaleType"]} if "scaleType" in spec else {})}


def _counts(spec: Mapping[str, Any], study: Mapping[str, Any], d: Decoder) -> dict[str, Any]:
    """parallelTrialCount (Katib's default 3), maxTrialCount (a grid's size when unset) and
    maxFailedTrialCount."""
    out = {"parallelTrialCount": _number(spec.get("parallelTrialCount", 3), d, "spec.parallelTrialCount", int)}
    if spec.get("maxTrialCount") is not None:
        out["maxTrialCount"] = _number(spec["maxTrialCount"], d, "spec.maxTrialCount", int)
    elif study["algorithm"] == "GRID_SEARCH":
        out["maxTrialCount"] = math.prod(_grid_size(p) for p in study["parameters"])
    else:
        raise d.error("spec.maxTrialCount", "required field is missing: vcli runs a study to its maxTrialCount "
                      "(Katib's goal alone ends it with --goal-value)")
    if spec.get("maxFailedTrialCount") is not None:
        out["maxFailedTrialCount"] = _number(spec["maxFailedTrialCount"], d, "spec.maxFailedTrialCount", int)
    return out


def _grid_size(p: Mapping[str, Any]) -> int:
    for key in ("categoricalValueSpec", "discreteValueSpec"):
        if key in p:
            return len(p[key]["values"])
    ints = p["integerValueSpec"]
    return int(ints["maxValue"]) - int(ints["minValue"]) + 1


# --------------------------------------------------------------------------- the trial


def _trial_template(t: Mapping[str, Any], d: Decoder, ignored: list[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """trialTemplate -> (the Vertex worker pools, {trial parameter's reference: its --FLAG})."""
    if "configMap" in t:
        raise d.error("spec.trialTemplate.configMap", "vcli reads the trialSpec written in the Experiment; "
                      "copy the ConfigMap's template into trialTemplate.trialSpec")
    references = {}
    for i, tp in enumerate(_list(t.get("trialParameters"), d, "spec.trialTemplate.trialParameters")):
        ref = str(_mapping(tp, d, f"spec.trialTemplate.trialParameters[{i}]").get("reference", ""))
        if ref.startswith("${trialSpec."):
            raise d.error(f"spec.trialTemplate.trialParameters[{i}].reference", f"[{ref}]: vcli has no trial "
                          "metadata to substitute; a trainer reads its trial's id from $CLOUD_ML_TRIAL_ID")
        references[str(tp.get("name"))] = ref
    trial = _mapping(t.get("trialSpec"), d, "spec.trialTemplate.trialSpec")
    pods = _pods(trial, d, ignored)
    _refuse_placeholders_elsewhere(trial, "spec.trialTemplate.trialSpec", d)
    flags: dict[str, str] = {}
    pools = [_pool(pod, replicas, t.get("primaryContainerName") or _OPERATOR_CONTAINER.get(str(trial.get("kind"))),
                   path, references, flags, d, ignored) for pod, replicas, path in pods]
    _ignore_unknown(t, ("primaryContainerName", "trialParameters", "trialSpec"), "spec.trialTemplate", ignored)
    return pools, flags


def _pods(trial: Mapping[str, Any], d: Decoder, ignored: list[str]) -> list[tuple[Mapping[str, Any], int, str]]:
    """(pod spec, replicas, its path) per Vertex pool, in pool order: a Job's one pod; a TFJob's
    chief, workers and parameter servers; a PyTorchJob's master and workers."""
    kind, path = trial.get("kind"), "spec.trialTemplate.trialSpec"
    spec = _mapping(trial.get("spec"), d, f"{path}.spec")
    _ignore_unknown(trial, ("apiVersion", "kind", "spec"), path, ignored)
    if kind == "Job":
        _ignore_unknown(spec, ("template",), f"{path}.spec", ignored)
        return [(_pod_spec(spec, d, f"{path}.spec.template", ignored), 1, f"{path}.spec.template.spec")]
    if kind not in TRIAL_KINDS:
        raise d.error(f"{path}.kind", f"[{kind}] is not run by vcli; it runs a Job, TFJob or PyTorchJob trial")
    key, chiefs, workers, servers = TRIAL_KINDS[str(kind)]
    roles = _mapping(spec.get(key), d, f"{path}.spec.{key}")
    _ignore_unknown(spec, (key,), f"{path}.spec", ignored)
    for role in roles:
        if role not in chiefs + workers + servers:
            raise d.error(f"{path}.spec.{key}.{role}", f"vcli runs the roles {', '.join(chiefs + workers + servers)}")
    found = [(role, _mapping(roles[role], d, f"{path}.spec.{key}.{role}")) for group in (chiefs, workers, servers)
             for role in group if role in roles]
    out = []
    for role, r in found:
        rpath = f"{path}.spec.{key}.{role}"
        _ignore_unknown(r, ("replicas", "template", "restartPolicy"), rpath, ignored)
        out.append((_pod_spec(r, d, f"{rpath}.template", ignored), _number(r.get("replicas", 1), d, f"{rpath}.replicas", int),
                    f"{rpath}.template.spec"))
    if not out:
        raise d.error(f"{path}.spec.{key}", "at least one replica spec is required")
    if found[0][0] in workers and out[0][1] > 1:  # no chief: the first worker is, as on Vertex's pool 0
        out[:1] = [(out[0][0], 1, out[0][2]), (out[0][0], out[0][1] - 1, out[0][2])]
    return out


def _pod_spec(holder: Mapping[str, Any], d: Decoder, path: str, ignored: list[str]) -> Mapping[str, Any]:
    template = _mapping(holder.get("template"), d, path)
    _ignore_unknown(template, ("spec",), path, ignored)
    pod = _mapping(template.get("spec"), d, f"{path}.spec")
    _ignore_unknown(pod, ("containers", "restartPolicy"), f"{path}.spec", ignored)
    return pod


def _pool(pod: Mapping[str, Any], replicas: int, primary: str | None, path: str, references: Mapping[str, str],
          flags: dict[str, str], d: Decoder, ignored: list[str]) -> dict[str, Any]:
    """A pod's primary container -> a Vertex worker pool with a containerSpec."""
    containers = _list(pod.get("containers"), d, f"{path}.containers")
    if not containers:
        raise d.error(f"{path}.containers", "at least one container is required")
    index = next((i for i, c in enumerate(containers) if isinstance(c, dict) and c.get("name") == primary), 0)
    ignored.extend(f"{path}.containers[{i}]" for i in range(len(containers)) if i != index)
    cpath = f"{path}.containers[{index}]"
    c = _mapping(containers[index], d, cpath)
    _ignore_unknown(c, ("name", "image", "command", "args", "env"), cpath, ignored)
    container: dict[str, Any] = {"imageUri": str(c.get("image", ""))}
    for key in ("command", "args"):
        tokens = _trial_flags([source_text(v) for v in _list(c.get(key), d, f"{cpath}.{key}")], f"{cpath}.{key}",
                              references, flags, d)
        if tokens:
            container[key] = tokens
    env = []
    for i, e in enumerate(_entries(c.get("env"), d, f"{cpath}.env")):
        if "value" in e:
            env.append({"name": str(e.get("name")), "value": source_text(e["value"])})
        else:
            ignored.append(f"{cpath}.env[{i}] ({e.get('name')}: only a value is passed)")
    if env:
        container["env"] = env
    if not container.get("command"):
        raise d.error(f"{cpath}.command", "required field is missing: vcli runs the command (with its args) as "
                      "the trial's process, or in the image with --executor=docker")
    return {"machineSpec": {"machineType": MACHINE_TYPE}, "replicaCount": replicas, "containerSpec": container}


def _trial_flags(tokens: list[str], path: str, references: Mapping[str, str], flags: dict[str, str],
                 d: Decoder) -> list[str]:
    """`tokens` without their `--FLAG=${trialParameters.NAME}` (or `--FLAG`, `${...}`) pairs,
    each recorded in `flags` (parameter -> FLAG); any other use of a trial parameter is refused."""
    out: list[str] = []
    for i, token in enumerate(tokens):
        pair = _FLAG_VALUE.match(token)
        alone = _PLACEHOLDER.fullmatch(token)
        if pair is None and alone is not None and out and _FLAG.match(out[-1]):
            pair = _FLAG.match(out.pop())
            name = alone.group(1)
        elif pair is not None:
            name = pair.group(2)
        elif _PLACEHOLDER.search(token):
            raise d.error(f"{path}[{i}]", f"[{token}] uses a trial parameter inside a larger value: vcli passes each "
                          "parameter as --FLAG=VALUE after the command; write it as --FLAG=${trialParameters.NAME}")
        else:
            out.append(token)
            continue
        assert pair is not None
        if name not in references:
            raise d.error(f"{path}[{i}]", f"[{token}] names [{name}], which is not in trialTemplate.trialParameters")
        parameter, flag = references[name], pair.group(1)
        if flags.setdefault(parameter, flag) != flag:
            raise d.error(f"{path}[{i}]", f"parameter [{parameter}] is passed as --{flags[parameter]} and as --{flag}; "
                          "vcli passes each parameter as one flag")
    return out


def _refuse_placeholders_elsewhere(node: Any, path: str, d: Decoder) -> None:
    """A trial parameter outside a container's command or args (an env value, a volume) is refused."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k not in ("command", "args"):
                _refuse_placeholders_elsewhere(v, f"{path}.{k}", d)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _refuse_placeholders_elsewhere(v, f"{path}[{i}]", d)
    elif isinstance(node, str) and _PLACEHOLDER.search(node):
        raise d.error(path, f"[{node[:120]}]: vcli passes trial parameters as flags after the command only, "
                      "not in env values or other fields")


def _flag_named(parameters: list[dict[str, Any]], flags: Mapping[str, str], d: Decoder,
                ignored: list[str]) -> list[dict[str, Any]]:
    """Each parameter renamed to the flag its command passes it as (`lr` given as --learning_rate
    becomes `learning_rate`); one in no command keeps its name (vcli passes it as --NAME=VALUE)."""
    names = {p["parameterId"] for p in parameters}
    for parameter in flags:
        if parameter not in names:
            raise d.error("spec.trialTemplate.trialParameters", f"a reference names [{parameter}], which is not in "
                          "spec.parameters")
    out, seen = [], set()
    for i, p in enumerate(parameters):
        flag = flags.get(p["parameterId"])
        if flag is None:
            ignored.append(f"spec.parameters[{i}] ({p['parameterId']}: in no command, vcli still passes "
                           f"--{p['parameterId']}=VALUE)")
        pid = flag or p["parameterId"]
        if pid in seen:
            raise d.error(f"spec.parameters[{i}]", f"two parameters would be passed as --{pid}")
        seen.add(pid)
        out.append({**p, "parameterId": pid})
    return out


def read_config(config: str) -> tuple[tuple[Any, str], Conversion | None]:
    """--config's (document, source), a Katib Experiment converted to its Vertex document,
    with the Conversion (None for any other document)."""
    from vcli.codec.yamlio import load_document

    doc, source = load_document(config)
    if not is_experiment(doc):
        return (doc, source), None
    conversion = convert(doc, source)
    return (conversion.document, f"{source} (its Vertex form)"), conversion
