#!/usr/bin/env python3
"""Run the test suite N times in a row with a busy loop beside it (a flake hunt).

    python3 benchmarks/busy_suite.py [N] [pytest args]

Starts one process that spins on a core for the whole time (CI's machine is shared and loaded),
then runs the README's test command (`python3 dev.py test`) N times (default 5), as CI does
(`CI=true`). Prints each run's wall time and pytest's summary line, and exits 1 if any run failed.
The result goes into docs/records/testing.md ("No flakes").
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv and argv[0].isdigit() else 5
    extra = argv[1:] if argv and argv[0].isdigit() else argv
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    failed = 0
    try:
        for k in range(1, runs + 1):
            began = time.perf_counter()
            out = subprocess.run(
                [sys.executable, str(ROOT / "dev.py"), "test", "-q", "-p", "no:cacheprovider", *extra],
                capture_output=True,
                text=True,
                env={**os.environ, "CI": "true"},
                cwd=ROOT,
            )
            took = time.perf_counter() - began
            summary = (out.stdout.strip().splitlines() or ["(no output)"])[-1]
            failed += out.returncode != 0
            print(f"run {k}: exit {out.returncode}, {took:.0f} s: {summary}", flush=True)
            if out.returncode:
                tail = "\n".join(out.stdout.splitlines()[-40:])
                print(tail, flush=True)
    finally:
        busy.kill()
        busy.wait()
    print(f"{runs} runs with a busy loop beside them, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
