"""The package's structure holds: no import circle, no module shadowed, no global written from outside."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys

from conftest import ROOT

import opzoo

PACKAGE = ROOT / "opzoo"


def module_names() -> list[str]:
    return sorted(
        ["opzoo", *(m.name for m in pkgutil.walk_packages([str(PACKAGE)], prefix="opzoo."))],
    )


def top_level_imports(name: str) -> set[str]:
    """The opzoo modules ``name`` imports when it is imported: module-level statements only (imports
    inside functions run later, and those under ``if TYPE_CHECKING`` never)."""
    path = PACKAGE.joinpath(*name.split(".")[1:])
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
            if isinstance(sub, ast.Import):
                found |= {a.name for a in sub.names}
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                found.add(sub.module)
                found |= {f"{sub.module}.{a.name}" for a in sub.names}
    known = set(module_names())
    # importing a.b.c imports its packages a and a.b first
    closed = {m for f in found for m in _parents(f) if m in known}
    return closed - {name}


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def find_circle(edges: dict[str, set[str]], packages: set[str] = frozenset()) -> list[str] | None:
    """A path that returns to where it started, or None. A package imported by its own submodule
    is no circle of code: importing a submodule imports its package first anyway."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1 and not (dep in packages and node.startswith(dep + ".")):
                return [*path, node, dep]
            if dep not in state and (found := visit(dep, [*path, node])):
                return found
        state[node] = 2
        return None

    for module in sorted(edges):
        if module not in state and (found := visit(module, [])):
            return found
    return None


def test_no_import_circle():
    """The module-level import graph of the package is acyclic."""
    graph = {m: top_level_imports(m) for m in module_names()}
    packages = {m for m in graph if (PACKAGE.joinpath(*m.split(".")[1:]) / "__init__.py").exists()}
    edges = {m: {d for d in deps if d not in _parents(m)} for m, deps in graph.items()}
    assert find_circle(edges, packages) is None, "import circle: " + " -> ".join(find_circle(edges, packages))
    # the detector itself finds the circle this package once had
    old = {"opzoo._registry": {"opzoo.nn"}, "opzoo.nn": {"opzoo._registry"}}
    assert find_circle(old) == ["opzoo._registry", "opzoo.nn", "opzoo._registry"]


def test_no_module_is_shadowed_by_a_global():
    """Every submodule is reachable under its own name: no package attribute of the same name hides it."""
    for name in module_names():
        if name in ("opzoo", "opzoo.__main__"):  # __main__ runs the command line when imported
            continue
        module = importlib.import_module(name)
        parent, _, attr = name.rpartition(".")
        value = getattr(importlib.import_module(parent), attr, module)
        assert value is module, f"{parent}.{attr} is {value!r}, not the module {name}"


def test_the_cli_leaves_the_default_registry_alone():
    """A command loads its own registry and passes it on; opzoo's default registry stays unloaded."""
    code = (
        "import opzoo; from opzoo.cli import main; main(['--no-autoload', 'info', 'myrelu']); "
        "print('default registry:', opzoo._default)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("default registry: None")


def test_the_test_helpers_see_the_package_under_test():
    """The suite runs against this checkout's opzoo (editable install), not a stale copy."""
    assert opzoo.__file__.startswith(str(PACKAGE))
