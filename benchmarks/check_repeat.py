#!/usr/bin/env python3
"""Run `opzoo check --profile ci` over the whole zoo N times and compare the verdicts.

    .venv/bin/python benchmarks/check_repeat.py [N] [opzoo check options]

Prints, per run, its wall time and whether every (op, property) verdict equals the first run's; exits
1 if any differs. Each run after the first checks the ops in another order (rotated by one op per
run), so that an op's verdict is shown not to depend on what ran before it in the process. With op
names among the options, only those are checked (give options as `--name=value`). The result goes
into docs/records/testing.md ("No flakes").
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def verdicts(extra: list[str]) -> tuple[dict[str, str], float]:
    began = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "opzoo", "check", "--profile", "ci", "--device", "cpu", "--json", *extra],
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - began
    if out.returncode not in (0, 1):
        sys.exit(f"opzoo check failed: {out.stderr.strip().splitlines()[-1:]}")
    return {r["id"]: r["status"] for r in json.loads(out.stdout)["results"]}, took


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    runs = int(argv[0]) if argv and argv[0].isdigit() else 20
    extra = argv[1:] if argv and argv[0].isdigit() else argv
    names = [a for a in extra if not a.startswith("-")]
    options = [a for a in extra if a.startswith("-")]
    first, took = verdicts(extra)
    names = names or list(dict.fromkeys(i.split("[", 1)[1].rstrip("]") for i in first))
    fails = sorted(k for k, v in first.items() if v == "fail")
    failing = ", ".join(fails) or "none"
    print(f"run 1: {took:.1f} s, {len(first)} checks, {len(fails)} failing: {failing}", flush=True)
    differ = 0
    for k in range(2, runs + 1):
        turn = (k - 1) % len(names)
        again, took = verdicts(options + names[turn:] + names[:turn])
        changed = sorted(i for i in set(first) | set(again) if first.get(i) != again.get(i))
        differ += bool(changed)
        verdict = f"DIFFERS: {', '.join(changed)}" if changed else "same verdicts"
        print(f"run {k}: {took:.1f} s, {verdict}", flush=True)
    print(f"{runs} runs, {differ} with different verdicts")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
