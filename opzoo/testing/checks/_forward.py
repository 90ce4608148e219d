"""The ``forward_mode`` property: forward-mode AD and vmap agree with the hand-written backward.

A Function that defines ``jvp`` has two derivatives written by hand, and nothing but a test ties
them together; one with a vmap rule runs its backward on batched grad_outputs (per-sample
gradients, ``jacrev``, ``is_grads_batched``), which gradcheck never does. One that defines neither
must say so with an error when asked, not return a wrong answer.

Every check runs per input and per output, and a failure names both (for an op with several), like
the other properties' failures. This module says which checks an op gets (what it defines; a
classic Function, a learnable Module); forward mode is checked in ``_jvp``, vmap in ``_vmap``, both
held to the yardstick of ``_agreement``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from opzoo.core import _recording
from opzoo.testing.checks._bound import Tensors
from opzoo.testing.checks._jvp import jacfwd_is_jacrev, jvp_is_backwards, jvp_raises
from opzoo.testing.checks._vmap import batched_backward, vmap_is_a_loop, vmap_raises

if TYPE_CHECKING:
    from opzoo.testing.checks._bound import Bound


def forward_mode(op: Bound, *xs: torch.Tensor) -> None:
    """Declared jvp / vmap rule: torch.func.jvp and dual tensors give the backward's J v, per input
    and output; vmap, also over the backward, gives a loop's results. Undeclared: asking must raise,
    not answer. A by-design backward (no derivative): its jvp is not compared with it."""
    if op.spec.kind == "module":
        jacfwd_is_jacrev(op, xs)
        return
    target = op.spec.target
    if _recording.classic(target):
        _classic(op, xs)
        return
    if defines_jvp(target) and _by_design(op):
        pass  # a jvp is a derivative; the backward, by design, is none: nothing to compare
    elif defines_jvp(target):
        jvp_is_backwards(op, xs)
    else:
        jvp_raises(op, xs)
    if defines_vmap(target):
        vmap_is_a_loop(op, xs)
    else:
        vmap_raises(op, xs)


def _by_design(op: Bound) -> bool:
    """Whether the backward is no derivative by design (a note says its jvp is not compared)."""
    reason = op.spec.contract.by_design
    if reason is not None:
        op.notes.append(f"by design ({reason}): the declared jvp is not compared with the backward")
    return reason is not None


def defines_jvp(target: Any) -> bool:
    """Whether a Function overrides ``jvp`` (forward-mode AD): itself, or on the twin its ``apply``
    runs (``_with_jvp``: opzoo's built-ins keep ``jvp`` there, out of Dynamo's sight)."""
    target = getattr(target, "_with_jvp", target)
    return getattr(target, "jvp", None) is not torch.autograd.Function.jvp


def defines_vmap(target: Any) -> bool:
    """Whether a Function has a vmap rule: its own ``vmap`` or ``generate_vmap_rule = True``."""
    own = getattr(target, "vmap", None) is not torch.autograd.Function.vmap
    return own or bool(getattr(target, "generate_vmap_rule", False))


def _classic(op: Bound, xs: Tensors) -> None:
    """A classic ``forward(ctx, ...)`` Function: torch.func refuses it whatever it defines (functorch
    needs ``setup_context``), so what can be asked is: forward_ad dual tensors (``J v`` where a jvp
    is defined, an error where none is) and backward on batched grad_outputs (``is_grads_batched``,
    which ``torch.autograd.functional.jacobian(vectorize=True)`` uses). A note says what was not."""
    target = op.spec.target
    if defines_jvp(target) and _by_design(op):
        pass  # see forward_mode
    elif defines_jvp(target):
        jvp_is_backwards(op, xs, func=False)
    else:
        jvp_raises(op, xs, func=False)
    refused = batched_backward(op, xs, refusal_ok=True)
    unused = ", its vmap rule never used" if defines_vmap(target) else ""
    op.notes.append(
        "classic forward(ctx, ...): torch.func.jvp and vmap refuse it (functorch needs setup_context)"
        f"{unused}: forward_ad dual tensors and backward on batched grad_outputs asked instead"
    )
    if refused is not None:
        op.notes.append(f"backward refused batched grad_outputs (is_grads_batched): {refused}")
