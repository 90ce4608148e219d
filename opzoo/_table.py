"""Plain-text and Markdown tables for the command line.

Every cell is shown :func:`~opzoo.exceptions.printable`, on one line: a summary, a formula or a
reason from a plugin cannot drive the terminal or break the table."""

from __future__ import annotations

import shutil
from typing import Sequence

from opzoo.exceptions import printable


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]], wrap_last: bool = True) -> str:
    """Return an aligned table; the last column is cut to the terminal width."""
    cells = [[_cell(c) for c in header]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    if wrap_last:
        room = shutil.get_terminal_size((120, 24)).columns - sum(widths[:-1]) - 2 * (len(widths) - 1)
        widths[-1] = max(20, min(widths[-1], room))
    lines = []
    for r in cells:
        padded = [c.ljust(w) if i < len(r) - 1 else _cut(c, w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Return a GitHub-flavoured Markdown table."""

    def esc(c: object) -> str:
        return _cell(None if c is None else str(c).replace("\n", " ")).replace("|", "\\|")

    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _cell(value: object) -> str:
    return "" if value is None else printable(str(value))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
