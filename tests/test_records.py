"""The record scripts of benchmarks/ (real_world.py, native_ops.py) stay runnable without being run:
their help, the torch-native declarations, and that those declarations' backward is torch's own."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import ROOT

from opzoo.testing import spec_of

BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import native_table  # noqa: E402
from _record import Cause, cause_of  # noqa: E402

HELP = """
import runpy, sys
sys.argv = [{path!r}, "--help"]
try:
    runpy.run_path({path!r}, run_name="__main__")
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("torch imported" if "torch" in sys.modules else "no torch")
"""


@pytest.mark.parametrize("script", ["real_world.py", "native_ops.py"])
def test_record_scripts_answer_help_without_torch(script):
    """Each record script prints its help, exits 0, and imports no torch (nor the packages it
    installs) to do so."""
    path = str(BENCHMARKS / script)
    out = subprocess.run(
        [sys.executable, "-c", HELP.format(path=path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout and out.stdout.strip().endswith("no torch"), out.stdout


def test_the_native_record_declares_at_least_40_valid_ops():
    """native_table declares at least 40 ops, each a valid contract that fits its forward."""
    assert len(native_table.OPS) >= 40
    for name, (declared, _) in native_table.OPS.items():
        spec = spec_of(declared, name=name)
        assert spec.kind == "function" and spec.arguments is not None


def _both(name, tensors, params, create_graph=False):
    """The wrapper's gradients and torch's autograd of the native call, at the same inputs."""
    spec = spec_of(native_table.OPS[name][0], name=name)
    fn = spec.target.native
    results = []
    for call in (lambda *ts: spec.apply(*ts, **params), lambda *ts: fn(*ts, *params.values())):
        leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in tensors]
        out = call(*leaves)
        wrt = [t for t in leaves if t.requires_grad]
        grads = torch.autograd.grad(
            out,
            wrt,
            torch.linspace(0.5, 1.5, out.numel()).reshape(out.shape).double(),
            create_graph=create_graph,
        )
        if create_graph:  # second derivatives (zeros where the first ones are constant)
            # weighted: a plain sum of softmax's gradient is 0 whatever x is
            linked = [
                (g * torch.linspace(1, 2, g.numel()).reshape(g.shape)).sum() for g in grads if g.requires_grad
            ]
            grads = torch.autograd.grad(sum(linked), wrt, allow_unused=True) if linked else (None,) * len(wrt)
            grads = [torch.zeros_like(t) if g is None else g for t, g in zip(wrt, grads)]
        results.append(grads)
    return results


@pytest.mark.parametrize(
    "name, tensors, params",
    [
        # a tie: torch's choice there (half each) must come back, not another valid one
        ("maximum", (torch.tensor([1.0, 2.0, 3.0]).double(), torch.tensor([1.0, 0.0, 3.0]).double()), {}),
        ("softmax", (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).double(),), {"dim": 0}),
        (
            "cross_entropy",
            (torch.randn(3, 4, generator=torch.Generator().manual_seed(1)).double(), torch.tensor([0, 3, 1])),
            {"label_smoothing": 0.1},
        ),
    ],
)
def test_a_native_ops_backward_is_torchs_own(name, tensors, params):
    """The wrapper's first and second derivatives are torch's autograd of the native call, ties
    and integer targets included."""
    for create_graph in (False, True):
        ours, torchs = _both(name, tensors, params, create_graph)
        for a, b in zip(ours, torchs):
            torch.testing.assert_close(a, b)


def test_a_cause_explains_only_its_ops_properties_and_examples():
    """A record's cause applies to its ops and properties, where the reason and the counterexample
    match its patterns; the first that applies is the failure's cause."""
    tiny = Cause("tiny", "torch defect", "", ("prod",), ("double_backward",), "mismatch", example=r"e-2\d\d")
    anywhere = Cause("any", "opzoo false alarm", "", ("prod", "sum"))
    failure = {"prop": "double_backward", "reason": "Jacobian mismatch", "example": {"values": [1.6e-228]}}
    assert cause_of((tiny, anywhere), "prod", failure) is tiny
    assert cause_of((tiny, anywhere), "prod", {**failure, "example": {"values": [0.5]}}) is anywhere
    assert cause_of((tiny, anywhere), "prod", {**failure, "prop": "gradient"}) is anywhere
    assert cause_of((tiny,), "sum", failure) is None


class _Scaled(torch.autograd.Function):
    """x * k along dim (the target of a declaration that the scan record reads)."""

    @staticmethod
    def forward(ctx, x, dim=-1, k=2.0):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k, None, None


def test_the_scan_record_reads_a_declaration_as_data_and_runs_none():
    """benchmarks/real_world_scan.py rebuilds the declaration scan printed from its syntax (opzoo.declare
    of the class, literals, math.inf and opzoo's Dim, Param and Floats of them); it eval()'d it
    before. Any other call, name or target is refused, and nothing of the text runs."""
    import real_world_scan

    import opzoo

    target = f"{_Scaled.__module__}.{_Scaled.__qualname__}"
    text = (
        f"opzoo.declare(\n    {target},\n    signature='(n)->(n)',\n"
        "    params={'dim': opzoo.Dim(), 'k': opzoo.Param(2.0, 2.0, 2.0)},  # pinned at upstream's defaults\n"
        "    min_sizes={'n': 1},\n    inputs={'x': opzoo.Floats(-math.inf, 1.5)},\n)"
    )
    contract = real_world_scan.declared(text, _Scaled, opzoo).contract
    assert (contract.signature, contract.min_sizes) == ("(n)->(n)", {"n": 1})
    assert contract.params["dim"].axis and contract.params["k"].default == 2.0
    assert (contract.inputs["x"].low, contract.inputs["x"].high) == (float("-inf"), 1.5)
    for bad in (
        f"opzoo.declare({target}, signature=__import__('os').system('exit 3'))",
        f"opzoo.declare({target}, params={{'k': opzoo.declare(1)}})",
        f"opzoo.declare({target}, **{{'signature': '(n)->(n)'}})",
        "opzoo.declare(os.path.Other)",
        "print('hello')",
    ):
        with pytest.raises(ValueError):
            real_world_scan.declared(bad, _Scaled, opzoo)
