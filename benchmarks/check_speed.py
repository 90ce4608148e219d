"""How fast opzoo checks (issue 32): its properties against torch's own checks on the same inputs,
and the issue's end-to-end figures, each beside a unit measured in the same run.

    .venv/bin/python benchmarks/check_speed.py [--ops a,b] [--properties p,q] [--rounds 2]
                                               [--figures assert_correct,check,zoo|none] [--record]

Per op and property (in this process, one torch thread, warm): opzoo's ``gradient``,
``double_backward`` and ``library`` (ci profile) against the torch check each overlaps, run on the
very inputs the property runs on (``gradcheck``, ``gradgradcheck``, ``torch.library.opcheck`` with the
tests the property runs there; fast mode where the property is), A B B A rounds, medians, ratios.

End to end (each a fresh process, wall seconds): ``assert_correct(MyReLU)`` (the first call, and the
median of the next --rounds calls in the same process), ``opzoo check myrelu --profile ci`` with its
start-up, the zoo under ``opzoo check --profile ci --no-autoload`` (and its ``library`` median per op),
each in rounds alternating with the unit ``python -c "import torch"``; the load average beside each.
The issue's targets are printed as met or not met: nothing is asserted. The real-world median per op
is benchmarks/real_world.py's (a scratch venv), not measured here.

``--record`` adds the tables to benchmarks/RESULTS.md as a section named by the date and commit (a
section of the same name is replaced). Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from _peer_speed import PEERS, Row

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
OPS = ("myrelu", "softmax", "linear", "gelu", "leaky_relu", "sse")
FIGURES = ("assert_correct", "check", "zoo")
UNIT = (sys.executable, "-c", "import torch")
#: figure -> (what, target in seconds or None); the targets are issue 32's, on a quiet 2-core machine
TARGETS = {
    "assert_correct first": ("`assert_correct(MyReLU)`, first call (after imports)", None),
    "assert_correct": ("`assert_correct(MyReLU)`, warm (median of the next calls)", 1.0),
    "check": ("`opzoo check myrelu --profile ci` (wall, with start-up)", 2.5),
    "zoo": ("the zoo: `opzoo check --profile ci --no-autoload` (wall)", 15.0),
    "library": ("`library`, median per op", 0.5),
    "real world": ("the real-world record's median per op (benchmarks/real_world.py)", 4.0),
}
WARM = """
import json, sys, time
import torch
from opzoo.ops.relu import MyReLU
from opzoo.testing import assert_correct
walls = []
for _ in range(1 + int(sys.argv[1])):
    began = time.perf_counter()
    assert_correct(MyReLU)
    walls.append(time.perf_counter() - began)
print(json.dumps(walls))
"""


class Parser(argparse.ArgumentParser):
    """A bad argument is one line, ``check_speed.py: error: ...``, and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"check_speed.py: error: {message}\n")


def _names(choices: tuple[str, ...], what: str):
    def parse(text: str) -> list[str]:
        names = [n for n in text.split(",") if n]
        bad = [n for n in names if n not in choices]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {bad or text!r}; choose from {', '.join(choices)}"
            )
        return names

    return parse


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog="check_speed.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ops", default=",".join(OPS), help=f"ops, comma-separated, or all (default: {','.join(OPS)})"
    )
    parser.add_argument(
        "--properties", type=_names(tuple(PEERS), "property"), default=list(PEERS), help="default: all three"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds of each measurement (default 2: A B B A)"
    )
    parser.add_argument(
        "--figures",
        type=_names((*FIGURES, "none"), "figure"),
        default=list(FIGURES),
        help=f"end-to-end figures, comma-separated, or none (default: {','.join(FIGURES)})",
    )
    parser.add_argument("--record", action="store_true", help="add the tables to benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds: expected 1 or more, got {args.rounds}")
    args.figures = [f for f in args.figures if f != "none"]
    return args


def load() -> float:
    return os.getloadavg()[0]


# -- per property ---------------------------------------------------------------------------------


def per_property(names: list[str], props: list[str], rounds: int) -> list[Row]:
    """Each op and property that applies to it against its peer, in this process, one torch thread."""
    import torch
    from _peer_speed import measure, quick_failures

    from opzoo.testing.properties import PROPERTIES

    torch.set_num_threads(1)
    quick_failures()
    rows = []
    for spec in _specs(names):
        for prop in props:
            if PROPERTIES[prop].applies(spec) is None:
                rows.append(measure(spec, prop, rounds))
                r = rows[-1]
                print(
                    f"  {r.op} {r.prop}: opzoo {r.ours:.3f} s, {PEERS[prop]} {r.peer:.3f} s", file=sys.stderr
                )
    return rows


def _specs(names: list[str]) -> list:
    import opzoo

    registry = opzoo.registry()
    if names == ["all"]:
        return sorted(registry.load_all(), key=lambda s: s.name)
    return [registry.info(n) for n in names]


def property_table(rows: list[Row]) -> list[str]:
    out = [
        "| op | property | inputs | opzoo s | peer | peer s | ratio | opzoo CPU s | peer CPU s | CPU ratio "
        "| peer failed on |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            f"| {r.op} | {r.prop} | {r.inputs} | {r.ours:.3f} | {PEERS[r.prop]} | {r.peer:.3f} | "
            f"{r.ratio:.1f}x | {r.ours_cpu:.3f} | {r.peer_cpu:.3f} | {r.cpu_ratio:.1f}x | {r.peer_fails} |"
        )
    out.append("")
    for prop in dict.fromkeys(r.prop for r in rows):
        mine = [r for r in rows if r.prop == prop]
        ratios = statistics.median(r.ratio for r in mine), statistics.median(r.cpu_ratio for r in mine)
        out.append(
            f"- `{prop}` / `{PEERS[prop]}`, median over {len(mine)} op(s): {ratios[0]:.1f}x wall, "
            f"{ratios[1]:.1f}x CPU"
        )
    return out + [""]


# -- end to end -----------------------------------------------------------------------------------


@dataclass
class Figure:
    """One end-to-end figure: its seconds, one per round, and the 1-minute load average at each."""

    key: str
    seconds: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    source: str = ""

    def add(self, seconds: float, at: float) -> None:
        self.seconds.append(seconds)
        self.loads.append(at)


def _run(cmd: list[str], what: str) -> tuple[float, str]:
    """Run ``cmd`` in the checkout: its wall seconds and its output. Exit 0 or 1 (some check failed)
    counts; anything else ends the script with one error line."""
    began = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - began
    if out.returncode not in (0, 1):
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        fail(f"{what} exited {out.returncode}: {last}")
    return took, out.stdout


def _opzoo() -> list[str]:
    script = Path(sys.executable).parent / "opzoo"
    return [str(script)] if script.exists() else [sys.executable, "-m", "opzoo"]


def _measure_one(key: str, rounds: int, figures: dict[str, Figure]) -> None:
    """One run of figure ``key``, added to ``figures``."""
    at = load()
    if key == "assert_correct":
        _, out = _run([sys.executable, "-c", WARM, str(rounds)], "assert_correct(MyReLU)")
        if not out.strip():
            fail("assert_correct(MyReLU) failed: a check of myrelu fails")
        walls = json.loads(out)
        figures["assert_correct first"].add(walls[0], at)
        figures["assert_correct"].add(statistics.median(walls[1:]), at)
    elif key == "check":
        figures["check"].add(
            _run([*_opzoo(), "check", "myrelu", "--profile", "ci"], "opzoo check myrelu")[0], at
        )
    else:
        took, out = _run(
            [*_opzoo(), "check", "--profile", "ci", "--no-autoload", "--json"], "opzoo check (the zoo)"
        )
        figures["zoo"].add(took, at)
        results = json.loads(out)["results"]
        per_op = [r["seconds"] for r in results if r["prop"] == "library" and r["status"] != "skip"]
        figures["library"].add(statistics.median(per_op), at)
        figures["library"].source = f"the zoo's `--json` seconds, {len(per_op)} ops"


def end_to_end(keys: list[str], rounds: int) -> tuple[dict[str, Figure], Figure]:
    """Each figure in ``rounds`` rounds, each run beside one of the unit (``python -c "import
    torch"``): unit then figure in even rounds, figure then unit in odd ones (A B B A)."""
    figures = {k: Figure(k) for k in TARGETS}
    unit = Figure("unit")
    for r in range(rounds):
        for key in keys:
            print(f"  round {r + 1}: {key}", file=sys.stderr, flush=True)
            steps = ["unit", key] if r % 2 == 0 else [key, "unit"]
            for step in steps:
                if step == "unit":
                    at = load()
                    unit.add(_run(list(UNIT), "import torch")[0], at)
                else:
                    _measure_one(step, rounds, figures)
    return figures, unit


def figure_table(figures: dict[str, Figure], unit: Figure, rows: list[Row]) -> list[str]:
    """The end-to-end figures against the unit, and the issue's targets: met or not met."""
    library = figures["library"]
    if not library.seconds and any(r.prop == "library" for r in rows):
        library.seconds = [r.ours for r in rows if r.prop == "library"]  # one per op: their median
        library.source = f"this run's per-property table (in process, warm), {len(library.seconds)} ops"
    u = statistics.median(unit.seconds) if unit.seconds else None
    out = [
        "| figure | median s | runs | load (1 min) | in units of `import torch` | target | met |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, (what, target) in TARGETS.items():
        f = figures[key]
        aim = f"<= {target:g} s" if target is not None else "-"
        if key == "real world":
            out.append(f"| {what} | out of scope here | | | | {aim} | not measured |")
            continue
        if not f.seconds:
            continue
        m = statistics.median(f.seconds)
        loads = f"{min(f.loads):.1f}-{max(f.loads):.1f}" if f.loads else "-"
        units = f"{m / u:.2f}" if u and key != "library" else "-"
        met = "-" if target is None else "met" if m <= target else "not met"
        label = f"{what} ({f.source})" if f.source else what
        out.append(f"| {label} | {m:.2f} | {len(f.seconds)} | {loads} | {units} | {aim} | {met} |")
    if u is not None:
        loads = f"{min(unit.loads):.1f}-{max(unit.loads):.1f}"
        out.append(
            f'| the unit: `python -c "import torch"` | {u:.2f} | {len(unit.seconds)} | {loads} | 1 | - | - |'
        )
    return out + [""]


# -- the record -----------------------------------------------------------------------------------


def heading(commit: str) -> str:
    return f"## Check speed (issue 32), measured {date.today()} at {commit}"


def section(argv: list[str], machine: str, loads: tuple[float, float], tables: list[str]) -> str:
    from _record import git, provenance

    said = (
        f"`benchmarks/check_speed.py {' '.join(argv)}` ({provenance()}). {machine}. Load average (1 min) "
        f"{loads[0]:.1f} at the start, {loads[1]:.1f} at the end: the machine is shared with other "
        "sessions, so the seconds are inflated and move with the load. **The ratios are the figure**: "
        "opzoo against its peer, each pair run side by side in one process on the same inputs (A B B A, "
        'medians); and each end-to-end figure in units of `python -c "import torch"` measured in the same '
        "rounds. The targets are issue 32's, for a quiet 2-core machine; nothing is asserted."
    )
    lines = [heading(git("rev-parse", "--short", "HEAD")), "", textwrap.fill(said, 110), "", *tables]
    return "\n".join(lines)


def record(text: str) -> None:
    """Add ``text`` (a section) to RESULTS.md, replacing a section of the same heading."""
    old = RESULTS.read_text()
    head = text.splitlines()[0]
    if head + "\n" in old:
        before, _, rest = old.partition(head + "\n")
        after = rest[rest.index("\n## ") + 1 :] if "\n## " in rest else ""
        new = before + text.rstrip("\n") + "\n\n" + after
    else:
        new = old.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(new.rstrip("\n") + "\n")
    print(f"wrote a section of {RESULTS}", file=sys.stderr)


def machine() -> str:
    import torch

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


def fail(message: str) -> None:
    """Bad input, or a command that broke: one line, exit status 2."""
    print(f"check_speed.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str]) -> int:
    import opzoo

    args = parse(argv)
    names = [n for n in args.ops.split(",") if n]
    unknown = [n for n in names if n not in (*opzoo.names(), "all")]
    if unknown:
        fail(f"--ops: no op named {', '.join(unknown)}; known: {', '.join(sorted(opzoo.names()))}, or all")
    began = load()
    print(f"load average (1 min) at the start: {began:.2f}", flush=True)
    rows = per_property(names, args.properties, args.rounds) if names else []
    figures, unit = end_to_end(args.figures, args.rounds)
    ended = load()
    tables = []
    if rows:
        tables += ["### Per op and property: opzoo against the peer on the same inputs", ""]
        tables += property_table(rows)
    if args.figures or any(r.prop == "library" for r in rows):
        tables += ["### End to end, and the targets", "", *figure_table(figures, unit, rows)]
    print("\n".join(tables))
    print(f"load average (1 min): {began:.2f} at the start, {ended:.2f} at the end; {machine()}")
    if args.record:
        record(section(argv, machine(), (began, ended), tables))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
