"""The shape of the package, in figures: rooms (modules), arrows (imports between them), floors
(the longest chain of imports), imports that go up a floor of ARCHITECTURE.md, and sizes (modules
over 400 lines, functions over 60). Reads the source only (no import), so it measures any checkout:

    python benchmarks/layout.py [ROOT]

A checkout without ARCHITECTURE.md (older than it) is measured without its floors; a ROOT that is no
checkout (no opzoo/ package) or a file that does not parse is one error line, exit status 2.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
from pathlib import Path

MODULE_LINES = 400
FUNCTION_LINES = 60


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted((root / "opzoo").rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def arrows(name: str, path: Path, known: set[str]) -> set[str]:
    """The opzoo modules ``name`` names in its import statements, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            for a in node.names:
                found.add(f"{module}.{a.name}" if f"{module}.{a.name}" in known else module)
    return (found & known) - {name}


def floors_of(root: Path) -> dict[str, int]:
    """ARCHITECTURE.md's floors (its ### headings under "The rooms"), if it has them."""
    if not (root / "ARCHITECTURE.md").is_file():
        return {}
    text = (root / "ARCHITECTURE.md").read_text()
    section = text.split("## The rooms", 1)[-1].split("\n## ", 1)[0]
    floors, floor = {}, 0
    for line in section.splitlines():
        floor += line.startswith("### ")
        if floor and line.startswith("|"):
            for p in re.findall(r"`([\w/]+\.py)`", line.split("|")[1]):
                name = "opzoo." + p.removesuffix(".py").replace("/", ".")
                floors[name.removesuffix(".__init__") if name != "opzoo.__init__" else "opzoo"] = floor
    return floors


def long_functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (n.name, n.end_lineno - n.lineno + 1)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno - n.lineno + 1 > FUNCTION_LINES
    ]


def main(root: Path) -> None:
    mods = modules(root)
    known = set(mods)
    edges = {m: arrows(m, p, known) for m, p in mods.items()}

    @functools.cache
    def depth(m: str) -> int:
        # a module naming its own package (``from opzoo import __version__``) loads it first
        # anyway: that arrow is counted, but it is no step down
        return 1 + max((depth(d) for d in edges[m] if not m.startswith(d + ".")), default=0)

    floors = floors_of(root)
    up = [(m, d) for m, ds in edges.items() for d in ds if floors.get(d, 0) > floors.get(m, 99)]
    lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
    big = sorted(((n, m) for m, n in lines.items() if n > MODULE_LINES), reverse=True)
    funcs = sorted(((n, f"{m}.{f}") for m, p in mods.items() for f, n in long_functions(p)), reverse=True)
    print(f"rooms (modules): {len(mods)}; packages: {sum(p.name == '__init__.py' for p in mods.values())}")
    print(f"arrows (imports between modules): {sum(map(len, edges.values()))}")
    print(f"floors (longest chain of imports): {max(map(depth, edges), default=0)}")
    print(f"lines of code: {sum(lines.values())}")
    if floors:
        print(f"imports up a floor of ARCHITECTURE.md: {len(up)}")
        for m, d in sorted(up):
            print(f"  {m} -> {d}")
    else:
        print("imports up a floor of ARCHITECTURE.md: not measured (it names no floors, or there is none)")
    print(f"modules over {MODULE_LINES} lines: {len(big)}")
    for n, m in big:
        print(f"  {n:5d} {m}")
    print(f"functions over {FUNCTION_LINES} lines: {len(funcs)}")
    for n, f in funcs:
        print(f"  {n:5d} {f}")


def cli(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="layout.py", description="The shape of the opzoo package of a checkout, in figures."
    )
    here = Path(__file__).resolve().parents[1]
    parser.add_argument("root", nargs="?", type=Path, default=here, help="the checkout (default: this one)")
    root = parser.parse_args(argv).root
    if not (root / "opzoo").is_dir():
        parser.exit(2, f"layout.py: error: {root} is no checkout of opzoo: it has no opzoo/ folder\n")
    try:
        main(root)
    except (SyntaxError, UnicodeDecodeError) as exc:
        why = f"{exc.filename}:{exc.lineno}: {exc.msg}" if isinstance(exc, SyntaxError) else str(exc)
        parser.exit(2, f"layout.py: error: a module does not parse: {why}\n")


if __name__ == "__main__":
    cli()
