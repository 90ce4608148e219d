"""Surrogate-gradient ops: a backward that is deliberately not the derivative of the forward (a
straight-through estimator, a spiking neuron's smooth surrogate, gradient reversal), checked against
the autograd gradient of the surrogate the op declares (``Contract(surrogate=...)``).

Finite differences of a piecewise-constant forward (round, sign, a spike) are zero almost everywhere
and say nothing about such a backward, so they are not used: the oracle is the surrogate,
differentiated by autograd in float64 (spikingjelly checks its own surrogates against their smooth
"primitive functions" so; opzoo does it for any op that declares one). The ``gradient`` property
hands surrogate ops to this module (``double_backward`` to ``_surrogate_second``);
``piecewise_constant_hint`` tells the author of an op that fails ``gradient`` that a surrogate may
be what they meant.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from opzoo.exceptions import one_line
from opzoo.testing.checks import _kinks
from opzoo.testing.checks._backward_rows import jacobian_rows
from opzoo.testing.checks._bound import Bound, PropertyFailed, Tensors, bind, grad_outputs, vjp
from opzoo.testing.checks._compare import TOLERANCES, where
from opzoo.testing.checks._kink_words import describe
from opzoo.testing.checks._onesided import Probe
from opzoo.testing.strategies import KINK_MARGIN, domain_box

#: Each drawn input is also checked scaled by these (clamped to the dtype's largest value; inf: that
#: value itself): where a naive surrogate backward overflows, exp(slope * x) or (slope * x)**2 ->
#: inf / inf = nan. Scaling the drawn input, rather than checking fixed extremes, keeps hypothesis'
#: counterexample minimal and the failure reproducible from it.
SCALES = (1e2, 1e4, 1e8, 1e30, 1e300, math.inf)

HINT = (
    " (the forward is piecewise constant: the gradient is zero almost everywhere; if the "
    "backward is meant as a surrogate, declare `surrogate=` in the contract, see docs/surrogates.md)"
)


# -- gradient -------------------------------------------------------------------------------------


def surrogate_gradient(op: Bound, *xs: torch.Tensor) -> None:
    """The backward is the autograd gradient of the declared surrogate: in float64 at float64
    precision, in each lower dtype the op declares against the float64 surrogate at the rounded
    inputs, and (elementwise ops) at the inputs scaled up to each dtype's largest value."""
    if all(x.numel() == 0 for x in xs):
        return
    contract = op.spec.contract
    dtypes = [getattr(torch, name) for name in contract.dtypes]
    for dtype in dtypes:
        _compare(op.cast(dtype), tuple(x.to(dtype) for x in xs))  # float constants follow the dtype
    if not contract.sig.elementwise:
        return
    for scale in SCALES:
        for dtype in dtypes:
            big = torch.finfo(dtype).max
            scaled = tuple(_scaled(x, scale, big).to(dtype) for x in xs)
            if all(bool(((x > contract.domain[0]) & (x < contract.domain[1])).all()) for x in scaled):
                times = f"times {scale:g}, clamped to" if math.isfinite(scale) else "pushed to"
                _compare(op, scaled, f" at large |x| (the input {times} +-{name_of(dtype)}'s largest)")


def _scaled(x: torch.Tensor, scale: float, big: float) -> torch.Tensor:
    """``x * scale`` in float64, clamped to [-big, big]; zeros stay zero (an infinite scale too)."""
    x = x.double()
    return torch.where(x == 0, x, (x * scale).nan_to_num().clamp(-big, big))


def name_of(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def surrogate_vjp(op: Bound, xs: Sequence[torch.Tensor], gs: Sequence[torch.Tensor]) -> Tensors:
    """The gradient of ``sum(surrogate(x)_j * g_j)`` with respect to each input, in float64 (zeros
    where the surrogate does not depend on an input)."""
    x64 = tuple(x.detach().double().requires_grad_() for x in xs)
    outs = surrogate_outputs(op, x64, len(gs))
    pairs = [(o, g.detach().double()) for o, g in zip(outs, gs) if o.requires_grad]
    if not pairs:
        return tuple(torch.zeros_like(x) for x in x64)
    grads = torch.autograd.grad([o for o, _ in pairs], x64, [g for _, g in pairs], allow_unused=True)
    return tuple(torch.zeros_like(x) if g is None else g.detach() for x, g in zip(x64, grads))


def surrogate_outputs(op: Bound, x64: Tensors, n_outputs: int) -> Tensors:
    surrogate = op.spec.contract.surrogate
    try:
        out = op.calling(lambda *ts: surrogate(*ts, **op.params))(*x64)
    except Exception as exc:  # the author's callable: say whose error it is
        raise PropertyFailed(f"the declared surrogate raised {one_line(exc, with_type=True)}") from None
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != n_outputs or not all(isinstance(o, torch.Tensor) for o in outs):
        raise PropertyFailed(
            f"the declared surrogate returned {len(outs)} value(s), but the op has {n_outputs} output(s)"
        )
    return outs


def _compare(op: Bound, xs: Tensors, at: str = "") -> None:
    outs, grads = vjp(op, xs)
    gs = grad_outputs(outs)
    want = surrogate_vjp(op, xs, gs)
    tol = TOLERANCES[xs[0].dtype]
    used = gs
    if any(mismatch(g.double(), w, tol) is not None for g, w in zip(grads, want)):
        # Where the surrogate is not differentiable (a threshold of a piecewise surrogate), its autograd
        # gradient is one choice among the valid ones: the op's is judged against its one-sided
        # derivatives there (in float64), and the rest compared as before.
        smooth = _surrogate_kinks(op, xs, len(outs), gs)
        if smooth is not None:
            kept = tuple(g * k.to(g.device) for g, k in zip(gs, smooth))
            used = kept
            grads = vjp(op, xs, kept)[1]
            want = surrogate_vjp(op, xs, kept)
            reach = _kinks.reached(
                smooth, [lambda w: vjp(op, xs, w)[1], lambda w: surrogate_vjp(op, xs, w)], gs
            )
            grads, want = _kinks.unjudged([g.double() for g in grads], want, reach)
    name = name_of(xs[0].dtype)
    own = None
    for i, (got, expected, x) in enumerate(zip(grads, want, xs)):
        what = f"gradient in {name}{where(i, len(xs), 'input')} differs from the declared surrogate{at}"
        bad = mismatch(got.double(), expected, tol)
        if bad is None:
            continue
        if xs[0].dtype != torch.float64:
            # In a lower dtype the op computes what its surrogate would in that dtype, not in float64:
            # 1 - sigmoid cancels to 0, and a threshold param (|x| < w) is compared at its rounding,
            # so the op's kink moves by up to a rounding of x. An element is right if it gives what
            # the surrogate run in this dtype gives, or (elementwise ops) the float64 surrogate's
            # gradient at a neighbouring value of this dtype.
            own = _rounded_alternatives(op, xs, used, tuple(grads)) if own is None else own
            for alt, nan_too in own:
                # nan_too: the surrogate run in this dtype, where a nan matches a nan (sin of a product
                # that overflows float32: the op gives what its surrogate gives there); a naive
                # overflow of a surrogate that stays finite in this dtype is still caught
                bad = bad & ~torch.isclose(got.double(), alt[i].double(), equal_nan=nan_too, **tol)
            if not bool(bad.any()):
                _note_in_dtype(op, name)
                continue
        hint = ""
        ones = vjp(op, xs, tuple(torch.ones_like(o) for o in outs))[1][i]
        if x.numel() > 0 and bool(ones.ne(0).any()) and torch.equal(ones, got):
            hint = " (the same for grad_output = 1: is the backward not multiplied by grad_output?)"
        raise surrogate_failure(what, bad, got, expected, x, hint)


def _rounded_alternatives(op: Bound, xs: Tensors, gs: Tensors, like: Tensors) -> list[tuple[Tensors, bool]]:
    """What a right op may give in the lower dtype of ``xs`` besides the float64 surrogate's
    gradient, each with whether a nan there matches a nan: the surrogate's own gradient computed in
    that dtype (yes), and (elementwise ops of one shape) the float64 surrogate's gradient at the next
    value of that dtype below and above (no)."""
    alternatives = []
    own = _in_dtype(op, xs, gs, like)
    if own is not None:
        alternatives.append((own, True))
    if _kinks.diagonal(op, xs):
        for towards in (-math.inf, math.inf):
            nearby = tuple(torch.nextafter(x, torch.full_like(x, towards)) for x in xs)
            alternatives.append((surrogate_vjp(op, nearby, gs), False))
    return alternatives


def _in_dtype(op: Bound, xs: Tensors, gs: Tensors, like: Tensors) -> Tensors | None:
    """The surrogate's autograd gradient computed in the dtype of ``xs`` (zeros where it does not
    depend on an input), or None where that cannot be had (the surrogate raises in that dtype, or
    returns something else)."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    try:
        out = op.calling(lambda *ts: op.spec.contract.surrogate(*ts, **op.params))(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [
            (o, g.to(o.dtype)) for o, g in zip(outs, gs) if isinstance(o, torch.Tensor) and o.requires_grad
        ]
        if len(outs) != len(gs) or not pairs:
            return None
        grads = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)
    except Exception:  # the float64 comparison has judged the surrogate itself; this is an allowance
        return None
    return tuple(torch.zeros_like(x) if g is None else g.detach() for x, g in zip(like, grads))


def _note_in_dtype(op: Bound, name: str) -> None:
    note = (
        f"in {name} the gradient differs from the float64 surrogate's where the surrogate run in {name}, "
        f"or at a neighbouring {name} value (a threshold compared at its rounding), gives what the op "
        "gives: accepted there"
    )
    if note not in op.notes:
        op.notes.append(note)


def _surrogate_kinks(op: Bound, xs: Tensors, n_outputs: int, gs: Tensors) -> Tensors | None:
    """Where the surrogate is smooth at ``xs``, one boolean tensor per output (None: everywhere);
    at its kinks the op's gradient is held to the surrogate's one-sided derivatives (float64 only: a
    lower precision is compared where the float64 check has judged it)."""
    x64 = tuple(x.detach().double() for x in xs)
    diagonal = _kinks.diagonal(op, xs)
    probe = Probe(lambda *ts: surrogate_outputs(op, ts, n_outputs), x64, diagonal=diagonal)
    if bool(probe.smooth.all()):
        return None
    if xs[0].dtype == torch.float64:
        rows = (~probe.smooth).nonzero().reshape(-1)
        try:
            _kinks.judge(
                probe, rows, jacobian_rows(_kinks.outputs_of(op), x64, rows, probe), subject="the surrogate"
            )
        except PropertyFailed as exc:
            raise PropertyFailed(
                f"gradient differs from the declared surrogate where that is not differentiable: {exc}",
                **exc.details,
            ) from None
        describe(probe, op.notes, subject="the surrogate")
    return probe.mask(probe.smooth)


def mismatch(got: torch.Tensor, want: torch.Tensor, tol: dict[str, float]) -> torch.Tensor | None:
    """The elements where ``got`` and ``want`` differ, or None. Where the surrogate's own gradient is
    not finite it cannot be an oracle: those elements are not compared."""
    bad = ~torch.isclose(got, want, **tol) & torch.isfinite(want)
    return bad if bad.any() else None


def surrogate_failure(
    what: str,
    bad: torch.Tensor,
    got: torch.Tensor,
    want: torch.Tensor,
    x: torch.Tensor,
    hint: str = "",
    of: str = "gradient",
) -> PropertyFailed:
    """A failure naming the worst element by its index, with the op's and the surrogate's values."""
    got, want = got.double(), want.double()
    diff = torch.where(bad, (got - want).abs().nan_to_num(math.inf), -1.0)
    flat = int(diff.reshape(-1).argmax())
    index = tuple(int(v) for v in torch.unravel_index(torch.tensor(flat), tuple(got.shape)))
    g, w = got.reshape(-1)[flat].item(), want.reshape(-1)[flat].item()
    at_x = f" (x = {x.reshape(-1)[flat].item():.9g})" if x.shape == got.shape else ""
    return PropertyFailed(
        f"{what}: {int(bad.sum())} of {bad.numel()} elements differ; worst at index {list(index)}{at_x}: "
        f"the op's {of} is {g:.9g}, the surrogate's is {w:.9g}{hint}",
        worst={
            "index": index,
            "x": x.reshape(-1)[flat].item() if x.shape == got.shape else math.nan,
            "surrogate": w,
            "analytic": g,
        },
    )


# -- the hint for ops that should declare one -----------------------------------------------------


def piecewise_constant_hint(op: Bound, *xs: torch.Tensor) -> str:
    """The hint to append to a failed ``gradient`` when the forward is piecewise constant (locally
    constant wherever it is probed) while the backward is not zero there; else "". The forward is
    probed at points spread over its domain, not only at ``xs``: a shrunk counterexample often sits
    on a jump (x = 0 for a step) or where an op that is not piecewise constant happens to be flat (a
    ReLU's negative side)."""
    if op.spec.contract.surrogate is not None or all(x.numel() == 0 for x in xs):
        return ""
    try:
        lo, hi = domain_box(op.spec.contract.domain, KINK_MARGIN)
        if op.spec.contract.sig.elementwise:
            # 40 points: none falls on an integer or a half-integer (where round, sign or a step
            # jump) for the default box [-6, 6]
            spread = torch.linspace(lo, hi, 40, dtype=xs[0].dtype, device=xs[0].device)
            probes = [tuple(spread for _ in xs)]
        else:
            # the counterexample, and its shapes filled with values spread over the box (each input
            # its own, so that no two are equal)
            probes = [tuple(x.detach() for x in xs), tuple(_spread(x, i, lo, hi) for i, x in enumerate(xs))]
        for probe in probes:
            if not _locally_constant(op, probe):
                return ""
        if not op.spec.contract.sig.elementwise and not _flat_at_fixed_inputs(op, xs[0].device):
            return ""  # flat only at the counterexample's sizes: a softmax over one element
        _, grads = vjp(op, probes[-1])
        return HINT if any(bool(g.ne(0).any()) for g in grads) else ""
    except Exception:  # a hint must never hide the failure it decorates
        return ""


def _flat_at_fixed_inputs(op: Bound, device: torch.device) -> bool:
    """Whether the forward is locally constant at the op's fixed inputs too, whose dimensions are
    sizes of their own (not only 1): a counterexample shrunk to a dimension of one element can be
    flat where the op is not (a log-softmax over one element is 0)."""
    from opzoo.testing._edges import fixed_inputs, split

    for inputs in fixed_inputs(op.spec, str(device)):
        xs, constants = split(op.spec, inputs)
        if not _locally_constant(bind(op.spec, op.params, constants=constants, device=device), xs):
            return False
    return True


def _spread(x: torch.Tensor, i: int, lo: float, hi: float) -> torch.Tensor:
    """``x``'s shape filled with values spread over [lo, hi], shuffled by a fixed permutation, off
    integers and half-integers (where rounding ops jump)."""
    n = x.numel()
    values = torch.linspace(lo, hi, n + 2, dtype=torch.float64)[1:-1] * (1 - 0.013 * (i + 1)) + 0.0123
    order = torch.randperm(n, generator=torch.Generator().manual_seed(i))
    return values[order].reshape(x.shape).to(device=x.device, dtype=x.dtype)


def _locally_constant(op: Bound, xs: Tensors) -> bool:
    """Whether nudging each input by a relative 1e-7 changes no output at all."""
    with torch.no_grad():
        base = op.outputs(*xs)
        for i, x in enumerate(xs):
            if x.numel() == 0:
                continue
            step = (
                1e-7
                * x.abs().clamp(min=1.0)
                * torch.linspace(0.5, 1.5, x.numel(), dtype=x.dtype).reshape(x.shape).to(x.device)
            )
            for sign in (1.0, -1.0):
                nudged = op.outputs(*xs[:i], x + sign * step, *xs[i + 1 :])
                if not all(torch.equal(a, b) for a, b in zip(nudged, base)):
                    return False
    return True
