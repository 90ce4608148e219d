"""`opzoo mutate`: how hard the checks push on an op, shown by the wrong backwards they catch."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from opzoo._records import json_safe
from opzoo.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    json_stream,
    registry_from,
    run_options,
    run_parser,
    specs_from,
)
from opzoo.exceptions import ConfigError
from opzoo.testing.mutation._mutants import parse_mutants
from opzoo.testing.mutation._mutants import summaries as mutant_summaries
from opzoo.testing.running._options import MUTATE, in_shard


def add_mutate(sub: Any) -> argparse.ArgumentParser:
    p = run_parser(
        sub,
        MUTATE,
        help="mutation-test the checks: wrong backwards made from each op, and which property catches each",
        description="Wrap each named op (all ops by default) in each mutant below, its source untouched, and "
        "run the op's properties on it: the first property that fails kills the mutant. Reports "
        "the kill rate (mutants that do not apply to an op are not counted), the property that "
        "killed each mutant, and why each survivor survived where a reason can be given. The "
        "control changes nothing and must pass every property. Exits 1 below --min-score, or if "
        "the control fails (the op fails its own checks: see opzoo check).",
        listing="\n\nmutants (--mutant):\n" + mutant_summaries(),
        names="ops to mutate (default: all), or an import path package.module:Class",
    )
    p.add_argument(
        "--mutant",
        "-m",
        action="append",
        metavar="MUTANT",
        help="only these mutants (repeatable or comma-separated)",
    )
    p.add_argument(
        "--min-score",
        metavar="SCORE",
        help="exit 1 if the kill rate is below SCORE: a fraction (0.99) or a percentage (99%%)",
    )
    p.add_argument("--json", action="store_true", help="print the verdicts and scores as JSON")
    return p


def run_mutate(args: argparse.Namespace) -> int:
    options = run_options(args, MUTATE)  # opzoo check's limits: a week, 100,000 examples
    try:
        mutants = parse_mutants(args.mutant)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    minimum = None
    if args.min_score is not None:
        from opzoo.testing.mutation._mutate import parse_score

        try:
            minimum = parse_score(args.min_score)
        except ValueError as exc:
            raise ConfigError(f"--min-score: {exc}") from None
    reg = registry_from(args)
    from opzoo.testing.mutation._mutate import Score, mutate
    from opzoo.testing.running._hooks import RunHooks
    from opzoo.testing.running._parallel import default_jobs
    from opzoo.testing.running._signals import insistent_interrupt

    # a shard of mutate is a share of the ops: each op's control is checked once, in its shard; an
    # import path's module is imported in the workers only
    specs = [s for s in specs_from(reg, args.names, here=False) if in_shard(options.shard, s.name, "")]
    verdicts: list[Any] = []
    began = time.perf_counter()
    try:
        with insistent_interrupt():
            mutate(
                specs,
                mutants,
                props=options.properties,
                jobs=options.jobs or default_jobs(),
                profile=options.profile,
                examples=options.examples,
                registry=RunHooks(reg),
                timeout=options.timeout,
                started=lambda spec: print(
                    f"mutating {spec.name.split('~')[0]} ...", file=sys.stderr, flush=True
                ),
                into=verdicts,
            )
    except KeyboardInterrupt:
        _report(args, verdicts, time.perf_counter() - began, minimum, interrupted=True)
        print(f"opzoo: interrupted after {len(verdicts)} verdict(s)", file=sys.stderr)
        return 130
    _report(args, verdicts, time.perf_counter() - began, minimum)
    total = Score.of(verdicts)
    below = minimum is not None and total.rate is not None and total.rate < minimum
    control_failed = any(v.status == "control failed" for v in verdicts)
    return EXIT_FAILED if below or control_failed else EXIT_OK


def _report(
    args: argparse.Namespace,
    verdicts: list[Any],
    wall: float,
    minimum: float | None,
    *,
    interrupted: bool = False,
) -> None:
    """Print the verdicts, each op's score and the total (or JSON)."""
    from opzoo.testing.mutation._mutate import Score

    ops = list(dict.fromkeys(v.op for v in verdicts))
    scores = {op: Score.of(v for v in verdicts if v.op == op) for op in ops}
    total = Score.of(verdicts)
    if args.json:
        report = {
            "verdicts": [v.to_dict() for v in verdicts],
            "ops": {op: s.to_dict() for op, s in scores.items()},
            "total": total.to_dict(),
            "min_score": minimum,
            "seconds": wall,
            "interrupted": interrupted,
        }
        print(json.dumps(json_safe(report), indent=2), file=json_stream(args))
    elif verdicts:
        _print_verdicts(verdicts, scores)
        print(_score_line(total, len(ops), wall, minimum) + (" before the interrupt" if interrupted else ""))


def _print_verdicts(verdicts: list[Any], scores: dict[str, Any]) -> None:
    """The table of verdicts, each op's score, each survivor and each control that failed."""
    from opzoo._table import text_table

    rows = [
        [v.op, v.mutant, v.status.upper() if v.status == "survived" else v.status, v.why()] for v in verdicts
    ]
    print(text_table(["OP", "MUTANT", "VERDICT", "BY / WHY"], rows))
    print()
    summary = [
        [op, s.killed, s.survived, s.not_applicable, _percent(s.rate), f"{s.seconds:.1f}"]
        for op, s in scores.items()
    ]
    print(text_table(["OP", "KILLED", "SURVIVED", "N/A", "SCORE", "SECONDS"], summary, wrap_last=False))
    survivors = [v for v in verdicts if v.status == "survived"]
    if survivors:
        print()
        for v in survivors:
            print(f"survived: {v.op}~{v.mutant}: {v.why()}")
    for v in verdicts:
        if v.status == "control failed":
            print(f"control failed: {v.op}: {v.why()}")


def _score_line(total: Any, ops: int, wall: float, minimum: float | None) -> str:
    blind = total.survived - total.explained
    counted = total.killed + total.survived
    line = (
        f"\nscore: {total.killed} of {counted} mutant(s) killed ({_percent(total.rate)}), "
        f"{total.survived} survived ({total.explained} explained, {blind} blind spot(s)), "
        f"{total.not_applicable} not applicable; {ops} op(s) in {wall:.1f} s"
    )
    if minimum is not None:
        line += f"; minimum {_percent(minimum)}"
    return line


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.1f}%"
