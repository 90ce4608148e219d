#!/usr/bin/env python3
"""Run `opzoo bench --json` and write benchmarks/RESULTS.md from it.

    python3 dev.py setup && .venv/bin/python benchmarks/record.py [opzoo bench options]

The notes in RESULTS.md below the generated tables are kept (everything after the line
"<!-- notes -->"), so explanations of missed targets survive a fresh run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
MARK = "<!-- notes -->"


# The targets the issues set, by section; opzoo bench itself only measures.
PIECEWISE_LINEAR = {"myrelu", "leaky_relu", "hardtanh", "hardsigmoid"}
EXAMPLE_PLUGINS = ("opzoo_bentid", "opzoo_smooth")


def target(row: dict) -> float | None:
    """The target for this row's ratio (or, for --help, milliseconds), where there is one."""
    if row["section"] == "op speed" and row.get("builtin"):
        n = row["elements"]
        if row["name"] == "linear":
            return 1.05
        if row["name"] in ("softmax", "logsumexp", "sse", "layer_norm"):
            return 1.5
        if row["name"] == "myrelu":
            return 1.5 if n < 100_000 else 1.15
        if n == 1_000_000:
            return 1.3 if row["name"] in PIECEWISE_LINEAR else 2.0
    if row["section"] == "saved memory" and row.get("builtin"):
        return 1.0  # bytes per element over the reference
    if row["section"] == "trainer":
        return 1.05
    if row["section"] == "start-up" and row["name"] == "opzoo --help":
        return 500.0  # ms, absolute
    return None


def verdict(row: dict) -> str:
    goal = target(row)
    if goal is None:
        return ""
    if row["section"] == "saved memory":
        return f"<= +{goal:g} B: " + ("met" if row["over_reference"] <= goal else "MISSED")
    if row["section"] == "start-up":
        return f"< {goal:g} ms: " + ("met" if row["ours"] < goal else "MISSED")
    return f"<= {goal:g}x: " + ("met" if row["ratio"] <= goal else "MISSED")


def plugin_imports() -> str:
    """Which example-plugin modules `opzoo list` and `opzoo.names()` import (lazy loading)."""
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from opzoo.cli import main; main(['list']); "
            f"print(sorted(m for m in sys.modules if m.startswith({EXAMPLE_PLUGINS!r})), file=sys.stderr)",
        ],
        capture_output=True,
        text=True,
    )
    named = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, opzoo; opzoo.names(); "
            f"print(sorted(m for m in sys.modules if m.startswith(('torch', *{EXAMPLE_PLUGINS!r}))))",
        ],
        capture_output=True,
        text=True,
    )
    last = listed.stderr.strip().splitlines()[-1] if listed.stderr.strip() else ""
    return f"plugin modules imported by opzoo list: {last}; by opzoo.names(): {named.stdout.strip()}"


def main(argv: list[str]) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "opzoo", "--no-autoload", "bench", "--json", *argv],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return out.returncode
    data = json.loads(out.stdout)
    m = data["machine"]
    lines = [
        "# Benchmark results",
        "",
        f"Recorded {date.today()} by `benchmarks/record.py` (`opzoo --no-autoload bench`): every ratio is",
        "opzoo / baseline, both measured side by side in one process, alternating, median of the repeats.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']} with {m['torch_threads']} threads, "
        f"Python {m['python']}, GPU: {m['cuda'] or 'none'}.",
        "",
    ]
    sections: dict[str, list[dict]] = {}
    for row in data["rows"]:
        sections.setdefault(row["section"], []).append(row)
    for section, rows in sections.items():
        lines += [
            f"## {section}",
            "",
            "| op / what | size | opzoo | baseline | ratio | target |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['name']} | {r['detail']} | {r['ours']:.4g} {r['unit']} | "
                f"{r['baseline']:.4g} {r['unit']} | {r['ratio']:.2f}x | {verdict(r) or '-'} |"
            )
        lines.append("")
        if section == "start-up":
            lines += [plugin_imports(), ""]
    notes = ""
    if RESULTS.exists() and MARK in RESULTS.read_text():
        notes = RESULTS.read_text().split(MARK, 1)[1]
    RESULTS.write_text("\n".join(lines) + "\n" + MARK + notes)
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
