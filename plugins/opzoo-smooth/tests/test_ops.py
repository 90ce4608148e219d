"""opzoo-smooth's own tests. The property tests of its ops come from opzoo's pytest plugin
(``--opzoo=logcosh,isru`` in pyproject.toml); these add what is specific to the package."""

import torch

import opzoo


def test_ops_come_from_this_distribution():
    for name in ("logcosh", "isru"):
        assert opzoo.info(name).source.dist == "opzoo-smooth"


def test_isru_saturates_at_one_over_sqrt_alpha():
    x = torch.tensor([1e6], dtype=torch.float64)
    assert torch.allclose(opzoo.info("isru").apply(x, alpha=4.0), torch.tensor([0.5], dtype=torch.float64))


def test_logcosh_does_not_overflow():
    x = torch.tensor([-1e3, 0.0, 1e3], requires_grad=True)
    y = opzoo.info("logcosh").apply(x)
    assert torch.isfinite(y).all()
    y.sum().backward()
    assert x.grad.tolist() == [-1.0, 0.0, 1.0]
