"""What the table of mutants (:mod:`opzoo.testing.mutation._mutants`) asks of an op: whether a mutant
applies to it (None, or why not), which properties can see the mutant on it, and why one that
changed nothing the checks asked for went unseen. Functions of an :class:`~opzoo.core._registry.OpSpec`,
read from its contract; what only the op itself can tell (its learnable tensors, a hand-written jvp,
kinks nobody declared) is asked of :mod:`opzoo.testing.mutation._mutant_facts` on first use, so that
the table imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opzoo.core._registry import OpSpec


# -- when a mutant applies ------------------------------------------------------------------------


def _differentiable(spec: OpSpec) -> int:
    """How many of the signature's inputs are differentiated."""
    constants = spec.arguments.constants if spec.arguments is not None else {}
    return len(spec.contract.sig.inputs) - len(constants)


def _learnable(spec: OpSpec) -> int:
    from opzoo.testing.mutation._mutant_facts import learnable_tensors

    return learnable_tensors(spec)


def two_tensors(spec: OpSpec) -> str | None:
    """Applies to an op with two gradients or more (inputs and learnable tensors)."""
    if _differentiable(spec) + _learnable(spec) >= 2:
        return None
    return "one input and no learnable tensor: there is no other gradient"


def same_shaped_inputs(spec: OpSpec) -> str | None:
    """Applies to an op with two differentiable inputs of the same core dimensions."""
    cores = [core for i, core in enumerate(spec.contract.sig.inputs) if _is_differentiable(spec, i)]
    if any(cores[i] == cores[j] for i in range(len(cores)) for j in range(i + 1, len(cores))):
        return None
    if len(cores) < 2:
        return "one input: there is no other gradient to swap it with"
    return "no two inputs have the same core dimensions: their gradients' shapes differ"


def _is_differentiable(spec: OpSpec, i: int) -> bool:
    return spec.arguments is None or i not in spec.arguments.constants


def broadcasts(spec: OpSpec) -> str | None:
    """Applies where something can be broadcast: two inputs with loop dimensions, or a learnable
    tensor."""
    if _learnable(spec):
        return None
    if _differentiable(spec) < 2:
        return "one input and no learnable tensor: nothing is broadcast"
    if spec.contract.loop_dims == 0:
        return "the op takes no loop dimensions (loop_dims=0): nothing is broadcast"
    return None


def zero_d(spec: OpSpec) -> str | None:
    """Applies where an input without core dimensions can be 0-d."""
    if any(not core for i, core in enumerate(spec.contract.sig.inputs) if _is_differentiable(spec, i)):
        return None
    return "every input has core dimensions: none is ever 0-d"


def two_dims(spec: OpSpec) -> str | None:
    """Applies where an input can have two dimensions or more."""
    if spec.contract.loop_dims != 0 or any(len(core) >= 2 for core in spec.contract.sig.inputs):
        return None
    return "no input has two dimensions or more (loop_dims=0): a size-1 dimension is never one of several"


def has_kinks(spec: OpSpec) -> str | None:
    """Applies to an op with kinks, declared or (an elementwise op that is no surrogate) found."""
    if spec.contract.kinks_at():
        return None
    if not spec.contract.sig.elementwise:
        return "not elementwise: no kink is declared or found (kinks are elementwise ops' only)"
    if spec.contract.surrogate is not None:
        return "a surrogate op: its surrogate, not a kink, says what the gradient is where the forward jumps"
    from opzoo.testing.mutation._mutant_facts import found_kinks

    if found_kinks(spec):
        return None
    return "no kink declared, and none found (the one-sided derivatives agree across the domain)"


def own_jvp(spec: OpSpec) -> str | None:
    """Applies to a Function with a hand-written jvp."""
    from opzoo.testing.mutation._mutant_facts import hand_written_jvp

    return hand_written_jvp(spec)


def two_outputs(spec: OpSpec) -> str | None:
    """Applies to an op of two outputs or more."""
    return None if len(spec.contract.sig.outputs) > 1 else "one output: there is no second grad_output"


def subsets(spec: OpSpec) -> str | None:
    """Applies to an op of two differentiable inputs or more."""
    if _differentiable(spec) >= 2:
        return None
    return "one input: it always requires grad when anything does"


def lower_dtypes(spec: OpSpec) -> str | None:
    """Applies to an op that declares a dtype besides float64."""
    if any(d != "float64" for d in spec.contract.dtypes):
        return None
    return "the op declares float64 only"


def short_dtypes(spec: OpSpec) -> str | None:
    """Applies to a Function that declares bfloat16 or float16 (a learnable op's outputs are its
    Module's, which no mutant rewrites)."""
    from opzoo.testing.mutation._mutant_facts import outputs_of_a_function

    why = outputs_of_a_function(spec)
    if why or any(d in ("bfloat16", "float16") for d in spec.contract.dtypes):
        return why
    return "the op declares neither bfloat16 nor float16"


# -- which properties can see a mutant --------------------------------------------------------------


def tight(spec: OpSpec) -> tuple[str, ...]:
    """The checks that compare a gradient at float64 precision: autograd's derivative of the forward
    (about 1e-9), the reference (1e-7), and for a surrogate op the surrogate (1e-7)."""
    return (
        ("autograd", "reference", "gradient")
        if spec.contract.surrogate is not None
        else ("autograd", "reference")
    )


def in_lower_dtypes(spec: OpSpec) -> tuple[str, ...]:
    """The checks that look at the gradient in float32 or bfloat16: the reference, or a surrogate
    op's surrogate; without a reference, a Function's own forward differentiated by autograd."""
    c = spec.contract
    if c.surrogate is not None:
        return ("reference", "gradient")
    from opzoo.testing.properties import PROPERTIES

    own = c.reference is None and not c.random and PROPERTIES["autograd"].applies(spec) is None
    return ("reference", "autograd") if own else ("reference",)


def at_large_inputs(spec: OpSpec) -> tuple[str, ...]:
    """The checks that look at inputs scaled to 1e4: extremes, or a surrogate op's surrogate."""
    return ("extremes", "gradient") if spec.contract.surrogate is not None else ("extremes",)


# -- why a mutant that changed nothing went unseen -------------------------------------------------


def no_negatives(spec: OpSpec) -> str:
    """Why a wrong gradient at negative inputs went unseen."""
    low, high = spec.contract.domain
    if low >= 0:
        return f"the contract's domain ({low:g}, {high:g}) excludes negative inputs"
    return "the op's gradient was zero wherever an input the checks tried was negative"


def no_large_inputs(spec: OpSpec) -> str:
    """Why a nan at inputs larger than 1000 went unseen."""
    low, high = spec.contract.domain
    if max(abs(low), abs(high)) <= 1e3:
        return f"the contract's domain ({low:g}, {high:g}) lies within |x| <= 1000"
    return "no input the checks tried was larger than 1000 in magnitude where the op's gradient is not zero"


__all__ = [
    "at_large_inputs",
    "broadcasts",
    "has_kinks",
    "in_lower_dtypes",
    "lower_dtypes",
    "no_large_inputs",
    "no_negatives",
    "own_jvp",
    "same_shaped_inputs",
    "subsets",
    "tight",
    "two_dims",
    "two_outputs",
    "two_tensors",
    "zero_d",
]
