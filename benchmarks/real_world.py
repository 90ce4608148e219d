#!/usr/bin/env python3
"""The real-world record: autograd Functions from PyPI packages, declared with ``opzoo.declare`` and
checked with ``opzoo check --profile ci``; every red verdict with independent evidence. Writes
docs/real-world.md.

    python3 benchmarks/real_world.py [--venv PATH] [--jobs N] [--out PATH]

It sets up a scratch venv (reused when it already holds exactly these versions): torch 2.13.0 (the
CPU wheel), opzoo from this checkout (editable) and the pinned packages of PACKAGES, ``--no-deps``.
There it runs ``opzoo check`` on the ops of benchmarks/real_world_ops.py by their import paths, then
benchmarks/real_world_evidence.py (plain torch, no opzoo), and writes the doc. Not run by CI: it
installs packages and takes several minutes.

Each failing check must be explained by one of CAUSES: an upstream defect, a limitation of torch, or
a false alarm of opzoo's (said so, never hidden). A failure no cause explains is printed, and listed
in the doc as unexplained; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _record import Cause, Verdicts, check, provenance, skipped  # noqa: E402
from _scratch_venv import ensure  # noqa: E402
from real_world_scan import kept_section  # noqa: E402

#: The packages and the versions the record pins (all install --no-deps and import with torch alone).
PACKAGES = {
    "entmax": "1.3",
    "snntorch": "1.0.0",
    "spikingjelly": "2.0.0",
    "pytorch-tabnet": "4.1.0",
    "sparsemax": "0.1.9",
    "pytorch-revgrad": "0.2.0",
    "roma": "1.8.0",
    "mambapy": "1.2.0",
    "efficientnet-pytorch": "0.7.1",
    # issue 29's Functions, and what their packages import at import time (--no-deps: torch's own
    # dependencies come with torch)
    "gpytorch": "1.15.2",
    "linear-operator": "0.6.1",
    "jaxtyping": "0.3.11",
    "wadler-lindig": "0.1.8",
    "scipy": "1.17.1",
    "pyro-ppl": "1.9.2",
    "pyro-api": "0.1.2",
    "opt-einsum": "3.4.0",
    "tqdm": "4.70.1",
    "monai": "1.6.1",
    "pypose": "0.9.5",
    "torchdiffeq": "0.2.5",
    "kornia": "0.9.0",
    "kornia-rs": "0.2.0",
    "sinabs": "3.1.3",
    "pbr": "7.1.3",
    "nir": "1.0.4",
    "nirtorch": "2.6",
    "h5py": "3.16.0",
    "matplotlib": "3.11.2",
    "contourpy": "1.3.3",
    "cycler": "0.12.1",
    "fonttools": "4.68.0",
    "kiwisolver": "1.5.1",
    "pillow": "13.0.0",
    "pyparsing": "3.3.3",
    "python-dateutil": "4.0.0",
    "packaging": "26.4",
    "einops": "0.8.2",
    "transformers": "5.24.0",
    "huggingface-hub": "2.4.0",
    "hf-xet": "1.8.0",
    "tokenizers": "0.23.3",
    "safetensors": "0.8.0",
    "regex": "2026.11.19",
    "pyyaml": "6.0.4",
    "httpx2": "2.16.2",
    "httpcore2": "2.16.2",
    "h11": "0.16.0",
    "anyio": "4.16.0",
    "idna": "3.20",
    "truststore": "0.10.5",
    "typer": "0.29.2",
    "click": "8.5.1",
    "shellingham": "1.5.4",
    "rich": "15.0.0",
    "markdown-it-py": "4.3.0",
    "mdurl": "0.1.2",
    "pygments": "2.21.0",
    "annotated-doc": "0.0.7",
}
UPSTREAM = "upstream defect"
TORCH = "torch limitation"
OPZOO = "opzoo false alarm"
OPZOO_LIMIT = "opzoo limitation"
CLASSMETHOD_OPS = (
    "entmax_sparsemax",
    "entmax_entmax15",
    "entmax_bisect",
    "entmax_sparsemax_bisect",
    "entmax_normmax_bisect",
    "entmax_budget_bisect",
    "entmax_sparsemax_loss",
    "entmax_entmax15_loss",
)
SNNTORCH = (
    "snntorch_atan",
    "snntorch_sigmoid",
    "snntorch_fast_sigmoid",
    "snntorch_leaky_spike",
    "snntorch_heaviside",
)


# The first cause that explains a failure is its cause: the specific ones come first.
CAUSES = (
    Cause(
        "classmethod-compile",
        TORCH,
        "torch.compile(fullgraph=True) cannot trace a Function whose forward is a @classmethod "
        "(Dynamo: 'failed to bind arguments when attempting to inline'): every entmax Function is "
        "written so. The backward is not at fault.",
        CLASSMETHOD_OPS,
        ("compile",),
        r"bind arguments|AutogradFunctionVariable|graph break",
        ("classmethod_compile",),
        "no open issue found; pytorch/pytorch#103139 (closed in 2023) was the same failure, fixed then "
        "by pytorch/pytorch#103175",
    ),
    Cause(
        "entmax-roll-last",
        UPSTREAM,
        "entmax's partial sort (`k` set) crashes for a negative `dim` other than -1: `_roll_last` "
        "computes `X.dim() - dim` where it means `X.dim() + dim`.",
        ("entmax_sparsemax", "entmax_entmax15"),
        ("accepts",),
        "",
        ("entmax_roll_last",),
    ),
    Cause(
        "entmax15-nan-second",
        UPSTREAM,
        "Entmax15Function's second derivative is nan wherever an output is 0: its backward takes "
        "`Y.sqrt()`, whose derivative at 0 is infinite.",
        ("entmax_entmax15",),
        ("double_backward",),
        "nan",
        ("entmax15_nan_second",),
    ),
    Cause(
        "entmax-bisect-nan-second",
        UPSTREAM,
        "EntmaxBisectFunction's and NormmaxBisectFunction's second derivatives are nan wherever an output "
        "is 0: `torch.where(Y > 0, Y ** (2 - alpha), 0)` differentiates the unselected branch (0 * inf).",
        ("entmax_bisect", "entmax_normmax_bisect"),
        ("double_backward",),
        "nan",
        ("entmax_bisect_nan_second",),
    ),
    Cause(
        "entmax-loss-zero-second",
        UPSTREAM,
        "The entmax losses' second derivatives with respect to X come back silently 0: the backward "
        "multiplies grad_output by p* saved from a forward run without grad.",
        ("entmax_sparsemax_loss", "entmax_entmax15_loss"),
        ("double_backward",),
        "",
        ("entmax_loss_zero_second",),
    ),
    Cause(
        "budget-squeeze",
        UPSTREAM,
        "BudgetBisectFunction's backward drops the wrong dimension (`active.sum(dim)` and then "
        "`.squeeze(dim)`): it raises where dim is the last one and positive, and is wrong where "
        "another dimension has size 1.",
        ("entmax_budget_bisect",),
        ("*",),
        "",
        ("budget_squeeze",),
    ),
    Cause(
        "sparsemax-1d",
        UPSTREAM,
        "sparsemax's SparsemaxFunction raises on every 1-D input.",
        ("sparsemax_sparsemax",),
        ("accepts",),
        "",
        ("sparsemax_1d",),
        "aced125/sparsemax#2 (open)",
    ),
    Cause(
        "tabnet-sparsemax",
        UPSTREAM,
        "pytorch-tabnet's SparsemaxFunction mutates its input (`input -= max_val`), and its backward's "
        "`squeeze()` without a dim is wrong wherever another dimension has size 1 (the bug entmax "
        "fixed in 2020).",
        ("tabnet_sparsemax",),
        ("*",),
        "",
        ("tabnet_mutates", "tabnet_squeeze"),
        "none on dreamquark-ai/tabnet; the same code was fixed in deep-spin/entmax#18 (issue #13) and "
        "in OpenTabular/DeepTab#459 (issue #453)",
    ),
    Cause(
        "snntorch-dtype",
        UPSTREAM,
        "snntorch's spike functions return float32 for a float64 input: `(input_ > 0).float()`.",
        SNNTORCH,
        ("hygiene", "library"),
        "dtype|Dtypes",
        ("snntorch_dtype",),
        "jeshraghian/snntorch#422 (fixed by PR #432, after 1.0.0)",
    ),
    Cause(
        "snntorch-sigmoid-nan",
        UPSTREAM,
        "snntorch's Sigmoid backward is nan at large negative inputs: exp(-slope x) overflows, inf / inf.",
        ("snntorch_sigmoid",),
        ("gradient", "extremes"),
        "nan",
        ("snntorch_sigmoid_nan",),
        "jeshraghian/snntorch#427 (fixed by PR #433, after 1.0.0)",
    ),
    Cause(
        "batched-promotion",
        TORCH,
        "Backward with batched grad_outputs (`is_grads_batched`, which `torch.autograd.functional."
        "jacobian(vectorize=True)` uses too) runs under torch's legacy vmap, where a 0-d float32 "
        "grad_output times a 0-d float64 saved input is float32; one call at a time it is float64. "
        "snntorch's Sigmoid backward then overflows float32 (exp(100)): nan, where each call alone gives "
        "1e-42. Reached only through snntorch's float32 output for a float64 input (snntorch-dtype).",
        ("snntorch_sigmoid",),
        ("forward_mode",),
        "batched",
        ("batched_promotion",),
        "none found",
    ),
    Cause(
        "snntorch-lso-count",
        UPSTREAM,
        "snntorch's LeakySpikeOperator backward returns one gradient for two inputs: every backward raises.",
        ("snntorch_leaky_spike",),
        ("*",),
        "incorrect number of gradients",
        ("snntorch_lso_count",),
        "PR jeshraghian/snntorch#351 (the fix, closed unmerged)",
    ),
    Cause(
        "snntorch-heaviside-second",
        UPSTREAM,
        "snntorch's Heaviside backward multiplies by its own saved output, so a second derivative "
        "differentiates through the Function again: nonzero where the surrogate relu's is 0.",
        ("snntorch_heaviside",),
        ("double_backward",),
        "",
        ("snntorch_heaviside_second",),
    ),
    Cause(
        "sj-fng-negative-zero",
        UPSTREAM,
        "spikingjelly's fake_numerical_gradient: the gradient at x = -0.0 is infinite (1 / -0.0), and "
        "the second derivative at 0 is nan.",
        ("spikingjelly_fake_numerical_gradient",),
        ("gradient", "double_backward", "extremes"),
        "",
        ("sj_fng_negative_zero",),
    ),
    Cause(
        "bisect-alpha-second",
        UPSTREAM,
        "EntmaxBisectFunction's backward reads alpha from `ctx.alpha`, the forward's expanded copy made "
        'without grad: with alpha a tensor input (upstream: "differentiable with respect to both X and '
        "alpha\"), the first derivative's dependence on alpha is dropped, and the second derivative "
        "with respect to alpha comes back silently 0. With alpha constant, gradgradcheck passes.",
        ("entmax_bisect",),
        ("double_backward",),
        r"with respect to input 1\b",
        ("bisect_alpha_second",),
    ),
    Cause(
        "quad-form-second",
        UPSTREAM,
        "gpytorch's QuadFormDiagonal saves `product = matrix @ rhs` from its forward (run without grad) "
        "and its backward returns `2 * product * g` for rhs: the second derivative of that with respect "
        "to the matrix is silently 0. The Function is not marked once_differentiable. Its first "
        "derivative is right on the symmetric matrices it documents.",
        ("gpytorch_quad_form",),
        ("double_backward",),
        "second derivative is wrong",
        ("quad_form_second",),
    ),
    Cause(
        "rbf-second",
        UPSTREAM,
        "gpytorch's RBFCovariance returns `grad_output * d_output_d_input`, the derivative saved from its "
        "forward (run without grad): its second derivative with respect to the lengthscale is silently "
        "0. The Function is not marked once_differentiable.",
        ("gpytorch_rbf_covariance",),
        ("double_backward",),
        "second derivative is wrong",
        ("rbf_second",),
    ),
    Cause(
        "nat-to-mu-second",
        UPSTREAM,
        "gpytorch's _NaturalToMuVarSqrt computes its (natural) gradient from mu and L saved by the forward, "
        "which ran without grad, and is not marked once_differentiable: a second derivative through it "
        "is silently wrong (gradgradcheck differentiates the backward itself, whatever it computes).",
        ("gpytorch_nat_to_mu",),
        ("double_backward",),
        "second derivative is wrong",
        ("nat_to_mu_second",),
    ),
    Cause(
        "data-dependent-compile",
        TORCH,
        "torch.compile(fullgraph=True) cannot trace a branch on a tensor's value (Dynamo: 'Data-dependent "
        "branching'): linear_operator's psd_safe_cholesky, which _NaturalToMuVarSqrt calls, tests "
        "`torch.any(info)` of cholesky_ex in Python. Eager, it runs.",
        ("gpytorch_nat_to_mu",),
        ("compile",),
        "Data-dependent branching",
        ("nat_to_mu_compile",),
    ),
    Cause(
        "requires-grad-compile",
        TORCH,
        "torch.compile(fullgraph=True) refuses a tensor creation with a `requires_grad` argument inside an "
        "autograd.Function it traces, even `requires_grad=False` (Dynamo: 'Attempted to use tensor "
        "creation function with requires_grad=True'): pypose's so3_Exp forward calls "
        "`torch.zeros_like(theta, requires_grad=False)`. Compiled on an input without grad, it runs.",
        ("pypose_so3_exp",),
        ("compile",),
        "requires_grad",
        ("so3_exp_compile",),
    ),
    Cause(
        "mask-vmap",
        TORCH,
        "vmap cannot batch indexing with a boolean mask (torch: 'We do not support batching operators that "
        "can support dynamic shape'; on an empty batch an IndexError): pypose's so3_Exp sets "
        "`generate_vmap_rule = True` on a forward that indexes so, and the generated rule raises for "
        "every input, where a loop runs. It raises; it never answers wrongly.",
        ("pypose_so3_exp",),
        ("forward_mode",),
        "mask|dynamic shape",
        ("so3_exp_vmap",),
    ),
    Cause(
        "sinabs-dtype",
        UPSTREAM,
        "sinabs' StochasticRounding returns float32 for a bfloat16 or float16 input: it adds "
        "`(torch.rand_like(inp) < frac).float()` to the input's floor (issue 28 saw the same).",
        ("sinabs_stochastic_rounding",),
        ("hygiene", "library"),
        "dtype|Dtypes",
        ("stochastic_rounding_dtype",),
    ),
    Cause(
        "by-design-linear-rounding",
        OPZOO,
        "opzoo's check that a by-design backward is linear in grad_output compares vjp(0.5 g1 - 2 g2) "
        "with 0.5 vjp(g1) - 2 vjp(g2) element by element, at the scale of each element (and of the "
        "terms a backward sums as `subsets` sees them); _NaturalToMuVarSqrt's backward at opzoo's "
        "(317, 317) edge input runs a Cholesky backward and products with mu, whose rounding is that "
        "of the matrix products inside, not of the element: the two differed by 7e-14 at 1.49. The "
        "backward is linear in exact arithmetic, and torch's own autograd of the same forward differs "
        "by rounding of the same order (below). Fixed (ba0893e): where those tolerances disagree, "
        "the check now re-runs each vjp on its grad_outputs times 1 + 2^-10 and allows 8 times what "
        "that moves, the backward's own rounding; from that commit on, this failure is not seen.",
        ("gpytorch_nat_to_mu",),
        ("gradient",),
        "not linear in grad_output",
        ("nat_to_mu_linear_rounding",),
    ),
    Cause(
        "bisect-autograd",
        OPZOO,
        "EntmaxBisectFunction and SparsemaxBisectFunction solve for their threshold by bisection between "
        "bounds that follow max(X): autograd of that forward differentiates the algorithm (tau moving "
        "with max(X) alone), not the function it computes to 1e-15. The backward is the derivative of "
        "the solution, as central differences and gradcheck confirm; opzoo's autograd oracle took the "
        "forward's autograd for the truth.",
        ("entmax_bisect", "entmax_sparsemax_bisect"),
        ("autograd",),
        "autograd of forward",
        ("bisect_autograd",),
        fixed=(
            "where the backward and the forward's autograd differ, the autograd check now asks finite "
            "differences along their difference (opzoo/testing/checks/_oracles.py); `SparsemaxBisect` in "
            "tests/upstream_ops.py was red there and is green."
        ),
    ),
    Cause(
        "surrogate-threshold",
        OPZOO,
        "At |x| = w the surrogate primitive of piecewise_leaky_relu has two one-sided derivatives, 1/(2w) "
        "and c; the op's backward gives c, a valid value, and autograd of the primitive the other. "
        "opzoo on this commit compares with autograd's choice only (issue 20's false alarm at "
        "the threshold of a piecewise surrogate).",
        ("spikingjelly_piecewise_leaky_relu",),
        ("gradient", "double_backward"),
        r"x = -?1\b|x = -?\d",
        ("sj_plr_threshold",),
        fixed=(
            "the kinks merge holds a surrogate's threshold to its one-sided derivatives; "
            "`PiecewiseLeakySpike` at x = w in tests/upstream_ops.py was red there and is green."
        ),
    ),
    Cause(
        "surrogate-bfloat16",
        OPZOO,
        "In bfloat16 the op's surrogate gradient equals torch's own autograd of upstream's primitive run "
        "in bfloat16, bit for bit; only the float64 value differs (1 - sigmoid cancels; cos of a product "
        "rounded to bfloat16). opzoo's surrogate check holds a lower dtype to the float64 surrogate "
        "with no allowance for what the surrogate itself loses in that dtype (its reference check "
        "has one).",
        ("spikingjelly_sigmoid", "spikingjelly_squarewave_fourier_series"),
        ("gradient",),
        "bfloat16",
        ("bf16_surrogate",),
        fixed=(
            "in a lower dtype the surrogate check accepts what the surrogate itself gives in that dtype, "
            "or the float64 surrogate at a neighbouring value of it (a threshold compared at its "
            "rounding); `SigmoidSpike`, `PiecewiseLeakySpike` and `SineSpike` in tests/upstream_ops.py "
            "were red there and are green."
        ),
    ),
    Cause(
        "support-boundary",
        OPZOO,
        "The counterexample sits exactly on the edge of the support (an output at 0 that becomes positive "
        "on one side), where the first derivative jumps and no second derivative exists; away from "
        "it gradgradcheck passes (issue 20's false alarm at support boundaries).",
        ("entmax_normmax_bisect",),
        ("double_backward",),
        r"^(?!timed out|PropertyTimeout)",  # a check cut short by its time limit is no verdict at all
        ("support_boundary",),
        fixed=(
            "the kinks merge finds the jump of the first derivative at the edge of the support and checks"
            " nothing there; sparsemax at [0, 1] (tests/test_declare.py) was red there and is green."
        ),
    ),
    Cause(
        "roma-degenerate",
        UPSTREAM,
        "roma's exact derivative (gradient_eps = 0, declared so to check the exact one; `roma.procrustes` "
        "defaults to 1e-5) is nan wherever M is rank-deficient: it divides by sums of singular values. "
        "At a 1x1 zero matrix, where R = [[1]] is constant and DS = m has derivative 1, the gradient is "
        "nan. A limit of the exact formula, which roma's default damping avoids.",
        ("roma_procrustes",),
        ("autograd", "extremes", "gradient"),
        "nan",
        ("roma_degenerate",),
    ),
    Cause(
        "roma-second-derivative",
        UPSTREAM,
        "roma's Procrustes backward is differentiable (not once_differentiable), but its second "
        "derivative is wrong: plain gradgradcheck of R and DS at a random M fails (below). With the "
        "non-differentiable outputs left out, opzoo now reaches it.",
        ("roma_procrustes",),
        ("double_backward",),
        "second derivative is wrong",
        ("roma_first_order",),
    ),
    Cause(
        "roma-batched-einsum",
        TORCH,
        "Backward with batched grad_outputs (`is_grads_batched`, torch's legacy vmap) has no batching "
        "rule for `einsum`, which roma's backward calls: it raises, where a loop of backwards works.",
        ("roma_procrustes",),
        ("forward_mode",),
        "Batching rule not implemented for aten::einsum",
        ("roma_batched",),
    ),
    Cause(
        "time-limit",
        OPZOO_LIMIT,
        "A check runs under a time limit (opzoo's default 60 s; this record's `--timeout`). On the "
        "large edge input, (47, 47, 47), roma's backward takes about 10 s on this 2-core machine (its "
        "SVD and einsums), and `layout` or `gradient` call it several times, so under 60 s the check "
        "ran out of time before it could say anything (a worker that does not answer is killed, and "
        "the op's remaining checks are skipped; struck inside hypothesis's data generation, the limit "
        "is worded by hypothesis as FlakyStrategyDefinition). Nothing is known to be wrong.",
        ("roma_procrustes",),
        ("gradient", "double_backward", "layout", "hygiene", "autograd", "extremes", "compile"),
        # a limit that strikes inside hypothesis's data generation is worded by hypothesis as
        # FlakyStrategyDefinition (the check's time is then 60 s to the millisecond)
        "timed out|FlakyStrategyDefinition",
    ),
    Cause(
        "singular-edge",
        OPZOO,
        "opzoo's large edge input filled its (47, 47) matrices with a golden-ratio sequence in order: "
        "but for its wrap-arounds, a + b*row + c*col, so each matrix was singular to rounding (about half "
        "its singular values below 1e-10). There the polar factor R has no derivative, roma's exact one "
        "divides by sums of singular values near 1e-16, and the gradient for one grad_output changed by "
        "5e-4 of its size with the grad_output's strides alone: rounding, amplified. opzoo checked the "
        "op at a point of its own making where no derivative exists; the op is right wherever one does.",
        ("roma_procrustes",),
        ("layout",),
        "non-contiguous grad_output",
        ("roma_singular_edge",),
        fixed=(
            "the edge values are now shuffled by a seeded generator, so a square matrix among them is "
            "conditioned as a random one is (opzoo/testing/strategies.py `_spread`); "
            "tests/test_declare.py::test_the_matrices_of_the_edge_inputs_are_well_conditioned."
        ),
    ),
    Cause(
        "non-differentiable-outputs",
        OPZOO,
        "roma's Function marks two of its four outputs non-differentiable (`ctx.mark_non_differentiable`); "
        "opzoo asks autograd for the gradient through every output, which torch refuses, or (gradient) "
        "holds those outputs' zero derivative to finite differences. Plain gradcheck of the differentiable "
        "outputs passes (and gradgradcheck fails: roma's second derivative is wrong, which opzoo cannot "
        "reach yet).",
        ("roma_procrustes",),
        ("*",),
        r"does not require grad|for output [23] .*analytical 0\b|directional derivative mismatch",
        ("roma_first_order",),
        fixed=(
            "every gradient is now taken over the outputs that require grad, and gradcheck leaves the "
            "others out, as torch's own does (opzoo/testing/checks/_bound.py `grad`, _kinks.py); "
            "`ScaledWithSign` in tests/upstream_ops.py was red in 7 properties and is green. Two checks "
            "still held U and V against the backward, seen once the large edge input was no longer "
            "singular: the large input's directional check weighed their finite differences (numerical "
            "123 against analytical 30.6), and autograd of the forward differentiated them; both now "
            "leave out what the Function marks (opzoo/testing/checks/_bound.py `differentiable`), and "
            "`DoubledWithCube`, `(2 x, x³)` with x³ marked, red in `gradient` and `autograd` before, "
            "is green. And `double_backward`'s check of the first derivative along the grad_outputs "
            "asked autograd through U and V, which torch refused; the refusal read as 'no second "
            "derivative', a skip that hid roma's wrong one (tests/test_declare.py::"
            "test_an_output_marked_non_differentiable_is_left_out_and_the_rest_checked)."
        ),
    ),
)


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in benchmarks/ with benchmarks/ importable; its output captured."""
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    return subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, **kw)  # type: ignore[call-overload]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--venv", type=Path, default=Path("/tmp/opzoo-real-world"), help="the scratch venv (made if missing)"
    )
    parser.add_argument(
        "--jobs", "-j", type=int, default=2, help="opzoo check's worker processes (default 2)"
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=240,
        help="opzoo check's limit per check, seconds (default 240: roma's backward at the (47, 47, 47) "
        "edge input takes about 10 s here, and `layout` calls it several times; opzoo's own default, 60, "
        "cut it short, and the op's later checks with it)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "real-world.md", help="the doc to write")
    parser.add_argument(
        "--rerender",
        type=float,
        metavar="SECONDS",
        help="write the doc from the venv's last-check.json (its check took SECONDS) instead of checking",
    )
    parser.add_argument(
        "--note", default="", help="a sentence on the run's conditions (the load), for the doc"
    )
    args = parser.parse_args(argv)

    python = ensure(args.venv.resolve(), [f"{name}=={version}" for name, version in PACKAGES.items()])
    print("gathering the evidence (plain torch) ...", file=sys.stderr)
    probe = run([str(python), str(HERE / "real_world_evidence.py")])
    if probe.returncode != 0:
        sys.exit(f"real_world_evidence.py failed:\n{probe.stderr[-2000:]}")
    facts = json.loads(probe.stdout.strip().splitlines()[-1])
    (args.venv / "last-evidence.json").write_text(json.dumps(facts, indent=1))
    paths = [f"real_world_ops:{name}" for name in facts["ops"]]
    if args.rerender is not None:
        results, seconds = json.loads((args.venv / "last-check.json").read_text())["results"], args.rerender
    else:
        results, raw, seconds = check(str(python), paths, args.jobs, "--timeout", str(args.timeout))
        (args.venv / "last-check.json").write_text(raw)
    doc, unexplained = render(facts, results, seconds, args)
    kept = kept_section(args.out)  # benchmarks/real_world_scan.py's section, as it stands
    args.out.write_text(doc + ("\n" + kept + "\n" if kept else ""))
    print(
        f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}", file=sys.stderr
    )
    for line in unexplained:
        print(f"UNEXPLAINED {line}", file=sys.stderr)
    return 1 if unexplained else 0


def render(
    facts: dict, results: list[dict], seconds: float, args: argparse.Namespace
) -> tuple[str, list[str]]:
    """The doc, and one line per failure no cause explains."""
    verdicts = Verdicts(CAUSES, results)
    rows = [
        f"| `{name}` | {info['package']} {info['version']} | `{info['path']}` | {info['form']} | "
        f"{info['declared']}{'; ' + info['note'] if info['note'] else ''} | {verdicts.cell(name)} |"
        for name, info in facts["ops"].items()
    ]
    seen, unexplained = verdicts.seen, verdicts.unexplained
    reds = verdicts.reds()
    # Each red op counted once, under the most serious of its causes.
    worst = Counter()
    for name in reds:
        kinds = {c.kind for c in CAUSES for n, _ in seen.get(c.key, []) if n == name}
        unknown = any(line.startswith(f"{name} ") for line in unexplained)
        order = (UPSTREAM, TORCH, OPZOO_LIMIT, OPZOO)
        worst[next((k for k in order if k in kinds and not unknown), "unexplained")] += 1
    shares = {
        UPSTREAM: "with an upstream defect",
        TORCH: "with a torch limitation (and no upstream defect)",
        OPZOO_LIMIT: "for a limitation of opzoo's (and no defect)",
        OPZOO: "for opzoo's false alarms alone: right, and wrongly red",
        "unexplained": "with a failure no cause explains",
    }
    out = [
        "# Real-world Functions, checked",
        "",
        "Autograd Functions from published PyPI packages, each declared with `opzoo.declare` as the "
        "package ships it (no subclass, no wrapper) and checked with `opzoo check --profile ci`. A green "
        "op passed every property that applies to it; every red one has a cause below, with evidence "
        "gathered with plain torch (no opzoo) and the upstream issue where one exists. Where opzoo itself "
        "is wrong, the cause says so.",
        "",
        f"Generated by `python3 benchmarks/real_world.py` on {date.today().isoformat()}, at {provenance()}, "
        f"torch {facts['torch']}, CPU, {args.jobs} worker(s), `--timeout {args.timeout}` per check: "
        f"the check took {seconds:.0f} s{' (' + args.note + ')' if args.note else ''}. The declarations are "
        "in "
        "[benchmarks/real_world_ops.py](../benchmarks/real_world_ops.py), the reproductions in "
        "[benchmarks/real_world_evidence.py](../benchmarks/real_world_evidence.py) and "
        "[benchmarks/real_world_evidence_inputs.py](../benchmarks/real_world_evidence_inputs.py). A failing "
        "check repeats "
        "with `PYTHONPATH=benchmarks VENV/bin/opzoo check real_world_ops:OP --property PROP --profile ci` "
        f"(VENV: the scratch venv, {args.venv} in this run).",
        "",
        f"**{len(facts['ops'])} Functions from {len({i['package'] for i in facts['ops'].values()})} "
        f"packages: {len(facts['ops']) - len(reds)} green, {len(reds)} red.** Of the red, "
        + ", ".join(f"{worst[k]} {why}" for k, why in shares.items() if worst[k])
        + ".",
        "",
        "| op | package | Function | form | declared | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        "*form*: `classic` is `forward(ctx, ...)`, `setup_context` a forward without ctx, `classmethod` "
        "`@classmethod forward(cls, ctx, ...)`. *declared*: the contract's fields beyond the defaults "
        "(a `surrogate` is the function whose derivative a deliberately-not-the-derivative backward "
        "computes: upstream's `primitive_function` where spikingjelly ships one, else written in "
        "real_world_ops.py from upstream's docstring formula).",
        "",
        "## Wrappers",
        "",
        "None. Every Function is declared as published: params of every kind (ints, floats, flags, "
        "`None`-able, a 0-d tensor, a function), a `dim`, integer targets, fixed ranks and four outputs all "
        "go into the contract, and so does what upstream documents about its inputs and its backward "
        "(issue 29): the set an input lives in (a symmetric matrix, a negative-definite one, positive "
        "values, an orthogonal matrix, a permutation and its inverse), inputs that are data and never "
        "differentiated (`grad=False`), inputs of one shape (`broadcast=False`), an optional mask, a "
        'backward that is deliberately no derivative (`gradient "by design: ..."`: the derivative '
        "checks skip with the reason, every other property runs) and a forward that draws "
        "(`random=True`). What is declared beyond upstream's own words is each op's limits (`min_sizes`: "
        "an empty dimension that torch's `max` or `log2` refuses) and, for the surrogate ops, the "
        "surrogate.",
        "",
        "## Causes of the red verdicts",
        "",
    ]
    for cause in CAUSES:
        fixed = cause.kind == OPZOO and "Fixed (" in cause.summary
        why = "opzoo's check was fixed, above" if fixed else "the `ci` draws did not reach it"
        not_seen = f"**Not seen in this run**: no check failed for it ({why})."
        evidence = "Evidence (plain torch, the upstream Function called directly):"
        out += verdicts.section(cause, facts["evidence"], not_seen, evidence)
    if unexplained:
        out += ["## Unexplained failures", "", *(f"- {line}" for line in unexplained), ""]
    out += skipped(results, _trim)
    return "\n".join(out), unexplained


def _trim(text: str) -> str:
    return re.sub(r"op '[^']*'", "the op", text).replace("|", "\\|")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
