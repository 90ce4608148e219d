#!/usr/bin/env python3
"""Run the suite's long tier and write its record page, docs/records/long-tests.md.

    python3 benchmarks/long_tests.py [pytest args]

The long tier is the tests marked ``long`` (tests/conftest.py's ``SWEEP``: each claim over many ops
at the ci profile's fifty examples, where the default run takes ten; and the repeated runs that
compare run modes, whose one case the default run keeps), which the README's test
command leaves out so that CI's run stays within minutes. This runs them as CI runs the rest
(`python3 dev.py test -m long`, ``CI=true``), and writes the commit, the date, the counts per test
file and any failure's name to the page. Exits 1 if any test failed.
"""

from __future__ import annotations

import collections
import datetime
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "records" / "long-tests.md"


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "long.xml"
        command = ["python3", "dev.py", "test", "-m", "long", "-q", "-p", "no:cacheprovider"]
        began = time.perf_counter()
        out = subprocess.run(
            [*command, f"--junitxml={junit}", *argv], cwd=ROOT, env={**os.environ, "CI": "true"}, text=True
        )
        took = time.perf_counter() - began
        if not junit.is_file():
            print(f"long_tests: pytest wrote no report (exit {out.returncode})", file=sys.stderr)
            return 1
        cases = list(ET.parse(junit).getroot().iter("testcase"))
    per_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failed = []
    for case in cases:
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        module = case.get("classname", "").rsplit(".", 1)[-1]
        per_file[module][kind] += 1
        per_file[module]["seconds"] += float(case.get("time", 0))
        if kind in ("failure", "error"):
            failed.append(f"{module}::{case.get('name')}")
    PAGE.write_text(_page(command, argv, took, per_file, failed))
    print(f"{len(cases)} tests, {len(failed)} failed, {took:.0f} s: {PAGE.relative_to(ROOT)}")
    return 1 if failed or out.returncode else 0


def _page(
    command: list[str],
    argv: list[str],
    took: float,
    per_file: dict[str, collections.Counter],
    failed: list[str],
) -> str:
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    total = sum(per_file.values(), collections.Counter())
    lines = [
        "# The suite's long tier",
        "",
        "The tests marked `long` (each claim over many ops at the ci profile's fifty examples, where the",
        "default run, and so CI's, takes ten; the repeated runs that compare run modes, one case of each",
        "in the default run), run by `python3 benchmarks/long_tests.py`: "
        f"`{' '.join([*command, *argv])}` with `CI=true`.",
        "",
        f"At {commit}, {today}, on {os.cpu_count()} CPUs: **{total['passed']} passed, "
        f"{total['failure'] + total['error']} failed, {total['skipped']} skipped** in {took:.0f} s.",
        "",
        "| test file | passed | failed | skipped | seconds in its tests |",
        "| --- | --- | --- | --- | --- |",
    ]
    for module, n in sorted(per_file.items()):
        bad = n["failure"] + n["error"]
        lines.append(f"| {module} | {n['passed']} | {bad} | {n['skipped']} | {n['seconds']:.0f} |")
    if failed:
        lines += ["", "Failed:", "", *(f"- `{name}`" for name in failed)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
