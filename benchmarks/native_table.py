"""Torch-native ops as autograd Functions whose backward is torch's own: the declarations of the
torch-native record (benchmarks/native_ops.py, docs/native-ops.md).

Each op is made by :func:`native` from one line that calls the native op. The Function's forward is
that line. Its backward is ``torch.func.vjp`` of the same line at the saved inputs, applied to the
grad_outputs: the vector-Jacobian product torch's autograd computes for the native op (its
``derivatives.yaml`` formula), nothing written by hand. Asked for a second derivative, autograd
differentiates through that vjp, so second derivatives are torch's too. So a verdict on these ops is
a verdict on torch's derivatives (and on opzoo's checks): every op here must be green, except where
torch itself is wrong.

Every op is a module attribute, checked by its import path: ``opzoo check native_table:maximum``.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from opzoo import Declared, Dim, Index, Mask, Param, declare


def native(name: str, fn: Callable[..., Any], *, tensors: int, constants: tuple[int, ...] = ()) -> type:
    """A setup_context-form Function named ``name``: forward ``fn(*tensors, *params)`` (the first
    ``tensors`` arguments are tensors; those at the indices in ``constants`` are not differentiated),
    backward torch's vjp of ``fn`` at the saved inputs."""
    diff = tuple(i for i in range(tensors) if i not in constants)

    def forward(*args: Any) -> Any:
        return fn(*args)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs[:tensors])
        ctx.params = inputs[tensors:]

    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = ctx.saved_tensors

        def of_differentiable(*ds: torch.Tensor) -> Any:
            ts = list(saved)
            for i, d in zip(diff, ds):
                ts[i] = d
            return fn(*ts, *ctx.params)

        # torch's vjp of the native op at these inputs: under create_graph the saved tensors carry
        # their history, so autograd differentiates through it (torch's second derivatives).
        _, pull = torch.func.vjp(of_differentiable, *(saved[i] for i in diff))
        got = pull(grads[0] if len(grads) == 1 else grads)
        out: list[torch.Tensor | None] = [None] * tensors
        for i, g in zip(diff, got):
            out[i] = g
        return (*out, *([None] * len(ctx.params)))

    methods = {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
        "native": staticmethod(fn),  # the call itself, for the record's table
        "__module__": __name__,
        "__doc__": f"torch-native {name}: its backward is torch's vjp of the native op.",
    }
    return type(f"Native_{name}", (torch.autograd.Function,), methods)


def op(name: str, fn: Callable[..., Any], signature: str = "()->()", **fields: Any) -> Declared:
    """``native`` declared with ``signature`` and the other contract ``fields``; ``inputs`` keys
    are positions among the tensors (the forward takes ``*args``)."""
    n = len(signature.split("->")[0].split("),("))
    constants = tuple(fields.get("inputs", {}))
    return declare(native(name, fn, tensors=n, constants=constants), signature=signature, **fields)


POSITIVE = (0.0, math.inf)
BINARY = "(),()->()"

# -- ties: n-ary max/min, order statistics, clamp at a bound ------------------------------------------
maximum = op("maximum", torch.maximum, BINARY)
minimum = op("minimum", torch.minimum, BINARY)
fmax = op("fmax", torch.fmax, BINARY)
amax = op("amax", lambda x, dim: torch.amax(x, dim=dim), "(n)->()", params={"dim": Dim()}, min_sizes={"n": 1})
amin = op("amin", lambda x, dim: torch.amin(x, dim=dim), "(n)->()", params={"dim": Dim()}, min_sizes={"n": 1})
max_dim = op(
    "max_dim",
    lambda x, dim: torch.max(x, dim=dim).values,
    "(n)->()",
    params={"dim": Dim()},
    min_sizes={"n": 1},
)
max_all = op("max_all", torch.max, "(n,m)->()", loop_dims=0, min_sizes={"n": 1, "m": 1})
sort = op(
    "sort",
    lambda x, dim, descending: torch.sort(x, dim=dim, descending=descending).values,
    "(n)->(n)",
    params={"dim": Dim(), "descending": Param(False)},
)
#: the k of topk and kthvalue: 1 to 3 of at least 3 elements
K_OF_N = {"params": {"k": Param(1, 1, 3)}, "min_sizes": {"n": 3}}
topk = op(
    "topk",
    lambda x, k: torch.topk(x, k, dim=-1).values,
    "(n)->(k)",
    output_sizes={"k": lambda k: k},
    **K_OF_N,
)
kthvalue = op("kthvalue", lambda x, k: torch.kthvalue(x, k, dim=-1).values, "(n)->()", **K_OF_N)
median = op("median", lambda x: torch.median(x, dim=-1).values, "(n)->()", min_sizes={"n": 1})
clamp_scalar = op(
    "clamp_scalar",
    torch.clamp,
    params={"lo": Param(-0.5, -2.0, -0.1), "hi": Param(0.5, 0.1, 2.0)},
    kinks=lambda lo, hi: {lo: 1.0, hi: 1.0},  # torch passes the gradient at either bound
)
clamp_tensor = op("clamp_tensor", torch.clamp, "(),(),()->()")
relu = op("relu", torch.relu, kinks={0.0: 0.0})
abs = op("abs", torch.abs, kinks={0.0: 0.0})  # noqa: A001 - the op's name
where_gt = op("where_gt", lambda x, y: torch.where(x > y, x, y), BINARY)

# -- cones: where a non-elementwise op is not differentiable ------------------------------------------
vector_norm = op(
    "vector_norm",
    lambda x, ord: torch.linalg.vector_norm(x, ord=ord, dim=-1),
    "(n)->()",
    params={"ord": Param(2.0, choices=(1.0, 2.0, 3.0, math.inf))},
    min_sizes={"n": 1},  # the inf-norm of an empty dimension raises (no identity)
)
norm_fro = op("norm_fro", torch.norm, "(n,m)->()", loop_dims=0)
l1_dist = op("l1_dist", lambda x, y: (x - y).abs().sum(-1), "(n),(n)->()")
dist = op("dist", torch.dist, "(n,m),(n,m)->()", loop_dims=0, params={"p": Param(2.0, 1.0, 4.0)})
LOW = ("float64", "float32")  # torch's CPU kernel has no bfloat16
cdist = op("cdist", torch.cdist, "(m,d),(n,d)->(m,n)", dtypes=LOW)
pairwise_distance = op("pairwise_distance", F.pairwise_distance, "(n),(n)->()")
std = op("std", lambda x: torch.std(x, dim=-1), "(n)->()")

# -- jumps and domains --------------------------------------------------------------------------------
atan2 = op("atan2", torch.atan2, BINARY)
pow_scalar = op("pow_scalar", torch.pow, params={"e": Param(0.5, -3.0, 3.0)}, domain=POSITIVE)
pow_tensor = op("pow_tensor", torch.pow, BINARY)
xlogy = op("xlogy", torch.xlogy, BINARY)
log = op("log", torch.log, domain=POSITIVE)
sqrt = op("sqrt", torch.sqrt, domain=POSITIVE)
rsqrt = op("rsqrt", torch.rsqrt, domain=POSITIVE)
hypot = op("hypot", torch.hypot, BINARY)
celu = op(
    "celu",
    F.celu,
    params={"alpha": Param(1.0, 0.1, 3.0)},
    # the definition in torch's docs, in float64 throughout: max(0, x) + min(0, alpha (exp(x/alpha) - 1))
    reference=lambda x, alpha: torch.where(x > 0, x, alpha * torch.expm1(x / alpha)),
)

# -- reductions and scans -----------------------------------------------------------------------------
sum = op("sum", lambda x, dim: x.sum(dim), "(n)->()", params={"dim": Dim()})  # noqa: A001
mean = op("mean", lambda x, dim: x.mean(dim), "(n)->()", params={"dim": Dim()})
var = op(
    "var",
    lambda x, correction: torch.var(x, dim=-1, correction=correction),
    "(n)->()",
    params={"correction": Param(1, 0, 1)},
)
var_one = op("var_one", lambda x: torch.var(x, dim=-1), "(1)->()")  # nan by definition: n - 1 = 0
logsumexp = op("logsumexp", torch.logsumexp, "(n)->()", params={"dim": Dim()})
prod = op("prod", torch.prod, "(n)->()", params={"dim": Dim()})
cumprod = op("cumprod", torch.cumprod, "(n)->(n)", params={"dim": Dim()})
cumsum = op("cumsum", torch.cumsum, "(n)->(n)", params={"dim": Dim()})
logcumsumexp = op("logcumsumexp", torch.logcumsumexp, "(n)->(n)", params={"dim": Dim()})
softmax = op("softmax", torch.softmax, "(n)->(n)", params={"dim": Dim()})
log_softmax = op("log_softmax", torch.log_softmax, "(n)->(n)", params={"dim": Dim()})

# -- n-ary arithmetic ---------------------------------------------------------------------------------
mul = op("mul", torch.mul, BINARY)
div = op("div", torch.div, BINARY)
addcmul = op(
    "addcmul",
    lambda a, b, c, value: torch.addcmul(a, b, c, value=value),
    "(),(),()->()",
    params={"value": Param(0.5, -2.0, 2.0)},
)
lerp = op("lerp", torch.lerp, "(),(),()->()")
where_mask = op("where_mask", lambda x, y, m: torch.where(m, x, y), "(),(),()->()", inputs={2: Mask()})
matmul = op("matmul", torch.matmul, "(m,k),(k,n)->(m,n)")

# -- losses: integer targets and others ---------------------------------------------------------------
cross_entropy = op(
    "cross_entropy",
    lambda x, t, label_smoothing: F.cross_entropy(x, t, reduction="none", label_smoothing=label_smoothing),
    "(n,c),(n)->(n)",
    loop_dims=0,
    inputs={1: Index(high="c")},
    params={"label_smoothing": Param(0.0, 0.0, 0.5)},
)
nll_loss = op(
    "nll_loss",
    lambda x, t: F.nll_loss(x, t, reduction="none"),
    "(n,c),(n)->(n)",
    loop_dims=0,
    inputs={1: Index(high="c")},
)
multi_margin_loss = op(
    "multi_margin_loss",
    lambda x, t, p, margin: F.multi_margin_loss(x, t, p=p, margin=margin, reduction="none"),
    "(n,c),(n)->(n)",
    loop_dims=0,
    inputs={1: Index(high="c")},
    params={"p": Param(1, choices=(1, 2)), "margin": Param(1.0, 0.5, 2.0)},
    dtypes=LOW,
)
mse_loss = op("mse_loss", lambda x, y: F.mse_loss(x, y, reduction="none"), BINARY)
huber_loss = op(
    "huber_loss",
    lambda x, y, delta: F.huber_loss(x, y, reduction="none", delta=delta),
    BINARY,
    params={"delta": Param(1.0, 0.1, 3.0)},
)
bce_with_logits = op(
    "bce_with_logits",
    lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"),
    "(n),(n)->(n)",
    loop_dims=0,  # "Target size must be the same as input size": it does not broadcast
)

# -- normalisations -----------------------------------------------------------------------------------
layer_norm = op(
    "layer_norm", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b), "(m,n),(n),(n)->(m,n)", loop_dims=0
)
group_norm = op(
    "group_norm",
    F.group_norm,
    "(b,4,l)->(b,4,l)",  # four channels, so that every group count divides them
    loop_dims=0,
    params={"num_groups": Param(2, choices=(1, 2, 4))},
    min_sizes={"l": 2},  # "Expected more than 1 value per channel": four groups of one value are refused
)
normalize = op(
    "normalize",
    lambda x, p: F.normalize(x, p=p, dim=-1),
    "(n)->(n)",
    params={"p": Param(2.0, choices=(1.0, 2.0, 3.0))},
)
rms_norm = op("rms_norm", lambda x, w: F.rms_norm(x, x.shape[-1:], w), "(m,n),(n)->(m,n)", loop_dims=0)

#: Every op of the record, by name, with the class of points where it is not smooth (or why it is
#: here), for the doc.
OPS: dict[str, tuple[Declared, str]] = {
    "maximum": (maximum, "tie x = y: torch splits the gradient in halves"),
    "minimum": (minimum, "tie x = y"),
    "fmax": (fmax, "tie x = y"),
    "amax": (amax, "ties among the maxima: torch spreads the gradient evenly"),
    "amin": (amin, "ties among the minima"),
    "max_dim": (max_dim, "ties: torch gives the gradient to one index"),
    "max_all": (max_all, "ties: torch spreads the gradient evenly"),
    "sort": (sort, "ties: any split among equal values"),
    "topk": (topk, "ties at the k-th value; an output size from a param"),
    "kthvalue": (kthvalue, "ties at the k-th value"),
    "median": (median, "ties; the lower median"),
    "clamp_scalar": (clamp_scalar, "kinks at the bounds (declared: torch passes the gradient there)"),
    "clamp_tensor": (clamp_tensor, "ties x = lo, x = hi; bounds that broadcast"),
    "relu": (relu, "kink at 0 (declared: torch gives 0)"),
    "abs": (abs, "kink at 0 (declared: torch gives 0)"),
    "where_gt": (where_gt, "tie x = y (all to y)"),
    "vector_norm": (vector_norm, "cone at 0; faces of the 1- and inf-norms"),
    "norm_fro": (norm_fro, "cone at 0"),
    "l1_dist": (l1_dist, "kinks where x_i = y_i"),
    "dist": (dist, "cone at x = y"),
    "cdist": (cdist, "cone where two rows coincide; no second derivative in torch"),
    "pairwise_distance": (pairwise_distance, "near-cone at x = y (eps = 1e-6)"),
    "std": (std, "cone at a constant input; nan for one element"),
    "atan2": (atan2, "the origin; the branch cut"),
    "pow_scalar": (pow_scalar, "domain x > 0"),
    "pow_tensor": (pow_tensor, "nan for x < 0 and a fractional y; x = 0"),
    "xlogy": (xlogy, "y <= 0: not finite or nan"),
    "log": (log, "domain x > 0"),
    "sqrt": (sqrt, "domain x > 0"),
    "rsqrt": (rsqrt, "domain x > 0"),
    "hypot": (hypot, "cone at the origin"),
    "celu": (celu, "smooth; a reference in float64 (torch's backward rounds 1/alpha to float32)"),
    "sum": (sum, "a reduction"),
    "mean": (mean, "nan over an empty dimension"),
    "var": (var, "nan for one element with correction 1"),
    "var_one": (var_one, "nan by definition"),
    "logsumexp": (logsumexp, "a reduction"),
    "prod": (prod, "zeros; products that underflow"),
    "cumprod": (cumprod, "zeros; products that underflow"),
    "cumsum": (cumsum, "a scan"),
    "logcumsumexp": (logcumsumexp, "a scan"),
    "softmax": (softmax, "shape-preserving over a dim"),
    "log_softmax": (log_softmax, "shape-preserving over a dim"),
    "mul": (mul, "n-ary"),
    "div": (div, "a pole at y = 0"),
    "addcmul": (addcmul, "ternary"),
    "lerp": (lerp, "ternary"),
    "where_mask": (where_mask, "a bool mask"),
    "matmul": (matmul, "n-ary with core dimensions"),
    "cross_entropy": (cross_entropy, "an integer target"),
    "nll_loss": (nll_loss, "an integer target"),
    "multi_margin_loss": (multi_margin_loss, "an integer target; hinges; no second derivative in torch"),
    "mse_loss": (mse_loss, "a loss"),
    "huber_loss": (huber_loss, "second-derivative kink at |x - y| = delta"),
    "bce_with_logits": (bce_with_logits, "a loss"),
    "layer_norm": (layer_norm, "near-cone at a constant row"),
    "group_norm": (group_norm, "near-cone at a constant group"),
    "normalize": (normalize, "cone at 0"),
    "rms_norm": (rms_norm, "near-cone at 0"),
}
