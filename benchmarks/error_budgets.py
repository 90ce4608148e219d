#!/usr/bin/env python3
"""Measure every op's gradient error in each dtype it declares, in units of that dtype's epsilon.

    .venv/bin/python benchmarks/error_budgets.py [NAME ...] [--examples N]

For each op (all registered ops by default) and each dtype, on the inputs its ``reference`` check
sees under the ci profile (50 derandomized examples, the fixed and the edge inputs): ``k = |g - g64|
/ (eps * scale)`` per gradient element (``opzoo.testing.checks._budget``, measured by
``opzoo.testing.running._errors``), and prints a Markdown table: the worst ``k``, the worst ``k_par``
(torch's own reference computed in that dtype), the worst ``k_steps`` (the op's own float64 formula,
each step rounded as in that dtype) and the worst ``k - 2 k_par - 2 k_steps``: what the budget holds
the op to. The output, with the date and commit it prints first, goes into
docs/records/testing.md ("Error budgets, per op").
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import time
from pathlib import Path

import torch

from opzoo.core._loading import load
from opzoo.testing.checks._budget import BUDGETS
from opzoo.testing.running._errors import Errors, error_samples

DTYPES = ("float64", "float32", "bfloat16", "float16")


def _commit() -> str:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "opzoo"], cwd=root, capture_output=True, text=True
    )
    return out.stdout.strip() + (" (with uncommitted changes to opzoo/)" if dirty.stdout.strip() else "")


def _cell(errors: Errors, d: str, budget: float | None) -> str:
    worst, excess = errors.worst(d), errors.excess(d)
    if worst is None:
        return "-"
    shown = f"{worst:.3g}"
    if budget is None or excess is None:
        return shown
    par, steps = errors.worst(d, "par_backward") or 0.0, errors.worst(d, "steps_backward") or 0.0
    return f"{shown} / {par:.3g} / {steps:.3g} / {max(excess, 0.0):.3g}" + (
        " **over**" if excess > budget else ""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument(
        "--examples", type=int, default=None, help="hypothesis examples (default: the ci profile's)"
    )
    args = parser.parse_args()
    reg = load()
    names = args.names or sorted(reg.names())
    print(
        f"measured {datetime.date.today().isoformat()} at commit {_commit()}, torch {torch.__version__}, "
        f"profile ci{f' ({args.examples} examples)' if args.examples else ''}\n"
    )
    budgets = " / ".join(f"{str(d).removeprefix('torch.')} {b:g}" for d, b in BUDGETS.items())
    print(
        "Each cell: worst k / worst k_par / worst k_steps / worst k - 2 k_par - 2 k_steps "
        f"(budgets: {budgets}; "
        "float64: none).\n"
    )
    print("| op | oracle | " + " | ".join(DTYPES) + " | seconds |")
    print("| --- | --- | " + " | ".join("---" for _ in DTYPES) + " | --- |")
    worst_over: list[str] = []
    for name in names:
        began = time.perf_counter()
        errors = error_samples(reg.info(name), examples=args.examples, registry=reg)
        cells = []
        for d in DTYPES:
            budget = BUDGETS.get(getattr(torch, d))
            excess = errors.excess(d)
            cells.append(_cell(errors, d, budget))
            if budget is not None and excess is not None and excess > budget:
                worst_over.append(f"{name} {d}")
        oracle = errors.oracle.split(",")[0].split(" (")[0].removeprefix("the ")
        took = time.perf_counter() - began
        print(f"| {name} | {oracle} | " + " | ".join(cells) + f" | {took:.1f} |", flush=True)
        for note in errors.notes:
            print(f"<!-- {name}: {note} -->")
    print(f"\nover budget: {', '.join(worst_over) or 'none'}")


if __name__ == "__main__":
    main()
