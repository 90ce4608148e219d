"""A check draws the same examples in every process, whatever ran before it in that process, so that
a failure's `reproduce:` command fails again (issue 11, item 8). See opzoo/testing/running/_repeatable.py."""

from __future__ import annotations

import contextlib
import importlib

import pytest
import torch

import opzoo
from opzoo.testing import PROPERTIES, check_property
from opzoo.testing.properties import Property


def drawn(monkeypatch) -> list:
    """What a property sees under the ci profile: each example's inputs and a draw from torch's
    generator (gradcheck's fast mode takes its random directions from it)."""
    seen = []

    def record(op, *xs):
        seen.append(([x.tolist() for x in xs], torch.rand(()).item()))

    monkeypatch.setitem(PROPERTIES, "recording", Property("recording", record))
    result = check_property(opzoo.info("myrelu"), "recording", profile="ci")
    assert result.status == "pass", result.report()
    assert len(seen) > 10
    return seen


def use_torch_generator(tmp_path):
    torch.rand(1000)


def import_a_module_with_new_literals(tmp_path):
    # A plugin module imported between two checks: hypothesis reads literals from "local" modules.
    (tmp_path / "opzoo_literals_probe.py").write_text(
        "VALUES = (0.123456789, 7.5e-3, 1.0e-7, 314159, -2.718281828, 2**40, 'abc')\n"
    )
    importlib.import_module("opzoo_literals_probe")


@pytest.mark.parametrize("between", [use_torch_generator, import_a_module_with_new_literals])
def test_the_ci_profile_draws_the_same_examples_whatever_ran_before(monkeypatch, tmp_path, between):
    monkeypatch.syspath_prepend(str(tmp_path))
    before = drawn(monkeypatch)
    between(tmp_path)
    assert drawn(monkeypatch) == before


def test_the_ci_examples_do_not_depend_on_the_text_of_opzoos_code(monkeypatch):
    # Unpinned, hypothesis seeds a derandomized run from a digest of the test function's text: an
    # edit of opzoo's runner would draw other examples, and change the verdicts on record.
    import hypothesis.core

    before = drawn(monkeypatch)
    monkeypatch.setattr(hypothesis.core, "function_digest", lambda test: b"an edited runner")
    assert drawn(monkeypatch) == before


def test_the_callers_torch_generator_is_left_as_it_was(monkeypatch):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    drawn(monkeypatch)
    assert torch.equal(torch.rand(3), expected)


def test_warnings_made_errors_by_the_caller_fail_no_correct_op(monkeypatch):
    """Under `filterwarnings = error` (or `python -W error`), the deprecation warnings torch raises
    from its own machinery (Dynamo instantiating a Function while it traces; torch.jit.script as
    torch.func loads its jvp decompositions) failed `compile` and `forward_mode` of every correct
    op: they are torch's, not the op's, and ignored while a check runs. The op's own are not."""
    import warnings

    from opzoo.testing.running import _repeatable, _runner

    def compiled() -> str:
        torch._dynamo.reset()  # a fresh trace: Dynamo warns as it traces
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return check_property(opzoo.info("myrelu"), "compile", profile="ci").status

    assert compiled() == "pass"
    # the filter is what makes it pass: without it, torch's warning fails the correct op
    with monkeypatch.context() as m:
        m.setattr(_runner, "torch_deprecations_ignored", contextlib.nullcontext)
        assert compiled() == "fail"
    # a warning of the op's own still reaches the caller's filter
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _repeatable.torch_deprecations_ignored(), pytest.raises(DeprecationWarning):
            warnings.warn("the op's own", DeprecationWarning)
