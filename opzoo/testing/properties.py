"""The properties every registered op must have, one :class:`Property` record each.

A property's check takes a bound op and a float64 input and raises :class:`PropertyFailed` (or any
error the op itself raises) when the property does not hold. To add a property, write its check and
add one record to :data:`PROPERTIES`; ``opzoo check``, the pytest plugin and the docs pick it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from opzoo._records import one_line
from opzoo._registry import OpSpec
from opzoo.testing._library import library, why_not_bridged
from opzoo.testing.strategies import KINK_MARGIN

#: Tolerances against the float64 result, per dtype (values already rounded to the dtype).
TOLERANCES = {
    torch.float64: dict(rtol=1e-7, atol=1e-9),
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.float16: dict(rtol=1e-2, atol=1e-3),
    torch.bfloat16: dict(rtol=3e-2, atol=1e-2),
}
EXACT = dict(rtol=1e-9, atol=1e-12)  # same arithmetic, other memory layout


class PropertyFailed(AssertionError):
    """A property does not hold; ``details`` holds what the report shows besides the message."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


@dataclass
class Bound:
    """An op with its parameters fixed; learnable tensors (module ops) are explicit inputs.

    ``fast`` selects gradcheck's fast mode (a random projection of the Jacobian instead of all of
    it); the thorough profile and the runner's small fixed inputs turn it off.
    """

    spec: OpSpec
    params: dict[str, float]
    fn: Callable[..., torch.Tensor]
    extras: tuple[torch.Tensor, ...] = ()
    module: torch.nn.Module | None = None  # a learnable op's instance, in the bound dtype
    fast: bool = True

    def __call__(self, x: torch.Tensor, *extras: torch.Tensor) -> torch.Tensor:
        return self.fn(x, *(extras or self.extras))

    def inputs(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Leaves for gradcheck: the input and every learnable tensor, all requiring grad."""
        return (
            x.detach().clone().requires_grad_(),
            *(e.detach().clone().requires_grad_() for e in self.extras),
        )


def bind(
    spec: OpSpec,
    params: dict[str, float],
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    fast: bool = True,
) -> Bound:
    """Return ``spec`` with ``params`` fixed, in ``dtype`` on ``device``."""
    bound = spec.contract.bind(params)
    # Build in float64, so that a parameter initialised from a Python float keeps its exact value.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        fn = spec.bound(**bound)
    finally:
        torch.set_default_dtype(previous)
    if not isinstance(fn, torch.nn.Module):
        return Bound(spec, bound, lambda x, *_: fn(x), fast=fast)
    module = fn.to(device=device, dtype=dtype)
    names = tuple(n for n, _ in module.named_parameters())
    tensors = tuple(p.detach() for _, p in module.named_parameters())

    def call(x: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(module, dict(zip(names, ps)), (x,))

    return Bound(spec, bound, call, tensors, module, fast)


def _ramp(like: torch.Tensor) -> torch.Tensor:
    """A deterministic grad_output with distinct, non-zero entries."""
    n = like.numel()
    return (torch.linspace(-1.5, 2.0, max(n, 1), dtype=like.dtype, device=like.device)[:n] + 0.01).reshape(
        like.shape
    )


def noncontiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout: a transpose for 2+ dims, else a strided slice."""
    if t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    base = torch.zeros((*t.shape, 2), dtype=t.dtype, device=t.device)
    base[..., 0] = t
    return base[..., 0]


def _vjp(
    op: Bound, x: torch.Tensor, g: torch.Tensor, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    xr = x.detach().clone().requires_grad_()
    y = op(xr)
    (gx,) = torch.autograd.grad(y, xr, g, allow_unused=True)
    return y.detach(), (torch.zeros_like(xr) if gx is None else gx)


def worst_gradient_mismatch(op: Bound, x: torch.Tensor, eps: float = 1e-6) -> dict[str, Any] | None:
    """Compare the analytic gradient of sum(op(x) * g) with central differences, element by element;
    return where they differ most."""
    if x.numel() == 0 or x.numel() > 4096:
        return None
    g = _ramp(op(x.detach()))
    _, analytic = _vjp(op, x, g)
    numeric = torch.empty_like(x)
    flat, nflat = x.detach().clone().reshape(-1), numeric.reshape(-1)
    with torch.no_grad():
        for i in range(flat.numel()):
            orig = flat[i].item()
            flat[i] = orig + eps
            up = (op(flat.reshape(x.shape)) * g).sum().item()
            flat[i] = orig - eps
            down = (op(flat.reshape(x.shape)) * g).sum().item()
            flat[i] = orig
            nflat[i] = (up - down) / (2 * eps)
    diff = (numeric - analytic).abs()
    i = int(diff.reshape(-1).argmax())
    index = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), x.shape)) if x.dim() else ()
    return {
        "index": index,
        "x": x.reshape(-1)[i].item(),
        "grad_output": g.reshape(-1)[i].item(),
        "numerical": numeric.reshape(-1)[i].item(),
        "analytic": analytic.reshape(-1)[i].item(),
    }


# -- the properties -------------------------------------------------------------------------------


def gradient(op: Bound, x: torch.Tensor) -> None:
    """gradcheck in float64: analytic backward vs central differences; undefined grads, dtypes."""
    try:
        gradcheck(
            op,
            op.inputs(x),
            fast_mode=op.fast,
            check_undefined_grad=True,
            check_grad_dtypes=True,
            eps=1e-6,
            atol=1e-5,
            rtol=1e-3,
        )
    except GradcheckError as exc:
        message = one_line(exc, with_type=False, lines=3)
        raise PropertyFailed(message, worst=worst_gradient_mismatch(op, x)) from None


def double_backward(op: Bound, x: torch.Tensor) -> None:
    """Declared: gradgradcheck with contiguous and non-contiguous grad_outputs. Undeclared: a
    second derivative must fail loudly, not come back silently."""
    if op.spec.contract.double_backward:
        y = op(x.detach())
        g = _ramp(y)
        for grad_out in (g, noncontiguous(g)):
            try:
                gradgradcheck(
                    op,
                    op.inputs(x),
                    (grad_out,),
                    fast_mode=op.fast,
                    eps=1e-6,
                    atol=1e-5,
                    rtol=1e-3,
                    gen_non_contig_grad_outputs=True,
                )
            except GradcheckError as exc:
                layout = "contiguous" if grad_out.is_contiguous() else "non-contiguous"
                message = one_line(exc, with_type=False, lines=3)
                raise PropertyFailed(f"with {layout} grad_output: {message}") from None
        return
    if x.numel() == 0:
        return
    xr = x.detach().clone().requires_grad_()
    (gx,) = torch.autograd.grad(op(xr), xr, _ramp(x), create_graph=True)
    if not gx.requires_grad:
        return  # a second derivative raises "does not require grad": loud enough
    try:
        (ggx,) = torch.autograd.grad(gx.sum(), xr)
    except RuntimeError:
        return
    raise PropertyFailed(
        "double backward is not declared, yet a second derivative came back without an error "
        f"(max |d2| = {ggx.abs().max().item():.4g}); declare double_backward=True so that it is "
        "checked, or decorate backward with torch.autograd.function.once_differentiable"
    )


def reference(op: Bound, x: torch.Tensor) -> None:
    """Forward and gradient match the declared reference: in float64, and in each lower dtype the
    op declares against the float64 reference (at the rounded inputs)."""
    ref = op.spec.contract.reference
    kinks = op.spec.contract.kinks_at(op.params)
    for name in op.spec.contract.dtypes:
        dtype = getattr(torch, name)
        xl = x.to(dtype)
        lop = op if dtype == torch.float64 else _cast(op, dtype)
        g = _ramp(xl)
        y, gx = _vjp(lop, xl, g)
        x64 = xl.double().detach().requires_grad_()
        y_ref = ref(x64, **op.params)
        (gx_ref,) = torch.autograd.grad(y_ref, x64, g.double(), allow_unused=True)
        gx_ref = torch.zeros_like(x64) if gx_ref is None else gx_ref
        tol = TOLERANCES[dtype]
        _close(y.double(), y_ref.detach(), tol, f"forward in {name} differs from the reference", xl)
        away = torch.ones_like(x64, dtype=torch.bool)
        for k in kinks:
            # In a low precision the kink itself is rounded (a param like min_val, too): keep the
            # comparison a few of that dtype's steps away from it.
            step = torch.finfo(dtype).eps * max(1.0, abs(k))
            away &= (x64.detach() - k).abs() >= max(KINK_MARGIN / 2, 4 * step)
        _close(gx.double()[away], gx_ref[away], tol, f"gradient in {name} differs from the reference's", xl)


def layout(op: Bound, x: torch.Tensor) -> None:
    """Non-contiguous inputs and grad_outputs give the values and gradients of contiguous ones."""
    if x.numel() == 0:
        return
    g = _ramp(x)
    y0, gx0 = _vjp(op, x, g)
    for xi, gi, what in (
        (noncontiguous(x), g, "input"),
        (x, noncontiguous(g), "grad_output"),
        (noncontiguous(x), noncontiguous(g), "input and grad_output"),
    ):
        if xi.is_contiguous() and gi.is_contiguous():
            continue  # 0-d: no other layout exists
        y, gx = _vjp(op, xi, gi)
        _close(y, y0, EXACT, f"forward differs for a non-contiguous {what}", x)
        _close(gx, gx0, EXACT, f"gradient differs for a non-contiguous {what}", x)


def hygiene(op: Bound, x: torch.Tensor) -> None:
    """Output dtype, device and shape follow the input; nothing is mutated; backward repeats."""
    xr = x.detach().clone().requires_grad_()
    before, version = xr.detach().clone(), xr._version
    y = op(xr)
    for what, got, want in (
        ("dtype", y.dtype, x.dtype),
        ("device", y.device, x.device),
        ("shape", tuple(y.shape), tuple(x.shape)),
    ):
        if got != want:
            raise PropertyFailed(f"output {what} is {got}, expected {want} (the input's)")
    if xr._version != version or not torch.equal(xr.detach(), before):
        raise PropertyFailed("forward mutated its input")
    g = _ramp(y.detach())
    g_before, g_version = g.clone(), g._version
    (gx1,) = torch.autograd.grad(y, xr, g, retain_graph=True, allow_unused=True)
    if g._version != g_version or not torch.equal(g, g_before):
        raise PropertyFailed("backward mutated grad_output")
    if xr._version != version or not torch.equal(xr.detach(), before):
        raise PropertyFailed("backward mutated the input")
    (gx2,) = torch.autograd.grad(y, xr, g, allow_unused=True)
    if gx1 is None or gx2 is None:
        return
    if gx1.dtype != x.dtype or tuple(gx1.shape) != tuple(x.shape):
        raise PropertyFailed(
            f"gradient is {gx1.dtype} {tuple(gx1.shape)}, expected {x.dtype} {tuple(x.shape)}"
        )
    if not torch.equal(gx1, gx2):
        raise PropertyFailed("running backward twice gave different gradients")


def kinks(op: Bound, x: torch.Tensor) -> None:
    """At each declared kink, the gradient equals the declared subgradient."""
    declared = op.spec.contract.kinks_at(op.params)
    points = torch.tensor(list(declared), dtype=torch.float64, device=x.device)
    want = torch.tensor(list(declared.values()), dtype=torch.float64, device=x.device)
    _, got = _vjp(op, points, torch.ones_like(points))
    if not torch.allclose(got, want, rtol=1e-9, atol=1e-12):
        i = int((got - want).abs().argmax())
        raise PropertyFailed(
            f"at the kink x = {points[i].item():g} the gradient is {got[i].item():g}, "
            f"but the op declares {want[i].item():g}",
            worst={
                "index": (i,),
                "x": points[i].item(),
                "declared": want[i].item(),
                "analytic": got[i].item(),
            },
        )


def compile(op: Bound, x: torch.Tensor) -> None:
    """Under torch.compile (aot_eager: no C compiler needed) outputs and gradients match eager,
    without graph breaks."""
    import torch._dynamo

    if x.numel() == 0:
        return

    def step(t: torch.Tensor) -> torch.Tensor:
        return op(t)

    explanation = torch._dynamo.explain(step)(x.detach().clone())
    if explanation.graph_break_count:
        reasons = "; ".join(
            str(getattr(b, "reason", b)).splitlines()[0] for b in explanation.break_reasons[:3]
        )
        raise PropertyFailed(f"{explanation.graph_break_count} graph break(s) under torch.compile: {reasons}")
    compiled = torch.compile(step, backend="aot_eager")
    g = _ramp(x)
    y0, gx0 = _vjp(op, x, g)
    xr = x.detach().clone().requires_grad_()
    y = compiled(xr)
    (gx,) = torch.autograd.grad(y, xr, g, allow_unused=True)
    gx = torch.zeros_like(xr) if gx is None else gx
    _close(y.detach(), y0, TOLERANCES[torch.float64], "compiled forward differs from eager", x)
    _close(gx, gx0, TOLERANCES[torch.float64], "compiled gradient differs from eager", x)


@dataclass(frozen=True)
class Property:
    """One property: its check, when it applies to an op, and which inputs it runs on.

    drawn: run on hypothesis-drawn inputs (the profile sets how many).
    fixed: also run on this many small fixed inputs, with full Jacobians (see the runner).
    """

    name: str
    check: Callable[[Bound, torch.Tensor], None]
    applies: Callable[[OpSpec], str | None] = lambda spec: None  # why it does not apply, or None
    drawn: bool = True
    fixed: int = 0

    @property
    def doc(self) -> str:
        return (self.check.__doc__ or "").strip().splitlines()[0]

    def __call__(self, op: Bound, x: torch.Tensor) -> None:
        self.check(op, x)


def _needs_reference(spec: OpSpec) -> str | None:
    return None if spec.contract.reference is not None else "no reference declared"


def _needs_kinks(spec: OpSpec) -> str | None:
    return None if spec.contract.kinks_at() else "no kinks declared"


#: name -> property, in the order they are reported.
PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        # Fast mode has missed wrong gradients: full Jacobians on a few small fixed inputs too.
        Property("gradient", gradient, fixed=2),
        Property("double_backward", double_backward),
        Property("reference", reference, _needs_reference),
        Property("layout", layout),
        Property("hygiene", hygiene),
        Property("kinks", kinks, _needs_kinks),
        # Compiling is slow: once, on one fixed input.
        Property("compile", compile, drawn=False, fixed=1),
        Property("library", library, why_not_bridged, fixed=1),  # drawn: quick opcheck; fixed: all
    )
}


# -- helpers --------------------------------------------------------------------------------------


def _cast(op: Bound, dtype: torch.dtype) -> Bound:
    if op.module is None:
        return op
    return bind(op.spec, op.params, dtype=dtype, device=op.extras[0].device if op.extras else "cpu")


def _close(got: torch.Tensor, want: torch.Tensor, tol: dict[str, float], what: str, x: torch.Tensor) -> None:
    if got.shape != want.shape:
        raise PropertyFailed(f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}")
    bad = ~torch.isclose(got.double(), want.double(), equal_nan=True, **tol)
    if bad.any():
        i = int(bad.reshape(-1).nonzero()[0])
        flat_x = x.reshape(-1) if x.numel() == got.numel() else None
        raise PropertyFailed(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements differ; first at flat index {i}: "
            f"got {got.reshape(-1)[i].item():.9g}, expected {want.reshape(-1)[i].item():.9g}"
            + (f" (x = {flat_x[i].item():.9g})" if flat_x is not None else ""),
        )


__all__ = ["PROPERTIES", "Bound", "Property", "PropertyFailed", "bind", "noncontiguous"]
