"""Real autograd Functions from seventeen PyPI packages, declared for opzoo exactly as published: each
class is passed to ``opzoo.declare`` untouched, with no subclass and no wrapper.

This is the declarations module of benchmarks/real_world.py, the real-world record
(docs/real-world.md). It imports the upstream packages, so it runs only in the record's scratch venv
(the pinned versions are in ``real_world.PACKAGES``). Each op is a module attribute, and the record
checks it by its import path: ``opzoo check real_world_ops:entmax_sparsemax``.

A surrogate-gradient op (a spike, a straight-through estimator, gradient reversal) declares the
function whose derivative its backward computes: upstream's own ``primitive_function`` where
upstream ships one (spikingjelly), otherwise the primitive written here from upstream's docstring
formula, each with the docstring line it comes from.

What upstream documents about its inputs and its backward is declared as it says: the set an input
lives in (a symmetric matrix, a permutation and its inverse, positive values, a rotation), inputs that
are data and never differentiated (``grad=False``), same-shape inputs (``broadcast=False``), a backward
that is deliberately no derivative (``gradient="by design: ..."``), and a forward that draws
(``random=True``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import efficientnet_pytorch.utils as efficientnet
import entmax.activations as entmax_act
import entmax.losses as entmax_loss
import entmax.root_finding as entmax_root
import gpytorch.functions.rbf_covariance as gp_rbf
import gpytorch.kernels.kernel as gp_kernel
import gpytorch.variational.large_batch_variational_strategy as gp_large
import gpytorch.variational.natural_variational_distribution as gp_natural
import kornia.losses.focal as kornia_focal
import mambapy.pscan as mamba
import monai.visualize.gradient_based as monai_grad
import pypose.lietensor.operation as pypose_op
import pyro.contrib.oed.eig as pyro_eig
import pyro.ops.special as pyro_special
import pytorch_revgrad.functional as revgrad
import pytorch_tabnet.sparsemax as tabnet
import roma.mappings as roma
import sinabs.activation.quantize as sinabs_quant
import snntorch.surrogate as snn
import sparsemax.sparsemax as sparsemax_pkg
import spikingjelly.activation_based.quantize as sj_quant
import spikingjelly.activation_based.surrogate as sj
import torch
import torch.nn.functional as F
import torchdiffeq._impl.misc as torchdiffeq_misc
import transformers.models.reformer.modeling_reformer as reformer

from opzoo import (
    Declared,
    Dim,
    Drawn,
    Floats,
    Index,
    Mask,
    Orthogonal,
    Param,
    Permutation,
    Positive,
    Symmetric,
    declare,
)


@dataclass(frozen=True)
class Entry:
    """One op of the record: its package (a key of ``real_world.PACKAGES``), the declaration, and
    what the doc says about how it was declared beyond the contract itself."""

    package: str
    op: Declared
    note: str = ""


# -- entmax 1.3: classmethod forwards with a dim, optional k, flags; integer-target losses -------------

entmax_sparsemax = declare(
    entmax_act.SparsemaxFunction,
    signature="(n)->(n)",
    params={"dim": Dim(), "k": Param(None, 1, 4)},
    min_sizes={"n": 1},  # X.max(dim) of an empty dimension raises: torch's own limit
)
entmax_entmax15 = declare(
    entmax_act.Entmax15Function,
    signature="(n)->(n)",
    params={"dim": Dim(0), "k": Param(None, 1, 4)},  # upstream's default dim is 0
    min_sizes={"n": 1},
)
entmax_bisect = declare(
    entmax_root.EntmaxBisectFunction,
    # "alpha: float or torch.Tensor ... alpha.shape[j] == (X.shape[j] if j != dim else 1)"; "differentiable
    # with respect to both X and alpha" (the Dim moves alpha's size-1 core to dim)
    # ... "or be expandable to": alpha broadcasts to X, never X to alpha (broadcast=False: of X's loop shape)
    signature="(n),(1)->(n)",
    broadcast=False,
    inputs={"alpha": Floats(1.2, 2.5)},  # > 1; near 1 upstream warns of an indetermination
    params={
        "dim": Dim(),
        "n_iter": Param(50, 50, 60),  # float64 needs about 50 bisections (upstream: 24 for float32)
        "ensure_sum_one": Param(True),
    },
    min_sizes={"n": 1},
)
entmax_sparsemax_bisect = declare(
    entmax_root.SparsemaxBisectFunction,
    signature="(n)->(n)",
    params={"dim": Dim()},  # its n_iter and ensure_sum_one are accepted and ignored (hard-coded)
    min_sizes={"n": 1},
)
entmax_normmax_bisect = declare(
    entmax_root.NormmaxBisectFunction,
    signature="(n)->(n)",
    params={"alpha": Param(2.0, 1.2, 3.0), "dim": Dim(), "n_iter": Param(50, 50, 60)},
    min_sizes={"n": 1},
)
entmax_budget_bisect = declare(
    entmax_root.BudgetBisectFunction,
    signature="(n)->(n)",
    params={"budget": Param(2.0, 0.5, 3.0), "dim": Dim(), "n_iter": Param(50, 50, 60)},
    min_sizes={"n": 1},
)
entmax_sparsemax_loss = declare(
    entmax_loss.SparsemaxLossFunction,
    signature="(n,c),(n)->(n)",
    loop_dims=0,  # "X (FloatTensor): n x num_classes"
    inputs={"target": Index(high="c")},
    params={"k": Param(None, 1, 4)},
)
entmax_entmax15_loss = declare(
    entmax_loss.Entmax15LossFunction,
    signature="(n,c),(n)->(n)",
    loop_dims=0,
    inputs={"target": Index(high="c")},
    params={"k": Param(None, 1, 4)},
)

# -- sparsemax 0.1.9 and pytorch-tabnet 4.1.0: classic forwards with a dim -----------------------------

sparsemax_sparsemax = declare(
    sparsemax_pkg.SparsemaxFunction,
    signature="(n)->(n)",
    params={"dim": Dim()},
    min_sizes={"n": 1},
)
tabnet_sparsemax = declare(
    tabnet.SparsemaxFunction,
    signature="(n)->(n)",
    params={"dim": Dim()},
    min_sizes={"n": 1},
)
tabnet_entmoid15 = declare(tabnet.Entmoid15)  # elementwise: "Entmax15([x, 0])"

# -- efficientnet-pytorch 0.7.1: a plain activation ----------------------------------------------------

efficientnet_swish = declare(efficientnet.SwishImplementation, reference=F.silu)

# -- snntorch 1.0.0: classic spike functions, surrogates from upstream's docstrings --------------------


def _snn_atan(input_: torch.Tensor, alpha: float) -> torch.Tensor:
    # docstring: S ≈ 1/π arctan(π U α/2)
    return torch.atan(math.pi / 2 * alpha * input_) / math.pi


def _snn_sigmoid(input_: torch.Tensor, slope: float) -> torch.Tensor:
    # docstring: S ≈ 1 / (1 + exp(-k U))
    return torch.sigmoid(slope * input_)


def _snn_fast_sigmoid(input_: torch.Tensor, slope: float) -> torch.Tensor:
    # docstring: S ≈ U / (1 + k|U|)
    return input_ / (1 + slope * input_.abs())


def _snn_leaky(input_: torch.Tensor, slope: float) -> torch.Tensor:
    # docstring: dS/dU = 1 if U ≥ U_thr, k otherwise (the step is U > 0)
    return torch.where(input_ > 0, input_, slope * input_)


def _snn_heaviside(input_: torch.Tensor) -> torch.Tensor:
    # docstring: dS/dU = 1 if U ≥ U_thr, 0 otherwise: the derivative of relu (the step is U > 0)
    return torch.relu(input_)


snntorch_atan = declare(snn.ATan, params={"alpha": Param(2.0, 0.5, 10.0)}, surrogate=_snn_atan)
snntorch_sigmoid = declare(snn.Sigmoid, params={"slope": Param(25.0, 1.0, 50.0)}, surrogate=_snn_sigmoid)
snntorch_fast_sigmoid = declare(
    snn.FastSigmoid, params={"slope": Param(25.0, 1.0, 100.0)}, surrogate=_snn_fast_sigmoid
)
snntorch_leaky_spike = declare(
    snn.LeakySpikeOperator, params={"slope": Param(0.1, 0.0, 1.0)}, surrogate=_snn_leaky
)
snntorch_heaviside = declare(snn.Heaviside, surrogate=_snn_heaviside)

# -- spikingjelly 2.0.0: setup_context spike functions with upstream's primitives; quantisers ----------


def _sj_fake_numerical(x: torch.Tensor, alpha: float) -> torch.Tensor:
    # Upstream ships no primitive for fake_numerical_gradient; its backward is
    # clamp_max(sign(x) / x, alpha) = min(1/|x|, alpha): the derivative of alpha*x for |x| <= 1/alpha
    # and of sign(x) * (1 + log(alpha |x|)) beyond.
    inner = x.abs() <= 1 / alpha
    outer = torch.sign(x) * (1 + torch.log(alpha * x.abs().clamp_min(1 / alpha)))
    return torch.where(inner, alpha * x, outer)


spikingjelly_sigmoid = declare(
    sj.sigmoid, params={"alpha": Param(4.0, 0.5, 10.0)}, surrogate=sj.Sigmoid.primitive_function
)
spikingjelly_atan = declare(
    sj.atan, params={"alpha": Param(2.0, 0.5, 10.0)}, surrogate=sj.ATan.primitive_function
)
spikingjelly_piecewise_leaky_relu = declare(
    sj.piecewise_leaky_relu,
    params={"w": Param(1.0, 0.1, 3.0), "c": Param(0.01, 0.0, 0.5)},
    surrogate=sj.PiecewiseLeakyReLU.primitive_function,
)
spikingjelly_squarewave_fourier_series = declare(
    sj.squarewave_fourier_series,
    params={"n": Param(2, 1, 8), "T_period": Param(8.0, 1.0, 16.0)},
    surrogate=sj.SquarewaveFourierSeries.primitive_function,
)
spikingjelly_fake_numerical_gradient = declare(
    sj.fake_numerical_gradient, params={"alpha": Param(0.3, 0.1, 1.0)}, surrogate=_sj_fake_numerical
)
spikingjelly_kbit_quantize = declare(
    sj_quant.KBitQuantizeATGF,
    params={"k": Param(8, 1, 8)},
    surrogate=lambda x, k: x,  # "straight-through estimator": the gradient passes unchanged
)
spikingjelly_clamp = declare(
    sj_quant.ClampATGF,
    params={"min_value": Param(-1.0, -3.0, -0.5), "max_value": Param(1.0, 0.5, 3.0)},
    # the exact derivative of clamp, with 1 at both bounds (its mask is min <= x <= max)
    kinks=lambda min_value, max_value: {min_value: 1.0, max_value: 1.0},
)

# -- pytorch-revgrad 0.2.0: gradient reversal, alpha a 0-d tensor ---------------------------------------

revgrad_revgrad = declare(
    revgrad.RevGrad,
    params={"alpha_": Param(1.0, 0.0, 2.0, tensor=True)},  # saved for backward: a float would raise
    surrogate=lambda input_, alpha_: -alpha_ * input_,
)

# -- roma 1.8.0: batched Procrustes by SVD, fixed rank, four outputs, setup_context with a jvp ----------

roma_procrustes = declare(
    roma._ProcrustesManualDerivatives,
    signature="(b,d,d)->(b,d,d),(b,d),(b,d,d),(b,d,d)",  # R, DS, and US, V (non-differentiable)
    loop_dims=0,  # "Input should be a BxDxD batch of matrices."
    params={
        "force_rotation": Param(True),
        # a damped pseudo-inverse above 0: the exact derivative only at 0
        "gradient_eps": Param(0.0, 0.0, 0.0),
    },
    dtypes=("float64", "float32"),  # torch's SVD has no bfloat16 or float16 kernel on CPU: a limit
)

# -- mambapy 1.2.0: the parallel scan of Mamba, two differentiable inputs of rank 4 ---------------------

mambapy_pscan = declare(
    mamba.PScan,
    signature="(b,l,d,n),(b,l,d,n)->(b,l,d,n)",  # "A_in : (B, L, D, N)", "X_in : (B, L, D, N)"
    loop_dims=0,
    min_sizes={"l": 1},  # npo2(0) takes log2(0): an empty sequence raises
)

# -- issue 29: what upstream documents about its inputs and its backward, declared -------------------------

# gpytorch 1.15.2: "computes torch.diag(B' A B) where A is a symmetric matrix" (d_rhs = 2AB holds for those)
gpytorch_quad_form = declare(
    gp_large.QuadFormDiagonal, signature="(m,m),(m,n)->(n)", inputs={"matrix": Symmetric()}
)
# "RBFCovariance cannot compute gradients with respect to x1 and x2": they are data; one lengthscale
gpytorch_rbf_covariance = declare(
    gp_rbf.RBFCovariance,
    signature="(n,d),(m,d),(1,1)->(n,m)",
    loop_dims=0,
    inputs={"x1": Floats(grad=False), "x2": Floats(grad=False), "lengthscale": Positive()},
    params={"sq_dist_func": Param(gp_kernel.sq_dist, choices=(gp_kernel.sq_dist,))},
)


def _negative_definite(f: torch.Tensor) -> torch.Tensor:
    # the natural parameter nat_covar = -S^-1 / 2: -2 * nat_covar is SPD (upstream takes its Cholesky)
    n = f.shape[-1]
    return -0.5 * (f @ f.mT / max(n, 1) + torch.eye(n, dtype=f.dtype))


# "Calculates the natural gradient with respect to nat_mean, nat_covar" (gpytorch.optim.NGD's)
gpytorch_nat_to_mu = declare(
    gp_natural._NaturalToMuVarSqrt,
    signature="(m),(m,m)->(m),(m,m)",
    broadcast=False,  # a batch of nat_mean goes with a batch of nat_covar: neither broadcasts
    inputs={"nat_covar": Drawn(_negative_definite, project=lambda a: (a + a.mT) / 2)},
    dtypes=("float64", "float32"),  # torch's triangular_solve has no bfloat16 or float16 CPU kernel: a limit
    gradient="by design: the natural gradient with respect to nat_mean and nat_covar (gpytorch's NGD)",
)

# pyro 1.9.2: log(input), its gradient divided by ewma, a running average of past inputs (not differentiated)
pyro_ewma_log = declare(
    pyro_eig._EwmaLogFn,
    signature="(),()->()",
    broadcast=False,
    inputs={"input": Positive(), "ewma": Positive(grad=False)},
    surrogate=lambda input, ewma: input / ewma,
)
# "Like torch.log but avoids infinite gradients at log(0) by clamping them to at most 1 / finfo.eps"
pyro_safe_log = declare(
    pyro_special._SafeLog,
    domain=(0.0, math.inf),
    reference=torch.log,
    gradient="by design: torch.log's gradient capped at 1 / finfo(dtype).eps",
)

# monai 1.6.1: guided backprop, g kept where x > 0 and g > 0: not linear in g
monai_guided_relu = declare(
    monai_grad._AutoGradReLU,
    reference=torch.relu,
    gradient="by design: guided backprop keeps g where x > 0 and g > 0",
    linear_in_grad=False,
)

# roma 1.8.0: "Identity on the orthonormalized matrices R ..., adding a term regularization * (M - R) to the
# gradient of M ... cannot be expressed as the derivative of any function"
roma_procrustes_regularization = declare(
    roma._ProcrustesRegularization,
    signature="(d,d),(d,d)->(d,d)",
    broadcast=False,  # R is M orthonormalized: of M's shape
    inputs={"R": Orthogonal()},
    params={"regularization": Param(0.1, 0.0, 1.0)},
    gradient="by design: adds regularization * (M - R) to M's gradient",
    linear_in_grad=False,
)

# pypose 0.9.5: the exponential map of so3 to a unit quaternion; its backward is the gradient on the Lie
# algebra (grad_output[..., :3] @ Jl, the left Jacobian), pypose's convention
pypose_so3_exp = declare(
    pypose_op.so3_Exp,
    signature="(3)->(4)",
    gradient="by design: the gradient on the Lie algebra (the left Jacobian), pypose's convention",
)

# torchdiffeq 0.2.5: returns out and gives x1 its gradient; torchdiffeq calls it with x1, out of one shape
torchdiffeq_stitch_gradient = declare(
    torchdiffeq_misc._StitchGradient,
    signature="(),()->()",
    broadcast=False,
    inputs={"out": Floats(grad=False)},
    surrogate=lambda x1, out: x1,
)

# kornia 0.9.0: "log_softmax(where(valid, pred, 0), 1).gather(1, target)", valid an optional mask (focal_loss
# passes target.unsqueeze(1) and its mask unsqueezed likewise)
kornia_target_log_softmax = declare(
    kornia_focal._TargetLogSoftmax,
    signature="(b,c),(b,1),(b,1)->(b,1)",
    loop_dims=0,
    inputs={"target": Index(high="c"), "valid": Mask(optional=True)},
    reference=lambda pred, target, valid: torch.log_softmax(
        pred if valid is None else torch.where(valid, pred, 0.0), 1
    ).gather(1, target),
)

# sinabs 3.1.3: "quantized to ceil(x) with probability (x - floor(x))"; "the backward pass is provided as a
# surrogate gradient (equivalent to that of a linear function)"
sinabs_stochastic_rounding = declare(sinabs_quant.StochasticRounding, random=True, surrogate=lambda inp: inp)

# transformers 5.24.0 (reformer): gathers by undo_sorted_bucket_idx, sends the gradient back by
# sorted_bucket_idx, its inverse
transformers_reverse_sort = declare(
    reformer.ReverseSort,
    signature="(b,h,s,d),(b,h,s),(b,h,s),(b,h,s)->(b,h,s,d),(b,h,s)",
    loop_dims=0,
    inputs={
        "sorted_bucket_idx": Permutation("s"),
        "undo_sorted_bucket_idx": Permutation("s", inverse_of="sorted_bucket_idx"),
    },
)

# -- the record's table --------------------------------------------------------------------------------

OPS: dict[str, Entry] = {
    "entmax_sparsemax": Entry("entmax", entmax_sparsemax),
    "entmax_entmax15": Entry("entmax", entmax_entmax15),
    "entmax_bisect": Entry("entmax", entmax_bisect, "alpha a tensor input: its gradient checked too"),
    "entmax_sparsemax_bisect": Entry("entmax", entmax_sparsemax_bisect),
    "entmax_normmax_bisect": Entry("entmax", entmax_normmax_bisect),
    "entmax_budget_bisect": Entry("entmax", entmax_budget_bisect),
    "entmax_sparsemax_loss": Entry("entmax", entmax_sparsemax_loss),
    "entmax_entmax15_loss": Entry("entmax", entmax_entmax15_loss),
    "sparsemax_sparsemax": Entry("sparsemax", sparsemax_sparsemax),
    "tabnet_sparsemax": Entry("pytorch-tabnet", tabnet_sparsemax),
    "tabnet_entmoid15": Entry("pytorch-tabnet", tabnet_entmoid15),
    "efficientnet_swish": Entry("efficientnet-pytorch", efficientnet_swish),
    "snntorch_atan": Entry("snntorch", snntorch_atan, "surrogate from the docstring"),
    "snntorch_sigmoid": Entry("snntorch", snntorch_sigmoid, "surrogate from the docstring"),
    "snntorch_fast_sigmoid": Entry("snntorch", snntorch_fast_sigmoid, "surrogate from the docstring"),
    "snntorch_leaky_spike": Entry("snntorch", snntorch_leaky_spike, "surrogate from the docstring"),
    "snntorch_heaviside": Entry("snntorch", snntorch_heaviside, "surrogate from the docstring"),
    "spikingjelly_sigmoid": Entry("spikingjelly", spikingjelly_sigmoid, "upstream's primitive"),
    "spikingjelly_atan": Entry("spikingjelly", spikingjelly_atan, "upstream's primitive"),
    "spikingjelly_piecewise_leaky_relu": Entry(
        "spikingjelly", spikingjelly_piecewise_leaky_relu, "upstream's primitive"
    ),
    "spikingjelly_squarewave_fourier_series": Entry(
        "spikingjelly", spikingjelly_squarewave_fourier_series, "upstream's primitive"
    ),
    "spikingjelly_fake_numerical_gradient": Entry(
        "spikingjelly", spikingjelly_fake_numerical_gradient, "primitive written here (upstream has none)"
    ),
    "spikingjelly_kbit_quantize": Entry("spikingjelly", spikingjelly_kbit_quantize, "straight-through"),
    "spikingjelly_clamp": Entry("spikingjelly", spikingjelly_clamp, "its bounds declared as kinks"),
    "revgrad_revgrad": Entry("pytorch-revgrad", revgrad_revgrad, "alpha_ passed as a 0-d tensor"),
    "roma_procrustes": Entry("roma", roma_procrustes),
    "mambapy_pscan": Entry("mambapy", mambapy_pscan),
    "gpytorch_quad_form": Entry("gpytorch", gpytorch_quad_form, "matrix symmetric, as documented"),
    "gpytorch_rbf_covariance": Entry(
        "gpytorch",
        gpytorch_rbf_covariance,
        "x1, x2 not differentiated (upstream refuses); gpytorch's sq_dist",
    ),
    "gpytorch_nat_to_mu": Entry(
        "gpytorch", gpytorch_nat_to_mu, "nat_covar negative definite; the natural gradient, by design"
    ),
    "pyro_ewma_log": Entry("pyro-ppl", pyro_ewma_log, "ewma not differentiated; same shape"),
    "pyro_safe_log": Entry("pyro-ppl", pyro_safe_log, "the capped gradient, by design"),
    "monai_guided_relu": Entry("monai", monai_guided_relu, "guided backprop, by design"),
    "roma_procrustes_regularization": Entry(
        "roma", roma_procrustes_regularization, "R orthogonal; the regularised gradient, by design"
    ),
    "pypose_so3_exp": Entry("pypose", pypose_so3_exp, "the Lie-algebra gradient, by design"),
    "torchdiffeq_stitch_gradient": Entry(
        "torchdiffeq", torchdiffeq_stitch_gradient, "same shape; out not differentiated"
    ),
    "kornia_target_log_softmax": Entry("kornia", kornia_target_log_softmax, "valid an optional mask"),
    "sinabs_stochastic_rounding": Entry("sinabs", sinabs_stochastic_rounding, "a random forward"),
    "transformers_reverse_sort": Entry(
        "transformers", transformers_reverse_sort, "two index inputs, inverse permutations"
    ),
}
