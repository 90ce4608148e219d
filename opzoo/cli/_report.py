"""`opzoo report`: the checks, the error budgets and the derivatives of some ops, as one HTML file."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from opzoo.cli._common import EXIT_FAILED, EXIT_OK, registry_from, run_options, run_parser, specs_from
from opzoo.testing.running._options import REPORT


def add_report(sub: Any) -> argparse.ArgumentParser:
    p = run_parser(
        sub,
        REPORT,
        help="write one self-contained HTML report: verdicts, derivative plots, error histograms",
        description="Run the properties of the named ops as opzoo check does (on the CPU) and write one HTML "
        "file with no outside references: the verdict table, each failure with its reproduce "
        "lines, for an elementwise op a plot of the forward, the hand-written backward and the "
        "oracle's derivative with kinks and failing examples marked, and for every op a histogram "
        "per dtype of the gradient's error in units of that dtype's epsilon. Needs matplotlib. "
        "Exits 1 if any check failed (the report is written all the same).",
        names="ops to report on, or import paths pkg.mod:Class",
        nargs="+",
    )
    p.add_argument(
        "--html", required=True, metavar="FILE", help="where to write the report (replaced atomically)"
    )
    p.add_argument(
        "--mutate",
        action="store_true",
        help="add the mutation score of the ops (opzoo mutate), through the same properties and examples",
    )
    return p


def run_report(args: argparse.Namespace) -> int:
    options = run_options(args, REPORT)  # the same limits as opzoo check's
    from opzoo import _files

    # a destination opzoo would not replace is refused before minutes of checks, not after
    _files.check_destination("report", args.html)
    from opzoo.report import _report

    _report.pyplot()  # a missing matplotlib is said before anything runs
    reg = registry_from(args)
    from opzoo.testing.running._hooks import RunHooks
    from opzoo.testing.running._parallel import default_jobs
    from opzoo.testing.running._signals import insistent_interrupt

    specs = specs_from(reg, args.names, here=False)  # an import path's module: in the workers only
    with insistent_interrupt():
        report = _report.build(
            specs,
            props=options.properties,
            profile=options.profile,
            examples=options.examples,
            jobs=options.jobs or default_jobs(),
            registry=RunHooks(reg),
            timeout=options.timeout,
            mutation=args.mutate,
            started=lambda spec: print(f"checking {spec.name} ...", file=sys.stderr, flush=True),
        )
    _report.write(args.html, report.html)
    failed = sum(r.status == "fail" for r in report.results)
    ended = f", {len(report.problems)} op(s) that ended or hung their worker" if report.problems else ""
    print(f"wrote {args.html}: {len(specs)} op(s), {report.plots} plot(s), {failed} failed check(s){ended}")
    return EXIT_FAILED if report.failed else EXIT_OK
