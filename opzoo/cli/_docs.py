"""The ops reference (docs/ops.md), generated from the registry so that it never drifts."""

from __future__ import annotations

import math

from opzoo._table import markdown_table
from opzoo.core._registry import Registry

HEADER = """# Built-in ops

Generated from the registry by `opzoo --no-autoload list --format markdown`; a test fails when this
file is stale. Every op has a hand-written backward (the learnable ones, `nn.Module`s, get theirs from
autograd) and passes `opzoo check`. Kinks are the points where an op is not differentiable, with the
gradient it defines there.
"""


def _num(v: float) -> str:
    return "inf" if v == math.inf else "-inf" if v == -math.inf else f"{v:g}"


def ops_markdown(registry: Registry) -> str:
    """Return a Markdown table of every op that loads: formula, derivative, params, kinks, support."""
    rows = []
    for spec in sorted(registry.load_all(), key=lambda s: s.name):
        c = spec.contract
        params = (
            ", ".join(
                f"`{n}`={_num(p.default)} in [{_num(p.low)}, {_num(p.high)}]" for n, p in c.params.items()
            )
            or "-"
        )
        kinks = ", ".join(f"{_num(k)} (grad {_num(g)})" for k, g in c.kinks_at().items()) or "-"
        domain = (
            "all reals"
            if c.domain == (-math.inf, math.inf)
            else f"({_num(c.domain[0])}, {_num(c.domain[1])})"
        )
        rows.append(
            (
                f"`{spec.name}`",
                spec.kind,
                f"`{c.signature}`",
                f"`{c.formula}`" if c.formula else "-",
                f"`{c.derivative}`" if c.derivative else "-",
                params,
                domain,
                kinks,
                "yes" if c.double_backward else "no",
                ", ".join(c.dtypes),
            )
        )
    header = (
        "op",
        "kind",
        "signature",
        "formula",
        "derivative",
        "params",
        "domain",
        "kinks",
        "double backward",
        "dtypes",
    )
    return HEADER + "\n" + markdown_table(header, rows) + "\n"
