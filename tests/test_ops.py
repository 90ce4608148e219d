"""The built-in zoo: registration, contracts, torch.func, memory, the nn.Module path, the docs."""

from __future__ import annotations

import math
import random

import pytest
import torch
from conftest import EXAMPLE_OPS, FUNCTIONS, GENERAL, LEARNABLE, ROOT, SURROGATE, example_dists, run_opzoo

import opzoo
from opzoo.bench._memory import saved_bytes
from opzoo.cli._docs import ops_markdown
from opzoo.nn import Activation
from opzoo.ops._base import Elementwise

BUILTIN = opzoo.load(autoload=False)


def test_builtin_ops_come_through_opzoos_own_entry_points():
    """Every built-in op is registered by opzoo's pyproject entry points, like a plugin's."""
    assert sorted(BUILTIN.names()) == sorted(FUNCTIONS + GENERAL + LEARNABLE + SURROGATE)
    for name in BUILTIN.names():
        spec = BUILTIN.info(name)
        assert (spec.source.dist, spec.source.via) == ("opzoo", "entry point")


def test_every_example_plugin_is_installed_and_offers_ops():
    """The set-up installs every example plugin under plugins/ (not the .test-only fixtures), and
    each offers ops: the suite's example ops are derived from them (tests/conftest.py)."""
    reg = opzoo.load()
    offered = {s.dist for name in reg.names() for s in reg.sources(name)}
    assert set(example_dists()) <= offered
    assert EXAMPLE_OPS


@pytest.mark.parametrize("name", FUNCTIONS + GENERAL + LEARNABLE + SURROGATE)
def test_full_contract(name):
    """Each built-in declares a summary, a reference, formulas and double-backward support; a
    surrogate op its surrogate too (each of ours has a differentiable backward: double_backward is
    checked against the surrogate's second derivative)."""
    spec = BUILTIN.info(name)
    c = spec.contract
    assert spec.summary and c.reference is not None and c.formula and c.derivative
    assert c.double_backward
    assert (c.surrogate is not None) == (name in SURROGATE)
    assert spec.kind == ("module" if name in LEARNABLE else "function")


def _x(n=24):
    x = torch.linspace(-4, 4, n, dtype=torch.float64)
    return x + 0.0123  # keep clear of the kinks at integers


@pytest.mark.parametrize("name", FUNCTIONS + SURROGATE + ["softmax", "logsumexp", "layer_norm"])
def test_vmap_and_grad(name):
    """Ops work under torch.func: vmap matches a loop, grad matches autograd."""
    spec = BUILTIN.info(name)
    x = _x().reshape(4, 6)
    batched = torch.func.vmap(lambda t: spec.apply(t))(x)
    torch.testing.assert_close(batched, torch.stack([spec.apply(row) for row in x]))
    g = torch.func.grad(lambda t: spec.apply(t).sum())(x[0])
    xr = x[0].clone().requires_grad_()
    (expected,) = torch.autograd.grad(spec.apply(xr).sum(), xr)
    torch.testing.assert_close(g, expected)


@pytest.mark.parametrize("name", [n for n in FUNCTIONS if n != "myrelu"])
def test_saves_no_more_than_reference_plus_one_byte_per_element(name):
    """Saved-for-backward bytes: at most the native reference's plus one byte per element."""
    spec = BUILTIN.info(name)
    x = torch.randn(1000, dtype=torch.float32)
    ours = saved_bytes(lambda t: spec.apply(t), x)
    ref = saved_bytes(lambda t: spec.contract.reference(t, **spec.contract.defaults()), x)
    assert ours <= ref + x.numel(), (ours, ref)


def test_ops_that_need_only_their_output_save_nothing_extra():
    """Piecewise-linear ops keep only their output, which the next layer holds anyway."""
    x = torch.randn(1000)
    for name in ("leaky_relu", "hardtanh", "hardsigmoid"):
        assert saved_bytes(lambda t: BUILTIN.info(name).apply(t), x) == 0, name


def test_myrelu_saves_its_input_for_speed():
    """myrelu keeps its input (4 B/element, the memory target is +1): the documented trade-off.

    The output cannot tell x = 0 from x < 0. A 1-byte bool mask would, but bool kernels run 3-4x
    slower than float ones on the CPU, and myrelu would miss its speed target by 2.5x
    (benchmarks/RESULTS.md).
    """
    x = torch.randn(1000)
    assert saved_bytes(lambda t: opzoo.info("myrelu").apply(t), x) == 4 * 1000
    assert saved_bytes(torch.relu, x) == 0  # relu's saved output is the output itself


def test_activation_module_in_sequential():
    """opzoo.nn.Activation turns any op into an nn.Module with its name and params in the repr."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), Activation("leaky_relu", negative_slope=0.1))
    assert "Activation('leaky_relu', negative_slope=0.1)" in repr(model)
    x = torch.randn(2, 3)
    torch.testing.assert_close(model(x), torch.nn.functional.leaky_relu(model[0](x), 0.1))
    with pytest.raises(opzoo.ParamError):
        Activation("leaky_relu", negative_slope=2.0)


def test_learnable_activation_has_parameters_and_trains():
    """A learnable op's parameters are trained by the trainer."""
    act = opzoo.nn.create(BUILTIN.info("prelu"), init_slope=0.25)
    assert [n for n, _ in act.named_parameters()] == ["inner.slope"]
    result = opzoo.train(activation="prelu", steps=40, d_in=40, hidden=16, lr=3e-6, seed=1)
    assert "act.inner.slope" in result.weights and result.weights["act.inner.slope"].item() != 0.25
    assert result.final_loss < result.losses[0]
    # with the seed's own settings too: the slope's rate is scaled to the 6,400 elements sharing it
    seeded = opzoo.train(activation="prelu", seed=0)
    assert seeded.final_loss < 1e-3 and seeded.weights["act.inner.slope"].item() != 0.25
    wrapped = Activation("swish_beta", init_beta=2.0)
    assert [n for n, _ in wrapped.named_parameters()] == ["inner.beta"]


def test_learnable_property_checks_cover_their_parameters():
    """The gradient property checks gradients with respect to a learnable op's parameters too."""
    from opzoo.testing import bind

    op = bind(BUILTIN.info("swish_beta"), {"init_beta": 1.5})
    assert len(op.extras) == 1 and len(op.inputs(_x())) == 2


@pytest.mark.parametrize(
    "name",
    [n for n in FUNCTIONS if n != "legendre_p3"]
    + ["softmax", "layer_norm"]
    + LEARNABLE
    + [n for n in SURROGATE if n != "grad_reverse"]
    + EXAMPLE_OPS,
)
def test_every_op_trains(name):
    """`opzoo train --activation X` trains with every built-in and example-plugin activation
    (a cubic, legendre_p3, diverges at any useful rate on this net: it is a test op; grad_reverse
    is an identity that reverses the gradient, an activation that ascends by design)."""
    result = opzoo.train(activation=name, steps=40, d_in=40, hidden=16, seed=1, lr=3e-6)
    assert all(math.isfinite(v) for v in result.losses)
    assert result.final_loss < result.losses[0]


def test_ops_with_a_restricted_domain_are_refused_by_the_trainer():
    """An op defined on (0, inf) cannot take a hidden layer's pre-activations: a clear error."""
    import fakeops

    opzoo.register(fakeops.Log, name="log")
    try:
        with pytest.raises(opzoo.ConfigError) as err:
            opzoo.train(activation="log", steps=2)
    finally:
        opzoo.registry().unregister("log")
    assert str(err.value) == (
        "'log' is defined on (0, inf) only, but the hidden layer's pre-activations take any real "
        "value; it cannot be the trainer's activation"
    )


def test_train_cli_with_a_plugin_op():
    """The CLI trains with an op from an example plugin package."""
    out = run_opzoo("train", "--activation", "bentid", "--steps", "100", "--d-in", "50")
    assert out.returncode == 0 and out.stdout.startswith("99 ")


def test_ops_reference_is_fresh():
    """docs/ops.md is what `opzoo --no-autoload list --format markdown` generates now."""
    assert (ROOT / "docs" / "ops.md").read_text() == ops_markdown(BUILTIN) + "\n", (
        "docs/ops.md is stale: run `opzoo --no-autoload list --format markdown > docs/ops.md`"
    )


def test_layer_norm_keeps_the_forwards_mean_and_rstd_for_backward():
    """Eager layer_norm saves the forward's mean and rstd (one value per row), so backward does not
    recompute them; the gradient is the same either way, also under vmap where it recomputes."""
    spec = BUILTIN.info("layer_norm")
    x = _x().reshape(4, 6).requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        y = spec.apply(x)
    assert saved == [(4, 6), (4, 1), (4, 1)]
    g = torch.linspace(-1, 2, 24, dtype=torch.float64).reshape(4, 6)
    (got,) = torch.autograd.grad(y, x, g)
    (want,) = torch.autograd.grad(torch.nn.functional.layer_norm(x, (6,)), x, g)
    torch.testing.assert_close(got, want)
    per_row = torch.func.vmap(torch.func.grad(lambda t: (spec.apply(t) * t).sum()))(x.detach())
    torch.testing.assert_close(
        per_row, torch.func.vmap(torch.func.grad(lambda t: (_layer_norm(t) * t).sum()))(x.detach())
    )


def _layer_norm(t: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(t, t.shape[-1:])


# -- one slope per elementwise op -----------------------------------------------------------------

ELEMENTWISE = FUNCTIONS + SURROGATE
DERIVED = ("setup_context", "backward", "jvp")


def _param_sets(spec, draws: int) -> list[tuple]:
    """The op's defaults, its params all at their lowest, all at their highest, and ``draws`` sets
    between (seeded: the same every run)."""
    ps = list(spec.contract.params.values())
    rng = random.Random(0)

    def draw(p):
        return rng.randint(p.low, p.high) if p.integer else rng.uniform(p.low, p.high)

    sets = [tuple(spec.contract.defaults().values()), tuple(p.low for p in ps), tuple(p.high for p in ps)]
    return sets + [tuple(draw(p) for p in ps) for _ in range(draws if ps else 0)]


def _saved(target, x: torch.Tensor, params: tuple) -> tuple:
    """What the op's own setup_context saves for backward at ``x`` ((None,) when nothing)."""
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.detach()) or t, lambda t: t):
        target.apply(x.detach().requires_grad_(), *params)
    return tuple(saved) or (None,)


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_every_elementwise_builtin_derives_backward_and_jvp_from_its_slope(name):
    """Each elementwise built-in is an Elementwise that writes one slope: its setup_context,
    backward and jvp are the ones the base derives (a fused fast path only as fast_backward)."""
    target = BUILTIN.info(name).target
    assert issubclass(target, Elementwise) and "slope" in target.__dict__
    for cls in target.__mro__[: target.__mro__.index(Elementwise)]:
        for attr in (*DERIVED, "vjp"):
            fn = getattr(cls.__dict__.get(attr), "__func__", None)  # a staticmethod's function
            assert attr not in cls.__dict__ or getattr(fn, "derived_from_slope", False), (cls, attr)
    assert all(getattr(target, attr).derived_from_slope for attr in ("setup_context", "backward"))
    assert target._with_jvp.jvp.derived_from_slope and "jvp" not in vars(target)  # on the twin only


def test_an_op_that_writes_its_own_backward_beside_a_slope_is_refused():
    """A second copy of the derivative beside the slope is refused when the class is made."""
    with pytest.raises(TypeError, match="Twice writes backward beside its slope"):

        class Twice(Elementwise):
            @staticmethod
            def forward(x):
                return x * x

            @staticmethod
            def slope(x):
                return 2 * x  # d/dx x^2 = 2x

            @staticmethod
            def backward(ctx, grad):
                return grad * 2 * ctx.saved_tensors[0]


@pytest.mark.parametrize("name", [n for n in ELEMENTWISE if BUILTIN.info(n).contract.kinks])
def test_the_slope_at_each_declared_kink_is_the_declared_value(name):
    """At each kink the contract declares, the slope (which backward, double backward and jvp all
    multiply by) gives the declared value, for the defaults and the ends of the params' ranges."""
    spec = BUILTIN.info(name)
    target = spec.target
    # 200 draws: softplus declared its kink at threshold / beta, which rounds into the linear piece
    # for 4% of its params (fixed by declaring the last x of the smooth piece)
    for params in _param_sets(spec, 200):
        declared = spec.contract.kinks_at(dict(zip(spec.contract.params, params)))
        x = torch.tensor(list(declared), dtype=torch.float64)
        got = torch.as_tensor(
            target.effective_slope(_saved(target, x, params)[0], *params), dtype=torch.float64
        )
        want = torch.tensor(list(declared.values()), dtype=torch.float64)
        torch.testing.assert_close(
            got.expand_as(want), want, rtol=1e-9, atol=1e-12, msg=lambda m: f"{params}: {m}"
        )


#: How far a fused fast path may round away from grad * slope, per dtype.
FAST_TOL = {
    torch.float64: dict(rtol=1e-9, atol=1e-12),
    torch.float32: dict(rtol=1e-5, atol=1e-6),
    torch.bfloat16: dict(rtol=2e-2, atol=1e-2),
}


@pytest.mark.parametrize(
    "name", [n for n in ELEMENTWISE if getattr(BUILTIN.info(n).target, "fast_backward", None)]
)
@pytest.mark.parametrize("dtype", list(FAST_TOL))
def test_each_fast_backward_is_grad_times_its_slope(name, dtype):
    """An op's hand-fused fast path (the backward when nothing records it) equals grad * slope,
    over kinks, zeros, tiny and large inputs, for every set of params checked."""
    spec = BUILTIN.info(name)
    target = spec.target
    for params in _param_sets(spec, 20):
        kinks = list(spec.contract.kinks_at(dict(zip(spec.contract.params, params))))
        grid = [*torch.linspace(-8, 8, 161).tolist(), *kinks, 0.0, -0.0, 1e-30, -1e-30, 1e4, -1e4]
        x = torch.tensor(grid, dtype=dtype)
        g = torch.linspace(-2, 3, len(grid), dtype=dtype)
        saved = _saved(target, x, params)
        with torch.no_grad():
            fast = target.fast_backward(g, *saved, *params)
            want = g * target.effective_slope(saved[0], *params)
        torch.testing.assert_close(fast, want, **FAST_TOL[dtype], msg=lambda m: f"{params}: {m}")
