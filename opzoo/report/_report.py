"""``opzoo report``: the evidence behind a verdict, as one self-contained HTML file.

What it holds, per op: the verdict table (the properties run as ``opzoo check`` runs them, by the
same runner), each failure with its reproduce lines, a histogram per dtype of the error in units of
that dtype's epsilon (``testing/checks/_budget``, ``testing/running/_errors``), and for an
elementwise op a plot of the forward, the hand-written backward and the oracle's derivative over
the range the checks draw from, with kinks and failing examples marked (for a surrogate op, the
surrogate's derivative beside the true one). ``mutation=True`` adds the mutation score (``mutation_section``).

Images are PNGs in ``data:`` URIs and the styles are inline: the file needs no server, no network
and no other file. matplotlib is optional (the ``train`` extra); :func:`pyplot` says how to get it.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import math
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from opzoo import _files
from opzoo.core._registry import OpSpec, Registry
from opzoo.exceptions import ConfigError, one_line

#: The one line a missing matplotlib gets (the CLI prefixes ``opzoo: error:``).
NEEDS_MATPLOTLIB = "opzoo report needs matplotlib: pip install 'opzoo[train]'"
#: Points of the grid an elementwise op is plotted on (declared kinks and 0 are added to it).
GRID = 801


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
    """A rendered report: the HTML, the check results it shows and how many plots it embeds."""

    html: str
    results: list[Any] = field(default_factory=list)
    plots: int = 0

    @property
    def failed(self) -> bool:
        return any(r.status == "fail" for r in self.results)


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
    draw them: the report, not yet written anywhere."""
    plt = pyplot()  # before any check runs: a missing matplotlib is said at once
    from opzoo.testing.properties import PROPERTIES
    from opzoo.testing.running._options import RunOptions
    from opzoo.testing.running._parallel import check_all

    props = list(props or PROPERTIES)
    results: list[Any] = []
    options = RunOptions(props, profile, examples, device="cpu", timeout=timeout, jobs=jobs)
    check_all(specs, options, registry=registry, into=results, started=started)
    parts = [_head(specs, profile), _verdicts(results, props)]
    plots = 0
    for spec in specs:
        mine = [r for r in results if r.op == spec.name]
        section, n = _op_section(plt, spec, mine, profile=profile, examples=examples, registry=registry)
        parts.append(section)
        plots += n
    if mutation:
        parts.append(mutation_section(specs, profile, registry=registry, jobs=jobs))
    parts.append("</body></html>\n")
    return Report("\n".join(parts), results, plots)


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
    registry: Registry | None = None,
    jobs: int = 1,
    mutants: Sequence[str] | None = None,
) -> str:
    """The mutation score of ``specs`` (every mutant, or ``mutants``) as an HTML section: the rate,
    then each mutant's verdict and why (``opzoo mutate``'s, docs/testing.md)."""
    from opzoo.testing.mutation import _mutate

    verdicts = _mutate.mutate(list(specs), mutants, profile=profile, registry=registry, jobs=jobs)
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


def _op_section(
    plt: Any,
    spec: OpSpec,
    results: list[Any],
    *,
    profile: str,
    examples: int | None,
    registry: Registry | None,
) -> tuple[str, int]:
    """One op: its failures, its derivative plot (elementwise ops), its error histograms."""
    from opzoo.testing.running._errors import error_samples

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
    if _plottable(spec):
        try:
            parts.append(_img(_derivative_figure(plt, spec, failed), f"{spec.name}: forward and derivatives"))
            plots += 1
        except Exception as exc:  # the op's own code, on a grid the checks never drew
            parts.append(f"<p class=note>no plot: {_e(one_line(exc, with_type=True))}</p>")
    try:
        errors = error_samples(spec, profile=profile, examples=examples, registry=registry)
    except Exception as exc:  # the op's own code: anything
        parts.append(f"<p class=note>no error histogram: {_e(one_line(exc, with_type=True))}</p>")
        return "\n".join(parts), plots
    if errors.backward:
        parts.append(_error_table(errors))
        parts.append(_img(_histogram_figure(plt, errors), f"{spec.name}: error histograms"))
        plots += 1
    for note in errors.notes:
        parts.append(f"<p class=note>{_e(note)}</p>")
    return "\n".join(parts), plots


def _plottable(spec: OpSpec) -> bool:
    sig = spec.contract.sig
    constants = spec.arguments.constants if spec.arguments is not None else {}
    return sig.elementwise and len(sig.inputs) == 1 and len(sig.outputs) == 1 and not constants


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
            f"<tr><td>{name}</td><td>{k.numel()}</td><td>{_k(worst)}</td><td>{beyond}</td><td>{shown}</td>"
            f"<td>{_k(errors.worst(name, 'forward'))}</td></tr>"
        )
    return (
        f"<p class=note>errors against {_e(errors.oracle)}</p>\n<table><tr><th>dtype</th>"
        "<th>gradient elements</th><th>worst k</th><th>worst k - 2 k(torch's own)</th><th>budget</th>"
        f"<th>forward's worst k</th></tr>{''.join(rows)}</table>"
    )


def _k(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


# -- figures --------------------------------------------------------------------------------------


def _histogram_figure(plt: Any, errors: Any) -> Any:
    """One panel per dtype: the gradient elements' k on a log scale, the budget marked."""
    from opzoo.testing.checks._budget import BUDGETS

    names = list(errors.backward)
    fig, axes = plt.subplots(1, len(names), figsize=(2.6 * len(names) + 0.6, 2.6), dpi=80, squeeze=False)
    low = -3.0
    for ax, name in zip(axes[0], names):
        k = errors.backward[name].double()
        finite = k[k.isfinite()]
        logs = finite.clamp(min=10**low).log10().numpy()
        top = max(3.0, float(logs.max()) if len(logs) else 3.0)
        ax.hist(logs, bins=40, range=(low, top), color="#4c72b0", log=True)
        ax.set_ylim(0.5, 2.0 * max(len(logs), 1))  # autoscaling squeezes a lone bar to a sliver
        limit = BUDGETS.get(getattr(torch, name))
        if limit is not None:
            ax.axvline(math.log10(limit), color="#c44e52", linestyle="--", label=f"budget {limit:g}")
            ax.legend(fontsize=7, loc="upper right")
        worst = errors.worst(name)
        ax.set_title(f"{name}: worst k {_k(worst)}", fontsize=9)
        ax.set_xlabel("log10 k (k < 1e-3 at -3)", fontsize=8)
        ax.tick_params(labelsize=7)
        if k.numel() > finite.numel():
            ax.text(
                0.02, 0.95, f"{k.numel() - finite.numel()} not finite", transform=ax.transAxes, fontsize=7
            )
    axes[0][0].set_ylabel("gradient elements", fontsize=8)
    fig.suptitle(f"{errors.op}: |g - g64| / (eps * scale) per gradient element", fontsize=9)
    fig.tight_layout()
    return fig


def _derivative_figure(plt: Any, spec: OpSpec, failed: list[Any]) -> Any:
    """The forward above; below, the hand-written backward, the oracle's derivative (and for a
    surrogate op the declared surrogate's and the true derivative); kinks and failures marked."""
    from opzoo.testing.checks._bound import bind, vjp
    from opzoo.testing.checks._kinks import outputs_of
    from opzoo.testing.checks._onesided import Probe
    from opzoo.testing.strategies import KINK_MARGIN, domain_box

    params = spec.contract.defaults()
    op = bind(spec, params)
    lo, hi = domain_box(spec.contract.domain, KINK_MARGIN)
    declared = sorted(k for k in spec.contract.kinks_at(params) if lo <= k <= hi)
    extra = [v for v in (0.0, *declared) if lo < v < hi]
    x = torch.cat(
        [torch.linspace(lo, hi, GRID, dtype=torch.float64), torch.tensor(extra, dtype=torch.float64)]
    )
    x = torch.unique(x)  # sorted
    with torch.no_grad():
        y = outputs_of(op)(x)[0]
    backward = vjp(op, (x,), (torch.ones_like(y),))[1][0]
    oracle, label = _oracle_slope(op, x)
    kinds = Probe(outputs_of(op), (x,), diagonal=True).kind.reshape(x.shape)
    rough = kinds != 0  # 0: smooth (_onesided.KINDS)
    detected = [v for v in x[rough].tolist() if all(abs(v - k) > 1e-9 for k in declared)]

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 4.6), dpi=80, sharex=True)
    xs = x.numpy()
    top.plot(xs, y.numpy(), color="#222", linewidth=1.3, label="forward")
    top.set_ylabel("f(x)", fontsize=8)
    surrogate = spec.contract.surrogate is not None
    name = "backward (the surrogate)" if surrogate else "backward (hand-written)"
    bottom.plot(xs, backward.numpy(), color="#4c72b0", linewidth=2.2, label=name)
    if oracle is not None:
        bottom.plot(xs, oracle.numpy(), color="#dd8452", linewidth=1.2, linestyle="--", label=label)
    if surrogate:
        declared_slope = _surrogate_slope(op, x)
        if declared_slope is not None:
            bottom.plot(
                xs,
                declared_slope.numpy(),
                color="#55a868",
                linewidth=1.0,
                linestyle=":",
                label="the declared surrogate's derivative",
            )
    for ax in (top, bottom):
        for i, k in enumerate(declared):
            ax.axvline(
                k,
                color="#8172b2",
                linestyle="--",
                linewidth=0.8,
                label="declared kink" if i == 0 and ax is bottom else None,
            )
        for i, k in enumerate(detected[:20]):
            ax.axvline(
                k,
                color="#937860",
                linestyle=":",
                linewidth=0.8,
                label="detected kink" if i == 0 and ax is bottom else None,
            )
    marked = False
    for r in failed:
        w = r.worst or {}
        if isinstance(w.get("x"), float) and math.isfinite(w["x"]) and lo <= w["x"] <= hi:
            value = w.get("analytic")
            if isinstance(value, float) and math.isfinite(value):
                bottom.plot(
                    [w["x"]],
                    [value],
                    "x",
                    color="#c44e52",
                    markersize=9,
                    mew=2,
                    label=None if marked else "failing example",
                )
            else:
                bottom.axvline(
                    w["x"], color="#c44e52", linewidth=1.2, label=None if marked else "failing example"
                )
            marked = True
    bottom.set_ylabel("df/dx", fontsize=8)
    bottom.set_xlabel("x (the range the checks draw from)", fontsize=8)
    bottom.legend(fontsize=7, loc="best")
    top.set_title(f"{spec.name} {params if params else ''}".strip(), fontsize=9)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def _oracle_slope(op: Any, x: torch.Tensor) -> tuple[torch.Tensor | None, str]:
    """The derivative to set beside the backward, and what it is: autograd of the declared
    reference, else of the forward, else central differences (a surrogate op: the forward's true
    derivative, by central differences where the reference has none)."""
    from opzoo.testing.checks import _oracles, _reference
    from opzoo.testing.running._errors import no_autograd_oracle

    ones = torch.ones_like(x)
    spec = op.spec
    if spec.contract.reference is not None and spec.contract.surrogate is None:
        grads = _reference._ref_vjp(_reference.reference_of(op), (x,), (ones,))[1]
        return grads[0], "autograd of the declared reference"
    if no_autograd_oracle(spec) is None:
        leaf = x.detach().clone().requires_grad_()
        outs = _oracles._forward_outputs(op, (leaf,))
        if outs is not None and outs[0].requires_grad:
            (g,) = torch.autograd.grad(outs[0], leaf, ones, allow_unused=True)
            if g is not None:
                return g.detach(), "autograd of the forward"
    h = 1e-6
    with torch.no_grad():
        fd = (op(x + h) - op(x - h)) / (2 * h)
    label = "true derivative (central differences)"
    if spec.contract.surrogate is not None:
        fd = torch.where(fd.abs() > 1e3, torch.nan, fd)  # a jump: no derivative to draw
        label += "; none at the jumps"
    return fd, label


def _surrogate_slope(op: Any, x: torch.Tensor) -> torch.Tensor | None:
    """The declared surrogate's autograd derivative, where it has one."""
    surrogate = op.spec.contract.surrogate
    params = op.params
    leaf = x.detach().clone().requires_grad_()
    out = op.calling(lambda *ts: surrogate(*ts, **params))(leaf)
    out = out[0] if isinstance(out, tuple) else out
    if not out.requires_grad:
        return None
    (g,) = torch.autograd.grad(out, leaf, torch.ones_like(out), allow_unused=True)
    return None if g is None else g.detach()
