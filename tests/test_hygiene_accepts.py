"""The ``accepts`` property (opzoo/testing/checks/_hygiene.py): each distinct way the forward rejects
inputs its contract admits, one line each, not only the one hypothesis shrinks to."""

from __future__ import annotations

from wrong_ops import CrashesOn1d, RejectsTwoWays

import opzoo
from opzoo.testing import check_property


def _accepts(cls: type) -> str:
    reg = opzoo.Registry()
    reg.register(cls, name="op")
    result = check_property(reg.info("op"), "accepts", profile="ci")
    assert result.status == "fail"
    return result.reason


def test_each_way_the_forward_rejects_inputs_is_one_line():
    """A forward that raises ValueError on 1-D input and IndexError on an empty last dimension:
    accepts names both, each once, with a shape that shows it."""
    reason = _accepts(RejectsTwoWays)
    assert reason.count("ValueError: expected a batch of rows") == 1, reason
    assert reason.count("IndexError: max(): Expected reduction dim") == 1, reason
    assert "declare it (min_sizes=" in reason


def test_one_way_is_one_line():
    """A forward that rejects inputs in one way only is reported as before, in one line."""
    reason = _accepts(CrashesOn1d)
    assert reason.startswith("the forward raised RuntimeError: expand") and "other way" not in reason


def test_an_op_taken_as_elementwise_is_told_to_declare_its_signature_first():
    """Undeclared, an op is taken as elementwise, with no dimension for min_sizes= to name: a
    log-softmax that rejects an empty last dimension is told to declare the dimension it works
    along (a new user was pointed at min_sizes= and had nothing to give it)."""
    from test_declare import LogSoftmaxLastDim

    reason = _accepts(LogSoftmaxLastDim)
    assert "declare its signature, the dimensions it works along (signature='(n)->(n)'" in reason, reason
    assert "`opzoo scan` infers one" in reason
