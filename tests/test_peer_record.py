"""benchmarks/peer_record.py (its input-by-input half: benchmarks/_peer.py) finds what it is meant to:
on a few fixed inputs (not the runner's, which the record itself uses), a second derivative the peer
fails is a blind spot when opzoo passes it, explained when opzoo notes why, and agreement otherwise."""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import ROOT
from correct_ops import ReLU
from wrong_ops import NanSecondDerivative, WrongDtype

from opzoo.testing import Property, bind, spec_of

sys.path.insert(0, str(ROOT / "benchmarks"))

import _peer  # noqa: E402


def _rows(target, *xs):
    """The peer's rows (and their class) for ``target`` on each input in ``xs`` (tuples of tensors)."""
    spec = spec_of(target)
    _peer.ROWS.clear()
    for inputs in xs:
        _peer.peer(bind(spec, spec.contract.defaults(), fast=False), *inputs)
    rows = list(_peer.ROWS)
    return [(row, _peer.judge(row, surrogate=False)[0]) for row in rows]


X = [(torch.tensor([1.5, 0.2, -2.0], dtype=torch.float64),), (torch.tensor(0.7, dtype=torch.float64),)]


def test_a_nan_second_derivative_is_seen_by_both():
    """x² whose backward carries sqrt(0 * x): gradgradcheck fails it, gradcheck passes, and opzoo's
    double_backward fails it too: no blind spot."""
    for row, kind in _rows(NanSecondDerivative, *X):
        assert row["peer"]["gradcheck_fast"] == row["peer"]["gradcheck_slow"] == "pass", row
        assert row["peer"]["gradgradcheck_slow"].startswith("fail"), row
        assert row["opzoo"]["double_backward"].startswith("fail"), row
        assert kind == "both fail"


def test_a_check_that_misses_it_is_a_blind_spot(monkeypatch):
    """With opzoo's double_backward made blind (as it was before issue 28's first point), the same
    inputs are listed as the peer failing and opzoo passing, with nothing to explain it."""
    from opzoo.testing.properties import PROPERTIES

    monkeypatch.setitem(PROPERTIES, "double_backward", Property("double_backward", lambda op, *xs: None))
    assert [kind for _, kind in _rows(NanSecondDerivative, *X)] == ["blind", "blind"]


def test_a_kink_the_peer_fails_is_explained_by_opzoo_s_note():
    """A ReLU at 0 (no kink declared): gradcheck's central difference straddles the kink (0.5, the
    backward 0) and fails; opzoo's gradient passes, noting the kink, which is what explains it."""
    [(row, kind)] = _rows(ReLU, (torch.tensor([0.0, 1.0], dtype=torch.float64),))
    assert row["peer"]["gradcheck_slow"].startswith("fail"), row
    assert kind == "explained", row
    assert row["notes"]["gradient"], row


@pytest.mark.parametrize("verdict", ["pass", "skip: once differentiable"])
def test_a_correct_op_agrees(verdict):
    """The judgement of a row where both pass is agreement, whatever opzoo's skip says."""
    row = {"peer": dict.fromkeys(_peer.CHECKS, "pass"), "opzoo": {"gradient": "pass"}}
    row["opzoo"]["double_backward"] = verdict
    row["notes"] = {"gradient": [], "double_backward": []}
    assert _peer.judge(row, surrogate=False) == ("agree", "")


def test_an_input_opzoo_fails_by_another_property_is_not_one_it_passes():
    """A ReLU returning float32 for float64 input, at x = 0.001: gradgradcheck fails with respect to
    the grad_output (its grad_outputs are float32, so its differences round), and opzoo's gradient
    and double_backward pass there (the first derivative's float32 rounding is within tolerance);
    but hygiene fails the op at that very input (its dtype), so opzoo does not pass it: both fail,
    the property named. The correct ReLU at the same input: agreement, the other properties not run."""
    x = (torch.full((2,), 0.001, dtype=torch.float64),)
    [(row, kind)] = _rows(WrongDtype, x)
    assert row["peer"]["gradgradcheck_slow"].startswith("fail"), row
    assert row["opzoo"] == {"gradient": "pass", "double_backward": "pass"}, row
    assert row["opzoo_other"]["hygiene"].startswith("fail: output dtype is torch.float32"), row
    assert kind == "both fail" and "hygiene (at this input)" in _peer.judge(row, surrogate=False)[1]
    [(row, kind)] = _rows(ReLU, x)
    assert kind == "agree" and "opzoo_other" not in row


def test_a_declared_by_design_backward_explains_the_peer_s_failure():
    """Guided backprop (monai's): the backward is not the derivative, on purpose, and opzoo's gradient
    holds what it can of it unnoted. The peer's failure there is the declaration's, as a surrogate's."""
    row = {"peer": dict.fromkeys(_peer.CHECKS, "fail: Jacobian mismatch"), "opzoo": {}, "notes": {}}
    row["opzoo"] = {"gradient": "pass", "double_backward": "pass"}
    row["notes"] = {"gradient": [], "double_backward": []}
    assert _peer.judge(row, surrogate=False)[0] == "blind"
    assert _peer.judge(row, surrogate=False, by_design=True) == (
        "explained",
        "a declared by-design backward: the backward is not the derivative, on purpose",
    )
