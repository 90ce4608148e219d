"""The error samples of one op: every element's error in each dtype it declares, in units of that
dtype's epsilon (``_budget.in_eps``), on the inputs its checks see, against the float64 oracle: what
``opzoo report`` draws and ``benchmarks/error_budgets.py`` records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from opzoo.core._spec import OpSpec
from opzoo.testing.checks._bound import Bound, Tensors, bind, grad_outputs, vjp
from opzoo.testing.checks._budget import in_eps, slack
from opzoo.testing.running._hooks import Asked

#: The note of a by-design op's errors: what its gradient's figures are, and what they are not.
BY_DESIGN = (
    "by design, the backward is no derivative: its gradient in each dtype is measured against its own "
    "float64 backward and held to no error budget (reference checks the forward only)"
)


@dataclass
class Errors:
    """The ``k`` of every element an op's results were measured on, per dtype (by torch name):
    ``backward[d]`` and ``forward[d]``, with ``par_backward[d]`` and ``par_forward[d]`` the same
    measure of the reference computed in ``d`` (0 where there is none), and ``steps_backward[d]``
    that of the op's own float64 formula with each step rounded as in ``d`` (``checks._steps``; 0 in
    float64), element for element; ``oracle`` says what the float64 values came from; ``notes``,
    what could not be measured, and why. ``budgeted``: whether the backward is held to the dtypes'
    error budgets (not a by-design backward, which is no derivative: no property holds it to one)."""

    op: str
    oracle: str
    backward: dict[str, torch.Tensor] = field(default_factory=dict)
    forward: dict[str, torch.Tensor] = field(default_factory=dict)
    par_backward: dict[str, torch.Tensor] = field(default_factory=dict)
    par_forward: dict[str, torch.Tensor] = field(default_factory=dict)
    steps_backward: dict[str, torch.Tensor] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    budgeted: bool = True

    def __post_init__(self) -> None:
        if not self.budgeted and BY_DESIGN not in self.notes:
            self.notes.append(BY_DESIGN)

    def worst(self, dtype: str, part: str = "backward") -> float | None:
        """The largest finite-or-not ``k`` measured in ``dtype`` (None: nothing measured)."""
        k = getattr(self, part).get(dtype)
        return None if k is None or not k.numel() else k.max().item()

    def excess(self, dtype: str, part: str = "backward") -> float | None:
        """The largest ``k - 2 * k_par - 2 * k_steps`` in ``dtype`` (``k_steps`` for the gradient only):
        what the budget is held to (None: nothing measured, or a backward held to no budget)."""
        k = getattr(self, part).get(dtype)
        if k is None or not k.numel() or (part == "backward" and not self.budgeted):
            return None
        for allowed in (
            getattr(self, f"par_{part}").get(dtype),
            getattr(self, f"steps_{part}", {}).get(dtype),
        ):
            if allowed is not None and allowed.shape == k.shape:
                k = k - 2 * allowed.nan_to_num(posinf=0.0)
        return k.max().item()


def oracle_name(spec: OpSpec) -> str:
    """What the float64 values an op's errors are measured against come from."""
    if spec.contract.surrogate is not None:
        return "the op's own float64 backward (a surrogate: its gradient is the declared one)"
    if spec.contract.by_design is not None and spec.contract.reference is not None:
        return (
            "the declared reference for the forward only, and the op's own float64 backward (by design: "
            f"{spec.contract.by_design}; no derivative, so not the reference's)"
        )
    if spec.contract.reference is not None:
        return "the declared reference, differentiated by autograd in float64"
    why = no_autograd_oracle(spec)
    if why:
        return f"the op's own float64 backward ({why})"
    return "autograd of the op's forward in float64"


def no_autograd_oracle(spec: OpSpec) -> str | None:
    """Why autograd of the forward is no oracle for ``spec`` (the ``autograd`` property's record
    says), or None."""
    from opzoo.testing.properties import PROPERTIES

    return PROPERTIES["autograd"].applies(spec)


def _forward_only(spec: OpSpec) -> bool:
    """Whether the declared reference is the forward's only (as the ``reference`` property holds it):
    a surrogate's backward is another function's derivative, a by-design one no derivative at all."""
    return spec.contract.surrogate is not None or spec.contract.by_design is not None


def _oracle(op: Bound, x64: Tensors, g64: Tensors, forward_only: bool) -> tuple[Tensors, Tensors] | None:
    """The oracle's float64 outputs and gradients at ``x64`` (see :func:`oracle_name`); None where
    the forward cannot be differentiated by autograd and there is no reference."""
    from opzoo.testing.checks import _oracles, _reference

    spec = op.spec
    if spec.contract.reference is not None:
        outs, grads = _reference._ref_vjp(_reference.reference_of(op), x64, g64, forward_only=True)
        if not _forward_only(spec) and not forward_only:
            outs, grads = _reference._ref_vjp(_reference.reference_of(op), x64, g64)
        elif not forward_only:
            grads = vjp(op, x64, g64)[1]
        return outs, grads
    if no_autograd_oracle(spec) is None:
        leaves = tuple(x.detach().clone().requires_grad_() for x in x64)
        outs = _oracles._forward_outputs(op, leaves)
        if outs is None or not any(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
            return None
        live = [j for j, o in enumerate(outs) if o.requires_grad]
        try:
            grads = torch.autograd.grad(
                [outs[j] for j in live], leaves, [g64[j] for j in live], allow_unused=True
            )
        except RuntimeError:
            return None
        grads = tuple(torch.zeros_like(x) if g is None else g for x, g in zip(x64, grads))
        return tuple(o.detach() for o in outs), grads
    return vjp(op, x64, g64)


def _away_from_kinks(op: Bound, lows: Tensors, dtype: torch.dtype) -> torch.Tensor | None:
    """For an elementwise op with declared kinks, where its inputs are clear of them (as the
    ``reference`` property leaves them out); None: everywhere."""
    from opzoo.testing.strategies import KINK_MARGIN

    kinks = op.spec.contract.kinks_at(op.params)
    if not kinks or not op.spec.contract.sig.elementwise or len(lows) != 1:
        return None
    away = torch.ones_like(lows[0], dtype=torch.bool)
    for k in kinks:
        step = torch.finfo(dtype).eps * max(1.0, abs(k))
        away &= (lows[0].double() - k).abs() >= max(KINK_MARGIN / 2, 4 * step)
    return away


def measure(op: Bound, xs: Sequence[torch.Tensor], dtype: torch.dtype, into: Errors) -> None:
    """Add to ``into`` the ``k`` of the op's forward and gradient in ``dtype`` at ``xs`` (rounded to
    ``dtype``), against the float64 oracle at the rounded inputs."""
    from opzoo.testing.checks import _reference

    name = str(dtype).removeprefix("torch.")
    lows = tuple(x.to(dtype) for x in xs)
    lop = op if dtype == torch.float64 else op.cast(dtype)
    outs, grads = vjp(lop, lows)
    gs = grad_outputs(outs)
    x64, g64 = tuple(x.double() for x in lows), tuple(g.double() for g in gs)
    forward_only = _forward_only(op.spec)
    oracle = _oracle(op, x64, g64, forward_only=False)
    if oracle is None:
        into.notes.append(f"{name}: no float64 oracle (autograd cannot differentiate the forward)")
        return
    want, want_grads = oracle
    par: Sequence[torch.Tensor | None] = (None,) * len(outs)
    par_grads: Sequence[torch.Tensor | None] = (None,) * len(xs)
    if dtype != torch.float64 and op.spec.contract.reference is not None:
        par, par_grads = _reference._ref_vjp(_reference.reference_of(op), lows, gs, forward_only=forward_only)
        par_grads = par_grads or (None,) * len(xs)
    fwd = [in_eps(o, w, dtype).reshape(-1) for o, w in zip(outs, want)]
    fwd_par = [
        (in_eps(p, w, dtype) if p is not None else torch.zeros_like(w, dtype=torch.float64)).reshape(-1)
        for p, w in zip(par, want)
    ]
    # float64 has no budget, and its own rounding is far below the oracle's slack: measured raw.
    off = slack(gs) if dtype != torch.float64 else 0.0
    away = _away_from_kinks(op, lows, dtype)
    steps = _stepped(op, lows, gs, into) if dtype != torch.float64 else None
    bwd = [_ks(g, w, dtype, off, away) for g, w in zip(grads, want_grads)]
    bwd_par = [_ks(p, w, dtype, off, away) for p, w in zip(par_grads, want_grads)]
    bwd_steps = (
        [_ks(s, w, dtype, off, away) for s, w in zip(steps, want_grads)]
        if steps is not None
        else [torch.zeros_like(k) for k in bwd]
    )
    parts = (
        ("forward", fwd),
        ("par_forward", fwd_par),
        ("backward", bwd),
        ("par_backward", bwd_par),
        ("steps_backward", bwd_steps),
    )
    for part, ks in parts:
        store = getattr(into, part)
        store[name] = torch.cat([store.get(name, torch.zeros(0, dtype=torch.float64)), *ks])


def _ks(
    got: torch.Tensor | None, want: torch.Tensor, dtype: torch.dtype, off: float, away: torch.Tensor | None
) -> torch.Tensor:
    """The ``k`` of ``got`` against ``want`` (0 where there is no ``got``), where ``away`` says, flat."""
    k = in_eps(got, want, dtype, off) if got is not None else torch.zeros_like(want, dtype=torch.float64)
    if away is not None and away.shape == k.shape:
        k = k[away]
    return k.reshape(-1)


def _stepped(op: Bound, lows: Tensors, gs: Tensors, into: Errors) -> Tensors | None:
    """The op's gradients by its float64 formula, each step rounded as in the dtype of ``lows``
    (``checks._steps``); None where it cannot be run so (noted)."""
    from opzoo.exceptions import one_line
    from opzoo.testing.checks._steps import stepped

    try:
        return stepped(op, lows, gs)
    except Exception as exc:  # the op's own code, in a dispatch mode it may not expect
        name = str(lows[0].dtype).removeprefix("torch.")
        note = f"{name}: its formula could not be run step by step: {one_line(exc, with_type=True)}"
        if note not in into.notes:
            into.notes.append(note)
        return None


def error_samples(
    spec: OpSpec,
    *,
    profile: str = "ci",
    examples: int | None = None,
    registry: Asked = None,
    dtypes: Sequence[str] | None = None,
) -> Errors:
    """Measure ``spec``'s errors in each dtype it declares (``dtypes``: these instead) on the inputs
    its checks see: the profile's hypothesis examples (derandomized under ``ci``), the small fixed
    inputs and the edge inputs. What the forward rejects, or an op that raises, is left out with a
    note; nothing here fails."""
    import hypothesis
    from hypothesis import given, settings

    from opzoo.testing.checks._bound import rejects
    from opzoo.testing.running import _profiles
    from opzoo.testing.running._repeatable import seeded_torch, without_local_constants
    from opzoo.testing.running._runner import split
    from opzoo.testing.strategies import cases, edge_inputs, fixed_inputs

    found = Errors(spec.name, oracle_name(spec), budgeted=spec.contract.by_design is None)
    chosen = [getattr(torch, d) for d in (dtypes or spec.contract.dtypes)]
    conf = _profiles.get(profile, examples)
    if not conf.derandomize:
        conf = settings(conf, derandomize=True)  # the same samples every time: a report is a record

    def attempt(params: dict[str, Any], inputs: tuple[torch.Tensor, ...]) -> bool:
        xs, constants = split(spec, inputs)
        op = bind(spec, params, constants=constants)
        if rejects(op, xs) is not None or all(x.numel() == 0 for x in xs):
            return False
        for dtype in chosen:
            try:
                with seeded_torch("cpu"):
                    measure(op, xs, dtype, found)
            except Exception as exc:  # the op's own code, in a dtype it may not support
                from opzoo.exceptions import one_line

                note = f"{str(dtype).removeprefix('torch.')}: {one_line(exc, with_type=True)}"
                if note not in found.notes:
                    found.notes.append(note)
        return True

    @conf
    @given(case=cases(spec, registry=registry))
    def run(case: tuple[dict[str, Any], tuple[torch.Tensor, ...]]) -> None:
        if not attempt(*case):
            hypothesis.reject()

    try:
        # as the checks draw: from the pinned seed, without literals of local modules (hypothesis
        # kept them in ./.hypothesis/)
        with without_local_constants():
            hypothesis.seed(_profiles.CI_SEED)(run)()
    except hypothesis.errors.Unsatisfiable:
        pass  # the forward rejected every drawn input: the fixed and edge ones may still be taken
    for inputs in [*fixed_inputs(spec, "cpu"), *edge_inputs(spec, "cpu")]:
        attempt(spec.contract.defaults(), inputs)
    return found
