"""The import rules of the README's layout: data flows one way (CLI -> codec/spec -> control ->
executors + placement + tuning -> metrics -> store -> view), so no lower layer imports a
higher one. Every import counts, the lazy ones inside functions too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Packages or modules that may import only these (themselves always allowed).
ONLY = {
    "vcli.tuning": {"vcli.spec", "vcli.enums", "vcli.errors"},
    "vcli.spec": {"vcli.enums", "vcli.errors"},
    "vcli.enums": set(),
    "vcli.errors": set(),
}
#: Packages or modules that must never import these.
NEVER = {
    "vcli.cli": {"vcli.executors"},
    "vcli.view": {"vcli.executors", "vcli.control", "vcli.cli"},
    "vcli.codec": {"vcli.executors", "vcli.control", "vcli.cli"},
    "vcli.placement": {"vcli.executors", "vcli.control", "vcli.cli"},
    "vcli.plots": {"vcli.executors", "vcli.control", "vcli.cli"},
    "vcli.dashboard": {"vcli.executors", "vcli.control", "vcli.cli"},
    "vcli.store": {"vcli.executors", "vcli.control", "vcli.cli", "vcli.view"},
    "vcli.store_tx": {"vcli.executors", "vcli.control", "vcli.cli", "vcli.view", "vcli.spec", "vcli.store"},
    "vcli.executors": {"vcli.control", "vcli.cli", "vcli.view", "vcli.dashboard", "vcli.plots"},
    "vcli.formats": {"vcli.executors", "vcli.control", "vcli.cli", "vcli.store", "vcli.view"},
}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def imports_of(module: str, source: str) -> set[str]:
    """Every vcli module `source` imports (top level or inside functions)."""
    package = module if module.endswith(".__init__") else module.rpartition(".")[0]
    package = package.removesuffix(".__init__")
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing package
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            if base == "vcli":
                out.update(f"vcli.{alias.name}" for alias in node.names)
            elif _within(base, "vcli"):
                out.add(base)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if _within(alias.name, "vcli"))
    return out


def violations(sources: dict[str, str]) -> list[str]:
    """`importer -> imported (rule)` for each import that breaks ONLY or NEVER."""
    found = []
    for module, source in sorted(sources.items()):
        for imported in sorted(imports_of(module, source)):
            for layer, allowed in ONLY.items():
                if (_within(module, layer) and not _within(imported, layer)
                        and not any(_within(imported, a) for a in allowed)):
                    found.append(f"{module} -> {imported} ({layer} may import only {sorted(allowed)})")
            for layer, banned in NEVER.items():
                for b in banned:
                    if _within(module, layer) and _within(imported, b):
                        found.append(f"{module} -> {imported} ({layer} must not import {b})")
    return found


def _tree() -> dict[str, str]:
    sources = {}
    for path in sorted((REPO / "vcli").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        sources[module] = path.read_text(encoding="utf-8")
    return sources


def test_the_tree_follows_the_import_rules() -> None:
    assert violations(_tree()) == []


def test_a_forbidden_import_is_caught_lazy_or_not() -> None:
    """The guard itself: each kind of forbidden import, added to the real tree, is reported."""
    tree = _tree()
    cases = {
        "vcli.tuning.toy": "from vcli.store import Store\n",
        "vcli.tuning.suggesters.toy": "def f():\n    import vcli.control.study\n",
        "vcli.spec": tree["vcli.spec"] + "\ndef _late():\n    from vcli.placement import hosts\n",
        "vcli.view.table": tree["vcli.view.table"] + "\ndef _late():\n    from vcli.executors import Placement\n",
        "vcli.placement.toy": "from ..executors.local import LocalExecutor\n",
        "vcli.executors.toy": "from vcli.cli import app\n",
    }
    for module, source in cases.items():
        found = violations({**tree, module: source})
        assert any(v.startswith(f"{module} -> ") for v in found), (module, found)


def test_placement_is_where_executors_get_it() -> None:
    """The one upward arrow that was (placement importing `executors.Placement`) is gone; the
    executors re-export placement's type for their callers."""
    from vcli.executors import Placement as FromExecutors
    from vcli.placement.types import Placement

    assert FromExecutors is Placement



#: The functions outside vcli/executors/ that may name a kind (`ExecutorKind.DOCKER`): the
#: automatic choice (an image pool runs in Docker) and `--hosts` meaning ssh. Everything else
#: asks the kind's `ExecutorType` (`vcli.executors.kinds`) or the executor's contract.
KIND_NAMERS = {("vcli.control.wiring", "executor_kind"), ("vcli.control.wiring", "open_execution")}


def kind_violations(sources: dict[str, str]) -> list[str]:
    """`module:line what` for each kind named outside the executors and `KIND_NAMERS`, and each
    `getattr`/`hasattr` on an executor in control/ (what only some kinds do is a method of the
    contract, with its default in `ExecutorBase`)."""
    found = []
    for module, source in sorted(sources.items()):
        tree = ast.parse(source)
        owner = {id(n): f.name for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ExecutorKind"
                    and node.attr.isupper() and not _within(module, "vcli.executors")
                    and (module, owner.get(id(node))) not in KIND_NAMERS):
                found.append(f"{module}:{node.lineno} ExecutorKind.{node.attr}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and _within(module, "vcli.control") and node.args and "executor" in ast.unparse(node.args[0])):
                found.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return found


def test_kinds_are_named_only_by_executors_and_the_automatic_choice() -> None:
    assert kind_violations(_tree()) == []


def test_a_kind_named_elsewhere_or_a_getattr_on_an_executor_is_caught() -> None:
    tree = _tree()
    cases = {
        "vcli.resources": tree["vcli.resources"] + "\ndef _f(h):\n    return h == ExecutorKind.SSH\n",
        "vcli.control.jobs": tree["vcli.control.jobs"] + "\ndef _g(run):\n    return getattr(run.executor, 'x', 0)\n",
        "vcli.control.wiring": tree["vcli.control.wiring"] + "\ndef _h():\n    return ExecutorKind.RAY\n",
    }
    for module, source in cases.items():
        assert any(v.startswith(f"{module}:") for v in kind_violations({module: source})), module


def test_the_registry_holds_every_kind_the_cli_offers() -> None:
    """`--executor`'s choices (`ExecutorKind`) are the registry's own kinds, in its order."""
    from vcli.enums import ExecutorKind
    from vcli.executors.kinds import _BUILTIN

    assert [name for name, _ in _BUILTIN] == [k.value for k in ExecutorKind]



def _runtime_imports(module: str, source: str, known: set[str]) -> set[str]:
    """The vcli modules `source` imports when it runs (top level or inside functions; not the
    ones under `if TYPE_CHECKING:`, which only a type checker reads). `from pkg import name`
    is the module `pkg.name` when there is one (a submodule), else `pkg` itself."""
    package = module.removesuffix(".__init__") if module.endswith(".__init__") else module.rpartition(".")[0]
    tree = ast.parse(source)
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING") for n in ast.walk(node)}

    def resolve(name: str) -> str | None:
        while name:
            for candidate in (name, f"{name}.__init__"):
                if candidate in known:
                    return candidate
            name = name.rpartition(".")[0]
        return None

    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            if not _within(base, "vcli"):
                continue
            for alias in node.names:
                out.add(resolve(f"{base}.{alias.name}") if f"{base}.{alias.name}" in known
                        or f"{base}.{alias.name}.__init__" in known else resolve(base))
        elif isinstance(node, ast.Import):
            out.update(resolve(a.name) for a in node.names if _within(a.name, "vcli"))
    return {m for m in out if m and m != module}


def import_cycles(sources: dict[str, str]) -> list[list[str]]:
    """The strongly connected groups (more than one module) of the runtime import graph."""
    known = set(sources)
    graph = {m: _runtime_imports(m, s, known) for m, s in sources.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_the_package() -> None:
    """No module imports, even lazily, one that imports it back: each package's modules form
    layers (its `__init__` re-exports its parts and no part imports the `__init__` back)."""
    assert import_cycles(_tree()) == []


def test_an_import_cycle_is_caught_lazy_or_not() -> None:
    tree = _tree()
    lazy = tree["vcli.control.liveness"] + "\ndef _late():\n    from vcli.control import cancel\n"
    assert any("vcli.control.liveness" in c for c in import_cycles({**tree, "vcli.control.liveness": lazy}))
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from vcli.control import cancel\n"
    assert import_cycles({**tree, "vcli.control.liveness": tree["vcli.control.liveness"] + typed}) == []


#: Where the size limits of the tuning-wing step hold (modules, functions, complexity).
SIZED = ["vcli/tuning", "vcli/control", "vcli/codec/flags.py", "vcli/executors/supervisor.py",
         "vcli/placement/hosts.py", "vcli/placement/hostfiles.py", "vcli/placement/hostrules.py"]


def _sized_files() -> list[Path]:
    out: list[Path] = []
    for entry in SIZED:
        path = REPO / entry
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def test_no_executor_or_placement_module_over_600_lines() -> None:
    """Executors hold their protocol in `executor.py` and put what can stand alone beside it
    (Slurm's allocation sizing, Docker's container arguments, SSH's replica state); placement's
    lease library keeps its SSH server in a module of its own (`leaseserver.py`)."""
    too_long = [f"{p.relative_to(REPO)}: {n} lines"
                for tree in ("vcli/executors", "vcli/placement") for p in sorted((REPO / tree).rglob("*.py"))
                if (n := p.read_text().count("\n")) > 600]
    assert not too_long, too_long


def test_the_package_root_stays_small() -> None:
    modules = sorted(p.name for p in (REPO / "vcli").glob("*.py"))
    assert len(modules) <= 15, modules


def test_no_module_over_500_lines_nor_function_over_60_lines_or_complexity_15() -> None:
    from radon.complexity import cc_visit

    too_long, too_complex = [], []
    for path in _sized_files():
        source = path.read_text()
        rel = path.relative_to(REPO)
        if source.count("\n") > 500:
            too_long.append(f"{rel}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                too_long.append(f"{rel}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
        for block in cc_visit(source):
            for b in [block, *getattr(block, "methods", [])]:
                if b.complexity > 15 and type(b).__name__ != "Class":
                    too_complex.append(f"{rel}:{b.lineno} {b.name}: complexity {b.complexity}")
    assert not too_long, too_long
    assert not too_complex, too_complex


def test_the_goal_sign_is_written_once() -> None:
    """`Goal.sign` is the one place that says which direction is better; a hand-written
    `1.0 if goal == Goal.MAXIMIZE else -1.0` (or a comparison picked by the goal) drifts."""
    hand_written = re.compile(r"-?1\.0 if .*Goal\.M(AX|IN)IMIZE|[<>]=? ?\w+ if .*Goal\.M(AX|IN)IMIZE"
                              r"|goal\.value == \"M(AX|IN)IMIZE\"")
    found = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "vcli").rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if hand_written.search(line) and p.name != "enums.py"]
    assert not found, found


#: The functions of vcli/ allowed over complexity 20, "path:function" (radon's name, with the
#: class for a method: `vcli/x.py:Class.method`) -> why it must stay so. Empty: none has a reason.
WRITTEN_REASONS: dict[str, str] = {}


def test_every_module_at_most_600_lines_and_every_function_at_most_complexity_20() -> None:
    """Everywhere in the package: no module over 600 lines and no function or method over
    cyclomatic complexity 20 (radon), unless `WRITTEN_REASONS` says why it must be. A module
    that grows past the limit is split into coherent siblings, a branchy function into
    well-named helpers (or a table), so each piece can be read and tested on its own; the
    stricter limits of the test above hold where the tuning-wing step set them. A reason for a
    function that no longer needs one fails too, so the list only shrinks."""
    from radon.complexity import cc_visit

    too_long: list[str] = []
    too_complex: set[str] = set()  # radon lists a method both alone and under its class
    over: set[str] = set()
    for path in sorted((REPO / "vcli").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        source = path.read_text()
        rel = path.relative_to(REPO).as_posix()
        if source.count("\n") > 600:
            too_long.append(f"{rel}: {source.count(chr(10))} lines")
        for block in cc_visit(source):
            for b in [block, *getattr(block, "methods", [])]:
                if b.complexity > 20 and type(b).__name__ != "Class":
                    over.add(f"{rel}:{b.fullname}")
                    if f"{rel}:{b.fullname}" not in WRITTEN_REASONS:
                        too_complex.add(f"{rel}:{b.lineno} {b.fullname}: complexity {b.complexity}")
    assert not too_long, too_long
    assert not too_complex, sorted(too_complex)
    stale = sorted(set(WRITTEN_REASONS) - over)
    assert not stale, f"no longer over complexity 20, remove from WRITTEN_REASONS: {stale}"


def test_study_strategies_see_the_run_through_their_narrow_view() -> None:
    """`vcli.control.strategies` types the run it serves as `StudyView` (a Protocol of what a
    strategy may read and do), never `StudyRun`: no import of the study loop, even for types."""
    source = (REPO / "vcli/control/strategies.py").read_text()
    imported = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)}
    assert "vcli.control.study" not in imported
    assert "run: StudyRun" not in source


def _test_modules_imported(source: str) -> set[str]:
    """The tests/test_* modules `source` imports (top level or inside functions, relative or not)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: within tests/
                base = f"tests.{base}" if base else "tests"
            names = [base, *(f"{base}.{a.name}" for a in node.names)]  # `from tests import test_x` too
        else:
            continue
        found |= {name for name in names if re.fullmatch(r"tests\.test_\w+", name)}
    return found


def test_no_test_module_imports_another() -> None:
    """What suites share lives in tests/kit.py (with tests/helpers.py, tests/fakes.py and
    tests/harness/) and in conftest.py's fixtures: no module of tests/ imports a tests/test_*
    module, lazily or not, so each suite runs, moves and goes on its own."""
    offenders = [f"{path.relative_to(REPO)} imports {module}"
                 for path in sorted((REPO / "tests").rglob("*.py")) if "__pycache__" not in path.parts
                 for module in sorted(_test_modules_imported(path.read_text()))]
    assert not offenders, offenders


def test_an_import_of_a_test_module_is_caught_lazy_or_not() -> None:
    for source in ("from tests.test_packages import STUDY\n", "def f():\n    from .test_ssh import Env\n",
                   "import tests.test_tpe\n", "from tests import test_pbt_study\n", "from . import test_slurm\n"):
        assert _test_modules_imported(source), source
    assert not _test_modules_imported("from tests.kit import vcli\nfrom tests.harness import netns\nimport tests.helpers\n")


def test_every_entry_of_the_marker_table_names_a_test_that_exists() -> None:
    """conftest.py's NEEDS marks tests by module, `module::test` and `module[param]`: an entry
    whose module or test was renamed or removed would leave its tests unmarked, silently."""
    from tests.conftest import NEEDS, NEEDS_MARKERS

    stale = []
    for key, markers in NEEDS.items():
        module, _, test = key.partition("::")
        module = module.split("[", 1)[0]
        path = REPO / "tests" / f"{module}.py"
        defined = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)} \
            if path.is_file() else set()
        if not path.is_file() or (test and test not in defined) or not set(markers) <= {*NEEDS_MARKERS, "integration"}:
            stale.append(f"{key}: {markers}")
    assert not stale, stale
