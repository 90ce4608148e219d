"""The peer record (issue 28 point 8): torch's gradcheck and gradgradcheck beside opzoo, on the very
inputs opzoo draws, so that nothing the peer catches passes unexplained.

    .venv/bin/python benchmarks/peer_record.py --set zoo -j 2 --json zoo.json
    .venv/bin/python benchmarks/peer_record.py --set fixtures --md fixtures.md
    .venv/bin/python benchmarks/peer_record.py --set native softmax relu --check none
    /tmp/opzoo-real-world/bin/python benchmarks/peer_record.py --set real-world --check green

The real-world set (benchmarks/real_world_ops.py) imports its packages: it runs in the scratch venv of
benchmarks/real_world.py, which that script sets up.

For each op of the set, a ``peer`` property (this script's only) runs through opzoo's own runner under
the ci profile with ``gradient``'s inputs (drawn, two fixed, the edges): hypothesis draws the same
examples as for ``gradient``, because ``peer`` never raises. On each input it runs torch's
``gradcheck`` and ``gradgradcheck`` (float64, torch's defaults, fast and slow mode; slow mode not above
4,096 input elements, nor where its full Jacobian is larger than an elementwise op's at that size:
``_peer._jacobian``) on the op's differentiable outputs, and opzoo's ``gradient`` and ``double_backward``
checks (as ``replay`` does), keeping what opzoo noted (a kink, a tie, a point that is not finite).
Then opzoo's other properties on the op (a full check; ``--check green``: only of the ops the peer passes).

Two lists per set:

- peer fails, opzoo passes (per input): explained by what opzoo noted or skipped there, or by a
  declared surrogate or by-design backward (not the derivative, on purpose); otherwise a blind spot, unless
  another of opzoo's properties fails the op at that very input (then opzoo does not pass it: both
  fail, listed apart);
- opzoo fails, peer passes (per op): the properties that failed, each seeing what the peer cannot.

Each op is one task on opzoo's worker processes (``run_pool``), a time limit each (``--limit``).
Not run by CI: a record (benchmarks/RESULTS.md, docs/records/testing.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _peer import CHECKS, ROWS, fails, install, judge

ROOT = Path(__file__).resolve().parent.parent
SETS = ("zoo", "correct", "wrong", "upstream", "native", "real-world")


# -- one op, on a worker --------------------------------------------------------------------------


@dataclass
class Record:
    """One task's outcome: the peer's rows, or the op's full check (property, status, reason)."""

    op: str
    what: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    results: list[tuple[str, str, str]] = field(default_factory=list)
    seconds: float = 0.0  # CPU seconds of the task
    timed_out: bool = False
    surrogate: bool = False
    by_design: bool = False


def work(spec: Any, what: str, *, device: str = "cpu", timeout: float | None = None) -> Record:
    """The task ``what`` of one op: "peer" (the rows), or "check" (every property but peer)."""
    from opzoo.testing.properties import PROPERTIES
    from opzoo.testing.running._runner import check, check_property

    began = time.process_time()
    record = Record(spec.name, what, surrogate=spec.contract.surrogate is not None)
    record.by_design = spec.contract.by_design is not None
    if what == "peer":
        ROWS.clear()
        result = check_property(spec, "peer", profile="ci", device=device, timeout=timeout)
        record.rows, record.timed_out = list(ROWS), result.timed_out
        if result.status == "fail":
            record.results.append(("peer", "fail", result.reason or ""))
    else:
        props = [p for p in PROPERTIES if p != "peer"]
        results = check(spec, props, devices=[device], profile="ci", timeout=timeout)
        record.results = [(r.prop, r.status, (r.reason or "")[:300]) for r in results]
        record.timed_out = any(r.timed_out for r in results)
    record.seconds = time.process_time() - began
    return record


# -- the sets -------------------------------------------------------------------------------------


def registry(which: str) -> Any:
    """The ops of a set, in a registry: the zoo as installed, or the fixtures of tests/ (correct,
    wrong, upstream), benchmarks/native_table.py's or benchmarks/real_world_ops.py's, each in a
    private one."""
    import opzoo

    if which == "zoo":
        from opzoo.core._loading import load

        return load()
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]
    reg = opzoo.Registry()
    for name, target in _fixtures(which).items():
        reg.register(target, name=name)
    return reg


def _fixtures(which: str) -> dict[str, Any]:
    if which == "correct":
        import correct_ops as c

        extra = {"rounds_by_path": c.RoundsByPath, "one_ulp_apart": c.OneUlpApart}
        return {**c.CORRECT, **c.AT_KINKS, **extra, **c.DECLARED}
    if which == "wrong":
        import wrong_ops

        return {name: cls for name, (cls, _, _) in wrong_ops.WRONG.items()}
    if which == "upstream":  # tests/upstream_ops.py, as tests/test_declare.py declares them
        import test_declare as d

        names = ("SPARSEMAX", "NLL", "PAIRMEAN", "SCALE", "GRAM", "SIGMOID_SPIKE", "PIECEWISE_SPIKE")
        names += ("SPARSEMAX_BISECT", "MASKED", "WITH_SIGN", "WITH_CUBE", "SINE_SPIKE")
        return {f"up_{n.lower()}": getattr(d, n) for n in names}
    if which == "real-world":  # the packages of benchmarks/real_world.py's scratch venv
        import real_world_ops

        return {name: entry.op for name, entry in real_world_ops.OPS.items()}
    import native_table

    return {name: declared for name, (declared, _) in native_table.OPS.items()}


@dataclass
class Op:
    """One op's outcome: its rows judged, its full check's failures, whether a task timed out."""

    name: str
    rows: list[tuple[dict[str, Any], str, str]]
    failed: dict[str, str]  # property -> reason, from the full check (and the peer task's own)
    timed_out: bool
    seconds: float

    @property
    def blind(self) -> bool:
        return any(c == "blind" for _, c, _ in self.rows)

    @property
    def peer_red(self) -> bool:
        return any(c in ("both fail", "explained", "blind") for _, c, _ in self.rows)


def gather(names: list[str], done: dict[Any, Any]) -> list[Op]:
    """The ops' outcomes from the pool's records (a crashed or killed task: a failed "task")."""
    ops = []
    for i, name in enumerate(names):
        records = [r for (j, _, _), r in done.items() if j == i]
        rows, failed, timed_out, seconds = [], {}, False, 0.0
        for r in records:
            if not isinstance(r, Record):  # the pool's Result for a task that crashed or was killed
                failed[f"task ({r.prop})"] = r.reason or r.status
                timed_out = True
                continue
            timed_out |= r.timed_out
            seconds += r.seconds
            rows += [(row, *judge(row, r.surrogate, r.by_design)) for row in r.rows]
            for row in r.rows:  # opzoo's own verdicts on the peer's inputs (all, without a full check)
                verdicts = {**row["opzoo"], **row.get("opzoo_other", {})}
                failed.update({p: v for p, v in verdicts.items() if fails(v) and p not in failed})
            failed.update({p: why for p, status, why in r.results if status == "fail"})
        ops.append(Op(name, rows, failed, timed_out, seconds))
    return ops


def counts(ops: list[Op]) -> dict[str, Any]:
    """The set's figures: ops, inputs, and each class of input and op."""
    classes = [c for op in ops for _, c, _ in op.rows]
    only = [op for op in ops if op.failed and not op.peer_red]
    by_prop: dict[str, int] = {}
    for op in only:
        for prop in op.failed:
            by_prop[prop] = by_prop.get(prop, 0) + 1
    return {
        "ops": len(ops),
        "inputs": len(classes),
        **{c: classes.count(c) for c in ("agree", "both fail", "opzoo only", "explained", "blind")},
        "ops peer red": sum(op.peer_red for op in ops),
        "ops opzoo red": sum(bool(op.failed) for op in ops),
        "ops opzoo red, peer green": len(only),
        # the promise: an op the peer fails somewhere, unexplained, and opzoo passes everywhere
        "ops opzoo green, peer red unexplained": [op.name for op in ops if op.blind and not op.failed],
        "by property": by_prop,
        "timed out": [op.name for op in ops if op.timed_out],
        "cpu seconds": round(sum(op.seconds for op in ops)),
    }


# -- the record -----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(which: str, ops: list[Op], figures: dict[str, Any]) -> str:
    """The set's section for benchmarks/RESULTS.md: the figures and the two lists."""
    f = figures
    red = f"opzoo red on {f['ops opzoo red']} ({f.get('fully checked', 0)} fully checked)"
    lines = [
        f"### {which}: {f['ops']} ops, {f['inputs']} inputs",
        "",
        f"Inputs: both pass {f['agree']}, both fail {f['both fail']}, opzoo fails and the peer passes "
        f"{f['opzoo only']}, the peer fails and opzoo passes {f['explained'] + f['blind']} "
        f"({f['explained']} explained, {f['blind']} unexplained). Ops: the peer red on {f['ops peer red']}, "
        f"{red}, opzoo red and the peer green on {f['ops opzoo red, peer green']}; {f['cpu seconds']} CPU s"
        + (f"; timed out: {', '.join(f['timed out'])}" if f["timed out"] else ""),
        "",
    ]
    lines += _peer_only(ops) + _by_another(ops) + _opzoo_only(ops)
    return "\n".join(lines) + "\n"


def _peer_only(ops: list[Op]) -> list[str]:
    out = ["The peer fails, opzoo passes (per op: inputs, which of the peer's checks, why):", ""]
    out += ["| op | inputs | the peer fails | explained by |", "| --- | --- | --- | --- |"]
    for op in ops:
        spots = [(row, c, why) for row, c, why in op.rows if c in ("explained", "blind")]
        if not spots:
            continue
        failing = sorted({k for row, _, _ in spots for k in CHECKS if fails(row["peer"][k])})
        whys = sorted({why if c == "explained" else "**unexplained**" for _, c, why in spots})
        kinds = sorted({row["kind"] for row, _, _ in spots})
        shown = f"{len(spots)} ({', '.join(kinds)})"
        out.append(f"| {op.name} | {shown} | {', '.join(failing)} | {_cell('; '.join(whys)[:400])} |")
    for op in ops:
        for row, c, why in op.rows:
            if c == "blind":
                failed = {k: v for k, v in row["peer"].items() if fails(v)}
                red = f"the op red by {', '.join(op.failed)}" if op.failed else "**the op green**"
                slow = {k: v[:120] for k, v in row.get("opzoo_slow", {}).items()}
                where = f"{row['kind']} {row['shapes']} {row['params']}" + (
                    f" (opzoo slow: {slow})" if slow else ""
                )
                out.append(f"- unexplained ({red}): `{op.name}` {where}: {failed}")
    return out + [""]


def _by_another(ops: list[Op]) -> list[str]:
    """The inputs the peer fails where opzoo's gradient and double_backward pass unexplained, and
    another of its properties fails the op at that very input (counted as both failing)."""
    out = []
    for op in ops:
        rows = [row for row, c, _ in op.rows if c == "both fail" and "opzoo_other" in row]
        failing = [row for row in rows if any(fails(v) for v in row["opzoo_other"].values())]
        if not failing:
            continue
        props = sorted({p for row in failing for p, v in row["opzoo_other"].items() if fails(v)})
        peer = sorted({k for row in failing for k in CHECKS if fails(row["peer"][k])})
        first = next(v for v in failing[0]["opzoo_other"].values() if fails(v))
        out.append(
            f"- `{op.name}`: {len(failing)} inputs the peer fails ({', '.join(peer)}) where opzoo's gradient "
            f"and double_backward pass unnoted, and opzoo fails the op at that very input by "
            f"{', '.join(props)} ({_cell(first[:160])}): counted as both failing"
        )
    return ["The peer fails, opzoo fails the same input by another property:", "", *out, ""] if out else []


def _opzoo_only(ops: list[Op]) -> list[str]:
    out = ["opzoo fails, the peer passes every input (per op: the properties, the first reason):", ""]
    out += ["| op | properties | reason |", "| --- | --- | --- |"]
    for op in ops:
        if op.failed and not op.peer_red:
            first = next(iter(op.failed.values()))
            out.append(f"| {op.name} | {', '.join(op.failed)} | {_cell(first[:200])} |")
    return out + [""]


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_set(
    which: str, names: list[str], jobs: int, limit: float, full: str
) -> tuple[list[Op], dict[str, Any]]:
    """The peer (and the full check: of every op, of those the peer passes, or of none) of every op
    of one set, on ``jobs`` workers."""
    reg = registry(which)
    specs = [reg.info(n) for n in names] if names else sorted(reg.load_all(), key=lambda s: s.name)
    began, cpu = time.perf_counter(), _cpu()
    tasks = [(i, what, "cpu") for i in range(len(specs)) for what in ("peer", "check")[: 1 + (full == "all")]]
    done = _pool(specs, tasks, jobs, limit)
    if full == "green":
        ops = gather([s.name for s in specs], done)
        done.update(
            _pool(specs, [(i, "check", "cpu") for i, op in enumerate(ops) if not op.peer_red], jobs, limit)
        )
    print(f"\n{which}: {time.perf_counter() - began:.0f} s wall, {_cpu() - cpu:.0f} s CPU", flush=True)
    ops = gather([s.name for s in specs], done)
    figures = counts(ops)
    figures["fully checked"] = sum(any(w == "check" for j, w, _ in done if j == i) for i in range(len(specs)))
    return ops, figures


def _pool(specs: list[Any], tasks: list[Any], jobs: int, limit: float) -> dict[Any, Any]:
    from opzoo.testing.running._parallel import run_pool

    started = lambda s: print(s.name, end=" ", flush=True)  # noqa: E731
    return run_pool(specs, tasks, work, jobs=jobs, limit=limit, timeout=limit, started=started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="only these ops (of the one set chosen)")
    parser.add_argument("--set", action="append", choices=(*SETS, "fixtures"), help="default: zoo, fixtures")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per op and task (default 300)")
    parser.add_argument(
        "--check",
        choices=("all", "green", "none"),
        default="all",
        help="opzoo's full check of every op (default), of those the peer passes, or of none",
    )
    parser.add_argument("--json", help="write every row and verdict here")
    parser.add_argument("--md", help="write the sections for benchmarks/RESULTS.md here")
    args = parser.parse_args()
    chosen = [
        s
        for c in args.set or ["zoo", "fixtures"]
        for s in (("correct", "wrong", "upstream") if c == "fixtures" else (c,))
    ]
    install()
    sections, dump = [], {}
    for which in chosen:
        ops, figures = run_set(which, args.names, args.jobs, args.limit, args.check)
        print(json.dumps(figures))
        sections.append(markdown(which, ops, figures))
        print(sections[-1], flush=True)
        dump[which] = {"figures": figures, "ops": [dataclasses.asdict(op) for op in ops]}
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=1, default=str))
    if args.md:
        Path(args.md).write_text("\n".join(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
