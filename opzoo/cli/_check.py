"""`opzoo check`: the property tests from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from opzoo._records import json_safe
from opzoo.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    print_json,
    registry_from,
    run_options,
    run_parser,
    specs_from,
)
from opzoo.exceptions import ConfigError, printable
from opzoo.testing.properties import summaries
from opzoo.testing.running._options import CHECK
from opzoo.testing.running._result import reports


def add_check(sub: Any) -> argparse.ArgumentParser:
    p = run_parser(
        sub,
        CHECK,
        help="property-test the ops' hand-written backward against numerical gradients",
        description="Check every property of the named ops (all ops by default) with hypothesis. Exits 1 if "
        "any fails. Checks run side by side in worker processes (--jobs); the results are the "
        "same as one process's, in the same order.",
        listing="\n\nproperties (--property):\n" + summaries(),
        names="ops to check (default: all), or an import path package.module:Class (no plugin needed)",
    )
    p.add_argument("--json", action="store_true", help="print results as JSON")
    return p


def run_check(args: argparse.Namespace) -> int:
    options = run_options(args, CHECK)
    reg = registry_from(args)
    import torch

    if options.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: CUDA is not available here, so nothing would be checked")
    from opzoo._lifetime import STOPPING, exit_status
    from opzoo.testing.running._hooks import RunHooks
    from opzoo.testing.running._parallel import check_all
    from opzoo.testing.running._signals import insistent_interrupt

    # a name given twice is checked once; an import path's module is imported in the workers only
    specs = specs_from(reg, args.names, here=False)
    hooks = RunHooks(reg)
    results: list[Any] = []
    try:
        # Ctrl-C, SIGTERM (`timeout`, a scheduler) and SIGHUP end the loop however often a raise is
        # dropped on the way (see _signals); the workers are stopped on the way out (_parallel).
        with insistent_interrupt(STOPPING):
            check_all(
                specs,
                options,
                registry=hooks,
                into=results,
                # on stderr: stdout may be JSON
                started=lambda spec: print(f"checking {spec.name} ...", file=sys.stderr, flush=True),
            )
    except KeyboardInterrupt as exc:
        # What finished is kept: reported in full (JSON too, marked), then the interrupt ends the
        # command (exit 130 for Ctrl-C, 128 + the signal's number for the others).
        _report(args, results, options.devices, [], interrupted=True)
        by = f" by {exc.signum_name}" if hasattr(exc, "signum") else ""
        print(f"opzoo: interrupted{by} after {len(results)} check(s)", file=sys.stderr)
        return exit_status(exc)
    # The plugins that failed to load (of every op, when every op is checked), then those whose
    # hooks failed during the checks, in whichever process ran them.
    broken = ([] if args.names else reg.failures()) + hooks.failures
    failed = _report(args, results, options.devices, broken)
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
    # Reasons, notes and failures carry what plugins and exceptions say: shown, never acted on.
    for reason, ids in skipped.items():
        shown = f"{len(ids)} check(s)" if len(ids) > 3 else ", ".join(ids)
        print(f"skipped: {printable(reason)}: {shown}")
    for r in results:
        for note in r.notes:
            print(f"note: {r.id}: {printable(note)}")
    for failure in broken:
        print(f"BROKEN {printable(str(failure))}")
    for text in reports(failed):
        print()
        print(text)
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
