"""What the properties work on: an op with its parameters fixed (:class:`Bound`), and how every
property calls it: its outputs, grad_outputs, vector-Jacobian products over the differentiable
outputs, what the forward rejects, another memory layout. How results are compared:
:mod:`opzoo.testing.checks._compare`.

An op takes the tensors its signature declares and returns one tensor or a tuple of them; here every
op is called as ``op(*inputs)`` and its outputs are always a tuple (:meth:`Bound.outputs`), so that a
property is written once for unary, n-ary and multi-output ops alike.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from opzoo.core._inputs import InputSet
from opzoo.core._registry import OpSpec
from opzoo.core._signature import ShapeError
from opzoo.testing.checks._reseed import reseeded

Tensors = tuple[torch.Tensor, ...]

#: Inputs of more elements than this get the checks whose cost stays linear in their size.
LARGE = 4096


class PropertyFailed(AssertionError):
    """A property does not hold; ``details`` holds what the report shows besides the message."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class PropertySkipped(Exception):
    """A property does not apply to this op after all (found while checking): a skip, with why."""


@dataclass
class Bound:
    """An op with its parameters fixed, called on its differentiable inputs alone, each with its core
    dimensions last; learnable tensors (module ops) are explicit inputs.

    ``op(*inputs)`` applies it; ``op(*inputs, *extras)`` with other learnable tensors. What the
    checks need not see is done here: tensors that are not differentiated (``constants``: class
    targets, masks, by their index among the signature's inputs) are put in their places, and for an
    op with a :func:`~opzoo.Dim` parameter the core dimension is moved to where that parameter says
    before the call, and back in the outputs (a permutation: every derivative is the same, permuted).
    ``fast`` selects gradcheck's fast mode (a random projection of the Jacobian instead of all of
    it); the thorough profile and the runner's small fixed inputs turn it off.
    """

    spec: OpSpec
    params: dict[str, Any]
    fn: Callable[..., Any]
    extras: Tensors = ()
    module: torch.nn.Module | None = None  # a learnable op's instance, in the bound dtype
    fast: bool = True
    notes: list[str] = field(default_factory=list)  # what a check noticed (a kink it excused, say)
    constants: dict[int, torch.Tensor] = field(default_factory=dict)
    #: How many tensors the op takes (its signature's differentiable inputs). Read once here: a call
    #: under torch.compile that parsed the signature would trace through its cache (and Dynamo warns).
    arity: int = field(init=False)
    #: The forward draws random numbers (``Contract(random=True)``): each call runs under
    #: :data:`~opzoo.testing.checks._reseed.SEED`.
    random: bool = field(init=False)

    #: The set each of the op's tensors (as the checks pass them) lives in, or None.
    sets: tuple[InputSet | None, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.arity = len(self.spec.contract.sig.inputs) - len(self.constants)
        self.random = self.spec.contract.random
        self.sets = _sets(self.spec, self.constants)

    def __call__(self, *args: torch.Tensor) -> Any:
        if self.random:
            with reseeded(args):
                return self.raw(*args)
        return self.raw(*args)

    def raw(self, *args: torch.Tensor) -> Any:
        """The op applied as :meth:`__call__` does, but never reseeded (what torch.compile traces:
        forking the generator breaks its graph)."""
        xs, extras = args[: self.arity], args[self.arity :]
        return self.fn(*xs, *(extras or self.extras))

    def calling(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, which takes the op's tensors as its forward does (every one, the core dimension
        where the Dim parameter puts it), as a function of this Bound's inputs: how the checks call
        a reference, a surrogate or the forward itself."""
        return _calling(self.spec, self.params, self.constants, fn)

    def full(self, *xs: torch.Tensor) -> Tensors:
        """Every one of the signature's inputs, the constants in their places (core dims last)."""
        return _interleave(xs, self.constants, len(self.spec.contract.sig.inputs))

    def arranged(self, *xs: torch.Tensor) -> Tensors:
        """Every one of the signature's inputs as the op itself takes them: the constants in their
        places, the core dimension where the Dim parameter puts it."""
        # Not calling(): that moves a Dim op's outputs back, and a tuple of inputs would be too.
        return _arranger(self.spec, self.params, self.constants)(xs)

    def outputs(self, *xs: torch.Tensor) -> Tensors:
        """The op's outputs as a tuple, checked against its signature: count and shapes."""
        out = self(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        sig = self.spec.contract.sig
        if len(outs) != len(sig.outputs) or not all(isinstance(o, torch.Tensor) for o in outs):
            got = f"{len(outs)} output(s)" if isinstance(out, tuple) else type(out).__name__
            n, hint = len(sig.outputs), " (the default: declare the op's)" if sig.elementwise else ""
            raise PropertyFailed(f"the op returned {got}, but its signature {sig} declares {n}{hint}")
        full = self.full(*xs)
        if any(x is None for x in full):
            return outs  # an optional input left out: no shape of its to read the signature's from
        shapes = [x.shape for x in full]
        try:
            want = self.spec.contract.output_shapes(shapes, self.params)
        except ShapeError:
            return outs  # inputs outside the signature: the caller drew them on purpose
        for j, (o, shape) in enumerate(zip(outs, want)):
            if tuple(o.shape) != shape:
                shown = ", ".join(str(tuple(s)) for s in shapes)
                raise PropertyFailed(
                    f"output {j} has shape {tuple(o.shape)}, but the signature {sig} gives {shape} "
                    f"for inputs of shape {shown}" + _along(self)
                )
        return outs

    def cast(self, dtype: torch.dtype) -> Bound:
        """The op in ``dtype``: a learnable op's parameters rebuilt in it; a Function as it is, but
        for its float constants (an input declared ``grad=False``), which follow the dtype."""
        if self.module is None:
            floats = {i: c for i, c in self.constants.items() if c is not None and c.is_floating_point()}
            if all(c.dtype == dtype for c in floats.values()):
                return self
            constants = {**self.constants, **{i: c.to(dtype) for i, c in floats.items()}}
            cast = bind(self.spec, self.params, constants=constants, dtype=dtype, fast=self.fast)
            cast.notes = self.notes  # what a check notices in the cast op is the op's
            return cast
        device = self.extras[0].device if self.extras else "cpu"
        return bind(self.spec, self.params, dtype=dtype, device=device, fast=self.fast)

    def inputs(self, *xs: torch.Tensor) -> Tensors:
        """Leaves for gradcheck: the inputs and every learnable tensor, all requiring grad."""
        return tuple(t.detach().clone().requires_grad_() for t in (*xs, *self.extras))


def bind(
    spec: OpSpec,
    params: dict[str, Any],
    *,
    constants: dict[int, torch.Tensor] | None = None,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    fast: bool = True,
) -> Bound:
    """Return ``spec`` with ``params`` fixed, in ``dtype`` on ``device``; ``constants`` are its tensor
    inputs that are not differentiated, by their index among the signature's inputs."""
    bound = spec.contract.bind(params)
    constants = dict(constants or {})
    # Build in float64, so that a parameter initialised from a Python float keeps its exact value.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        fn = spec.bound(**bound)
    finally:
        torch.set_default_dtype(previous)
    if not isinstance(fn, torch.nn.Module):
        return Bound(spec, bound, _calling(spec, bound, constants, fn), fast=fast, constants=constants)
    module = fn.to(device=device, dtype=dtype)
    names = tuple(n for n, _ in module.named_parameters())
    tensors = tuple(p.detach() for _, p in module.named_parameters())
    arity = len(spec.contract.sig.inputs)

    def call(*args: torch.Tensor) -> Any:
        return torch.func.functional_call(module, dict(zip(names, args[arity:])), args[:arity])

    return Bound(spec, bound, call, tensors, module, fast)


def _interleave(xs: Sequence[torch.Tensor], constants: dict[int, torch.Tensor], n: int) -> Tensors:
    if not constants:
        return tuple(xs)
    it = iter(xs)
    return tuple(constants[i] if i in constants else next(it) for i in range(n))


def _calling(
    spec: OpSpec, params: dict[str, Any], constants: dict[int, torch.Tensor], fn: Callable[..., Any]
) -> Callable[..., Any]:
    """``fn`` of every input in the op's own layout, as a function of the differentiable inputs with
    their core dimensions last (see :class:`Bound`)."""
    sig = spec.contract.sig
    axis = spec.contract.axis
    sets = [s if s is not None and s.projects else None for s in _sets(spec, constants)]
    if not constants and axis is None and not any(sets):
        return fn
    dim = params[axis] if axis is not None else None
    cored_out = [bool(core) for core in sig.outputs]
    arrange = _arranger(spec, params, constants)

    def call(*xs: torch.Tensor) -> Any:
        if any(sets) and not _AS_DRAWN:
            # The checks perturb entry by entry (gradcheck, differences along a direction, one-sided
            # probes), which leaves a set (a symmetric matrix, an orthogonal one): every call sees
            # the op of the projection, which moves inside the set and is the identity on it.
            xs = tuple(
                _projected(s, x) if s is not None and x.is_floating_point() else x for s, x in zip(sets, xs)
            )
        out = fn(*arrange(xs))
        if dim is None:
            return out
        if isinstance(out, tuple):
            return tuple(_back(o, dim, c) for o, c in zip(out, cored_out))
        return _back(out, dim, cored_out[0])

    return call


_AS_DRAWN: list[bool] = []


@contextlib.contextmanager
def as_drawn() -> Iterator[None]:
    """Within: the op sees its inputs themselves, not their projections onto their sets (what a
    forward writes into its input is seen only so)."""
    _AS_DRAWN.append(True)
    try:
        yield
    finally:
        _AS_DRAWN.pop()


def _sets(spec: OpSpec, constants: dict[int, torch.Tensor]) -> tuple[InputSet | None, ...]:
    """The set of each differentiable input (by its place among them), or None."""
    sets = spec.arguments.sets if spec.arguments is not None else {}
    n = len(spec.contract.sig.inputs)
    return tuple(sets.get(i) for i in range(n) if i not in constants)


def _projected(kind: InputSet, x: torch.Tensor) -> torch.Tensor:
    """``kind.project(x)`` in ``x``'s layout (``layout`` tests the strides the op sees), functional
    (torch.func transforms run through it); computed in float32 at least (QR has no bfloat16)."""
    low = x.dtype not in (torch.float32, torch.float64)
    y = kind.project(x.float() if low else x).to(x.dtype)
    if x.is_contiguous():
        return y.contiguous()
    order = sorted(range(x.dim()), key=lambda d: -x.stride(d))
    if x.permute(order).is_contiguous():
        inverse = sorted(range(x.dim()), key=lambda d: order[d])
        return y.permute(order).contiguous().permute(inverse)
    return _strided(y)


def _strided(y: torch.Tensor) -> torch.Tensor:
    """``y`` as the strided slice noncontiguous() makes: every other element of a twice larger buffer."""
    return torch.stack((y, torch.zeros_like(y)), -1)[..., 0]


def _arranger(
    spec: OpSpec, params: dict[str, Any], constants: dict[int, torch.Tensor]
) -> Callable[[Sequence[torch.Tensor]], Tensors]:
    """How to put every input in the op's own layout: constants in their places, core dimensions
    where a Dim parameter puts them. The contract is read here, not per call (see Bound.arity)."""
    sig = spec.contract.sig
    n = len(sig.inputs)
    axis = spec.contract.axis
    dim = params[axis] if axis is not None else None
    cored_in = [bool(core) for core in sig.inputs]

    def arrange(xs: Sequence[torch.Tensor]) -> Tensors:
        full = _interleave(xs, constants, n)
        if dim is None:
            return full
        return tuple(_moved(t, dim) if c and t is not None else t for t, c in zip(full, cored_in))

    return arrange


def _moved(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t``'s core dimension (last) moved to ``dim``, contiguous only where ``t`` is: ``layout``'s
    strided inputs reach a Dim op strided (they came contiguous: a backward wrong there passed)."""
    return t.movedim(-1, dim).contiguous() if t.is_contiguous() else _strided(t.movedim(-1, dim))


def _back(out: Any, dim: int, cored: bool) -> Any:
    if not cored or not isinstance(out, torch.Tensor) or out.dim() == 0:
        return out
    return out.movedim(dim, -1)


def _along(op: Bound) -> str:
    axis = op.spec.contract.axis
    return "" if axis is None else f" (core dimension last; the op saw it at {axis}={op.params[axis]})"


def ramp(like: torch.Tensor, k: int = 0) -> torch.Tensor:
    """A deterministic grad_output with distinct, non-zero entries; ``k`` shifts it, so that each
    output of a multi-output op gets its own."""
    n = like.numel()
    lo, hi = -1.5 + 0.37 * k, 2.0 - 0.29 * k
    values = torch.linspace(lo, hi, max(n, 1), dtype=like.dtype, device=like.device)[:n] + 0.01
    if k:
        values = values.flip(0)  # not a multiple of another output's
    return values.reshape(like.shape)


def grad_outputs(outs: Sequence[torch.Tensor]) -> Tensors:
    """One distinct grad_output per output."""
    return tuple(ramp(o.detach(), k) for k, o in enumerate(outs))


def rejects(op: Bound, xs: Sequence[torch.Tensor]) -> BaseException | None:
    """The error the op's forward raises on ``xs``, or None if it takes them. It runs on copies: a
    forward that writes into its input must not change the example the property then sees."""
    try:
        with torch.no_grad():
            op(*(x.clone() for x in xs))
    except Exception as exc:  # the op's own code: anything
        return exc
    return None


def differentiable(op: Bound, xs: Sequence[torch.Tensor]) -> tuple[bool, ...]:
    """For each output of ``op`` at ``xs``, whether autograd may differentiate it: not one its
    Function marks ``ctx.mark_non_differentiable`` (roma's U and V, which vary smoothly with the
    input all the same), nor an integer one. A difference quotient or another derivative of the
    others is no evidence against the backward, which, as in torch's gradcheck, leaves them out."""
    return tuple(o.requires_grad for o in op.outputs(*(_leaf(x, False) for x in xs)))


def noncontiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout: a transpose for 2+ dims, else a strided slice."""
    if t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    base = torch.zeros((*t.shape, 2), dtype=t.dtype, device=t.device)
    base[..., 0] = t
    return base[..., 0]


def grad(
    outs: Sequence[torch.Tensor], wrt: Sequence[torch.Tensor], gs: Sequence[torch.Tensor], **kw: Any
) -> tuple[torch.Tensor | None, ...]:
    """``torch.autograd.grad(outs, wrt, gs, allow_unused=True, **kw)`` over the outputs that are
    differentiable: an output that does not require grad (one the Function marks
    ``ctx.mark_non_differentiable``, an integer one) contributes nothing, as in torch's own
    gradcheck; None for every input when no output is differentiable."""
    pairs = [(o, g) for o, g in zip(outs, gs) if o.requires_grad]
    if not pairs:
        return (None,) * len(wrt)
    return torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True, **kw)


def vjp(
    op: Bound, xs: Sequence[torch.Tensor], gs: Sequence[torch.Tensor] | None = None, *, strided: bool = False
) -> tuple[Tensors, Tensors]:
    """The outputs and the gradient of ``sum(out_j * g_j)`` with respect to each input (zeros
    where the op gives None). ``gs`` default: :func:`grad_outputs`. ``strided``: each input keeps
    its strides, a strided slice too (a clone would make that one contiguous again)."""
    leaves = tuple(_leaf(x, strided) for x in xs)
    outs = op.outputs(*leaves)
    gs = grad_outputs(outs) if gs is None else tuple(gs)
    grads = grad(outs, leaves, gs)
    return (
        tuple(o.detach() for o in outs),
        tuple(torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)),
    )


def _leaf(x: torch.Tensor, strided: bool) -> torch.Tensor:
    """A leaf copy of ``x``; with ``strided``, with ``x``'s strides (none of them 0: a write there
    would land twice)."""
    if strided and not x.is_contiguous() and 0 not in x.stride():
        leaf = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
        with torch.no_grad():
            leaf.copy_(x)
        return leaf.requires_grad_()
    return x.detach().clone().requires_grad_()


def once_differentiable(grads: Sequence[torch.Tensor | None]) -> bool:
    """Whether the graph of ``grads`` holds the error node once_differentiable leaves. Asking for the
    derivative through it raises, but only where autograd walks it: connected to no input, it is
    pruned by a gradient with respect to the inputs alone, which comes back silently zero."""
    stack = [g.grad_fn for g in grads if g is not None and g.grad_fn is not None]
    seen: set[int] = set()
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ in ("Error", "DelayedError"):
            return True
        stack.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)
    return False
