"""A classic ``forward(ctx, ...)`` run outside ``Function.apply``, with a context that records what
forward did with it.

Most Functions in the wild are written in the classic form: forward fills its context itself
(``ctx.save_for_backward(x)``, ``ctx.dim = dim``), and torch hands it one only inside ``apply``. Run
with a :class:`Recorder` instead, forward's outputs can be differentiated by autograd (the
``autograd`` oracle) and what it saved can be put into a context that torch does hand out: the one
``torch.library``'s ``setup_context`` gets (:func:`fill`), so a classic Function bridges like the
``setup_context`` form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

__all__ = ["Recorder", "classic", "fill", "run"]

# What forward may call on its context, and what a context has that forward may read: neither is
# recorded as a plain attribute.
_OWN = frozenset(
    {
        "save_for_backward",
        "save_for_forward",
        "mark_dirty",
        "mark_non_differentiable",
        "set_materialize_grads",
        "needs_input_grad",
        "saved_tensors",
    }
)


def classic(target: type) -> bool:
    """Whether Function ``target`` is in the classic form, ``forward(ctx, ...)`` (a staticmethod or a
    classmethod): the form that does not define ``setup_context``."""
    return target.setup_context is torch.autograd.Function.setup_context


@dataclass
class Record:
    """What a classic forward did with its context, besides setting plain attributes."""

    needs_input_grad: tuple[bool, ...]
    saved: tuple[Any, ...] = ()
    for_forward: tuple[Any, ...] | None = None
    dirty: tuple[torch.Tensor, ...] = ()
    non_differentiable: tuple[torch.Tensor, ...] = ()
    materialize_grads: bool | None = None  # None: forward left the default
    attributes: dict[str, Any] = field(default_factory=dict)


class Recorder:
    """A context for a classic forward run outside ``apply``: it takes what torch's own context takes
    (``save_for_backward``, ``save_for_forward``, ``mark_dirty``, ``mark_non_differentiable``,
    ``set_materialize_grads``, any attribute: ``ctx.dim = dim``), answers ``needs_input_grad`` and
    ``saved_tensors``, and keeps all of it in :attr:`record`."""

    def __init__(self, needs_input_grad: Sequence[bool]) -> None:
        object.__setattr__(self, "record", Record(tuple(needs_input_grad)))

    # -- what forward calls ---------------------------------------------------------------------

    def save_for_backward(self, *tensors: torch.Tensor | None) -> None:
        """Record the tensors backward will find in ``saved_tensors``."""
        self.record.saved = tensors

    def save_for_forward(self, *tensors: torch.Tensor | None) -> None:
        """Record the tensors jvp will find in ``saved_tensors``."""
        self.record.for_forward = tensors

    def mark_dirty(self, *tensors: torch.Tensor) -> None:
        """Record that forward wrote into these inputs."""
        self.record.dirty = tensors

    def mark_non_differentiable(self, *tensors: torch.Tensor) -> None:
        """Record the outputs that get no gradient."""
        self.record.non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """Record whether backward gets zeros (the default) or None for an output with no gradient."""
        self.record.materialize_grads = bool(value)

    # -- what forward (or backward) reads -------------------------------------------------------

    @property
    def needs_input_grad(self) -> tuple[bool, ...]:
        """One flag per argument of forward (after ctx), as ``apply`` gives them."""
        return self.record.needs_input_grad

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        """What forward saved for backward."""
        return self.record.saved

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN or name == "record":
            raise AttributeError(f"a Function's context has {name!r} already; it cannot be set")
        self.record.attributes[name] = value

    def __getattr__(self, name: str) -> Any:
        # Only called for what is not found the ordinary way: the attributes forward set.
        try:
            return object.__getattribute__(self, "record").attributes[name]
        except KeyError:
            raise AttributeError(f"the context has no attribute {name!r}") from None


def run(
    forward: Callable[..., Any], args: Sequence[Any], needs_input_grad: Sequence[bool] | None = None
) -> tuple[Any, Record]:
    """Run classic ``forward`` (``Function.forward``, bound for a classmethod) on ``args`` with a
    :class:`Recorder`; return its outputs and what it recorded. ``needs_input_grad`` defaults to
    what ``apply`` would give: a tensor argument that requires grad, while grad mode is on."""
    if needs_input_grad is None:
        grad = torch.is_grad_enabled()
        needs_input_grad = tuple(grad and isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    ctx = Recorder(needs_input_grad)
    out = forward(ctx, *args)
    return out, ctx.record


def fill(
    ctx: Any,
    record: Record,
    outputs: Sequence[Any],
    real: Sequence[Any],
) -> None:
    """Put what a recorded forward did into torch's own context ``ctx``, as forward would have
    inside ``apply``. ``outputs`` are the recorded run's outputs and ``real`` the outputs ``ctx``
    belongs to: a recorded output, saved or kept as an attribute, is replaced by the real one (saved
    as an output, its gradient history reaches a second derivative, as inside ``apply``)."""
    swap = {id(o): r for o, r in zip(outputs, real) if isinstance(o, torch.Tensor)}

    def same(value: Any) -> Any:
        return swap.get(id(value), value) if isinstance(value, torch.Tensor) else value

    ctx.save_for_backward(*(same(t) for t in record.saved))
    if record.for_forward is not None:
        ctx.save_for_forward(*(same(t) for t in record.for_forward))
    if record.non_differentiable:
        ctx.mark_non_differentiable(*(same(t) for t in record.non_differentiable))
    if record.materialize_grads is not None:
        ctx.set_materialize_grads(record.materialize_grads)
    for name, value in record.attributes.items():
        setattr(ctx, name, same(value))
