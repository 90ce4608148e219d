"""The base class of opzoo's built-in Functions.

``Function.apply`` binds default arguments with ``inspect.signature`` on every call, for Functions
in the ``setup_context`` form. With positional arguments there is nothing to bind, and that binding
was a third of an op's cost at the seed's size (measured: 28.6 vs 18.2 us per forward+backward at
6,400 elements). Under torch.func transforms or torch.compile the regular path runs unchanged.
Forward-mode dual tensors (``forward_ad.make_dual``) need no detour: the C++ apply calls ``jvp``.

Both shortcuts are private to torch (``torch._C``); the dependency is ``torch>=2.4``. Where a torch
lacks either, every call takes the regular path: correct, at the cost measured above.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, ClassVar

import torch
from torch.autograd import forward_ad

from opzoo.ops._opmath import HALF

_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)
# The C++ apply that Function.apply itself ends in (torch._C._FunctionBase.apply).
_C_APPLY = getattr(super(torch.autograd.Function, torch.autograd.Function), "apply", None)
_FAST = _transforms_active is not None and _C_APPLY is not None


# Function.apply's Python part: default-argument binding, torch.func dispatch.
_FUNCTION_APPLY = torch.autograd.Function.apply.__func__  # type: ignore[attr-defined]


class Op(torch.autograd.Function):
    """An autograd Function whose ``apply`` skips the per-call signature binding when it can.

    A ``jvp`` written in the class body is moved to a twin subclass, ``cls._with_jvp``, which
    ``apply`` runs in eager mode: Dynamo breaks the graph at any Function that defines ``jvp``
    ("Unsupported custom jvp", torch 2.13), and it compiles ``cls.apply`` as the class itself (it
    never runs this ``apply``), so compiled training stays one graph while forward-mode AD and
    torch.func find the ``jvp``.
    """

    _with_jvp: type[Op]
    _jvp: Any = None

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        if torch.compiler.is_compiling():
            return _FUNCTION_APPLY(cls, *args, **kwargs)
        fn = cls._with_jvp
        if not _FAST or kwargs or _transforms_active():
            return _FUNCTION_APPLY(fn, *args, **kwargs)
        # The C++ apply that Function.apply itself ends in, minus the Python preprocessing.
        return super(torch.autograd.Function, fn).apply(*args)

    generate_vmap_rule = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("_is_jvp_twin"):
            return
        if "jvp" in cls.__dict__:  # kept as _jvp, so that subclasses inherit it too
            cls._jvp = cls.__dict__["jvp"]
            del cls.jvp
        jvp = getattr(cls, "_jvp", None)
        if jvp is None:
            cls._with_jvp = cls
            return
        cls._with_jvp = type(  # type: ignore[assignment]
            cls.__name__,
            (cls,),
            {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
                "_is_jvp_twin": True,
                "jvp": staticmethod(jvp),
            },
        )


def composite() -> bool:
    """Whether a backward must be composed of plain differentiable ops.

    True when the backward is itself recorded (``create_graph=True``, for double backward) or traced
    by ``torch.compile`` (which fuses the composite into one kernel anyway). Otherwise built-in ops
    take a fast path of fewer, fused passes that needs no graph.
    """
    return torch.is_grad_enabled() or torch.compiler.is_compiling()


def times_grad_(t: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``t * grad`` in ``grad``'s dtype, in ``t``'s buffer when it can: ``t`` must be a fresh tensor
    the caller owns (in float32 for a half-precision ``grad``, if it was computed in opmath).

    A batch of grad_outputs (``autograd.grad(..., is_grads_batched=True)``, ``jacrev``, per-sample
    gradients) cannot go into an unbatched buffer; vmap refuses before it writes anything, and the
    product is then made out of place. Asking first would cost every backward two checks (0.2 us);
    a refusal costs only the batched calls. The cast is asked for only where the dtypes differ:
    ``Tensor.to`` takes 0.7 us even when there is nothing to do.
    """
    try:
        out = t.mul_(grad)
    except RuntimeError:
        out = t * grad
    return out if out.dtype == grad.dtype else out.to(grad.dtype)


if hasattr(forward_ad, "_current_level"):  # private to torch: where it lacks it, always save

    def forward_mode() -> bool:
        """Whether a forward-mode AD level is open (``forward_ad.dual_level``, ``torch.func.jvp``).

        Tensors for ``jvp`` are saved only then (``ctx.save_for_forward``): a call that only goes
        backward pays one comparison (40 ns), not a save (400 ns). Forward-mode AD drops them once
        ``jvp`` has run.
        """
        return forward_ad._current_level >= 0

else:

    def forward_mode() -> bool:
        """Always: this torch does not say whether a forward-mode AD level is open."""
        return True


def save(ctx: Any, *tensors: torch.Tensor) -> None:
    """Save ``tensors`` for backward, and for ``jvp`` too while forward mode is on."""
    ctx.save_for_backward(*tensors)
    if forward_mode():
        ctx.save_for_forward(*tensors)


class Elementwise(Op):
    """An elementwise op whose backward and ``jvp`` both follow from one ``slope``.

    An op writes ``forward(x, *params)`` and, beside it, ``slope(t, *params)``: the derivative of
    forward at each element, with its ``# d/dx ...`` comment, built of differentiable torch ops (the
    composite backward is differentiated again for double backward, and traced by torch.compile).
    ``t`` is what ``slope_of`` names: ``"input"``; ``"output"`` where the output tells as much (it
    shares storage with what the next layer keeps: saving it costs no memory); or ``None`` for a
    constant slope (``t`` is None, nothing is saved). ``saves(t)``, if the op defines it, is what
    is kept of ``t`` instead (a one-byte mask, say). ``slope`` returns a bool mask, a number, or a
    tensor of ``t``'s dtype; with ``in_opmath``, it is given a half-precision ``t`` in float32
    (``_opmath``: one rounding, not one per op) and its result is cast back.

    From these the class gets, once, at its creation:

    - ``setup_context``: saves ``t`` for backward, and for ``jvp`` while forward mode is on; the
      params go to ``ctx.params``;
    - ``backward``: ``grad * slope(t)``, or, where nothing records the backward (``composite()`` is
      false) and the op defines one, ``fast_backward(grad, t, *params)`` (``(grad, t, y, *params)``
      with ``fast_needs_output``): the same product hand-fused into fewer passes over memory, held
      to ``slope`` by tests/test_ops.py;
    - ``jvp``: ``tangent * slope(t)``, moved to the twin as ``Op`` does with any ``jvp``;
    - ``effective_slope(t, *params)``: the slope as those two use it (in opmath where declared).

    An op that writes its own ``setup_context``, ``backward``, ``vjp`` or ``jvp`` beside a slope is
    refused (TypeError): a second copy of the derivative is one that can drift from the first.
    """

    slope_of: ClassVar[str | None] = "input"
    saves: ClassVar[Callable[[torch.Tensor], torch.Tensor] | None] = None
    fast_backward: ClassVar[Callable[..., torch.Tensor] | None] = None
    fast_needs_output: ClassVar[bool] = False
    in_opmath: ClassVar[bool] = False
    effective_slope: ClassVar[Callable[..., Any]]

    @staticmethod
    def slope(t: Any, *params: Any) -> Any:
        """d/dx forward(x, *params), from ``t`` (see the class docstring)."""
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if not cls.__dict__.get("_is_jvp_twin") and any(k in cls.__dict__ for k in _HOOKS):
            written = [k for k in ("setup_context", "backward", "vjp", "jvp") if k in cls.__dict__]
            if written:
                raise TypeError(
                    f"{cls.__qualname__} writes {', '.join(written)} beside its slope: an Elementwise "
                    "op derives them from slope (a hand-fused backward goes in fast_backward)"
                )
            _derive_from_slope(cls)
        super().__init_subclass__(**kwargs)


_HOOKS = ("slope", "slope_of", "saves", "fast_backward", "fast_needs_output", "in_opmath")


def _derive_from_slope(cls: type[Elementwise]) -> None:
    """Give ``cls`` the setup_context, backward and jvp that its slope implies."""
    if cls.slope_of not in ("input", "output", None):
        raise TypeError(
            f"{cls.__qualname__}.slope_of must be 'input', 'output' or None, not {cls.slope_of!r}"
        )
    n = len(inspect.signature(cls.forward).parameters) - 1  # the params after x
    slope = _in_opmath(cls.slope) if cls.in_opmath else cls.slope
    setup_context = _setup_context(cls, n)
    if cls.slope_of is None:
        backward, jvp = _constant_backward_and_jvp(slope, n)
    else:
        backward, jvp = _backward_and_jvp(slope, cls.fast_backward, n)
    for fn in (setup_context, backward, jvp):
        fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
        fn.derived_from_slope = True  # type: ignore[attr-defined]
        setattr(cls, fn.__name__, staticmethod(fn))
    cls.effective_slope = staticmethod(slope)


# The closures below branch only on constants of the class, and the common cases have closures of
# their own: tens of nanoseconds a call in all, against the microseconds of the smallest op (the
# A/B record in benchmarks/RESULTS.md).


def _in_opmath(exact: Callable[..., Any]) -> Callable[..., Any]:
    def slope(t: torch.Tensor, *params: Any) -> torch.Tensor:
        return exact(t.float(), *params).to(t.dtype) if t.dtype in HALF else exact(t, *params)

    return slope


def _setup_context(cls: type[Elementwise], n: int) -> Callable[..., None]:
    of_input, keep, with_output = cls.slope_of == "input", cls.saves, cls.fast_needs_output
    if cls.slope_of is not None and keep is None and not with_output:  # one tensor, kept as it is

        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
            t = inputs[0] if of_input else output
            if n:
                ctx.params = inputs[1:]
            ctx.save_for_backward(t)
            if forward_mode():
                ctx.save_for_forward(t)

        return setup_context

    saved = cls.slope_of is not None

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:  # type: ignore[no-redef]
        if n:
            ctx.params = inputs[1:]
        if not saved:
            return
        t = inputs[0] if of_input else output
        if keep is not None:
            t = keep(t)
        if with_output:
            ctx.save_for_backward(t, output)
        else:
            ctx.save_for_backward(t)
        if forward_mode():
            ctx.save_for_forward(t)

    return setup_context


def _backward_and_jvp(slope: Callable[..., Any], fast: Callable[..., Any] | None, n: int) -> tuple[Any, Any]:
    """grad * slope(t) (or fast(grad, *saved, *params)), and tangent * slope(t)."""
    if n == 0:

        def backward(ctx: Any, grad: torch.Tensor) -> Any:
            if not ctx.needs_input_grad[0]:
                return None
            if fast is None or composite():
                return grad * slope(ctx.saved_tensors[0])
            return fast(grad, *ctx.saved_tensors)

        def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
            return tangent * slope(ctx.saved_tensors[0])

        return backward, jvp

    nones = (None,) * n

    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[no-redef]
        if not ctx.needs_input_grad[0]:
            return (None, *nones)
        if fast is None or composite():
            return (grad * slope(ctx.saved_tensors[0], *ctx.params), *nones)
        return (fast(grad, *ctx.saved_tensors, *ctx.params), *nones)

    def jvp(ctx: Any, tangent: torch.Tensor, *_: None) -> torch.Tensor:  # type: ignore[no-redef]
        return tangent * slope(ctx.saved_tensors[0], *ctx.params)

    return backward, jvp


def _constant_backward_and_jvp(slope: Callable[..., Any], n: int) -> tuple[Any, Any]:
    """grad * slope(None, *params), and tangent * slope(None, *params); a slope of 1 passes grad
    through untouched (a straight-through estimator), and the tangent as a new tensor, as forward's
    output is one."""
    if n == 0:

        def backward(ctx: Any, grad: torch.Tensor) -> Any:
            if not ctx.needs_input_grad[0]:
                return None
            s = slope(None)
            return grad if s == 1 else grad * s

        def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
            s = slope(None)
            return tangent.clone() if s == 1 else tangent * s

        return backward, jvp

    nones = (None,) * n

    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[no-redef]
        if not ctx.needs_input_grad[0]:
            return (None, *nones)
        s = slope(None, *ctx.params)
        return (grad if s == 1 else grad * s, *nones)

    def jvp(ctx: Any, tangent: torch.Tensor, *_: None) -> torch.Tensor:  # type: ignore[no-redef]
        s = slope(None, *ctx.params)
        return tangent.clone() if s == 1 else tangent * s

    return backward, jvp


LOG2_E = 1.4426950408889634


def exp_(t: torch.Tensor) -> torch.Tensor:
    """exp(t) in place, as exp2(t log2 e): 4x faster than exp on this CPU (72 vs 313 us at 1M).

    ``t`` must be a fresh tensor the caller owns.
    """
    return t.mul_(LOG2_E).exp2_()
