"""The figures of ``opzoo report``: an elementwise op's forward and derivatives over the range its
checks draw from (:func:`derivative_figure`, from the :class:`Curves` that :func:`curves` computes
in a worker), and the gradient's error per dtype as histograms (:func:`histogram_figure`). Each
takes matplotlib's pyplot and returns the figure, drawn, not saved; no drawing runs the op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from opzoo.core._registry import OpSpec

#: Points of the grid an elementwise op is plotted on (declared kinks and 0 are added to it).
GRID = 801


def shown_k(value: float | None) -> str:
    """An error in eps (k) as the report shows it."""
    return "-" if value is None else f"{value:.3g}"


def histogram_figure(plt: Any, errors: Any) -> Any:
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
        ax.set_title(f"{name}: worst k {shown_k(worst)}", fontsize=9)
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


@dataclass
class Curves:
    """What the derivative figure draws of an elementwise op on its grid ``x``: computed where the
    op may run (:func:`curves`, a worker), drawn where it may not (:func:`derivative_figure`).
    Arrays, not tensors, so that they travel between processes as plain bytes."""

    params: dict[str, Any]
    x: np.ndarray
    y: np.ndarray  # the forward
    backward: np.ndarray  # the hand-written backward's slope
    oracle: np.ndarray | None
    label: str  # what the oracle is
    surrogate: np.ndarray | None  # a surrogate op: the declared surrogate's derivative
    declared: list[float]  # declared kinks in range
    detected: list[float]  # kinks found numerically, not declared
    box: tuple[float, float]  # the range the checks draw from
    surrogate_op: bool = False  # the op declares a surrogate: its backward is the surrogate's


def curves(spec: OpSpec) -> Curves:
    """The op's forward, backward and oracle on the grid, at its default params: this runs the op."""
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
    surrogate = _surrogate_slope(op, x) if spec.contract.surrogate is not None else None
    kinds = Probe(outputs_of(op), (x,), diagonal=True).kind.reshape(x.shape)
    rough = kinds != 0  # 0: smooth (_onesided.KINDS)
    detected = [v for v in x[rough].tolist() if all(abs(v - k) > 1e-9 for k in declared)]
    return Curves(
        params, *(_array(t) for t in (x, y, backward, oracle)), label, _array(surrogate),
        declared, detected, (lo, hi), spec.contract.surrogate is not None,
    )  # fmt: skip


def _array(t: torch.Tensor | None) -> Any:
    return None if t is None else t.detach().double().numpy().copy()


def derivative_figure(plt: Any, spec: OpSpec, c: Curves, failed: list[Any]) -> Any:
    """The forward above; below, the hand-written backward, the oracle's derivative (and for a
    surrogate op the declared surrogate's and the true derivative); kinks and failures marked. Of
    ``spec`` only its name is read: an import path's op is never resolved here."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 4.6), dpi=80, sharex=True)
    top.plot(c.x, c.y, color="#222", linewidth=1.3, label="forward")
    top.set_ylabel("f(x)", fontsize=8)
    surrogate = c.surrogate_op
    name = "backward (the surrogate)" if surrogate else "backward (hand-written)"
    bottom.plot(c.x, c.backward, color="#4c72b0", linewidth=2.2, label=name)
    if c.oracle is not None:
        bottom.plot(c.x, c.oracle, color="#dd8452", linewidth=1.2, linestyle="--", label=c.label)
    if c.surrogate is not None:
        style = dict(color="#55a868", linewidth=1.0, linestyle=":")
        bottom.plot(c.x, c.surrogate, label="the declared surrogate's derivative", **style)
    _mark_kinks((top, bottom), c.declared, c.detected)
    _mark_failures(bottom, failed, c.box)
    bottom.set_ylabel("df/dx", fontsize=8)
    bottom.set_xlabel("x (the range the checks draw from)", fontsize=8)
    bottom.legend(fontsize=7, loc="best")
    top.set_title(f"{spec.name} {c.params if c.params else ''}".strip(), fontsize=9)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def _mark_kinks(axes: tuple[Any, Any], declared: list[float], detected: list[float]) -> None:
    """Declared kinks dashed, detected ones (the first 20) dotted, on both panels; labelled below."""
    bottom = axes[1]
    for ax in axes:
        for i, k in enumerate(declared):
            label = "declared kink" if i == 0 and ax is bottom else None
            ax.axvline(k, color="#8172b2", linestyle="--", linewidth=0.8, label=label)
        for i, k in enumerate(detected[:20]):
            label = "detected kink" if i == 0 and ax is bottom else None
            ax.axvline(k, color="#937860", linestyle=":", linewidth=0.8, label=label)


def _mark_failures(bottom: Any, failed: list[Any], box: tuple[float, float]) -> None:
    """Each failing example in range: a cross at its backward's value, or a line where it had none."""
    lo, hi = box
    marked = False
    for r in failed:
        w = r.worst or {}
        if isinstance(w.get("x"), float) and math.isfinite(w["x"]) and lo <= w["x"] <= hi:
            label = None if marked else "failing example"
            value = w.get("analytic")
            if isinstance(value, float) and math.isfinite(value):
                bottom.plot([w["x"]], [value], "x", color="#c44e52", markersize=9, mew=2, label=label)
            else:
                bottom.axvline(w["x"], color="#c44e52", linewidth=1.2, label=label)
            marked = True


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
