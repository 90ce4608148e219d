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
                f"{r['baseline']:.4g} {r['unit']} | {r['ratio']:.2f}x | {r['target'] or '-'} |"
            )
            if r.get("imports"):
                lines.append(f"| | {r['imports']} | | | | |")
        lines.append("")
    notes = ""
    if RESULTS.exists() and MARK in RESULTS.read_text():
        notes = RESULTS.read_text().split(MARK, 1)[1]
    RESULTS.write_text("\n".join(lines) + "\n" + MARK + notes)
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
