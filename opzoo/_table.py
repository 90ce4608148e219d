"""Plain-text and Markdown tables for the command line."""

from __future__ import annotations

import shutil
from typing import Sequence


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]], wrap_last: bool = True) -> str:
    """Return an aligned table; the last column is cut to the terminal width."""
    cells = [[str(c) for c in header]] + [["" if c is None else str(c) for c in r] for r in rows]
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
        return ("" if c is None else str(c)).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
