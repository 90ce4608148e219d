#!/usr/bin/env python3
"""Each property's own search (A, as before issue 32) against one draw per op replayed for every
property (B), side by side in one process, under the ``ci`` profile.

    .venv/bin/python benchmarks/replay_ab.py [zoo|wrong|NAME,NAME...] [--threads 1]

``zoo``: the registry's ops, the example plugins' included (``python3 dev.py setup`` installs them);
``wrong``: every op of tests/wrong_ops.py's WRONG. For each op it checks every property on the CPU
both ways (A B for one op, B A for the next, after a warm-up; B's draws forgotten before each of its
runs) and prints the CPU seconds of each, B / A, and whether every result is the same: status,
reason, notes, counterexample, reproduce lines and worst mismatch. Asserts nothing; exits 1 if a
result differs.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path
from typing import Any, Callable

import torch

import opzoo
from opzoo.core._registry import spec_of
from opzoo.core._spec import OpSpec
from opzoo.testing.properties import PROPERTIES
from opzoo.testing.running import _cases
from opzoo.testing.running._result import Result
from opzoo.testing.running._runner import check_property

ROOT = Path(__file__).resolve().parent.parent


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def key(r: Result) -> tuple[Any, ...]:
    """What must not change: everything in a result but its time."""
    shown = (json.dumps(v, sort_keys=True, default=str) for v in (r.example, r.worst))
    return (r.status, r.reason, tuple(r.notes), *shown, r.repro, r.timed_out)


def searched(spec: OpSpec, prop: str) -> Result:
    with _cases.searching():
        return check_property(spec, prop, profile="ci", timeout=None)


def replayed(spec: OpSpec, prop: str) -> Result:
    return check_property(spec, prop, profile="ci", timeout=None)


def every_property(check: Callable[[OpSpec, str], Result], spec: OpSpec) -> tuple[list[Result], float]:
    _cases.clear()
    began = cpu()
    results = [check(spec, prop) for prop in PROPERTIES]
    return results, cpu() - began


def specs(which: str) -> list[OpSpec]:
    if which == "wrong":
        sys.path.insert(0, str(ROOT / "tests"))
        import wrong_ops

        return [spec_of(cls, name=name) for name, (cls, _, _) in wrong_ops.WRONG.items()]
    registry = opzoo.registry()
    names = sorted(opzoo.names()) if which == "zoo" else which.split(",")
    return [registry.info(name) for name in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="?", default="zoo")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ops = specs(args.which)
    warm = opzoo.registry().info("myrelu")
    for prop in ("compile", "library", "forward_mode", "gradient"):  # first compile, opcheck, functorch
        searched(warm, prop)
    total = {"A": 0.0, "B": 0.0}
    differ = 0
    print(f"{'op':34} {'A cpu-s':>8} {'B cpu-s':>8} {'B/A':>5}  failing properties  results")
    for i, spec in enumerate(ops):
        runs: dict[str, tuple[list[Result], float]] = {}
        for who in ("A", "B") if i % 2 == 0 else ("B", "A"):
            runs[who] = every_property(searched if who == "A" else replayed, spec)
        (a, ta), (b, tb) = runs["A"], runs["B"]
        total["A"] += ta
        total["B"] += tb
        bad = [x.prop for x, y in zip(a, b) if key(x) != key(y)]
        differ += bool(bad)
        fails = ",".join(r.prop for r in a if r.status == "fail") or "-"
        same = "same" if not bad else f"DIFFER: {', '.join(bad)}"
        print(f"{spec.name:34} {ta:8.2f} {tb:8.2f} {tb / ta:5.2f}  {fails:18}  {same}", flush=True)
        for x, y in zip(a, b):
            if key(x) != key(y):
                print(f"    A: {key(x)}\n    B: {key(y)}")
    ratio = total["B"] / total["A"]
    print(f"{len(ops)} ops: A {total['A']:.1f} cpu-s, B {total['B']:.1f} cpu-s, B/A {ratio:.3f}", end="; ")
    print(f"ops whose results differ: {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
