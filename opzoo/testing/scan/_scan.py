"""``opzoo.scan``: every Function of installed packages found, its contract inferred, and checked,
with no declaration written; the rows and the table ``opzoo scan`` prints.

The calling process imports nothing of the packages, ever: discovery runs in children
(``core/_discover``), then one scan child imports the modules that imported cleanly, infers each
Function's contract on the checks' workers (``_infer``: probing runs op code), declares the ones it
could, and runs their checks with ``check_all``. It sends the rows back as one JSON document. Every
verdict is an inferred declaration's: a red one that the op's own declaration would not give is a
bug of scan. Imports no torch here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from opzoo.core._discover import OK, Discovery, ModuleVerdict, discover
from opzoo.exceptions import OpZooError, one_line, printable

__all__ = ["ScanReport", "ScanRow", "scan"]


@dataclass
class ScanRow:
    """One Function found: its import path, form, what scan made of it (``status``: inferred;
    inferred, gradient not checked; cannot infer; declared by its class), why (cannot infer) or its
    by-design reason, the declaration to paste, notes, and its checks' results (as
    ``Result.to_dict`` gives them)."""

    path: str
    form: str
    status: str
    why: str = ""
    inferred: str = ""
    declaration: str = ""
    notes: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> list[str]:
        """The properties whose inferred checks failed."""
        return list(dict.fromkeys(r["prop"] for r in self.results if r["status"] == "fail"))

    def verdict(self) -> str:
        """The row's verdict in a few words: green, red (which properties), or why none."""
        if not self.results:
            return f"{self.status}: {self.why}" if self.why else self.status
        counts = {s: sum(r["status"] == s for r in self.results) for s in ("pass", "fail", "skip")}
        tally = f"{counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip"
        word = f"red: {', '.join(self.failed)}" if self.failed else "green"
        return f"{word} ({tally})" + (f"; gradient not checked: {self.why}" if self.why else "")


@dataclass
class ScanReport:
    """What ``scan`` found: each package's discovery, a row per Function (in module order)."""

    packages: list[Discovery]
    rows: list[ScanRow]

    @property
    def failures(self) -> list[ModuleVerdict]:
        """The modules that did not import cleanly, of every package."""
        return [m for found in self.packages for m in found.failed]

    @property
    def red(self) -> bool:
        """Whether any inferred verdict is red."""
        return any(row.failed for row in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "packages": [
                {"package": p.package, "version": p.version, "modules": len(p.modules)} for p in self.packages
            ],
            "rows": [asdict(row) | {"verdict": row.verdict()} for row in self.rows],
            "failures": [asdict(m) for m in self.failures],
        }


def scan(
    *packages: str,
    properties: Sequence[str] | None = None,
    profile: str = "ci",
    jobs: int | None = None,
    timeout: float = 60.0,
) -> ScanReport:
    """Find every ``torch.autograd.Function`` subclass in the installed ``packages``, infer a contract
    for each by probing it, and check those inferred (``properties``: all by default; ``profile``,
    ``jobs`` and ``timeout`` as ``opzoo check`` takes them: ``timeout`` also bounds each probing;
    on the CPU, where the probes ran). Nothing of the packages runs in this process."""
    from opzoo.testing.running._options import RunOptions

    wanted = tuple(properties) if properties else None
    options = RunOptions(properties=wanted, profile=profile, jobs=jobs, timeout=timeout, device="cpu")
    found = [discover(p) for p in dict.fromkeys(packages)]
    paths = [(f.path, f.form) for d in found for f in d.functions]
    modules = [m.module for d in found for m in d.modules if m.status == OK and m.functions]
    rows = [ScanRow(**row) for row in _in_child(modules, paths, options)] if paths else []
    return ScanReport(found, rows)


# -- the scan child --------------------------------------------------------------------------------


def _in_child(modules: list[str], paths: list[tuple[str, str]], options: Any) -> list[dict[str, Any]]:
    """The rows, made in one forked child (its output on stderr: nothing of an op reaches stdout)."""
    import tempfile

    out = tempfile.TemporaryFile()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # never returns
        _child(modules, paths, options, out.fileno(), parent)
    try:
        status = os.waitpid(pid, 0)[1]
    except BaseException:  # Ctrl-C: the child and its workers go too
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        raise
    out.seek(0)
    data = out.read()
    out.close()
    try:
        return json.loads(data)
    except ValueError:
        raise OpZooError(f"the scan's child process ended before it reported (status {status})") from None


def _child(modules: list[str], paths: list[tuple[str, str]], options: Any, out: int, parent: int) -> None:
    code = 1
    try:
        from opzoo._lifetime import die_with_parent, one_thread

        die_with_parent(parent)
        one_thread()
        os.dup2(2, 1)  # what the package prints goes to stderr: stdout may be JSON
        sys.stdout = sys.stderr
        rows = _rows(modules, paths, options)
        os.write(out, json.dumps(rows, default=str).encode())
        code = 0
    except BaseException as exc:  # noqa: BLE001  (reported by the missing document, and here)
        print(f"opzoo: scan: {one_line(exc, with_type=True)}", file=sys.stderr)
    finally:
        os._exit(code)


def _rows(modules: list[str], paths: list[tuple[str, str]], options: Any) -> list[dict[str, Any]]:
    """Import ``modules`` (watched: one that changes torch's state now has its Functions refused),
    infer each Function on the workers, declare and check those inferred."""
    from opzoo.testing.running._parallel import default_jobs, run_pool
    from opzoo.testing.scan._infer import infer_task
    from opzoo.testing.scan._record import Inferred

    refused = _import_watched(modules)
    targets = [_Target(path) for path, _ in paths]
    print(f"scan: inferring {len(targets)} Function(s) ...", file=sys.stderr, flush=True)
    tasks = [
        (i, "infer", "cpu") for i, (path, _) in enumerate(paths) if path.partition(":")[0] not in refused
    ]
    jobs = options.jobs or default_jobs()
    got = run_pool(targets, tasks, infer_task, jobs=jobs, limit=options.timeout, timeout=options.timeout)
    records = []
    for i, (path, form) in enumerate(paths):
        rec = got.get((i, "infer", "cpu"))
        if not isinstance(rec, Inferred):  # refused, or the pool's failing Result: it ended its worker
            why = refused.get(path.partition(":")[0]) or f"probing it failed: {getattr(rec, 'reason', '?')}"
            rec = Inferred(path, why=why)
        rec.form = rec.form or form
        records.append(rec)
    return _checked(records, options)


@dataclass(frozen=True)
class _Target:
    """A Function to probe, as the pool names its tasks."""

    name: str


def _import_watched(modules: list[str]) -> dict[str, str]:
    """Import each module here, watched as discovery watched it; why each refused one is."""
    import importlib

    from opzoo.core._torch_state import TorchState, changed_reason

    refused = {}
    for name in modules:
        before = TorchState.now()
        try:
            importlib.import_module(name)
        except Exception as exc:
            refused[name] = f"its module did not import this time: {one_line(exc, with_type=True)}"
        changes = before.changes()
        if changes:
            before.restore()
            refused[name] = changed_reason(changes, undone=True)
    return refused


def _checked(records: list[Any], options: Any) -> list[dict[str, Any]]:
    """Each record declared (where it can be) and checked: the rows."""
    from opzoo.core._declare import declare
    from opzoo.core._spec import import_path, spec_of
    from opzoo.testing.running._parallel import check_all
    from opzoo.testing.scan._record import NOT_CHECKED, declaration, declaration_text, status_of

    specs, rows = [], []
    for rec in records:
        kwargs, why = declaration(rec)
        row = {"path": rec.path, "form": rec.form, "status": status_of(rec), "why": why, "notes": rec.notes}
        row |= {"declaration": declaration_text(rec), "inferred": _inferred(rec) if not rec.why else ""}
        if kwargs is not None:
            try:
                target = import_path(rec.path)
                specs.append(spec_of(target if rec.own else declare(target, **kwargs), name=rec.path))
            except OpZooError as exc:
                row |= {"status": "cannot infer", "why": f"scan's declaration was refused: {one_line(exc)}"}
            if row["status"] == NOT_CHECKED:
                row["why"] = rec.by_design
        rows.append(row)
    if specs:
        started = lambda spec: print(f"checking {spec.name} ...", file=sys.stderr, flush=True)  # noqa: E731
        results = check_all(specs, options, started=started)
        for row in rows:
            row["results"] = [r.to_dict() for r in results if r.op == row["path"]]
    return rows


def _inferred(rec: Any) -> str:
    """The INFERRED column: the signature and the declared params' names."""
    if rec.own:
        return "its own opzoo_contract"
    return ", ".join([rec.signature, *rec.params])


# -- the table -------------------------------------------------------------------------------------


def table(report: ScanReport) -> str:
    """The rows as ``opzoo scan`` prints them: one line each, the declaration under each inferred
    one, the modules that did not import, and a summary line per package."""
    from opzoo._table import text_table

    head = ["FUNCTION", "FORM", "INFERRED", "VERDICT (inferred)"]
    lines = [
        text_table(
            head,
            [[r.path, r.form, r.inferred or "-", printable(r.verdict())] for r in report.rows],
            wrap_last=False,
        )
    ]
    for row in report.rows:
        if row.declaration:
            lines.append(f"\n{row.path}:" + ("" if row.results else "  (would need, once declarable)"))
            lines += ["  " + printable(line) for line in row.declaration.splitlines()]
    for found in report.packages:
        if found.failed:
            lines.append("")
        for m in found.failed:
            lines.append(f"not importable: {m.module} ({m.status}: {printable(m.why)})")
    lines.append("")
    lines += [_summary(found, report.rows) for found in report.packages]
    return "\n".join(lines)


def _summary(found: Discovery, rows: list[ScanRow]) -> str:
    from opzoo.testing.scan._record import OWN

    paths = {f.path for f in found.functions}
    mine = [r for r in rows if r.path in paths]
    own = [r for r in mine if r.results and r.status == OWN]
    checked = [r for r in mine if r.results and r.status != OWN]
    red = sum(bool(r.failed) for r in checked)
    name = f"{found.package} {found.version}".strip()
    declared = ""
    if own:
        own_red = sum(bool(r.failed) for r in own)
        declared = (
            f"{len(own)} declared by their class and checked ({len(own) - own_red} green, {own_red} red), "
        )
    return (
        f"{name}: {len(mine)} Function(s) in {len(found.modules)} module(s) "
        f"({len(found.failed)} did not import): {declared}"
        f"{len(checked)} inferred and checked ({len(checked) - red} green, {red} red), "
        f"{len(mine) - len(checked) - len(own)} cannot infer"
    )
