"""Independent evidence for the real-world record: plain-torch reproductions, no opzoo.

Run by benchmarks/real_world.py with the scratch venv's python; prints one JSON object: for each cause
of a red verdict (``real_world.CAUSES`` names them), whether its reproduction reproduced and the lines
it printed; and for each op of ``real_world_ops.OPS``, its package version and the form of its
forward. Every reproduction calls the upstream Function directly (``Function.apply``) and checks it
with torch alone: ``gradcheck``/``gradgradcheck``, central differences, the failing call itself.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import math
import sys
import traceback
import warnings
from typing import Callable

import torch
from _evidence import EVIDENCE, F64, evidence

warnings.filterwarnings("ignore")


def t(values: object, **kw: object) -> torch.Tensor:
    return torch.tensor(values, dtype=F64, **kw)


def error_of(thunk: Callable[[], object]) -> str | None:
    """The one-line error ``thunk`` raises, or None."""
    try:
        thunk()
    except Exception as exc:  # the error is the evidence
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return None


def hvp(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """d/dx <grad_x <fn(x), w>, v> by double backward (w = ones)."""
    x = x.detach().clone().requires_grad_()
    out = fn(x)
    (g,) = torch.autograd.grad(out, x, torch.ones_like(out), create_graph=True)
    if not g.requires_grad:  # the backward returned a constant: its derivative is zero
        return torch.zeros_like(x)
    (h,) = torch.autograd.grad(g, x, v, allow_unused=True)
    return torch.zeros_like(x) if h is None else h


def hvp_numerical(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """The same by central differences of the first derivative (eps 1e-6)."""

    def grad_at(z: torch.Tensor) -> torch.Tensor:
        z = z.detach().clone().requires_grad_()
        out = fn(z)
        return torch.autograd.grad(out, z, torch.ones_like(out))[0]

    cols = []
    flat = x.detach().reshape(-1)
    for i in range(flat.numel()):
        e = torch.zeros_like(flat)
        e[i] = 1e-6
        d = (grad_at((flat + e).reshape(x.shape)) - grad_at((flat - e).reshape(x.shape))) / 2e-6
        cols.append((d * v).sum())
    return torch.stack(cols).reshape(x.shape)


# -- entmax ---------------------------------------------------------------------------------------------


def _nan_second(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> tuple[bool, list[str]]:
    y = fn(x)
    h = hvp(fn, x, torch.linspace(0.5, 1.5, x.numel(), dtype=F64).reshape(x.shape))
    num = hvp_numerical(fn, x, torch.linspace(0.5, 1.5, x.numel(), dtype=F64).reshape(x.shape))
    return bool(torch.isnan(h).any()) and bool(torch.isfinite(num).all()), [
        f"x = {x.tolist()}: output {[round(v, 6) for v in y.reshape(-1).tolist()]} (some exactly 0)",
        f"second derivative (HVP) by double backward: {h.tolist()}",
        f"the same by central differences of the gradient: {[round(v, 6) for v in num.reshape(-1).tolist()]}",
    ]


@evidence("entmax15_nan_second")
def _entmax15() -> tuple[bool, list[str]]:
    from entmax.activations import Entmax15Function

    ok, lines = _nan_second(lambda x: Entmax15Function.apply(x, -1), t([1.5, 0.2, -2.0]))
    return ok, [
        "Entmax15Function.apply(x, -1); backward: gppr = Y.sqrt(), whose derivative at Y = 0 is inf",
        *lines,
    ]


@evidence("entmax_bisect_nan_second")
def _entmax_bisect() -> tuple[bool, list[str]]:
    from entmax.root_finding import EntmaxBisectFunction, NormmaxBisectFunction

    ok, lines = _nan_second(lambda x: EntmaxBisectFunction.apply(x, 1.5, -1), t([1.5, 0.2, -2.0]))
    ok_n, lines_n = _nan_second(lambda x: NormmaxBisectFunction.apply(x, 1.5, -1), t([1.5, 0.2, -2.0]))
    return ok and ok_n, [
        "EntmaxBisectFunction.apply(x, 1.5, -1); backward: torch.where(Y > 0, Y ** (2 - alpha), 0): "
        "the unselected branch's derivative at Y = 0 is inf, and 0 * inf = nan",
        *lines,
        "NormmaxBisectFunction.apply(x, 1.5, -1); its backward takes the same where (`b`):",
        *lines_n,
    ]


@evidence("entmax_loss_zero_second")
def _entmax_losses() -> tuple[bool, list[str]]:
    from entmax.losses import Entmax15LossFunction, SparsemaxLossFunction

    x, target = t([[1.0, 0.5, -0.5]]), torch.tensor([0])
    lines, ok = [], True
    for cls in (SparsemaxLossFunction, Entmax15LossFunction):
        fn = lambda z, cls=cls: cls.apply(z, target)  # noqa: E731
        v = t([[1.0, -1.0, 0.5]])
        h, num = hvp(fn, x, v), hvp_numerical(fn, x, v)
        ok &= bool((h == 0).all()) and bool(num.abs().max() > 1e-3)
        lines.append(
            f"{cls.__name__}.apply(x = {x.tolist()}, target = [0]): HVP by double backward {h.tolist()}, "
            f"by central differences {[round(a, 6) for a in num.reshape(-1).tolist()]}"
        )
    return ok, [
        "backward = grad_output * p_star, with p_star saved from a forward run without grad: "
        "the second derivative comes back silently 0",
        *lines,
    ]


@evidence("budget_squeeze")
def _budget() -> tuple[bool, list[str]]:
    from entmax.root_finding import BudgetBisectFunction

    x = t([[0.3]], requires_grad=True)
    crash = error_of(lambda: BudgetBisectFunction.apply(x, 2.0, 1).sum().backward())
    lines = [
        "backward: active.sum(ctx.dim) drops the dimension, then .squeeze(ctx.dim) drops another one",
        f"x of shape (1, 1), dim = 1: backward raises {crash}",
    ]
    torch.manual_seed(0)
    fails = []
    for shape, dim in [((3, 1, 4), -1), ((3, 4), -1), ((4, 1, 1, 3), -1)]:
        z = (torch.randn(shape, dtype=F64) * 0.5).requires_grad_()
        fail = error_of(
            lambda: torch.autograd.gradcheck(lambda a: BudgetBisectFunction.apply(a, 2.0, dim), (z,))
        )
        fails.append(fail is not None)
        lines.append(f"gradcheck, shape {shape}, dim {dim}: {fail or 'passes'}")
    return crash is not None and fails == [True, False, True], lines


@evidence("entmax_roll_last")
def _roll_last() -> tuple[bool, list[str]]:
    from entmax.activations import Entmax15Function, SparsemaxFunction

    x = t([[0.3, -1.0], [2.0, 0.1], [0.5, 0.4]])
    lines, crashed = [], []
    for cls in (SparsemaxFunction, Entmax15Function):
        for dim in (-2, 0):
            err = error_of(lambda cls=cls, dim=dim: cls.apply(x, dim, 1))
            crashed.append(err is not None)
            lines.append(f"{cls.__name__}.apply(x of shape (3, 2), dim={dim}, k=1): {err or 'works'}")
    return crashed == [True, False, True, False], [
        "_roll_last: `elif dim < 0: dim = X.dim() - dim` (should be +): with k set, a negative dim other "
        "than -1 crashes as soon as a row needs the larger partial sort",
        *lines,
    ]


@evidence("classmethod_compile")
def _classmethod_compile() -> tuple[bool, list[str]]:
    class Twice(torch.autograd.Function):  # the smallest classmethod-form Function
        @classmethod
        def forward(cls, ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    class TwiceStatic(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    x = torch.randn(3, requires_grad=True)
    got = {}
    for cls in (Twice, TwiceStatic):
        torch._dynamo.reset()
        compiled = torch.compile(lambda a, cls=cls: cls.apply(a), fullgraph=True, backend="aot_eager")
        got[cls.__name__] = error_of(lambda compiled=compiled: compiled(x).sum().backward())
    return got["Twice"] is not None and got["TwiceStatic"] is None, [
        "torch.compile(lambda x: Twice.apply(x), fullgraph=True, backend='aot_eager'), Twice with a "
        f"@classmethod forward(cls, ctx, x) returning x * 2: {got['Twice']}",
        f"the same with a @staticmethod forward: {got['TwiceStatic'] or 'compiles'}",
    ]


# -- sparsemax, tabnet ----------------------------------------------------------------------------------


@evidence("sparsemax_1d")
def _sparsemax_1d() -> tuple[bool, list[str]]:
    from sparsemax.sparsemax import SparsemaxFunction

    crash = error_of(lambda: SparsemaxFunction.apply(t([0.5, 1.0, -0.2]), -1))
    two_d = error_of(lambda: SparsemaxFunction.apply(t([[0.5, 1.0, -0.2]]), -1))
    return crash is not None and two_d is None, [
        f"SparsemaxFunction.apply(x of shape (3,), -1) raises {crash}",
        f"the same row as shape (1, 3): {two_d or 'works'}",
    ]


@evidence("tabnet_mutates")
def _tabnet_mutates() -> tuple[bool, list[str]]:
    from pytorch_tabnet.sparsemax import SparsemaxFunction

    x = t([[0.5, 1.0, -0.2]])
    before = x.clone()
    SparsemaxFunction.apply(x, -1)
    change = (x - before).abs().max().item()
    return change > 0, [f"forward: `input -= max_val`; x = {before.tolist()} is {x.tolist()} after the call"]


@evidence("tabnet_squeeze")
def _tabnet_squeeze() -> tuple[bool, list[str]]:
    from pytorch_tabnet.sparsemax import SparsemaxFunction

    lines = [
        "backward: supp_size.squeeze() without a dim also drops a size-1 loop dimension; "
        "gradcheck through a clone (so that the mutation above does not hide it):"
    ]
    torch.manual_seed(0)
    fails = []
    for shape in [(3, 1, 4), (3, 4), (4, 1, 1, 3)]:
        z = torch.randn(shape, dtype=F64, requires_grad=True)
        fail = error_of(
            lambda: torch.autograd.gradcheck(lambda a: SparsemaxFunction.apply(a.clone(), -1), (z,))
        )
        fails.append(fail is not None)
        lines.append(f"shape {shape}, dim -1: {fail or 'passes'}")
    return fails == [True, False, True], lines


# -- snntorch -------------------------------------------------------------------------------------------


@evidence("snntorch_dtype")
def _snn_dtype() -> tuple[bool, list[str]]:
    import snntorch.surrogate as snn

    outs = {
        name: getattr(snn, name).apply(t([0.5, -0.5]), *args).dtype
        for name, args in [
            ("ATan", (2.0,)),
            ("Sigmoid", (25.0,)),
            ("FastSigmoid", (25.0,)),
            ("LeakySpikeOperator", (0.1,)),
            ("Heaviside", ()),
        ]
    }
    return all(d == torch.float32 for d in outs.values()), [
        "forward: out = (input_ > 0).float()",
        *(f"{k}.apply(float64 x): {v}" for k, v in outs.items()),
    ]


@evidence("snntorch_sigmoid_nan")
def _snn_sigmoid() -> tuple[bool, list[str]]:
    import snntorch.surrogate as snn

    x = t([-100.0, -40.0, -1.0, 40.0], requires_grad=True)
    (g,) = torch.autograd.grad(snn.Sigmoid.apply(x, 25.0).sum(), x)
    return bool(torch.isnan(g[:2]).all()), [
        "backward: grad * slope * exp(-slope x) / (exp(-slope x) + 1) ** 2: inf / inf below x = -28 "
        "at slope 25",
        f"x = {x.tolist()}, slope 25: gradient {g.tolist()} (the surrogate's: about 0, 0, 3.5e-10, 0)",
    ]


@evidence("snntorch_lso_count")
def _snn_lso() -> tuple[bool, list[str]]:
    import snntorch.surrogate as snn

    x = t([0.5, -0.5], requires_grad=True)
    crash = error_of(lambda: snn.LeakySpikeOperator.apply(x, 0.1).sum().backward())
    return crash is not None, [f"LeakySpikeOperator.apply(x, 0.1).sum().backward() raises {crash}"]


@evidence("snntorch_heaviside_second")
def _snn_heaviside() -> tuple[bool, list[str]]:
    import snntorch.surrogate as snn

    x = t([1.0, -1.0])
    h = hvp(lambda z: snn.Heaviside.apply(z), x, t([1.0, 1.0]))
    return bool(h[0] != 0), [
        "backward: grad_output * out, with out the Function's own saved output: a second derivative "
        "differentiates through the Function again",
        f"x = {x.tolist()}: second derivative by double backward {h.tolist()}; the surrogate relu's "
        "is [0, 0]",
    ]


# -- spikingjelly ---------------------------------------------------------------------------------------


@evidence("sj_fng_negative_zero")
def _sj_fng() -> tuple[bool, list[str]]:
    from spikingjelly.activation_based.surrogate import fake_numerical_gradient as fng

    x = t([-0.0, 0.0, 1e-3], requires_grad=True)  # a list: -0.0 == 0.0 as a dict key
    grads = torch.autograd.grad(fng.apply(x, 0.3).sum(), x)[0].tolist()
    h = hvp(lambda z: fng.apply(z, 0.3), t([0.0]), t([1.0]))
    return math.isinf(grads[0]) and math.isnan(h.item()), [
        "backward: clamp_max(((x >= 0) * 2 - 1) / x, alpha): at x = -0.0 that is 1 / -0.0 = -inf",
        f"gradient at x = -0.0, +0.0, 1e-3 (alpha 0.3): {grads}",
        f"second derivative at x = 0 by double backward: {h.item()} (clamp_max passes 0 times "
        "d(1/x)/dx = -inf); "
        "the surrogate alpha x is linear there: 0",
    ]


@evidence("sj_plr_threshold")
def _sj_plr() -> tuple[bool, list[str]]:
    from spikingjelly.activation_based.surrogate import PiecewiseLeakyReLU, piecewise_leaky_relu

    w, c = 1.0, 0.01
    x = t([w], requires_grad=True)
    g = torch.autograd.grad(piecewise_leaky_relu.apply(x, w, c).sum(), x)[0].item()
    prim = lambda z: PiecewiseLeakyReLU.primitive_function(z, w, c)  # noqa: E731
    left = ((prim(t([w])) - prim(t([w - 1e-7]))) / 1e-7).item()
    right = ((prim(t([w + 1e-7])) - prim(t([w]))) / 1e-7).item()
    return abs(g - right) < 1e-6 and abs(left - right) > 0.1, [
        f"at x = w = {w} the primitive's one-sided derivatives are {left:.6g} (left) and "
        f"{right:.6g} (right); "
        f"the op's gradient there is {g:.6g}: the right-hand one, a valid choice",
    ]


@evidence("bf16_surrogate")
def _bf16() -> tuple[bool, list[str]]:
    from spikingjelly.activation_based.surrogate import Sigmoid, SquarewaveFourierSeries, sigmoid
    from spikingjelly.activation_based.surrogate import squarewave_fourier_series as sq

    lines, same = [], True
    for what, op, prim, v in [
        (
            "sigmoid, alpha 4",
            lambda z: sigmoid.apply(z, 4.0),
            lambda z: Sigmoid.primitive_function(z, 4.0),
            1.5625,
        ),
        (
            "squarewave_fourier_series, n 2, T 8",
            lambda z: sq.apply(z, 2, 8.0),
            lambda z: SquarewaveFourierSeries.primitive_function(z, 2, 8.0),
            9984.0,
        ),
    ]:
        x = torch.tensor([v], dtype=torch.bfloat16, requires_grad=True)
        got = torch.autograd.grad(op(x).sum(), x)[0].item()
        own = torch.autograd.grad(prim(x).sum(), x)[0].item()
        x64 = x.detach().double().requires_grad_()
        exact = torch.autograd.grad(prim(x64).sum(), x64)[0].item()
        same &= got == own
        lines.append(
            f"{what} at x = {v} in bfloat16: the op's gradient {got:.6g}; torch's autograd of "
            f"upstream's primitive, also in bfloat16, {own:.6g}; in float64 {exact:.6g}"
        )
    return same, lines


# -- roma and the entmax support boundary: the ops are right ----------------------------------------------


@evidence("roma_first_order")
def _roma() -> tuple[bool, list[str]]:
    from roma.mappings import _ProcrustesManualDerivatives as P

    torch.manual_seed(0)
    m = torch.randn(2, 3, 3, dtype=F64, requires_grad=True)
    outs = P.apply(m, True, 0.0)
    needs = [o.requires_grad for o in outs]
    first = error_of(lambda: torch.autograd.gradcheck(lambda a: P.apply(a, True, 0.0)[:2], (m,)))
    second = error_of(lambda: torch.autograd.gradgradcheck(lambda a: P.apply(a, True, 0.0)[:2], (m,)))
    return needs == [True, True, False, False] and first is None, [
        f"outputs R, DS, US, V require grad: {needs} (US and V are mark_non_differentiable)",
        f"gradcheck of R and DS with respect to M, (2, 3, 3): {first or 'passes'}",
        f"gradgradcheck of the same: {second or 'passes'}",
    ]


@evidence("roma_batched")
def _roma_batched() -> tuple[bool, list[str]]:
    from roma.mappings import _ProcrustesManualDerivatives as P

    torch.manual_seed(0)
    m = torch.randn(2, 3, 3, dtype=F64, requires_grad=True)
    r, ds = P.apply(m, True, 0.0)[:2]
    gs = torch.randn(4, *r.shape, dtype=F64)
    batched = error_of(lambda: torch.autograd.grad(r, m, gs, retain_graph=True, is_grads_batched=True))
    loop = error_of(lambda: [torch.autograd.grad(r, m, g, retain_graph=True) for g in gs])
    return batched is not None and "einsum" in batched and loop is None, [
        f"backward of R with 4 batched grad_outputs (is_grads_batched): {batched}",
        f"the same 4 one by one: {loop or 'works'}",
    ]


@evidence("roma_degenerate")
def _roma_degenerate() -> tuple[bool, list[str]]:
    from roma.mappings import _ProcrustesManualDerivatives as P

    lines, nan_at = [], []
    for m0 in ([[[0.0]]], [[[0.5]]], [[[1.0, 1.0], [1.0, 1.0]]]):
        m = t(m0, requires_grad=True)
        r, ds = P.apply(m, True, 0.0)[:2]
        (g,) = torch.autograd.grad((r * 1.3).sum() + (ds * 0.7).sum(), m)
        nan_at.append(bool(g.isnan().any()))
        lines.append(
            f"M = {m0}: R = {r.tolist()}, DS = {ds.tolist()}; gradient of 1.3 R + 0.7 DS: {g.tolist()}"
        )
    return nan_at == [True, False, True], lines


@evidence("roma_singular_edge")
def _roma_singular_edge() -> tuple[bool, list[str]]:
    from roma.mappings import _ProcrustesManualDerivatives as P

    def edge(n: int, shuffled: bool) -> torch.Tensor:
        """n**3 values the way opzoo's old edge input laid them out (in order), or shuffled."""
        k = torch.arange(n**3, dtype=F64)
        values = -2 + 4 * (0.04 + 0.92 * ((k * 0.6180339887498949 + 0.137) % 1.0))
        if shuffled:
            values = values[torch.randperm(n**3, generator=torch.Generator().manual_seed(1))]
        return values.reshape(n, n, n)

    lines, spread = [], []
    for name, shuffled in (("in order (the old edge input)", False), ("shuffled (the new one)", True)):
        sv = torch.linalg.svdvals(edge(47, shuffled))
        small = int((sv < 1e-10).sum(-1).min())
        # roma's backward at (47, 47, 47) takes seconds; (8, 8, 8) has the same singular layout
        m = edge(8, shuffled).requires_grad_()
        r = P.apply(m, True, 0.0)[0]
        g = torch.linspace(-1, 1, 8**3, dtype=F64).reshape(8, 8, 8)
        strided = g.transpose(1, 2).contiguous().transpose(1, 2)  # the same values, other strides
        (a,) = torch.autograd.grad(r, m, g, retain_graph=True)
        (b,) = torch.autograd.grad(r, m, strided)
        rel = ((a - b).abs().max() / a.abs().max()).item()
        spread.append(rel)
        lines.append(
            f"(47, 47, 47) filled {name}: the matrices' smallest singular values "
            f"{sv[:, -1].min().item():.1e} to {sv[:, -1].max().item():.1e}, each matrix with at least "
            f"{small} of its 47 below 1e-10; at (8, 8, 8) (smallest at most "
            f"{torch.linalg.svdvals(m.detach())[:, -1].max().item():.1e}), roma's gradient "
            f"of R for one grad_output, contiguous vs transposed strides: they differ by {rel:.1e} of "
            f"the largest element"
        )
    return spread[0] > 1e-6 and spread[1] < 1e-12, lines


@evidence("support_boundary")
def _boundary() -> tuple[bool, list[str]]:
    from entmax.root_finding import NormmaxBisectFunction as N

    at = N.apply(t([0.0, 1.0]), 2.0, -1, 50).tolist()
    right = N.apply(t([1e-4, 1.0]), 2.0, -1, 50).tolist()
    z = t([0.3, 1.0, -0.4], requires_grad=True)
    away = error_of(lambda: torch.autograd.gradgradcheck(lambda a: N.apply(a, 2.0, -1, 50), (z,)))
    return at[0] == 0.0 and right[0] > 0 and away is None, [
        f"NormmaxBisectFunction at x = [0, 1], alpha 2: {at}; at [1e-4, 1]: "
        f"{[round(v, 6) for v in right]}: x0 = 0 is the edge of the support, where the first "
        "derivative jumps (no second derivative exists)",
        f"gradgradcheck away from the edge, x = {z.tolist()}: {away or 'passes'}",
    ]


@evidence("bisect_autograd")
def _bisect_autograd() -> tuple[bool, list[str]]:
    from entmax.root_finding import EntmaxBisectFunction, SparsemaxBisectFunction

    class Ctx:  # what forward(ctx, ...) is handed: it only saves
        def save_for_backward(self, *ts: torch.Tensor) -> None:
            self.saved_tensors = ts

    lines, ok = [], True
    for what, cls, x0, args in [
        ("EntmaxBisectFunction, alpha 1.5", EntmaxBisectFunction, [0.0, 0.0], (1.5, 0, 50, False)),
        ("SparsemaxBisectFunction", SparsemaxBisectFunction, [0.0, 0.2], (0, 50, False)),
    ]:
        x = t(x0, requires_grad=True)
        w = t([-1.5, 2.0])  # a grad_output
        backward = torch.autograd.grad((cls.apply(x, *args) * w).sum(), x)[0]
        leaf = x.detach().clone().requires_grad_()
        forward = torch.autograd.grad((cls.forward(Ctx(), leaf, *args) * w).sum(), leaf)[0]
        h = 1e-5
        central = torch.stack(
            [
                ((cls.apply(x.detach() + h * e, *args) - cls.apply(x.detach() - h * e, *args)) * w).sum()
                / (2 * h)
                for e in torch.eye(2, dtype=F64)
            ]
        )
        passes = error_of(lambda: torch.autograd.gradcheck(lambda a: cls.apply(a, *args), (x,)))
        ok &= (
            passes is None
            and bool(torch.allclose(backward, central, atol=1e-7))
            and not bool(torch.allclose(forward, central, atol=1e-3))
        )
        lines.append(
            f"{what} at x = {x0}, grad_output {w.tolist()}: the backward {_r(backward)}, central "
            f"differences {_r(central)}, autograd of the forward (the bisection) {_r(forward)}; "
            f"gradcheck {passes or 'passes'}"
        )
    lines.append(
        "the bisection's bounds follow max(X), so autograd of the forward differentiates tau as if it "
        "moved with max(X) alone; the backward gives the derivative of the solution (implicit), which "
        "central differences confirm"
    )
    return ok, lines


def _r(v: torch.Tensor) -> list[float]:
    return [round(float(e), 6) for e in v]


@evidence("batched_promotion")
def _batched_promotion() -> tuple[bool, list[str]]:
    import snntorch.surrogate as snn

    x = t(-4.0, requires_grad=True)
    gs = t([1.0, -0.5, 2.0]).float()  # snntorch's output is float32: so are its grad_outputs
    batched = torch.autograd.grad(snn.Sigmoid.apply(x, 25.0), x, gs, is_grads_batched=True)[0]
    loop = [torch.autograd.grad(snn.Sigmoid.apply(x, 25.0), x, g)[0].item() for g in gs]

    class Probe(torch.autograd.Function):  # the dtype backward computes in, per call
        seen: list[torch.dtype] = []

        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a.float()

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            Probe.seen.append((g * a).dtype)
            return g * a

    torch.autograd.grad(Probe.apply(x), x, gs, is_grads_batched=True)
    torch.autograd.grad(Probe.apply(x), x, gs[0])
    return bool(batched.isnan().all()) and all(math.isfinite(v) for v in loop) and Probe.seen == [
        torch.float32,
        torch.float64,
    ], [
        f"snntorch Sigmoid, slope 25, x = -4.0 (float64; output float32): backward with batched "
        f"grad_outputs {gs.tolist()} (is_grads_batched): {batched.tolist()}; one by one: {loop}",
        f"a 0-d float32 grad_output times a 0-d float64 saved input, inside backward: "
        f"{Probe.seen[0]} under is_grads_batched, {Probe.seen[1]} in a plain call, so exp(100) * g "
        "overflows float32 there (inf / inf = nan)",
    ]


# -- the ops' versions and forms --------------------------------------------------------------------------


def form_of(cls: type) -> str:
    """``classmethod``, ``setup_context`` or ``classic``: how the Function's forward is written."""
    if isinstance(inspect.getattr_static(cls, "forward"), classmethod):
        return "classmethod"
    if cls.setup_context is not torch.autograd.Function.setup_context:
        return "setup_context"
    return "classic"


def main() -> int:
    import real_world_evidence_inputs  # noqa: F401  (its reproductions register in EVIDENCE)
    import real_world_ops
    from _describe import declared

    ops = {}
    for name, entry in real_world_ops.OPS.items():
        cls = entry.op.target
        ops[name] = {
            "package": entry.package,
            "version": importlib.metadata.version(entry.package),
            "path": f"{cls.__module__}:{cls.__qualname__}",
            "form": form_of(cls),
            "declared": declared(entry.op.contract),
            "note": entry.note,
        }
    found = {}
    for key, fn in EVIDENCE.items():
        try:
            reproduced, lines = fn()
        except Exception:  # a reproduction that breaks is reported as such, not hidden
            reproduced, lines = (
                False,
                ["the reproduction itself raised:", *traceback.format_exc().splitlines()[-3:]],
            )
        found[key] = {"reproduced": bool(reproduced), "lines": lines}
    print(json.dumps({"ops": ops, "evidence": found, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
