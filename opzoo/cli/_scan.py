"""`opzoo scan`: the Functions of installed packages found, their contracts inferred and checked."""

from __future__ import annotations

import argparse
import json
from typing import Any

from opzoo.cli._common import EXIT_FAILED, EXIT_OK, print_json


def add_scan(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "scan",
        help="find every autograd.Function in installed packages, infer a contract for each, check it",
        description="Import every module of each package in child processes (one that fails, hangs, ends "
        "the process or changes torch's global state is listed, not used), infer a contract for each "
        "torch.autograd.Function found by probing its forward, check those inferred, and print the "
        "verdicts with each inferred declaration, ready to paste. A Function scan cannot infer is "
        "listed with why. Nothing of the packages runs in this process. Exits 1 if an inferred "
        "verdict is red.",
    )
    p.add_argument("packages", nargs="+", metavar="PKG", help="installed packages (import names) to scan")
    p.add_argument(
        "--property",
        action="append",
        dest="properties",
        metavar="NAME",
        help="check only these properties (repeat or comma-separate; default: all)",
    )
    p.add_argument("--profile", default="ci", help="hypothesis profile of the checks (default: ci)")
    p.add_argument("-j", "--jobs", type=int, help="worker processes (default: one per usable CPU)")
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds per property of an op, and for probing each Function (default: 60)",
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    return p


def run_scan(args: argparse.Namespace) -> int:
    from opzoo.exceptions import ConfigError
    from opzoo.testing.running._options import OptionError
    from opzoo.testing.scan._scan import scan, table

    properties = [p.strip() for group in args.properties or () for p in group.split(",") if p.strip()]
    try:
        report = scan(
            *args.packages, properties=properties, profile=args.profile, jobs=args.jobs, timeout=args.timeout
        )
    except OptionError as exc:
        flag = "--property" if exc.option == "properties" else f"--{exc.option}"
        raise ConfigError(exc.naming(flag)) from None
    if args.json:
        print_json(args, json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(table(report))
    return EXIT_FAILED if report.red else EXIT_OK
