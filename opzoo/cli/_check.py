"""`opzoo check`: the property tests from the command line."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any, Sequence

from opzoo._records import json_safe
from opzoo.cli._common import EXIT_FAILED, EXIT_OK, check_run_limits, print_json, registry_from
from opzoo.exceptions import ConfigError
from opzoo.testing.properties import parse_properties, summaries
from opzoo.testing.running._profiles import HELP as PROFILES_HELP
from opzoo.testing.running._profiles import PROFILES


def add_check(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "check",
        help="property-test the ops' hand-written backward against numerical gradients",
        description=textwrap.fill(
            "Check every property of the named ops (all ops by default) with hypothesis. Exits 1 if "
            "any fails. Checks run side by side in worker processes (--jobs); the results are the "
            "same as one process's, in the same order."
        )
        + "\n\nproperties (--property):\n"
        + summaries(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="ops to check (default: all), or an import path package.module:Class (no plugin needed)",
    )
    p.add_argument(
        "--property",
        "-p",
        action="append",
        metavar="PROP",
        help="check only these properties (repeatable or comma-separated)",
    )
    p.add_argument("--examples", type=int, metavar="N", help="hypothesis examples per property")
    p.add_argument("--profile", choices=PROFILES, help=PROFILES_HELP)
    p.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="hypothesis seed for a profile that is not derandomized (a failure's reproduce line names it)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda", "all"),
        default="all",
        help="where to run (default: all; cuda is skipped without CUDA)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wall-clock limit per property of an op (default 60); past it the op counts as hung",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        metavar="N",
        help="worker processes that run checks side by side (default: one per usable CPU on Linux, "
        "else 1; 1: all in this process)",
    )
    p.add_argument("--json", action="store_true", help="print results as JSON")
    return p


def run_check(args: argparse.Namespace) -> int:
    check_run_limits(args)
    try:
        props = parse_properties(args.property)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    reg = registry_from(args)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: CUDA is not available here, so nothing would be checked")
    from opzoo.testing.running._parallel import check_all, default_jobs
    from opzoo.testing.running._signals import insistent_interrupt

    if args.names:
        from opzoo.core._registry import lookup

        # A name given twice is checked once; an import path (package.module:Class) as it is.
        specs = [lookup(reg, n) for n in dict.fromkeys(args.names)]
    else:
        specs = sorted(reg.load_all(), key=lambda s: s.name)
    devices = ("cpu", "cuda") if args.device == "all" else (args.device,)
    from opzoo._lifetime import STOPPING, exit_status

    results = []
    try:
        # Ctrl-C, SIGTERM (`timeout`, a scheduler) and SIGHUP end the loop however often a raise is
        # dropped on the way (see _signals); the workers are stopped on the way out (_parallel).
        with insistent_interrupt(STOPPING):
            check_all(
                specs,
                props,
                devices=devices,
                jobs=args.jobs or default_jobs(),
                into=results,
                # on stderr: stdout may be JSON
                started=lambda spec: print(f"checking {spec.name} ...", file=sys.stderr, flush=True),
                profile=args.profile,
                examples=args.examples,
                registry=reg,
                seed=args.seed,
                timeout=args.timeout,
            )
    except KeyboardInterrupt as exc:
        # What finished is kept: reported in full (JSON too, marked), then the interrupt ends the
        # command (exit 130 for Ctrl-C, 128 + the signal's number for the others).
        _report(args, results, devices, [], interrupted=True)
        by = f" by {exc.signum_name}" if hasattr(exc, "signum") else ""
        print(f"opzoo: interrupted{by} after {len(results)} check(s)", file=sys.stderr)
        return exit_status(exc)
    # After the checks: a plugin's input-strategy hook that failed during them is reported too.
    broken = [] if args.names else reg.failures()
    failed = _report(args, results, devices, broken)
    return EXIT_FAILED if failed or broken else EXIT_OK


def _report(
    args: argparse.Namespace,
    results: list[Any],
    devices: Sequence[str],
    broken: list[Any],
    *,
    interrupted: bool = False,
) -> bool:
    """Print the results (the table, skips, notes and each failure's report, or JSON); whether any
    failed."""
    failed = [r for r in results if r.status == "fail"]
    if args.json:
        report = {
            "results": [r.to_dict() for r in results],
            "broken": [str(f) for f in broken],
            "interrupted": interrupted,
        }
        print_json(args, json.dumps(json_safe(report), indent=2, default=str))
        return bool(failed)
    if not results:
        return False
    _print_check_table(results, devices)
    skipped = {}
    for r in results:
        if r.status == "skip":
            skipped.setdefault(r.reason, []).append(r.id)
    for reason, ids in skipped.items():
        print(
            f"skipped: {reason}: {len(ids)} check(s)"
            if len(ids) > 3
            else f"skipped: {reason}: {', '.join(ids)}"
        )
    for r in results:
        for note in r.notes:
            print(f"note: {r.id}: {note}")
    for failure in broken:
        print(f"BROKEN {failure}")
    for r in failed:
        print()
        print(r.report())
    passed = sum(r.status == "pass" for r in results)
    print(
        f"\n{passed} passed, {len(failed)} failed, {len(results) - passed - len(failed)} skipped"
        + (f", {len(broken)} broken plugin(s)" if broken else "")
        + (" before the interrupt" if interrupted else "")
    )
    return bool(failed)


def _print_check_table(results: list[Any], devices: Sequence[str]) -> None:
    from opzoo._table import text_table

    props = list(dict.fromkeys(r.prop for r in results))
    ops = list(dict.fromkeys(r.op for r in results))
    cell = {(r.op, r.prop, r.device): r.status for r in results}
    rows = []
    for op in ops:
        row = [op]
        for prop in props:
            statuses = [cell.get((op, prop, d), "") for d in devices]
            shown = [s for s in statuses if s != "skip"] or statuses[:1]
            row.append("FAIL" if "fail" in shown else shown[0])
        rows.append(row)
    print(text_table(["OP", *props], rows, wrap_last=False))
