"""`opzoo list` and `opzoo info`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from opzoo._records import json_safe
from opzoo.cli._common import EXIT_OK, print_json, registry_from
from opzoo.exceptions import printable


def add_list(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("list", help="list registered ops and broken plugins")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON")
    fmt.add_argument(
        "--format",
        choices=("table", "markdown", "names"),
        default="table",
        help="table (default), markdown (the ops reference in docs/ops.md), or names "
        "only (imports no plugin)",
    )
    return p


def run_list(args: argparse.Namespace) -> int:
    reg = registry_from(args)
    if args.format == "names":
        print("\n".join(reg.names()))
        return EXIT_OK
    if args.format == "markdown":
        from opzoo.cli._docs import ops_markdown

        print(ops_markdown(reg))
        return EXIT_OK
    rows = reg.rows()
    if args.json:
        print_json(args, json.dumps(json_safe(rows), indent=2))
        return EXIT_OK
    from opzoo._table import text_table

    print(
        text_table(
            ("NAME", "SOURCE", "STATUS", "SIGNATURE", "SUMMARY"),
            [(r["name"], r["source"], r["status"], r["signature"] or "-", r["summary"]) for r in rows],
        )
    )
    broken = sum(r["status"] != "ok" for r in rows)
    if broken:
        print(
            f"\n{broken} problem(s); 'opzoo info NAME' shows one, --strict makes them errors", file=sys.stderr
        )
    return EXIT_OK


def add_info(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("info", help="describe one op: contract, source, module")
    p.add_argument("name", help="op name, or dist:name to pick one source")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def run_info(args: argparse.Namespace) -> int:
    spec = registry_from(args).info(args.name)
    d = spec.to_dict()
    if args.json:
        print_json(args, json.dumps(json_safe(d), indent=2, default=str))
        return EXIT_OK
    width = max(len(k) for k in d)
    for key, value in d.items():
        if key == "params":
            value = "; ".join(_param_text(name, p) for name, p in value.items())
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        # every value may be a plugin's words: shown, never acted on by the terminal
        print(f"{key.ljust(width)}  {'-' if value in (None, '') else printable(str(value))}")
    return EXIT_OK


def _param_text(name: str, p: dict[str, Any]) -> str:
    """A parameter as ``opzoo info`` shows it: ``alpha=1.0 in [0, 10] (what it is)``, the range left
    out where there is none (a Dim, a choice)."""
    low, high = p.get("low"), p.get("high")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
    bounded = numbers and (low, high) != (-math.inf, math.inf) and low != high
    text = f"{name}={p.get('default')!r}" + (f" in [{low:g}, {high:g}]" if bounded else "")
    return text + (f" ({p['doc']})" if p.get("doc") else "")
