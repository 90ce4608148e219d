"""ARCHITECTURE.md holds: every module in its table, every rule it states checked here (or where it
names another test)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

import opzoo

PACKAGE = ROOT / "opzoo"
ARCHITECTURE = (ROOT / "ARCHITECTURE.md").read_text()


def module_names() -> list[str]:
    return sorted(
        ["opzoo", *(m.name for m in pkgutil.walk_packages([str(PACKAGE)], prefix="opzoo."))],
    )


def source_of(name: str) -> Path:
    path = PACKAGE.joinpath(*name.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _imported(node: ast.AST, package: str) -> set[str]:
    """The dotted names an import statement brings in (a relative one resolved in ``package``)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join([*base, module] if module else base)
        return {module, *(f"{module}.{a.name}" for a in node.names)}
    return set()


def imports(name: str, *, deferred: bool) -> set[str]:
    """The opzoo modules ``name`` imports: with ``deferred``, every import statement anywhere in it
    (inside functions, under ``TYPE_CHECKING``); without, only those that run when it is imported."""
    path = source_of(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            found.update(_imported(node, package))
            for field in ("body", "orelse", "finalbody"):
                visit(getattr(node, field, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                visit(handler.body)

    if deferred:
        for node in ast.walk(tree):
            found.update(_imported(node, package))
    else:
        visit(tree.body)
    known = set(module_names())
    # importing a.b.c imports its packages a and a.b first
    return {m for f in found for m in _parents(f) if m in known or m == "torch"} - {name}


def find_circle(edges: dict[str, set[str]]) -> list[str] | None:
    """A path that returns to where it started, or None."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return [*path, node, dep]
            if dep not in state and (found := visit(dep, [*path, node])):
                return found
        state[node] = 2
        return None

    for module in sorted(edges):
        if module not in state and (found := visit(module, [])):
            return found
    return None


def test_no_import_circle_counting_deferred_imports():
    """The import graph of the package is acyclic, counting imports inside functions and under
    TYPE_CHECKING too. A submodule importing its own package is no circle: importing a submodule
    imports its package first anyway."""
    edges = {
        m: {d for d in imports(m, deferred=True) if d != "torch" and d not in _parents(m)}
        for m in module_names()
    }
    circle = find_circle(edges)
    assert circle is None, "import circle: " + " -> ".join(circle)
    # the detector itself finds the circles this package once had, through deferred imports
    assert find_circle(
        {
            "opzoo.trainer._config": {"opzoo.trainer._preflight"},
            "opzoo.trainer._preflight": {"opzoo.trainer._config"},
        }
    )


def named_imports(name: str) -> set[str]:
    """The opzoo modules ``name``'s import statements name, anywhere in it (inside functions, under
    ``TYPE_CHECKING``): ``from opzoo.core import _registry`` names ``opzoo.core._registry``, not the
    packages above it that importing it loads first."""
    path = source_of(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = set(module_names())
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            module = sorted(_imported(node, package))[0]
            for a in node.names:
                found.add(f"{module}.{a.name}" if f"{module}.{a.name}" in known else module)
    return (found & known) - {name}


def _floors() -> dict[str, int]:
    """ARCHITECTURE.md's floors: module -> the number of the heading its row sits under."""
    section = ARCHITECTURE.split("## The rooms", 1)[1].split("\n## ", 1)[0]
    floors: dict[str, int] = {}
    floor = 0
    for line in section.splitlines():
        if line.startswith("### "):
            floor += 1
        for path in re.findall(r"`([\w/]+\.py)`", line.split("|")[1] if line.startswith("|") else ""):
            floors[_module_of(path)] = floor
    return floors


def _module_of(path: str) -> str:
    name = "opzoo." + path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__") if name != "opzoo.__init__" else "opzoo"


def upward_imports(floors: dict[str, int], edges: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} (floor {floors[m]}) imports {d} (floor {floors[d]})"
        for m, deps in edges.items()
        for d in deps
        if floors[d] > floors[m]
    )


def test_no_import_goes_up_a_floor():
    """Each module imports only from its own floor of ARCHITECTURE.md and the floors below, counting
    imports inside functions and under TYPE_CHECKING: the page's picture of who uses whom is true."""
    floors = _floors()
    assert floors and max(floors.values()) >= 8, "ARCHITECTURE.md names no floors"
    edges = {m: named_imports(m) for m in module_names()}
    assert not upward_imports(floors, edges)
    # the detector sees an import that goes up: the registry core reaching for the trainer
    assert upward_imports(floors, {"opzoo.core._registry": {"opzoo.trainer._trainer"}})


def _table_rows() -> dict[str, str]:
    """ARCHITECTURE.md's rooms: module -> its torch cell, for every module a row names."""
    section = ARCHITECTURE.split("## The rooms", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("module", "---"):
            continue
        for path in re.findall(r"`([\w/]+\.py)`", cells[0]):
            name = _module_of(path)
            assert name not in rows, f"{path} has two rows in ARCHITECTURE.md"
            rows[name] = cells[2]
    return rows


def test_every_module_has_a_row_in_architecture():
    """A newcomer finds every module in ARCHITECTURE.md's table, and no row names a module that is
    gone."""
    rows = _table_rows()
    assert sorted(rows) == module_names(), (
        f"missing from ARCHITECTURE.md: {sorted(set(module_names()) - set(rows))}; "
        f"gone: {sorted(set(rows) - set(module_names()))}"
    )


def test_the_torch_column_is_true():
    """Each module imports torch when imported exactly where the table says "yes"."""
    direct = {m: imports(m, deferred=False) for m in module_names()}
    memo: dict[str, bool] = {}

    def pulls_torch(module: str) -> bool:
        if module not in memo:
            memo[module] = False  # a package importing its submodule: no loop
            deps = direct[module] | set(_parents(module)[:-1])
            memo[module] = "torch" in deps or any(pulls_torch(d) for d in deps if d in direct)
        return memo[module]

    wrong = {m: cell for m, cell in _table_rows().items() if (cell == "yes") != pulls_torch(m)}
    assert not wrong, f"the torch column is wrong for {wrong}"
    # a module that imports torch only through another is found too
    assert pulls_torch("opzoo.testing.running._runner") and not pulls_torch("opzoo.testing.properties")


def test_help_texts_import_no_torch():
    """`opzoo --help`, `opzoo check --help`, `opzoo mutate --help` (whose lists of properties and
    mutants come from their tables) and `opzoo report --help` are quick: they import no torch."""
    code = (
        "import sys\nfrom opzoo.cli import main\n"
        "for args in (['--help'], ['check', '--help'], ['mutate', '--help'], ['report', '--help']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("False")
    assert "double_backward:" in out.stdout and "forward_mode:" in out.stdout
    assert "wrong_above_4096:" in out.stdout


def test_no_module_is_shadowed_by_a_global():
    """Every submodule is reachable under its own name: no package attribute of the same name hides it."""
    for name in module_names():
        if name in ("opzoo", "opzoo.__main__"):  # __main__ runs the command line when imported
            continue
        module = importlib.import_module(name)
        parent, _, attr = name.rpartition(".")
        value = getattr(importlib.import_module(parent), attr, module)
        assert value is module, f"{parent}.{attr} is {value!r}, not the module {name}"


def _module_aliases(tree: ast.Module, package: str) -> set[str]:
    """Names bound to opzoo modules by the module's imports (``import opzoo``, ``from opzoo import
    _trainer``, ``import opzoo.testing.running._parallel as parallel``)."""
    known = set(module_names())
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "opzoo":
                    aliases.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            module = next(iter(sorted(_imported(node, package))), "")
            for a in node.names:
                if f"{module}.{a.name}" in known or f"{node.module}.{a.name}" in known:
                    aliases.add(a.asname or a.name)
    return aliases


def global_writes(name: str, path: Path | None = None) -> list[str]:
    """Where module ``name`` (read from ``path``, by default its file in the package) assigns an
    attribute of another opzoo module (``opzoo._default = r``, ``setattr(_trainer, ...)``)."""
    path = path or source_of(name)
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    aliases = _module_aliases(tree, package)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in aliases:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(t)}")
    return found


def test_no_global_written_from_outside(tmp_path):
    """No opzoo module assigns another module's globals: state flows down as arguments."""
    written = [w for m in module_names() for w in global_writes(m)]
    assert not written, written
    # the detector sees such a write (in a probe outside the package: other workers list its modules)
    probe = tmp_path / "_probe_global_write.py"
    probe.write_text("import opzoo\nopzoo._default = None\n")
    assert global_writes("opzoo._probe_global_write", probe)


def test_the_cli_leaves_the_default_registry_alone():
    """A command loads its own registry and passes it on; opzoo's default registry stays unloaded."""
    code = (
        "from opzoo.core import _default; from opzoo.cli import main; "
        "main(['--no-autoload', 'info', 'myrelu']); print('default registry:', _default._default)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("default registry: None")


def _string_literals(node: ast.AST) -> str:
    return " ".join(
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


CLI_SIDE = ("opzoo.cli", "opzoo.cli._common", "opzoo.pytest_plugin")


def test_only_the_cli_writes_opzoo_error():
    """`opzoo: error:` (the line an OpZooError becomes) is written in cli/__init__.py alone."""
    for name in module_names():
        text = _string_literals(ast.parse(source_of(name).read_text()))
        assert ("opzoo: error" in text) == (name == "opzoo.cli"), name


def test_library_errors_speak_of_parameters_not_flags():
    """An error raised outside the command line names parameters, not `--flags`: the library is
    used from Python too, where there are no flags."""
    flag = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
    offenders = []
    for name in module_names():
        if name.startswith(CLI_SIDE):
            continue
        for node in ast.walk(ast.parse(source_of(name).read_text())):
            if (
                isinstance(node, ast.Raise)
                and node.exc is not None
                and flag.search(_string_literals(node.exc))
            ):
                offenders.append(f"{name}:{node.lineno}: {ast.unparse(node.exc)[:100]}")
    assert not offenders, offenders


def test_the_kind_of_an_op_is_read_only_where_the_table_says():
    """Function or learnable Module is told apart (``spec.kind`` compared, or an instance or class
    tested against nn.Module) only in the modules ARCHITECTURE.md names."""
    allowed = {
        "opzoo.core._spec",
        "opzoo.library",
        "opzoo.nn",
        "opzoo.testing.checks._bound",
        "opzoo.testing.checks._forward",
        "opzoo.testing.mutation._mutant_facts",
        "opzoo.testing.mutation._mutant_ops",
        "opzoo.testing.properties",
    }
    telling = re.compile(
        r'\bkind\s*(?:==|!=)\s*"(?:module|function)"|(?:issubclass|isinstance)\([^)]*nn\.Module\)'
    )
    reading = {name for name in module_names() if telling.search(source_of(name).read_text())}
    assert reading == allowed, f"tells the kinds apart: {sorted(reading)}"
    rules = ARCHITECTURE.split("## Rules", 1)[1]
    for name in allowed:
        assert f"`{source_of(name).relative_to(PACKAGE)}`" in rules, name


def test_the_docs_table_of_properties_follows_the_records():
    """docs/testing.md's table of properties has one row per record in PROPERTIES, in its order
    (the help text is generated from the records: test_help_texts_import_no_torch)."""
    from opzoo.testing.properties import PROPERTIES

    text = (ROOT / "docs" / "testing.md").read_text()
    table = text.split("| property | what must hold | why |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|", table, flags=re.M)
    assert rows == list(PROPERTIES)


def test_the_docs_table_of_mutants_follows_the_records():
    """docs/testing.md's table of mutants has one row per record in MUTANTS, in its order, with the
    record's summary (the help text is generated from the records)."""
    from opzoo.testing.mutation._mutants import MUTANTS

    text = (ROOT / "docs" / "testing.md").read_text()
    table = text.split("| mutant | what it does | seen by |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([\w.-]+)` \| (.*?) \|", table, flags=re.M)
    assert rows == [(m.name, m.summary) for m in MUTANTS.values()]


def test_every_hook_has_a_fake_plugin():
    """Each hook in hookspecs.py is implemented by a fake plugin in tests/fakehooks.py."""
    from opzoo import hookspecs

    hooks = {n for n in dir(hookspecs) if n.startswith("opzoo_")}
    fakes = (ROOT / "tests" / "fakehooks.py").read_text()
    assert hooks and all(f"def {h}(" in fakes for h in hooks), hooks


def test_every_command_is_wired_and_documented():
    """Each subcommand module's add_NAME/run_NAME pair is in cli.COMMANDS, and each command has a row
    in the README's table of commands."""
    from opzoo import cli

    readme = (ROOT / "README.md").read_text()
    for module in (PACKAGE / "cli").glob("_*.py"):
        tree = ast.parse(module.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("add_"):
                command = node.name.removeprefix("add_")
                command = {"list": "list"}.get(command, command)
                assert command in cli.COMMANDS, f"{module.name}: {command} is not in cli.COMMANDS"
    for command in cli.COMMANDS:
        assert f"| `opzoo {command}" in readme, f"the README's table has no row for `opzoo {command}`"


def test_the_test_helpers_see_the_package_under_test():
    """The suite runs against this checkout's opzoo (editable install), not a stale copy."""
    assert opzoo.__file__.startswith(str(PACKAGE))


def _too_long(path: Path) -> list[str]:
    """The module, if over 400 lines, and its functions over 60, as lines to read."""
    text = path.read_text()
    found = [f"{path.name}: {len(text.splitlines())} lines"] if len(text.splitlines()) > 400 else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
            found.append(f"{path.name}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    return found


def test_no_module_over_400_lines_no_function_over_60(tmp_path):
    """A room a newcomer reads in one sitting: no module of the package over 400 lines, no function
    over 60 (benchmarks/layout.py counts the same, for any checkout)."""
    assert [line for name in module_names() for line in _too_long(source_of(name))] == []
    # the rule sees a long one: a function of 61 lines in a module of 401
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    (tmp_path / "long.py").write_text("def f():\n" + body + "\n" * 340)
    assert _too_long(tmp_path / "long.py") == ["long.py: 401 lines", "long.py:1 f: 61 lines"]


def _test_names(paths: list[Path]) -> set[str]:
    return {n.name for f in paths for n in ast.walk(ast.parse(f.read_text()))
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}  # fmt: skip


def _long_tier_orphans(path: Path, names: set[str]) -> list[str]:
    """What the long tier's rule refuses in one test file: a whole test marked ``long`` without a
    comment just above it that names one of the tests ``names`` (the default run's test of its
    path), and a list of ``pytest.param``s whose every case is ``long`` (CI's run would keep none)."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)

    def is_long(node: ast.AST) -> bool:
        return ast.unparse(node).replace(" ", "") in ("pytest.mark.long", "[pytest.mark.long]")

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(is_long(d) for d in node.decorator_list):
            first = min(d.lineno for d in node.decorator_list) - 1
            above = []
            while first > 0 and lines[first - 1].lstrip().startswith("#"):
                first -= 1
                above.append(lines[first])
            if not set(re.findall(r"\btest_\w+", " ".join(above))) & names:
                found.append(f"{path.name}:{node.lineno} {node.name}: no default-run test named above it")
        if isinstance(node, ast.List) and node.elts:
            params = [
                e for e in node.elts if isinstance(e, ast.Call) and ast.unparse(e.func) == "pytest.param"
            ]
            longs = [p for p in params if any(k.arg == "marks" and is_long(k.value) for k in p.keywords)]
            if longs and len(longs) == len(node.elts):
                found.append(f"{path.name}:{node.lineno}: every case is long")
    return found


def test_what_the_long_tier_takes_keeps_a_case_in_the_default_run(tmp_path):
    """ARCHITECTURE.md: a test moved to the long tier keeps its path in CI's run — one case of its
    parameters, or a test named in the comment above its mark."""
    files = sorted((ROOT / "tests").glob("test_*.py"))
    names = _test_names(files)
    assert [o for f in files for o in _long_tier_orphans(f, names)] == []
    # the rule sees both kinds of orphan
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n\n# kept by test_nothing_at_all\n@pytest.mark.long\ndef test_a():\n    pass\n\n\n"
        "@pytest.mark.parametrize('n', [pytest.param(3, marks=pytest.mark.long)])\ndef test_b(n):\n    pass\n"
    )
    assert _long_tier_orphans(tmp_path / "test_x.py", _test_names([tmp_path / "test_x.py"])) == [
        "test_x.py:6 test_a: no default-run test named above it",
        "test_x.py:10: every case is long",
    ]
