#!/usr/bin/env python3
"""The torch-native record: ops whose backward is torch's own autograd of a native op (ties, cones,
domains, reductions, n-ary ops, integer-target losses, normalisations), checked with ``opzoo check
--profile ci``; the torch defects among them shown with plain torch. Writes docs/native-ops.md.

    .venv/bin/python benchmarks/native_ops.py [--jobs N] [--out PATH]

The ops are declared in benchmarks/native_table.py, each a Function whose forward calls the native op
and whose backward is ``torch.func.vjp`` of that call: a verdict on them is a verdict on torch's
derivatives and on opzoo's checks. Every op must be green except where torch itself is wrong. Not
run by CI (it takes many minutes); uses the interpreter it runs under, which must have opzoo and torch.

Each failing check must be explained by one of CAUSES; one that no cause explains is printed and
listed in the doc as unexplained, and the exit status is then 1.
"""

from __future__ import annotations

import argparse
import inspect
import math
import re
import sys
from datetime import date
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _record import Cause, Verdicts, check, provenance, skipped  # noqa: E402

TORCH_DEFECT = "torch defect"
OPZOO = "opzoo false alarm"


TIES = (
    "maximum",
    "minimum",
    "fmax",
    "amax",
    "amin",
    "max_dim",
    "max_all",
    "sort",
    "topk",
    "kthvalue",
    "median",
    "clamp_tensor",
    "where_gt",
)
CONES = (
    "vector_norm",
    "norm_fro",
    "l1_dist",
    "dist",
    "cdist",
    "pairwise_distance",
    "std",
    "hypot",
    "normalize",
    "rms_norm",
    "layer_norm",
    "group_norm",
)
UNDEFINED = (
    "atan2",
    "pow_tensor",
    "xlogy",
    "div",
    "hypot",
    "std",
    "mean",
    "var",
    "var_one",
    "log",
    "sqrt",
    "rsqrt",
)
DIM_OPS = (
    "amax",
    "amin",
    "max_dim",
    "sort",
    "sum",
    "mean",
    "logsumexp",
    "prod",
    "cumprod",
    "cumsum",
    "logcumsumexp",
    "softmax",
    "log_softmax",
)

# The first cause that explains a failure is its cause: torch's defects first, then opzoo's false alarms.
CAUSES = (
    Cause(
        "celu-float32-alpha",
        TORCH_DEFECT,
        "celu's backward computes with `1.0 / alpha.toFloat()` (derivatives.yaml: `elu_backward(grad, "
        "alpha, 1, 1.0/alpha.toFloat(), false, self)`): for float64 input the gradient is off by a "
        "float32-sized relative error that grows with |x / alpha| (exact at alpha = 1). At x = 0 its "
        "gradient is then 1 - 1.5e-8 (alpha 0.1), where it is exactly 1 for x > 0: the first derivative "
        "jumps at 0, and the second derivative there (0) is between no one-sided derivatives.",
        ("celu",),
        ("reference", "autograd", "double_backward"),
        "",
        ("celu",),
        "none found (pytorch/pytorch#158314 shows celu's float64 forward losing precision on CPU)",
    ),
    Cause(
        "prod-tiny",
        TORCH_DEFECT,
        "prod and cumprod at tiny inputs: `prod_backward` divides by the input (`grad * result / input` "
        "where no input is exactly 0), so where a product or a square underflows its second derivatives "
        "are garbage (1e212, nan) or 0 where the exact ones are not, and its first derivatives 0. "
        "cumprod's second derivative goes wrong long before anything underflows: at inputs of 1e-40 it "
        "is 6e23 where it is -1.4, and at 1e-86 it is 0.",
        ("prod", "cumprod"),
        ("gradient", "double_backward", "reference"),
        "",
        ("prod_tiny",),
        "none found for tiny inputs (pytorch/pytorch#106789, prod's double backward with two zeros, "
        "is fixed)",
        example=r"e-([2-9]\d|[1-3]\d\d)",  # a counterexample with an input below 1e-19
    ),
    Cause(
        "clamp-broadcast",
        TORCH_DEFECT,
        "clamp with tensor bounds: when x and one bound have the smaller shape and the other bound the "
        "larger, the forward broadcasts but the backward raises `output with shape [...] doesn't match "
        "the broadcast shape [...]`.",
        ("clamp_tensor",),
        ("*",),
        "match the broadcast shape|doesn't match",
        ("clamp_broadcast",),
        "none found for the eager backward (pytorch/functorch#865, the same message under vmap, is open)",
    ),
    Cause(
        "clamp-equal-bounds",
        TORCH_DEFECT,
        "clamp with tensor bounds where min = max and x lies outside: the output is the bound, and "
        "moving x, min and max together moves it as much (slope 1 along (1, 1, 1)), so a generalised "
        "gradient's parts add up to 1 (a convex combination of (0, 1, 0) and (0, 0, 1)); torch's "
        "backward gives (0, 0, 0): `grad_min` needs min < max, `grad_max` needs x > max or max < min.",
        ("clamp_tensor",),
        ("gradient",),
        "no valid subgradient",
        ("clamp_equal_bounds",),
    ),
    Cause(
        "pow-exponent-zero",
        TORCH_DEFECT,
        "pow(x, y) at y = 0: `pow_backward_self` returns `where(exponent == 0, 0, grad * y * x^(y-1))`, "
        "so the gradient in x is 0 there but no longer depends on y: its derivative in y, the mixed "
        "second derivative d2/dx dy x^y = x^(y-1) (1 + y log x) = 1/x at y = 0, comes back 0.",
        ("pow_tensor",),
        ("double_backward",),
        "with respect to input 1",
        ("pow_exponent_zero",),
        "none found (pytorch/pytorch#95180, pow's second derivative at base 0, is closed)",
    ),
    Cause(
        "hypot-origin",
        TORCH_DEFECT,
        "hypot at the origin: its backward, `grad * x / result`, is 0 / 0 = nan. The origin is a cone "
        "(no derivative); any vector of the unit disc is a valid generalised gradient, and torch's own "
        "vector_norm gives 0 there (the fix of pytorch/pytorch#2421); nan is none.",
        ("hypot",),
        ("extremes", "gradient"),
        "nan",
        ("hypot_origin",),
        "none found for hypot; pytorch/pytorch#2421 (closed) was the same for norm",
    ),
    Cause(
        "div-square-underflows",
        TORCH_DEFECT,
        "div(x, y) where y^2 underflows (|y| below about 1e-154): torch's gradient in y is "
        "`-grad * ((x / y) / y)`; `(x / y) / y` overflows to inf, and where that element's grad_output is "
        "0 the product is 0 * inf = nan. The exact value there is 0 (with a broadcast x, an output element "
        "that does not depend on that y asks for exactly this), and `-((grad * x) / y) / y` gives it. "
        "torch's gradcheck fails the same input. A corner of float64 (the derivative itself, -x/y^2, is "
        "not representable there), but a nan for a zero grad_output is torch's order of operations.",
        ("div",),
        ("gradient",),
        "analytical nan",
        ("div_square_underflows",),
        "none found",
    ),
    Cause(
        "norm-zero-component",
        TORCH_DEFECT,
        "dist (a p-norm) with 2 < p < 3 where one component of x - y is 0 and the norm is not: the norm "
        "is twice differentiable there (|t|^p is, for p > 2) and its second derivative in that component "
        "is 0, but torch's backward computes `x * |x|^(p-2)`, whose derivative meets |x|^(p-3) = inf at "
        "0 times a zero factor: nan. From p = 3 on it is 0. torch's gradgradcheck fails the same input.",
        ("dist",),
        ("double_backward",),
        "analytical nan",
        ("norm_zero_component",),
        "none found",
    ),
    Cause(
        "normalize-zero-row",
        TORCH_DEFECT,
        "F.normalize at a row that is 0: the output is x / max(||x||, eps), which near 0 is x / eps, "
        "linear, so its second derivative is 0; but the norm's own second derivative at 0 is nan (the "
        "apex of its cone), and clamp_min's zero gradient to the norm does not stop it: 0 * nan = nan. "
        "torch's gradgradcheck fails the same input.",
        ("normalize",),
        ("double_backward",),
        "nan",
        ("normalize_zero_row",),
        "none found",
    ),
    Cause(
        "not-differentiable-there",
        OPZOO,
        "The counterexample sits where the op has no derivative: a tie (two equal values of a max, a "
        "sort, a clamp's bound), the apex of a cone (a norm at 0, |x - y| at x = y, a std of equal "
        "values), an origin or an input where the op is not finite nearby (atan2, pow, xlogy, div at "
        "0), or a smooth corner far narrower than the finite-difference step (rms_norm's eps). Finite "
        "differences straddle it and measure neither side; torch's value there is a valid generalised "
        "gradient (issue 20, point 6: kinks found for any op, on the 'kinks' branch).",
        TIES + CONES + UNDEFINED,
        ("gradient", "double_backward"),
        "Jacobian mismatch|nan",
        fixed=(
            "the kinks merge classifies each output element from one-sided differences and holds the "
            "backward to the valid generalised gradients there "
            "(opzoo/testing/checks/_onesided.py, _kinks.py); "
            "the correct ops of tests/correct_ops.py AT_KINKS (ties, cones, jumps, points not finite "
            "nearby) were red there and are green."
        ),
    ),
    Cause(
        "nan-compared-bitwise",
        OPZOO,
        "A `nan` that is the right value (the variance of one element, 0/0, a mean over nothing) "
        "compared as unequal to itself, or widening the tolerance of the other elements (issue 20, "
        "point 8: nan-aware comparisons, on the 'kinks' branch).",
        UNDEFINED + ("var_one",),
        ("hygiene", "autograd", "subsets", "library"),
        "nan|twice|bit for bit|relative 0",
        fixed=(
            "the kinks merge compares nan as equal to nan and keeps a nan from widening the other "
            "elements' tolerance; `variance` of one element in tests/correct_ops.py was red and is green."
        ),
    ),
    Cause(
        "bridge-ignores-dim",
        OPZOO,
        "The torch.library bridge's fake kernel computes output shapes from the signature with the "
        "core dimensions last: it ignores a Dim parameter (the op's core dimension is elsewhere) and "
        "`output_sizes=` (topk's k), so opcheck's fake-tensor test sees other shapes or strides than "
        "the real kernel's. The op is right; the bridge's fake kernel is not.",
        DIM_OPS + ("topk",),
        ("library",),
        "MetadataMismatchError|KeyError",
        fixed=(
            "the library bridge's fake kernel puts a Dim op's core dimension where dim says and computes "
            "declared output sizes (opzoo/library.py, on main since ed79e1e)."
        ),
    ),
    Cause(
        "mask-on-scalar-cores",
        OPZOO,
        "opzoo's edge inputs give a `Mask` input float values when the signature names no core "
        "dimension (`(),(),()->()`): `edge_inputs` fills the non-differentiated inputs only when it "
        "has dimension sizes (opzoo/testing/strategies.py). torch.where rightly refuses a float "
        "condition.",
        ("where_mask",),
        ("accepts",),
        "boolean",
        fixed=(
            "edge inputs give a Mask or Index input values of its kind whether or not a named dimension "
            "bounds it (opzoo/testing/strategies.py), and the library check's AOT candidate shifts "
            "floating tensors only; `MaskedScale` in tests/upstream_ops.py was red in `accepts` and "
            "`library` and is green."
        ),
    ),
    Cause(
        "overflowing-derivative",
        OPZOO,
        "The true derivative overflows float64 (d(x/y)/dy = -x/y^2 at y = 7e-188 is about -1e374), so "
        "torch's `inf` is the right rounding; `extremes` asks for a finite gradient wherever the forward "
        "is finite.",
        ("div",),
        ("extremes",),
        "inf",
        fixed=(
            "the kinks merge excuses a derivative that is not finite where the forward is not finite "
            "within a small step (opzoo/testing/checks/_oracles.py `extremes`)."
        ),
    ),
)


# -- evidence: plain torch, no opzoo ----------------------------------------------------------------------


def _celu() -> tuple[bool, list[str]]:
    import torch
    import torch.nn.functional as F

    x = torch.tensor([-0.5, -3.0, -9.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(F.celu(x, 0.3).sum(), x)
    exact = torch.exp(x.detach() / 0.3)  # d/dx alpha (exp(x / alpha) - 1), x < 0
    rel = ((g - exact) / exact).abs().tolist()
    x1 = torch.tensor([-3.0], dtype=torch.float64, requires_grad=True)
    (g1,) = torch.autograd.grad(F.celu(x1, 1.0).sum(), x1)
    rel1 = abs(g1.item() / math.exp(-3.0) - 1)
    return rel[1] > 1e-8 and rel1 < 1e-14, [
        "x = [-0.5, -3, -9], alpha 0.3, float64: relative error of autograd's gradient against "
        f"exp(x / alpha): {', '.join(f'{r:.2g}' for r in rel)} (float64's epsilon is 2.2e-16)",
        f"the same at alpha = 1, x = -3: {rel1:.2g}",
    ]


def _prod() -> tuple[bool, list[str]]:
    import torch

    def second(fn: Callable[..., Any], values: list[float], g: float, i: int) -> list[float]:
        x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
        out = fn(x)
        (first,) = torch.autograd.grad(out, x, torch.full_like(out, g), create_graph=True)
        return torch.autograd.grad(first[i], x)[0].tolist()

    one = second(lambda x: torch.prod(x, 0), [1.6423694446639928e-228], -1.49, 0)
    pair = second(lambda x: torch.prod(x), [1e-170, 1e-170, 3.0, 4.0], 1.0, 0)
    cum = second(lambda x: torch.cumprod(x, 0), [2.225073858507203e-309] * 2, 1.0, 0)
    x = torch.tensor([1e-170, 1e-170, 3.0, 4.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(torch.prod(x), x)
    return one[0] > 1e100 and pair[1] == 0.0 and math.isnan(cum[0]), [
        f"prod of one element x = 1.64e-228, grad_output -1.49: d2/dx2 = {one[0]:.4g}; exact 0 (prod(x) = x)",
        f"prod of [1e-170, 1e-170, 3, 4] (1.2e-339 underflows to 0): d/dx = {g.tolist()}, exact "
        f"[1.2e-169, 1.2e-169, 0, 0]; d2/dx0 dx = {pair}, exact [0, 12, 4e-170, 3e-170]",
        f"sum of cumprod of [2.2e-309, 2.2e-309]: d2/dx0 dx = {cum}; exact [0, 1]",
    ]


def _clamp() -> tuple[bool, list[str]]:
    import torch

    lines, raised = [], []
    for xs, ls, hs in [
        ((1,), (1,), (3,)),
        ((1,), (3,), (1,)),
        ((2, 1), (2, 1), (1, 4)),
        ((3, 1), (1, 4), (1, 4)),
    ]:
        x = torch.rand(xs, dtype=torch.float64, requires_grad=True)
        lo = (0.3 * torch.rand(ls, dtype=torch.float64)).requires_grad_()
        hi = (0.7 + 0.3 * torch.rand(hs, dtype=torch.float64)).requires_grad_()
        y = torch.clamp(x, lo, hi)
        try:
            torch.autograd.grad(y.sum(), (x, lo, hi))
            outcome = "works"
        except RuntimeError as exc:
            outcome = "raises " + " ".join(str(exc).split())
        raised.append(outcome != "works")
        lines.append(f"x {xs}, min {ls}, max {hs}: forward {tuple(y.shape)}, backward {outcome}")
    return raised == [True, True, True, False], lines


def _clamp_equal() -> tuple[bool, list[str]]:
    import torch

    x, lo, hi = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (-1.0, 0.0, 0.0))
    grads = [g.item() for g in torch.autograd.grad(torch.clamp(x, lo, hi), (x, lo, hi))]

    def along(t: float) -> float:
        return torch.clamp(x.detach() + t, lo.detach() + t, hi.detach() + t).item()

    slopes = [(along(1e-3) - along(0.0)) / 1e-3, (along(0.0) - along(-1e-3)) / 1e-3]
    return grads == [0.0, 0.0, 0.0] and all(abs(v - 1) < 1e-9 for v in slopes), [
        f"torch.clamp(x, min, max) at x = -1, min = max = 0: gradients (x, min, max) = {grads}",
        f"moving all three by t = +-1e-3: slopes {slopes[0]:.6g} (right) and {slopes[1]:.6g} (left), "
        "so the parts of any valid generalised gradient add up to 1",
    ]


def _pow_zero() -> tuple[bool, list[str]]:
    import torch

    lines, got = [], []
    for y0 in (0.0, 1e-9):
        x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        y = torch.tensor(y0, dtype=torch.float64, requires_grad=True)
        (gx,) = torch.autograd.grad(torch.pow(x, y), x, create_graph=True)
        (gxy,) = torch.autograd.grad(gx, y)
        got.append(gxy.item())
        lines.append(
            f"x = 2, y = {y0:g}: d/dx x^y = {gx.item():.6g}, d2/dx dy = {gxy.item():.9g} (exact 0.5)"
        )
    return got[0] == 0.0 and abs(got[1] - 0.5) < 1e-6, lines


def _hypot() -> tuple[bool, list[str]]:
    import torch

    a = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    (h,) = torch.autograd.grad(torch.hypot(a[0], a[1]), a)
    (n,) = torch.autograd.grad(torch.linalg.vector_norm(a), a)
    return bool(h.isnan().all()) and bool((n == 0).all()), [
        f"gradient of hypot(x, y) at (0, 0): {h.tolist()}; of vector_norm([x, y]) there: {n.tolist()}",
    ]


def _div_tiny() -> tuple[bool, list[str]]:
    import torch

    x = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    lines, nan = [], []
    for y0 in (1e-150, 1.5e-214):
        y = torch.tensor([y0, 1.0], dtype=torch.float64, requires_grad=True)
        (gy,) = torch.autograd.grad(torch.div(x, y), y, torch.tensor([0.0, 1.0], dtype=torch.float64))
        nan.append(bool(gy[0].isnan()))
        lines.append(f"div(1, [{y0:g}, 1]), grad_output [0, 1]: gradient in y {gy.tolist()} (exact [0, -1])")
    try:
        torch.autograd.gradcheck(torch.div, (x, y))
        peer = "passes"
    except RuntimeError as e:  # GradcheckError
        analytical = " ".join(str(e).partition("analytical:")[2].split())
        peer = f"fails, its analytical Jacobian in y {analytical}"
    lines.append(f"gradcheck at y = [1.5e-214, 1]: {peer} (the nan is the element in y[0] of output 1)")
    return nan == [False, True] and "nan" in peer, lines


def _norm_zero_component() -> tuple[bool, list[str]]:
    import torch

    a = torch.tensor([[0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    lines, rows = [], []
    for p in (2.875, 3.0):
        (g,) = torch.autograd.grad(torch.dist(a, b, p), a, create_graph=True)
        (h,) = torch.autograd.grad(g[0, 0], a)
        rows.append(h[0].tolist())
        lines.append(
            f"dist([[0, 0]], [[0, 1]], p={p}): d/dx0 of its gradient in x0 {h[0].tolist()} (exact [0, 0])"
        )
    peer = torch.autograd.gradgradcheck(lambda a: torch.dist(a, b, 2.875), (a,), raise_exception=False)
    lines.append(f"gradgradcheck at p = 2.875: {peer}")
    return rows[0][0] != rows[0][0] and rows[1] == [0.0, 0.0] and not peer, lines


def _normalize_zero_row() -> tuple[bool, list[str]]:
    import torch
    import torch.nn.functional as F

    z = torch.tensor([[0.0], [1.0]], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(
        F.normalize(z, dim=-1), z, torch.ones(2, 1, dtype=torch.float64), create_graph=True
    )
    (h,) = torch.autograd.grad(g.sum(), z)
    peer = torch.autograd.gradgradcheck(lambda z: F.normalize(z, dim=-1), (z,), raise_exception=False)
    return bool(h[0].isnan().all()) and not peer, [
        f"normalize([[0], [1]], dim=-1): gradient {g.tolist()}, its derivative {h.tolist()} "
        f"(exact [[0], [0]]); gradgradcheck: {peer}"
    ]


def _cumprod_tiny() -> tuple[bool, list[str]]:
    import torch

    g = torch.tensor([-1.49, 2.01], dtype=torch.float64)
    u = torch.tensor([0.3, -0.7], dtype=torch.float64)
    lines, got = [], []
    for s in (1e-3, 1e-40, 6.18e-86):
        x = torch.full((2,), s, dtype=torch.float64, requires_grad=True)
        (first,) = torch.autograd.grad(torch.cumprod(x, 0), x, g, create_graph=True)
        (hu,) = torch.autograd.grad(first, x, u)
        got.append(hu[0].item())
        lines.append(
            f"cumprod of [{s:g}, {s:g}], grad_output {g.tolist()}: H u = {hu.tolist()} "
            "(exact [-1.407, 0.603])"
        )
    return abs(got[0] + 1.407) < 1e-9 and abs(got[1] + 1.407) > 1 and abs(got[2] + 1.407) > 1, lines


def _prod_all() -> tuple[bool, list[str]]:
    a, la = _prod()
    b, lb = _cumprod_tiny()
    return a and b, la + lb


def _celu_all() -> tuple[bool, list[str]]:
    import torch
    import torch.nn.functional as F

    ok, lines = _celu()
    firsts = []
    for v in (0.0, 1e-6):
        x = torch.tensor(v, dtype=torch.float64, requires_grad=True)
        firsts.append(torch.autograd.grad(F.celu(x, 0.1), x)[0].item())
    lines.append(
        f"its gradient at x = 0 (alpha 0.1): {firsts[0]!r}; at x = 1e-6: {firsts[1]!r} (exact 1 at both)"
    )
    return ok and firsts[0] != 1.0 and firsts[1] == 1.0, lines


EVIDENCE: dict[str, Callable[[], tuple[bool, list[str]]]] = {
    "celu": _celu_all,
    "prod_tiny": _prod_all,
    "clamp_broadcast": _clamp,
    "clamp_equal_bounds": _clamp_equal,
    "pow_exponent_zero": _pow_zero,
    "hypot_origin": _hypot,
    "div_square_underflows": _div_tiny,
    "norm_zero_component": _norm_zero_component,
    "normalize_zero_row": _normalize_zero_row,
}


# -- the run ----------------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--jobs", "-j", type=int, default=2, help="opzoo check's worker processes (default 2)"
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=240,
        help="opzoo check's limit per check, seconds (default 240: dist's double_backward ran past 60 "
        "beside a test suite, and a slow check on a loaded machine read as a hung op)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "native-ops.md", help="the doc to write")
    parser.add_argument("--json", type=Path, help="also keep opzoo check's JSON here")
    args = parser.parse_args(argv)

    import native_table
    import torch

    paths = [f"native_table:{name}" for name in native_table.OPS]
    results, raw, seconds = check(sys.executable, paths, args.jobs, "--timeout", str(args.timeout))
    if args.json:
        args.json.write_text(raw)
    found = {key: dict(zip(("reproduced", "lines"), fn())) for key, fn in EVIDENCE.items()}
    doc, unexplained = render(native_table, results, found, seconds, args, torch.__version__)
    args.out.write_text(doc)
    print(f"wrote {args.out}", file=sys.stderr)
    for line in unexplained:
        print(f"UNEXPLAINED {line}", file=sys.stderr)
    return 1 if unexplained else 0


def call_of(fn: Any) -> str:
    """The native call an op makes: ``torch.maximum``, or the body of its lambda."""
    if getattr(fn, "__name__", "") != "<lambda>":
        module = getattr(fn, "__module__", "") or ""
        prefix = "F" if module.startswith("torch.nn.functional") else "torch"
        return f"{prefix}.{fn.__name__}"
    source = inspect.getsource(fn)
    start = source.index("lambda")
    depth, end = 0, len(source)
    for i in range(source.index(":", start), len(source)):  # from the body: its parameters hold commas
        ch = source[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                end = i
                break
            depth -= 1
        elif ch == "," and depth == 0:
            end = i
            break
    return " ".join(source[start:end].split())


def render(
    table: Any, results: list[dict], found: dict, seconds: float, args: argparse.Namespace, torch_version: str
) -> tuple[str, list[str]]:
    """The doc, and one line per failure no cause explains."""
    from _describe import declared

    verdicts = Verdicts(CAUSES, results)
    rows = [
        f"| `{name}` | `{call_of(decl.target.native)}` | {declared(decl.contract)} | {why} | "
        f"{verdicts.cell(name)} |"
        for name, (decl, why) in table.OPS.items()
    ]
    seen, unexplained = verdicts.seen, verdicts.unexplained
    reds = sorted(verdicts.reds())
    defects = sorted({n for c in CAUSES if c.kind == TORCH_DEFECT for n, _ in seen.get(c.key, [])})
    out = [
        "# Torch's own derivatives, checked",
        "",
        "Native torch ops whose backward is torch's own autograd, checked with `opzoo check --profile ci`. "
        "They are correct by construction except where torch itself is wrong, so a red verdict here is "
        "either a torch defect, shown below with plain torch, or a false alarm of opzoo's.",
        "",
        "## What makes the backward torch's",
        "",
        "Each op is made by `native()` in [benchmarks/native_table.py](../benchmarks/native_table.py) from "
        "one line that calls the native op: a `setup_context`-form Function whose forward is that line and "
        "whose backward is `torch.func.vjp` of the same line at the saved inputs, applied to the "
        "grad_outputs. That is the vector-Jacobian product torch's autograd computes for the native op "
        "(its `derivatives.yaml` formula): nothing is written by hand, and no value is recomputed "
        "differently. The saved inputs keep their history, so a second derivative differentiates "
        "through that vjp: torch's second derivatives too. `torch.func.vjp` rather than "
        "`torch.autograd.grad` inside the backward, because Dynamo traces the former (`compile` then "
        "checks torch's op, not a graph break of the wrapper's making). The Functions define no `jvp` "
        "and no vmap rule, so `forward_mode` checks that forward mode refuses, and `autograd` (the "
        "backward against autograd of the forward) holds by construction: it checks the wrapper.",
        "",
        f"Generated by `.venv/bin/python benchmarks/native_ops.py` on {date.today().isoformat()}, at "
        f"{provenance()}, torch {torch_version}, CPU, {args.jobs} worker(s), `--timeout {args.timeout}` per "
        f"check: the check took {seconds:.0f} s.",
        "",
        f"**{len(table.OPS)} ops: {len(table.OPS) - len(reds)} green, {len(reds)} red** "
        f"({len(defects)} for a torch defect: {', '.join(defects) or 'none'}"
        + (f"; {len(unexplained)} unexplained failing check(s)" if unexplained else "")
        + ").",
        "",
        "| op | native call | declared | not smooth where | verdict |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
        "## Torch defects",
        "",
        "Each is shown with plain torch; a defect that the `ci` profile's draws did not reach is shown all "
        "the same (the draws are in a box of [-6, 6] at three scales; prod's needs products below 1e-308).",
        "",
    ]
    for cause in CAUSES:
        not_seen = "Not reached by this run's `ci` draws: no check failed for it."
        out += verdicts.section(cause, found, not_seen, "Plain torch:")
    if unexplained:
        out += [
            "## Unexplained failures",
            "",
            "Failing checks of correct torch derivatives that no torch defect explains: false alarms of "
            "opzoo's until shown otherwise.",
            "",
            *(f"- {line}" for line in unexplained),
            "",
        ]
    out += skipped(results, lambda why: re.sub(r"op .[^ ]*. ", "the op ", why).replace("|", "/"))
    return "\n".join(out), unexplained


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
