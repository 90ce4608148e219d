"""What the two records (benchmarks/real_world.py, benchmarks/native_ops.py) share: the cause of a
failing check, the git facts a doc states, and how a failure is quoted. Imports neither opzoo nor
torch: real_world.py runs under any python3."""

from __future__ import annotations

import json
import re
import subprocess
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
