"""``opzoo report``: the evidence behind a verdict, as one self-contained HTML file.

What it holds, per op: the verdict table (the properties run as ``opzoo check`` runs them, by the
same runner), each failure with its reproduce lines, a histogram per dtype of the error in units of
that dtype's epsilon (``testing/checks/_budget``, ``testing/running/_errors``), and for an
elementwise op a plot of the forward, the hand-written backward and the oracle's derivative over
the range the checks draw from, with kinks and failing examples marked (for a surrogate op, the
surrogate's derivative beside the true one). ``mutation=True`` adds the mutation score (``mutation_section``).

Images are PNGs in ``data:`` URIs and the styles are inline: the file needs no server, no network
and no other file. matplotlib is optional (the ``train`` extra); :func:`pyplot` says how to get it.
This module is the page; the figures are drawn by ``_figures``, from what ``_evidence`` measured on
the checks' workers: no op code runs in the process that writes the page.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from opzoo import _files
from opzoo.core._registry import OpSpec, Registry
from opzoo.exceptions import ConfigError
from opzoo.report._evidence import Evidence, evidence
from opzoo.report._figures import derivative_figure, histogram_figure, shown_k
from opzoo.testing.running._result import HUNG

#: The one line a missing matplotlib gets (the CLI prefixes ``opzoo: error:``).
NEEDS_MATPLOTLIB = "opzoo report needs matplotlib: pip install 'opzoo[train]'"


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display); ConfigError if missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError(NEEDS_MATPLOTLIB) from None
    return plt


@dataclass
class Report:
    """A rendered report: the HTML, the check results it shows, how many plots it embeds, and the
    ops whose evidence ended or hung its worker (each with why)."""

    html: str
    results: list[Any] = field(default_factory=list)
    plots: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.problems) or any(r.status == "fail" for r in self.results)


def build(
    specs: Sequence[OpSpec],
    *,
    props: Sequence[str] | None = None,
    profile: str = "ci",
    examples: int | None = None,
    jobs: int = 1,
    registry: Registry | None = None,
    timeout: float | None = 60.0,
    mutation: bool = False,
    started: Any = lambda spec: None,
) -> Report:
    """Run the checks of ``specs`` (``props``: all by default) on the CPU, measure their errors and
    draw them: the report, not yet written anywhere. The op's code runs on the checks' workers
    only, the evidence too (:mod:`~opzoo.report._evidence`); this process draws."""
    plt = pyplot()  # before any check runs: a missing matplotlib is said at once
    from opzoo.testing.properties import PROPERTIES
    from opzoo.testing.running._options import RunOptions
    from opzoo.testing.running._parallel import check_all

    props = list(props or PROPERTIES)
    results: list[Any] = []
    options = RunOptions(props, profile, examples, device="cpu", timeout=timeout, jobs=jobs)
    check_all(specs, options, registry=registry, into=results, started=started)
    found = _gather(
        specs, results, profile=profile, examples=examples, jobs=jobs, registry=registry, timeout=timeout
    )
    parts = [_head(specs, profile), _verdicts(results, props)]
    plots, problems = 0, []
    for i, spec in enumerate(specs):
        mine = [r for r in results if r.op == spec.name]
        got = found.get(i)
        if not isinstance(got, Evidence):  # the pool's Result: the worker ended or was killed
            problems.append(f"{spec.name}: {got.reason}")
            got = Evidence(notes=[f"no plot and no error histogram: {got.reason}"])
        elif got.timed_out:
            problems.append(f"{spec.name}: {got.notes[-1]}")
        section, n = _op_section(plt, spec, mine, got.loaded())
        parts.append(section)
        plots += n
    if mutation:
        parts.append(
            mutation_section(
                specs, profile, props=props, examples=examples, registry=registry, jobs=jobs, timeout=timeout
            )
        )
    parts.append("</body></html>\n")
    return Report("\n".join(parts), results, plots, problems)


def _gather(
    specs: Sequence[OpSpec], results: list[Any], *, jobs: int, timeout: float | None, **kw: Any
) -> dict[int, Any]:
    """Each op's :class:`Evidence` by its index, from the workers (the pool's failing Result where
    its worker ended or was killed); an op that hung in its checks gets none measured."""
    from opzoo.testing.running._parallel import run_pool

    hung = {r.op for r in results if r.timed_out}
    tasks = [(i, "evidence", "cpu") for i, spec in enumerate(specs) if spec.name not in hung]
    limit = None if timeout is None else 2 * timeout  # two parts, each within the limit
    got = run_pool(specs, tasks, evidence, jobs=jobs, limit=limit, timeout=timeout, **kw)
    done: dict[int, Any] = {
        i: Evidence(notes=[f"no plot and no error histogram: {HUNG}"]) for i in range(len(specs))
    }
    done.update({i: value for (i, _, _), value in got.items()})
    return done


def write(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` as opzoo writes every file (opzoo/_files.py): whole or not at
    all, only over a regular file (a device, fifo, socket or folder refused), a symlink followed."""
    path = os.fspath(path)
    _files.check_destination("report", path)
    _files.write("report", path, text.encode("utf-8"))


def mutation_section(
    specs: Sequence[OpSpec],
    profile: str,
    *,
    props: Sequence[str] | None = None,
    examples: int | None = None,
    registry: Registry | None = None,
    jobs: int = 1,
    mutants: Sequence[str] | None = None,
    timeout: float | None = 60.0,
) -> str:
    """The mutation score of ``specs`` (every mutant, or ``mutants``) through ``props`` (all by
    default) as an HTML section: the rate, then each mutant's verdict and why (``opzoo mutate``'s,
    docs/testing.md). The report's own properties and examples: a mutant is judged by what the
    report checks, as ``opzoo mutate -p`` judges it."""
    from opzoo.testing.mutation import _mutate

    verdicts = _mutate.mutate(
        list(specs),
        mutants,
        props=props,
        examples=examples,
        profile=profile,
        registry=registry,
        jobs=jobs,
        timeout=timeout,
    )
    score = _mutate.Score.of(verdicts)
    rate = "n/a" if score.rate is None else f"{100 * score.rate:.1f}%"
    rows = "".join(
        f"<tr><td>{_e(v.op)}</td><td>{_e(v.mutant)}</td><td>{_e(v.status)}</td><td>{_e(v.why())}</td></tr>"
        for v in verdicts
    )
    return (
        f"<h2>Mutation score: {rate}</h2>\n<p>{score.killed} killed, {score.survived} survived "
        f"({score.explained} explained), {score.not_applicable} not applicable, {score.unjudged} "
        f"unjudged (profile {profile}).</p>\n<table><tr><th>op</th><th>mutant</th><th>verdict</th>"
        f"<th>why</th></tr>{rows}</table>"
    )


# -- the parts of the page ------------------------------------------------------------------------

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 70em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
td.pass { background: #d8f0d8; } td.fail { background: #f4c7c3; font-weight: bold; }
td.skip { background: #eee; color: #777; }
table.verdicts { font-size: 0.75em; } table.verdicts td, table.verdicts th { padding: 0.15em 0.3em; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
.note { color: #555; } img { display: block; margin: 0.5em 0; max-width: 100%; }
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _head(specs: Sequence[OpSpec], profile: str) -> str:
    from opzoo._version import __version__

    names = ", ".join(s.name for s in specs)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>opzoo report: {_e(names)}</title>"
        f"<style>{_STYLE}</style></head><body>\n<h1>opzoo report: {_e(names)}</h1>\n"
        f"<p class=note>opzoo {_e(__version__)}, torch {_e(torch.__version__)}, profile {_e(profile)}, "
        f"{when}. Errors are in units of each dtype's epsilon times the oracle's magnitude "
        '(docs/testing.md, "Error budgets").</p>'
    )


def _verdicts(results: list[Any], props: Sequence[str]) -> str:
    ops = list(dict.fromkeys(r.op for r in results))
    cell = {(r.op, r.prop): r for r in results}
    head = "".join(f"<th>{_e(p)}</th>" for p in props)
    rows = []
    for op in ops:
        cells = []
        for p in props:
            r = cell.get((op, p))
            if r is None:
                cells.append("<td></td>")
                continue
            tip = f' title="{_e(r.reason)}"' if r.reason else ""
            cells.append(f"<td class={r.status}{tip}>{_e(r.status)}</td>")
        rows.append(f"<tr><td>{_e(op)}</td>{''.join(cells)}</tr>")
    passed = sum(r.status == "pass" for r in results)
    failed = sum(r.status == "fail" for r in results)
    return (
        f"<h2>Verdicts</h2>\n<table class=verdicts><tr><th>op</th>{head}</tr>{''.join(rows)}</table>\n"
        f"<p>{passed} passed, {failed} failed, {len(results) - passed - failed} skipped.</p>"
    )


def _op_section(plt: Any, spec: OpSpec, results: list[Any], found: Evidence) -> tuple[str, int]:
    """One op: its failures, its derivative plot (elementwise ops), its error histograms, drawn
    from what its worker ``found``; of ``spec`` only its name and summary are read (an import
    path's, as the child that tried it read them: its module is never imported here)."""
    parts = [f"<h2>{_e(spec.name)}</h2>"]
    if spec.summary:
        parts.append(f"<p>{_e(spec.summary)}</p>")
    failed = [r for r in results if r.status == "fail"]
    for r in failed:
        parts.append(f"<h3>FAIL {_e(r.id)}</h3>\n<pre>{_e(r.report())}</pre>")
    notes = dict.fromkeys(f"{r.prop}: {n}" for r in results for n in r.notes)
    if notes:
        parts.append("<p class=note>" + "<br>".join(_e(n) for n in notes) + "</p>")
    plots = 0
    if found.curves is not None:
        figure = derivative_figure(plt, spec, found.curves, failed)
        parts.append(_img(figure, f"{spec.name}: forward and derivatives"))
        plots += 1
    errors = found.errors
    if errors is not None and errors.backward:
        parts.append(_error_table(errors))
        parts.append(_img(histogram_figure(plt, errors), f"{spec.name}: error histograms"))
        plots += 1
    for note in [*found.notes, *(errors.notes if errors is not None else ())]:
        parts.append(f"<p class=note>{_e(note)}</p>")
    return "\n".join(parts), plots


def _img(fig: Any, alt: str) -> str:
    plt = pyplot()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _error_table(errors: Any) -> str:
    from opzoo.testing.checks._budget import BUDGETS

    rows = []
    for name, k in errors.backward.items():
        dtype = getattr(torch, name)
        limit = BUDGETS.get(dtype)
        worst, excess = errors.worst(name), errors.excess(name)
        shown = "-" if limit is None else f"{limit:g}"
        beyond = "-" if limit is None or excess is None else f"{excess:.3g}"
        rows.append(
            f"<tr><td>{name}</td><td>{k.numel()}</td><td>{shown_k(worst)}</td><td>{beyond}</td><td>{shown}</td>"
            f"<td>{shown_k(errors.worst(name, 'forward'))}</td></tr>"
        )
    return (
        f"<p class=note>errors against {_e(errors.oracle)}</p>\n<table><tr><th>dtype</th>"
        "<th>gradient elements</th><th>worst k</th>"
        "<th>worst k - 2 k(torch's own) - 2 k(its formula step by step)</th><th>budget</th>"
        f"<th>forward's worst k</th></tr>{''.join(rows)}</table>"
    )
