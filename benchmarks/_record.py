"""What the two records (benchmarks/real_world.py, benchmarks/native_ops.py) share: the cause of a
failing check, each op's verdict and the sections that explain the red ones, the git facts a doc
states, and how a failure is quoted. Imports neither opzoo nor torch: real_world.py runs under any
python3."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Cause:
    """Why checks fail: the ops and properties it explains (``*``: any property), a pattern the
    failure's reason must match (and one its counterexample, as JSON, must match), what kind of cause
    it is, its evidence (keys of the record's reproductions) and its upstream issues. The first cause
    of a record's list that explains a failure is its cause."""

    key: str
    kind: str
    summary: str
    ops: tuple[str, ...]
    props: tuple[str, ...] = ("*",)
    match: str = ""
    evidence: tuple[str, ...] = ()
    upstream: str = "none found"
    example: str = ""
    #: for a false alarm of opzoo's that opzoo no longer raises: how it was fixed, and its test
    fixed: str = ""

    def explains(self, op: str, result: dict) -> bool:
        """Whether this is why ``result``, a failing check of ``op`` (as ``opzoo check --json`` gives
        it), failed."""
        return (
            op in self.ops
            and ("*" in self.props or result["prop"] in self.props)
            and re.search(self.match, result["reason"]) is not None
            and re.search(self.example, json.dumps(result.get("example"))) is not None
        )


def cause_of(causes: tuple[Cause, ...], op: str, result: dict) -> Cause | None:
    """The first of ``causes`` that explains the failing check ``result`` of ``op``, or None."""
    return next((c for c in causes if c.explains(op, result)), None)


def check(python: str, paths: list[str], jobs: int, *options: str) -> tuple[list[dict], str, float]:
    """``opzoo check --profile ci --device cpu --json`` of the ops at ``paths`` (import paths of
    benchmarks/' modules), run by ``python`` in benchmarks/ on ``jobs`` workers with ``options``:
    its results, its JSON and the seconds it took. An exit other than 0 or 1 ends the script."""
    print(f"opzoo check --profile ci on {len(paths)} ops ...", file=sys.stderr)
    began = time.perf_counter()
    cmd = [python, "-m", "opzoo", "check", "--profile", "ci", "--device", "cpu", "-j", str(jobs), *options]
    here = ROOT / "benchmarks"
    out = subprocess.run(
        [*cmd, "--json", *paths],
        cwd=here,
        env={**os.environ, "PYTHONPATH": str(here)},
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - began
    if out.returncode not in (0, 1):
        sys.exit(f"opzoo check failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)["results"], out.stdout, seconds


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def provenance() -> str:
    """The commit, and whether the tree differs from it."""
    commit = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain"):
        commit += " (with uncommitted changes)"
    return f"commit {commit}"


def first_line(text: str) -> str:
    """A failure's reason on one line, at most 400 characters."""
    return " ".join(text.split())[:400]


def example(result: dict) -> str:
    """A failure's counterexample in brief: each input's shape (and its values when short), the params."""
    e = result.get("example") or {}
    shown = e.get("inputs", [])
    if not shown:
        return ""
    parts = []
    for t in shown:
        values = t.get("values")
        short = values is not None and len(json.dumps(values)) <= 80
        parts.append(f"{tuple(t['shape'])}" + (f" = {json.dumps(values)}" if short else ""))
    params = e.get("params") or {}
    return f" (example: {'; '.join(parts)}" + (f"; params {params})" if params else ")")


class Verdicts:
    """The checks' results (``opzoo check --json``) read against a record's causes: each op's verdict
    cell, the causes seen (cause key -> the failing checks it explains, as (op, result)), and the
    failing checks no cause explains, one line each."""

    def __init__(self, causes: tuple[Cause, ...], results: list[dict]) -> None:
        self.causes = causes
        self.by_op: dict[str, list[dict]] = {}
        for r in results:
            self.by_op.setdefault(r["op"].partition(":")[2], []).append(r)
        self.seen: dict[str, list[tuple[str, dict]]] = {}
        self.unexplained: list[str] = []

    def cell(self, op: str) -> str:
        """``op``'s verdict: green, or red with each failing property and a link to its cause's
        section (or **unexplained**); then how many checks passed, failed and were skipped."""
        results = self.by_op.get(op, [])
        counts = Counter(r["status"] for r in results)
        cells = []
        for r in results:
            if r["status"] != "fail":
                continue
            cause = cause_of(self.causes, op, r)
            if cause is None:
                self.unexplained.append(f"{op} {r['prop']}: {first_line(r['reason'])}{example(r)}")
                cells.append(f"`{r['prop']}` (**unexplained**)")
            else:
                self.seen.setdefault(cause.key, []).append((op, r))
                cells.append(f"`{r['prop']}` ([{cause.kind}](#{cause.key}))")
        verdict = "red: " + ", ".join(cells) if cells else "green"
        return f"{verdict} ({counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip)"

    def reds(self) -> set[str]:
        """The ops with a failing check."""
        return {op for op, rs in self.by_op.items() if any(r["status"] == "fail" for r in rs)}

    def section(self, cause: Cause, evidence: dict, not_seen: str, evidence_title: str) -> list[str]:
        """The doc's section of ``cause``: what it is, opzoo's report of each failing check it explains
        (or ``not_seen``, or how it was fixed), upstream's issue, then each reproduction in
        ``evidence`` (key -> {"reproduced", "lines"}) under ``evidence_title``."""
        hits = self.seen.get(cause.key, [])
        out = [f"### {cause.key}", "", f"**{cause.kind}.** {cause.summary}", ""]
        if hits:
            out += ["opzoo's report, per failing check:", ""]
            out += [f"- `{op}` `{r['prop']}`: {first_line(r['reason'])}{example(r)}" for op, r in hits]
        elif cause.fixed:
            out.append(f"**Fixed**, and not seen in this run: {cause.fixed}")
        else:
            out.append(not_seen)
        out += ["", f"Upstream: {cause.upstream}.", "", evidence_title, ""]
        for key in cause.evidence:
            ev = evidence[key]
            out.append(f"- `{key}` ({'reproduced' if ev['reproduced'] else '**NOT reproduced**'}):")
            out += [f"  - {line}" for line in ev["lines"]]
        out.append("")
        return out


def skipped(results: list[dict], trim: Callable[[str], str]) -> list[str]:
    """The doc's section of skipped checks: one row per property and reason (``trim``-med), counted."""
    skips = Counter((r["prop"], first_line(r["reason"])) for r in results if r["status"] == "skip")
    out = ["## Skipped checks", "", "| property | reason | checks |", "| --- | --- | --- |"]
    out += [f"| `{prop}` | {trim(why)} | {n} |" for (prop, why), n in sorted(skips.items())]
    out.append("")
    return out
