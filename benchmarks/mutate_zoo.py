"""The mutation record (issue 22): `opzoo mutate` over every registered op and over the correct fixture
ops of tests/correct_ops.py, under the ci profile; the kill rate, every survivor with its reason, the
time per op and in all.

    .venv/bin/python benchmarks/mutate_zoo.py                 # both sets, all cores
    .venv/bin/python benchmarks/mutate_zoo.py --set zoo -j 2 --json zoo.json
    .venv/bin/python benchmarks/mutate_zoo.py --set fixtures myrelu   # some ops only

Time per op is the sum of its checks' seconds (on any worker); the wall time of each set is the
run's. CPU seconds (this process and its workers) are printed too: on a shared machine the wall time
is pessimistic, CPU / jobs is what an idle machine would take.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _fixtures() -> Any:
    """The correct fixture ops the suite holds to every property, in a registry of their own."""
    sys.path.insert(0, str(ROOT / "tests"))
    import correct_ops as c

    import opzoo

    reg = opzoo.Registry()
    ops = {**c.CORRECT, **c.AT_KINKS, "rounds_by_path": c.RoundsByPath, "one_ulp_apart": c.OneUlpApart}
    for name, cls in ops.items():
        reg.register(cls, name=name)
    for name, declared in c.DECLARED.items():
        reg.register(declared, name=name)
    return reg


def run(name: str, reg: Any, names: list[str], jobs: int) -> dict[str, Any]:
    from opzoo.testing.mutation._mutate import Score, mutate

    specs = [reg.info(n) for n in names] if names else sorted(reg.load_all(), key=lambda s: s.name)
    began, cpu = time.perf_counter(), _cpu()
    verdicts = mutate(
        specs, jobs=jobs, profile="ci", registry=reg, started=lambda s: print(".", end="", flush=True)
    )
    wall, cpu = time.perf_counter() - began, _cpu() - cpu
    print()
    ops = {s.name: Score.of(v for v in verdicts if v.op == s.name) for s in specs}
    total = Score.of(verdicts)
    print(f"\n== {name}: {len(specs)} op(s), {wall:.0f} s wall, {cpu:.0f} s CPU, {jobs} job(s)")
    print(f"{'op':20s} {'killed':>6s} {'surv.':>6s} {'n/a':>4s} {'score':>7s} {'seconds':>8s}")
    for op, s in ops.items():
        rate = "-" if s.rate is None else f"{100 * s.rate:.1f}%"
        print(f"{op:20s} {s.killed:6d} {s.survived:6d} {s.not_applicable:4d} {rate:>7s} {s.seconds:8.1f}")
    for v in verdicts:
        if v.status in ("survived", "control failed", "unjudged"):
            print(f"{v.status}: {v.op}~{v.mutant}: {v.why()}")
    rate = "-" if total.rate is None else f"{100 * total.rate:.2f}%"
    print(
        f"total: {total.killed} of {total.killed + total.survived} killed ({rate}), "
        f"{total.survived} survived ({total.explained} explained), "
        f"{total.not_applicable} not applicable, {total.unjudged} unjudged"
    )
    killers: dict[str, int] = {}
    for v in verdicts:
        if v.status == "killed":
            killers[v.prop] = killers.get(v.prop, 0) + 1
    print("killed by: " + ", ".join(f"{p} {n}" for p, n in sorted(killers.items(), key=lambda kv: -kv[1])))
    return {
        "set": name,
        "wall": wall,
        "cpu": cpu,
        "jobs": jobs,
        "verdicts": [v.to_dict() for v in verdicts],
        "ops": {op: s.to_dict() for op, s in ops.items()},
        "total": total.to_dict(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="only these ops (of the set chosen)")
    parser.add_argument("--set", choices=("zoo", "fixtures", "both"), default="both")
    parser.add_argument("-j", "--jobs", type=int, default=None, help="worker processes (default: every CPU)")
    parser.add_argument("--json", help="write the verdicts here")
    args = parser.parse_args()
    from opzoo.core._loading import load
    from opzoo.testing.running._parallel import default_jobs

    jobs = args.jobs or default_jobs()
    out = []
    if args.set in ("zoo", "both"):
        out.append(run("zoo", load(), args.names, jobs))
    if args.set in ("fixtures", "both"):
        out.append(run("correct fixture ops", _fixtures(), args.names, jobs))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
