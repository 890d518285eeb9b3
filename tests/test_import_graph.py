"""Imports never run in a circle (the guide's rule), counting imports inside functions too, and
never run up the layers: each package imports only what its `__init__` docstring allows, below it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "turbospark_app"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph(typing_too: bool = False) -> dict[str, set[str]]:
    """Module -> the app modules it imports (at module level or inside a function); with
    `typing_too`, also those under `if TYPE_CHECKING:` (they never run, but a circle through
    them is still a circle of design: engine's config -> constraint -> selection -> config hid
    there)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text("utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block)
                       for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only and not typing_too:  # these imports never run
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                # `from pkg import mod` imports a module; `from mod import name` the module itself
                targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in modules else stem
                           for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

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
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_function_level_imports() -> None:
    graph = import_graph()
    assert "turbospark_app.cli.model_command" in graph["turbospark_app.cli.main"]  # inside main()
    assert "turbospark_app.model.fetch" in graph["turbospark_app.cli.self_test"]  # inside a function


def test_no_import_cycle_anywhere() -> None:
    # (bundle <-> model.fetch <-> model.model_cli was one, through function-level imports;
    # engine config -> constraint -> selection -> config another, through a typing-only one)
    assert cycles(import_graph(typing_too=True)) == []


def test_the_cycle_check_sees_typing_only_imports(tmp_path, monkeypatch) -> None:
    import shutil

    copy = tmp_path / "turbospark_app"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    bad = copy / "engine" / "constraint.py"
    bad.write_text(bad.read_text("utf-8").replace(
        "if TYPE_CHECKING:", "if TYPE_CHECKING:\n    from .config import Shaping", 1), "utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", copy)
    assert cycles(import_graph()) == []  # the runtime graph alone misses it
    assert cycles(import_graph(typing_too=True)) == [
        ["turbospark_app.engine.config", "turbospark_app.engine.constraint"]]


def test_importing_bundle_loads_only_leaf_modules() -> None:
    code = ("import sys, turbospark_app.host.bundle; "
            "print(sorted(m for m in sys.modules if m.startswith('turbospark_app.')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["['turbospark_app.host',", "'turbospark_app.host.bundle']"]


# --- layering ---------------------------------------------------------------------------------------

# Bottom to top (the order, with host and readings placed): a package may import only
# packages of lower tiers, or a peer of its own tier its docstring names (conversations -> chat).
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"host"}),
    frozenset({"engine"}),
    frozenset({"model", "readings", "media"}),
    frozenset({"chat", "conversations", "catalog", "documents"}),
    frozenset({"service", "tools"}),
    frozenset({"remote", "server"}),
    frozenset({"ui"}),
    frozenset({"cli"}),
)
TIER = {package: tier for tier, packages in enumerate(LAYERS) for package in packages}
TOP_MODULES = {"turbospark_app", "turbospark_app.__main__"}  # the version, and `python -m`


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and module not in TOP_MODULES else None


def declared_imports(package: str) -> set[str]:
    """The packages named after "May import:" in the package's `__init__` docstring."""
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text("utf-8"))) or ""
    head, found, rest = doc.partition("May import:")
    assert found, f"{package}/__init__.py: the docstring must say what the layer may import"
    clause = rest.split("(")[0].split(".")[0]
    return {word for word in clause.replace(":", ",").replace("\n", " ").split(",")
            for word in [word.strip().split()[-1] if word.strip() else ""] if word in TIER}


def package_imports() -> dict[str, dict[str, list[str]]]:
    """Package -> imported package -> the module edges behind it (for the failure message)."""
    out: dict[str, dict[str, list[str]]] = {}
    for module, targets in import_graph().items():
        source = _package_of(module)
        for target in targets:
            dest = _package_of(target)
            if source and dest and dest != source:
                out.setdefault(source, {}).setdefault(dest, []).append(f"{module} -> {target}")
    return out


def test_every_package_has_a_tier_and_no_module_is_loose() -> None:
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == set(TIER)
    loose = {p.name for p in PACKAGE.glob("*.py")}
    assert loose == {"__init__.py", "__main__.py"}


def test_docstrings_allow_only_lower_layers() -> None:
    for package, tier in TIER.items():
        for allowed in declared_imports(package):
            assert TIER[allowed] < tier or (TIER[allowed] == tier and (package, allowed) == (
                "conversations", "chat")), f"{package} declares it may import {allowed}, a higher layer"


def test_no_package_imports_above_what_it_declares() -> None:
    wrong = [edge for source, dests in package_imports().items() for dest, edges in dests.items()
             if dest not in declared_imports(source) for edge in edges]
    assert wrong == [], "imports that run up the layers (or are not declared):\n" + "\n".join(wrong)


def test_the_layering_check_catches_an_upward_import(tmp_path, monkeypatch) -> None:
    # The same check over a copy of the package with one upward import added must fail.
    import shutil

    copy = tmp_path / "turbospark_app"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    bad = copy / "engine" / "config.py"
    bad.write_text(bad.read_text("utf-8") + "\nfrom ..ui import app  # upward\n", "utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", copy)
    wrong = [edge for source, dests in package_imports().items() for dest, edges in dests.items()
             if dest not in declared_imports(source) for edge in edges]
    assert wrong == ["turbospark_app.engine.config -> turbospark_app.ui.app"]
