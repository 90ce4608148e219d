"""What a tensor input is: the sets of opzoo.core._inputs, declared per input, drawn inside the set
(shrunk, fixed and edge inputs too), and the checks perturbing inside it: a correct upstream op red
without its declaration and green with it, a wrong twin red with it."""

from __future__ import annotations

import math
import os
from pathlib import Path

import input_ops as io
import pytest
import torch
from conftest import run_opzoo
from hypothesis import find, given, settings

import opzoo
from opzoo import (
    SPD,
    Drawn,
    Floats,
    Invertible,
    Orthogonal,
    Permutation,
    Positive,
    Rotation,
    Symmetric,
    UnitNorm,
)
from opzoo.testing import PROPERTIES, assert_correct, bind, check, spec_of
from opzoo.testing.strategies import cases, edge_inputs, fixed_inputs

TESTS = Path(__file__).parent
QUAD = "(m,m),(m,n)->(n)"
REVERSE = "(b,h,s,d),(b,h,s),(b,h,s),(b,h,s)->(b,h,s,d),(b,h,s)"


@pytest.mark.parametrize(
    "signature, inputs, message",
    [
        (QUAD, {"rhs": Symmetric()}, "inputs['rhs']: a symmetric matrix is a square matrix, core (n,n), but"),
        (QUAD, {"matrix": SPD(cond=0.5)}, "inputs['matrix']: cond must be a finite number >= 1, got 0.5"),
        (QUAD, {"matrix": Invertible(cond=math.inf)}, "inputs['matrix']: cond must be a finite number"),
        (QUAD, {"rhs": Floats(1.0, -1.0)}, "inputs['rhs']: the interval must be (low, high) with low < high"),
        (QUAD, {"rhs": Permutation("q")}, "inputs['rhs']: along must name a dimension of the signature"),
        (QUAD, {"rhs": Permutation("m")}, "inputs['rhs']: a Permutation along 'm' needs it as the last core"),
        (QUAD, {"rhs": Orthogonal(det=-1)}, "inputs['rhs']: det is None or 1"),
        (QUAD, {"rhs": Drawn()}, "inputs['rhs']: a Drawn input takes a map or a strategy"),
        (QUAD, {"rhs": "symmetric"}, "inputs['rhs'] must be an opzoo.Index, opzoo.Mask or a set"),
        ("()->()", {0: Positive()}, "inputs[0]: the input of a unary elementwise op is declared by domain="),
        (
            REVERSE,
            {"sorted_bucket_idx": Permutation("s", inverse_of="logits")},
            "inputs['sorted_bucket_idx']: inverse_of names 'logits', which must be a Permutation",
        ),
    ],
)
def test_a_set_that_does_not_fit_its_input_is_one_error_naming_it(signature, inputs, message):
    """A set on an input it cannot describe, or with wrong arguments, is a ContractError naming the
    input, in one line."""
    target = {QUAD: io.QuadFormDiagonal, REVERSE: io.ReverseSort}.get(signature, io.Inverse)
    with pytest.raises(opzoo.ContractError) as info:
        spec_of(opzoo.declare(target, signature=signature, inputs=inputs))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_bad_set_is_one_line_at_the_command_line(tmp_path):
    """At the CLI, a declaration whose set does not fit is one ``opzoo: error:`` line, no traceback."""
    (tmp_path / "bad_sets.py").write_text(
        "import opzoo, input_ops\n"
        "QUAD = opzoo.declare(input_ops.QuadFormDiagonal, signature='(m,m),(m,n)->(n)',\n"
        "                     inputs={'rhs': opzoo.SPD()})\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{TESTS}"}
    proc = run_opzoo("check", "bad_sets:QUAD", env=env)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    line = next(t for t in proc.stderr.splitlines() if t.startswith("opzoo: error:"))
    assert "inputs['rhs']: an SPD matrix is a square matrix" in line


def _free(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * 3


@pytest.mark.parametrize("n", [0, 1, 2, 4])
def test_each_set_maps_free_values_into_it(n):
    """Every map puts any free values (zero included, where shrinking goes) inside its set, and
    each projection is the identity on the set."""
    for free in (_free(3, n, n), torch.zeros(2, n, n, dtype=torch.float64)):
        eye = torch.eye(n, dtype=torch.float64)
        sym = Symmetric().draw(free, 6.0)
        assert torch.equal(sym, sym.mT)
        a = SPD(cond=50.0).draw(free, 6.0)
        assert torch.equal(a, a.mT)
        if n:
            ev = torch.linalg.eigvalsh(a)
            assert ev.min() >= 1 - 1e-9 and ev.max() <= 50 * (1 + 1e-9)
            assert (torch.linalg.cond(Invertible(cond=30.0).draw(free, 6.0)) <= 30 * (1 + 1e-9)).all()
        for kind in (Orthogonal(), Rotation()):
            q = kind.draw(free, 6.0)
            torch.testing.assert_close(q.mT @ q, eye.expand_as(q), atol=1e-12, rtol=0)
            torch.testing.assert_close(kind.project(q), q, atol=1e-12, rtol=0)
            if n:
                assert kind != Rotation() or (torch.linalg.det(q) > 0).all()
        torch.testing.assert_close(Symmetric().project(sym), sym, atol=0, rtol=0)
    u = UnitNorm().draw(torch.cat([_free(3, 4), torch.zeros(1, 4, dtype=torch.float64)]), 6.0)
    torch.testing.assert_close(u.norm(dim=-1), torch.ones(4, dtype=torch.float64), atol=1e-12, rtol=0)
    p = Permutation("s").draw(_free(2, 5), 6.0)
    assert torch.equal(p.sort(-1).values, torch.arange(5).expand(2, 5))
    inv = Permutation("s", inverse_of="p").inverse(p)
    assert torch.equal(torch.gather(p, -1, inv), torch.arange(5).expand(2, 5))


def test_an_interval_maps_the_box_onto_itself():
    """Floats(low, high) maps [-box, box] affinely onto the interval less its margin; Positive onto
    (0, box]; an unbounded one leaves the free values as they are."""
    box = torch.tensor([-6.0, 0.0, 6.0], dtype=torch.float64)
    lo, mid, hi = Floats(1.0, 3.0).draw(box, 6.0).tolist()
    assert 1.0 < lo < 1.01 and mid == pytest.approx(2.0) and 2.99 < hi < 3.0
    assert (Positive().draw(box, 6.0) > 0).all()
    assert torch.equal(Floats().draw(box, 6.0), box)
    assert Positive().scales and Floats().scales and not Floats(1.0, 3.0).scales and not UnitNorm().scales


DTYPES = ("float64", "float32")  # torch's linalg has no bfloat16 kernels
QUAD_SYM = opzoo.declare(io.QuadFormDiagonal, signature=QUAD, inputs={"matrix": Symmetric()})
INVERSE = opzoo.declare(
    io.Inverse, signature="(n,n)->(n,n)", inputs={0: Invertible(cond=100.0)}, dtypes=DTYPES
)
CHOLESKY = opzoo.declare(io.Cholesky, signature="(n,n)->(n,n)", inputs={0: SPD(cond=100.0)}, dtypes=DTYPES)
PERMS = {
    "sorted_bucket_idx": Permutation("s"),
    "undo_sorted_bucket_idx": Permutation("s", inverse_of="sorted_bucket_idx"),
}
REVERSE_SORT = opzoo.declare(io.ReverseSort, signature=REVERSE, loop_dims=0, inputs=PERMS)


def _in_set(kind, x):
    """Whether ``x`` is in ``kind`` (to rounding where a decomposition made it)."""
    if x.numel() == 0:
        return True
    if isinstance(kind, Symmetric) and not torch.equal(x, x.mT):
        return False
    if isinstance(kind, SPD):
        ev = torch.linalg.eigvalsh(x)
        return bool(ev.min() >= 1 - 1e-9 and ev.max() <= kind.cond * (1 + 1e-9))
    if isinstance(kind, Invertible):
        return bool(
            (torch.linalg.svdvals(x) >= 1 - 1e-9).all()
            and (torch.linalg.cond(x) <= kind.cond * (1 + 1e-9)).all()
        )
    if isinstance(kind, Orthogonal):
        eye = torch.eye(x.shape[-1], dtype=x.dtype).expand_as(x)
        return bool(torch.allclose(x.mT @ x, eye, atol=1e-12, rtol=0))
    if isinstance(kind, Permutation):
        return torch.equal(x.sort(-1).values, torch.arange(x.shape[-1]).expand_as(x))
    if isinstance(kind, Floats):
        return bool(((x >= kind.low) & (x <= kind.high)).all())
    return True


def _all_in_sets(spec, xs):
    for i, kind in spec.arguments.sets.items():
        assert _in_set(kind, xs[i]), (kind, xs[i])
    for i, j in spec.arguments.inverses.items():
        assert torch.equal(torch.gather(xs[j], -1, xs[i]), torch.arange(xs[i].shape[-1]).expand_as(xs[i]))


ORTHO = opzoo.declare(io.Inverse, signature="(n,n)->(n,n)", inputs={0: Rotation()}, dtypes=DTYPES)
INTERVAL = opzoo.declare(
    io.QuadFormDiagonal, signature=QUAD, inputs={"matrix": Symmetric(), "rhs": Floats(0.5, 2.0)}
)


@pytest.mark.parametrize(
    "declared",
    [QUAD_SYM, INVERSE, CHOLESKY, REVERSE_SORT, ORTHO, INTERVAL],
    ids=["symmetric", "invertible", "spd", "permutations", "rotation", "interval"],
)
def test_every_drawn_fixed_and_edge_input_is_in_its_set(declared):
    """Drawn inputs (at every scale), the fixed and the edge ones, and a shrunk example: each input
    in its declared set, each inverse permutation the inverse of the one it names."""
    spec = spec_of(declared)

    @settings(max_examples=60, derandomize=True, database=None, deadline=None)
    @given(case=cases(spec))
    def drawn(case):
        _all_in_sets(spec, case[1])

    drawn()
    for xs in [*fixed_inputs(spec, "cpu"), *edge_inputs(spec, "cpu")]:
        _all_in_sets(spec, xs)
    big = find(
        cases(spec), lambda case: case[1][0].numel() >= 8, settings=settings(database=None, derandomize=True)
    )
    _all_in_sets(spec, big[1])


def test_a_users_set_is_drawn_by_its_map_or_its_strategy():
    """Drawn(map) maps the free values (drawn, fixed and edge inputs alike); Drawn(strategy) draws
    the input as the strategy does, unscaled, and then there are no fixed or edge inputs."""
    from hypothesis import strategies as st

    mapped = spec_of(
        opzoo.declare(io.QuadFormDiagonal, signature=QUAD, inputs={"rhs": Drawn(lambda f: f.abs() + 1)})
    )

    def ones(shape):
        return st.just(torch.ones(shape, dtype=torch.float64))

    drawn = spec_of(opzoo.declare(io.QuadFormDiagonal, signature=QUAD, inputs={"rhs": Drawn(strategy=ones)}))

    @settings(max_examples=30, derandomize=True, database=None, deadline=None)
    @given(a=cases(mapped), b=cases(drawn))
    def run(a, b):
        assert (a[1][1] >= 1).all()
        assert torch.equal(b[1][1], torch.ones_like(b[1][1]))

    run()
    assert all((xs[1] >= 1).all() for xs in [*fixed_inputs(mapped, "cpu"), *edge_inputs(mapped, "cpu")])
    assert fixed_inputs(drawn, "cpu") == [] and edge_inputs(drawn, "cpu") == []


def _verdicts(declared, props):
    results = check(spec_of(declared), props, devices=["cpu"], profile="ci")
    return {r.prop: r.status for r in results}


def _wrong(cls, reference):
    kw = {
        k: v
        for k, v in vars(reference.contract).items()
        if k in ("signature", "inputs", "loop_dims", "dtypes")
    }
    return opzoo.declare(cls, **kw)


@pytest.mark.parametrize(
    "without, declared, wrong, red",
    [
        (opzoo.declare(io.QuadFormDiagonal, signature=QUAD), QUAD_SYM, io.WrongQuadFormDiagonal, "gradient"),
        (
            opzoo.declare(io.Inverse, signature="(n,n)->(n,n)", dtypes=DTYPES),
            INVERSE,
            io.WrongInverse,
            "accepts",
        ),
        (
            opzoo.declare(
                io.ReverseSort, signature=REVERSE, loop_dims=0, inputs={k: Permutation("s") for k in PERMS}
            ),
            REVERSE_SORT,
            io.WrongReverseSort,
            "gradient",
        ),
    ],
    ids=["symmetric", "invertible", "inverse-permutation"],
)
def test_a_correct_op_is_red_without_its_set_green_with_it_and_a_wrong_twin_red(
    without, declared, wrong, red
):
    """gpytorch's QuadFormDiagonal (rhs gradient 2AB: right for a symmetric A), a linalg.inv
    Function (raises on a singular matrix), reformer's ReverseSort (its backward is the inverse
    permutation): red as their inputs were drawn before, green on every property with the set
    upstream documents, and a twin with its backward off red with it."""
    assert _verdicts(without, [red])[red] == "fail"
    assert_correct(declared, devices=["cpu"])
    assert _verdicts(_wrong(wrong, declared), ["gradient"])["gradient"] == "fail"


def test_the_checks_perturb_inside_the_set():
    """torch's Cholesky backward is symmetric (the forward reads one triangle): entry-by-entry
    differences of an SPD input never agree with it, differences of its projection do. An SPD map
    without a projection is red on gradient; SPD (projected) green on every property but
    double_backward (checked below on the small inputs); 1.5 times the gradient red."""
    spd = SPD(cond=100.0)
    unprojected = opzoo.declare(
        io.Cholesky, signature="(n,n)->(n,n)", inputs={0: Drawn(lambda f: spd.draw(f, 6.0))}, dtypes=DTYPES
    )
    assert _verdicts(unprojected, ["gradient"])["gradient"] == "fail"
    props = [p for p in PROPERTIES if p != "double_backward"]
    assert_correct(CHOLESKY, properties=props, devices=["cpu"])
    spec = spec_of(CHOLESKY)
    for xs in fixed_inputs(spec, "cpu"):
        PROPERTIES["double_backward"](bind(spec, {}, fast=True), *xs)
    assert _verdicts(_wrong(io.WrongCholesky, CHOLESKY), ["gradient"])["gradient"] == "fail"


def test_a_projection_keeps_the_layout_the_op_sees():
    """The projected input has the strides of the input itself: a transposed one, a permuted one, the
    strided slice layout's checks make."""
    from opzoo.testing.checks._bound import _projected, noncontiguous

    x = SPD().draw(_free(2, 3, 3), 6.0)
    for kind in (Symmetric(), Orthogonal(), UnitNorm()):
        for t in (x, noncontiguous(x), x.permute(2, 0, 1).contiguous().permute(1, 2, 0)):
            y = _projected(kind, t)
            assert y.stride() == t.stride() and y.shape == t.shape
    v = noncontiguous(x[0, 0])  # the strided slice of a 1-D input
    assert _projected(UnitNorm(), v).stride() == v.stride() == (2,)


def test_a_forward_that_writes_into_a_projected_input_is_seen():
    """The op sees a projection (a copy) of a symmetric input: hygiene gives it the input itself once
    more, under no_grad, and sees the write."""
    writes = opzoo.declare(io.QuadFormWrites, signature=QUAD, inputs={"matrix": Symmetric()})
    results = check(spec_of(writes), ["hygiene"], devices=["cpu"], profile="ci")
    assert results[0].status == "fail" and "forward mutated its input" in results[0].reason


def test_extremes_scales_only_inputs_whose_set_scaling_keeps():
    """A rotation scaled by 1e4 is no rotation: extremes leaves it as drawn and scales the vector."""
    from opzoo.testing.checks._extremes import extremes

    spec = spec_of(opzoo.declare(io.Rotate, signature="(3,3),(3)->(3)", inputs={"rotation": Rotation()}))
    rotation = Rotation().draw(_free(3, 3), 6.0)
    io.Rotate.SEEN.clear()
    extremes(bind(spec, {}), rotation, torch.ones(3, dtype=torch.float64))
    assert io.Rotate.SEEN and max(io.Rotate.SEEN) <= 1 + 1e-6


MATRIX = "(n,n),(n,k)->(n,k)"
CROSS = "(3,3),(3),(3)->(3)"
AXIS = "(n),(n)->(n)"


@pytest.mark.parametrize(
    "op, wrong, signature, name, kind, without",
    [
        (io.SolveOrthogonal, io.WrongSolveOrthogonal, MATRIX, "frame", Orthogonal(), None),
        (io.RotatedCross, io.WrongRotatedCross, CROSS, "rotation", Rotation(), Orthogonal()),
        (io.AlongAxis, io.WrongAlongAxis, AXIS, "axis", UnitNorm(), None),
    ],
    ids=["orthogonal", "rotation", "unit-norm"],
)
def test_a_backward_right_on_a_manifold_is_green_there_and_its_wrong_twin_red(
    op, wrong, signature, name, kind, without
):
    """A backward that holds only on the declared set: R^-1 M whose backward uses R' for R^-1
    (orthogonal), the backward of R (a x b) for (R a) x (R b) (a rotation: a reflection negates it),
    the backward of (u.v) u for (u.v) u / (u.u) (a unit axis). Red on gradient as drawn without the
    set (for the rotation: with reflections drawn too), green with it, and a wrong twin red with it:
    the checks perturb along the set, so only the backward's part along it is judged, and that part
    still catches a wrong term. Only gradient runs: the one property these sets change the verdict
    of (the suite's time budget)."""
    inputs = {} if without is None else {name: without}
    assert _verdicts(opzoo.declare(op, signature=signature, inputs=inputs), ["gradient"]) == {
        "gradient": "fail"
    }
    declared = opzoo.declare(op, signature=signature, inputs={name: kind}, dtypes=DTYPES)
    assert _verdicts(declared, ["gradient"]) == {"gradient": "pass"}
    assert _verdicts(_wrong(wrong, declared), ["gradient"]) == {"gradient": "fail"}


@pytest.mark.parametrize(
    "kind", [Positive(), Drawn(lambda f: f.abs() + 0.5)], ids=["positive", "a-users-map"]
)
def test_an_input_that_must_be_positive_is_red_undeclared_green_declared_and_a_wrong_twin_red(kind):
    """x * log(s), raising on s <= 0 as upstream code checks its input: red on accepts as drawn
    before (any float for s), green on every property with s declared Positive() or drawn by a
    user's map, and a twin with the gradient for s off red with it. All properties but compile:
    torch.compile cannot trace a branch on a tensor's value (the check), a limitation of torch's."""
    assert _verdicts(opzoo.declare(io.ScaledLog, signature="(),()->()"), ["accepts"]) == {"accepts": "fail"}
    declared = opzoo.declare(io.ScaledLog, signature="(),()->()", inputs={"s": kind})
    assert_correct(declared, properties=[p for p in PROPERTIES if p != "compile"], devices=["cpu"])
    assert _verdicts(_wrong(io.WrongScaledLog, declared), ["gradient"]) == {"gradient": "fail"}
