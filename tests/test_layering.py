"""The import rules of the README's layout: data flows one way (CLI -> codec/spec -> control ->
executors + placement + tuning -> metrics -> store -> view), so no lower layer imports a
higher one. Every import counts, the lazy ones inside functions too."""

from __future__ import annotations

import ast
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
        "vcli.spec": tree["vcli.spec"] + "\ndef _late():\n    from vcli import hosts\n",
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


#: Where the size limits of the tuning-wing step hold (modules, functions, complexity).
SIZED = ["vcli/tuning", "vcli/control", "vcli/codec/flags.py", "vcli/executors/supervisor.py"]


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
