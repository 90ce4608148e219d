"""The mutants of issue 28 (opzoo/testing/mutation/_mutants.py): a nan second derivative, and float32
outputs for short dtypes, each killed on every op where it applies by the property meant to see it."""

from __future__ import annotations

import pytest
from correct_ops import Cube, RoundsByPath, SeedMyReLU, SinCos

import opzoo
from opzoo.testing.mutation._mutate import KILLED, NOT_APPLICABLE, mutate_one

REG = opzoo.Registry()
for _name, _cls in {"cube": Cube, "times": RoundsByPath, "seed_myrelu": SeedMyReLU, "sincos": SinCos}.items():
    REG.register(_cls, name=_name)

#: ops of every kind the zoo has: one input or two, one output or two, a reduction, a matrix
#: product, a learnable op, a kink, a surrogate
OPS = ["cube", "times", "seed_myrelu", "sincos", "myrelu", "softmax", "linear", "prelu", "heaviside"]


def _spec(name: str):
    return REG.info(name) if name in REG else opzoo.info(name)


@pytest.mark.parametrize("op", OPS)
def test_a_nan_second_derivative_is_killed_by_double_backward(op):
    """Every gradient times sqrt(0 * |g|) + 1, the same values: double_backward sees the nan its
    derivative is (through the inputs, or through the grad_outputs where the gradient is linear)."""
    verdict = mutate_one(_spec(op), "nan_second_derivative", props=["double_backward"])
    assert verdict.status == KILLED, verdict.why()
    assert verdict.prop == "double_backward"
    assert verdict.changed or _spec(op).kind == "module"  # a Module's gradients come from its wrapper


@pytest.mark.parametrize("op", [o for o in OPS if o != "prelu"])
def test_float32_outputs_for_short_dtypes_are_killed_by_hygiene(op):
    """The forward's outputs float32 for bfloat16 or float16 inputs: hygiene, which runs the forward
    in each declared dtype, kills it."""
    verdict = mutate_one(_spec(op), "wrong_dtype_short", props=["hygiene"])
    assert verdict.status == KILLED and verdict.changed, verdict.why()
    assert "dtype is torch.float32, expected torch.bfloat16" in verdict.reason


def test_float32_outputs_do_not_apply_where_no_short_dtype_is_declared():
    """On an op declaring float64 and float32 only, or a learnable op, the mutant does not apply, and
    says why."""
    declared = opzoo.declare(Cube, dtypes=("float64", "float32"))
    verdict = mutate_one(opzoo.testing.spec_of(declared), "wrong_dtype_short", props=["hygiene"])
    assert verdict.status == NOT_APPLICABLE and "neither bfloat16 nor float16" in verdict.reason
    assert mutate_one(opzoo.info("prelu"), "wrong_dtype_short").status == NOT_APPLICABLE
