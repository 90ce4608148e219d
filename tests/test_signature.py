"""gufunc signatures and the contract rules that follow from them."""

from __future__ import annotations

import math

import pytest
import torch

import opzoo
from opzoo.core._signature import ShapeError, Signature


@pytest.mark.parametrize(
    "text, inputs, outputs",
    [
        ("()->()", ((),), ((),)),
        ("(n,k),(k,m)->(n,m)", (("n", "k"), ("k", "m")), (("n", "m"),)),
        ("(n)->()", (("n",),), ((),)),
        ("()->(),()", ((),), ((), ())),
        (" ( n , m ) , (n,m) -> ( ) ", (("n", "m"), ("n", "m")), ((),)),
        ("(3),(3)->(3)", (("3",), ("3",)), (("3",),)),
    ],
)
def test_signatures_parse(text, inputs, outputs):
    """NumPy's gufunc grammar: one core per input and output, names or fixed sizes."""
    sig = Signature.parse(text)
    assert (sig.inputs, sig.outputs) == (inputs, outputs)
    assert Signature.parse(str(sig)) == sig
    assert sig.elementwise == (text == "()->()")


@pytest.mark.parametrize(
    "text, message",
    [
        ("(n)", "has no '->'"),
        ("(n,k)(k,m)->(n,m)", "expected ',' or the end at position 5"),
        ("n->()", "expected '(' at position 0"),
        ("(n-1)->()", "'n-1' at position 1 is not a dimension name"),
        ("(n)->(m)", "output dimension 'm' appears in no input"),
        ("(n->()", "never closed"),
        (3, "must be a string"),
    ],
)
def test_malformed_signatures_say_where(text, message):
    """A malformed signature is a ContractError saying what and where."""
    with pytest.raises(opzoo.ContractError, match=None) as info:
        Signature.parse(text)
    assert message in str(info.value)


def test_output_shapes_broadcast_loop_dimensions():
    """Loop dimensions broadcast as in NumPy; core dimensions must agree exactly."""
    mm = Signature.parse("(n,k),(k,m)->(n,m)")
    assert mm.output_shapes([(2, 3), (3, 4)]) == [(2, 4)]
    assert mm.output_shapes([(5, 1, 2, 3), (7, 3, 4)]) == [(5, 7, 2, 4)]
    assert mm.output_shapes([(0, 2, 0), (0, 4)]) == [(0, 2, 4)]
    assert Signature.parse("()->(),()").output_shapes([(2, 3)]) == [(2, 3), (2, 3)]
    with pytest.raises(ShapeError, match="dimension 'k' is 4, not 3"):
        mm.output_shapes([(2, 3), (4, 4)])
    with pytest.raises(ShapeError, match="do not broadcast"):
        mm.output_shapes([(2, 2, 3), (3, 3, 4)])
    with pytest.raises(ShapeError, match="fewer dimensions than its core"):
        mm.output_shapes([(3,), (3, 4)])


def _fn(forward, **contract):
    """A Function class with this forward (setup_context form) and contract."""
    return type(
        "Op",
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "setup_context": staticmethod(lambda ctx, inputs, output: None),
            "backward": staticmethod(lambda ctx, *g: g),
            "opzoo_contract": opzoo.Contract(**contract),
        },
    )


@pytest.mark.parametrize(
    "forward, contract, message",
    [
        (lambda x, w: x @ w, {}, "forward takes 2 tensor(s) but the signature '()->()' declares 1"),
        (lambda x: x, {"signature": "(n,k),(k,m)->(n,m)"}, "forward takes 1 tensor(s) but the signature"),
        (lambda x, w: x, {"signature": "(n,k)->(n,k"}, "signature '(n,k)->(n,k'"),
        (lambda x, w: x @ w, {"signature": "(n,k),(k,m)->(n,m)", "kinks": {0.0: 1.0}}, "kinks apply to"),
        (lambda x: x.sum(-1), {"signature": "(n)->()", "domain": (0.0, math.inf)}, "a domain applies to"),
        (lambda x, dim: x, {"params": {"dim": opzoo.Param(1.5)}, "signature": "()->()"}, None),
    ],
)
def test_contract_validation_against_the_signature(forward, contract, message):
    """A Function whose forward disagrees with its signature is refused at registration, in one line."""
    reg = opzoo.Registry()
    if message is None:
        reg.register(_fn(forward, **contract), name="fine")
        return
    with pytest.raises(opzoo.ContractError) as info:
        reg.register(_fn(forward, **contract), name="op")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_classic_forward_with_ctx_is_counted_without_ctx():
    """forward(ctx, x, w) is a two-tensor op in the classic form."""

    class Classic(torch.autograd.Function):
        opzoo_contract = opzoo.Contract(signature="(n,k),(k,m)->(n,m)")

        @staticmethod
        def forward(ctx, x, w):
            return x @ w

        @staticmethod
        def backward(ctx, g):
            return None, None

    assert opzoo.Registry().register(Classic) is Classic


def test_integer_params_are_ints():
    """A Param with an int default is an integer parameter: ints in, ints out, non-integers refused."""
    p = opzoo.Param(1, 0, 3)
    assert p.integer and p.check("dim", 2) == 2 and isinstance(p.check("dim", 2.0), int)
    assert isinstance(p.check("dim", "2"), int)
    with pytest.raises(opzoo.ParamError, match="must be an integer, got 1.5"):
        p.check("dim", 1.5)
    with pytest.raises(opzoo.ParamError, match=r"must lie in \[0, 3\]"):
        p.check("dim", 4)
    assert not opzoo.Param(1.0).integer and isinstance(opzoo.Param(1.0).check("a", 2), float)
