"""`opzoo scan`: discovery in children, inference that never makes a correct op red, the table."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from opzoo.core._discover import CHANGED, ENDED, FAILED, HUNG, OK, discover, modules_of
from opzoo.exceptions import OpZooError
from opzoo.testing.scan._record import Inferred, declaration, declaration_text, status_of

TESTS = str(Path(__file__).parent)


@pytest.fixture
def on_path(monkeypatch):
    """tests/ on sys.path, so that scanpkg is an installed package (the forked children inherit it)."""
    monkeypatch.syspath_prepend(TESTS)


def test_discovery_judges_each_module_in_a_child_and_imports_nothing_here(on_path):
    """Each module's verdict (ok, failed, ended the process, changed torch's state) and the Functions
    of the good ones, with nothing of the package imported in the asking process."""
    before = {name for name in sys.modules if name.startswith("scanpkg")}
    found = discover("scanpkg", timeout=60)
    status = {m.module: m.status for m in found.modules}
    assert status == {
        "scanpkg": OK,
        "scanpkg.broken": FAILED,
        "scanpkg.dtype": CHANGED,
        "scanpkg.exits": ENDED,
        "scanpkg.ops": OK,
        "scanpkg.wrong": OK,
    }
    paths = [f.path for f in found.functions]
    assert paths[:3] == ["scanpkg.ops:SoftPlus", "scanpkg.ops:Softmax", "scanpkg.ops:Heaviside"]
    assert "scanpkg.dtype:Doubled" not in paths  # its module changed torch: not used
    forms = {f.path: (f.form, f.forward) for f in found.functions}
    assert forms["scanpkg.ops:SoftPlus"] == ("setup_context", "(x)")
    assert forms["scanpkg.ops:Softmax"] == ("classic", "(ctx, x, dim=-1)")
    assert forms["scanpkg.ops:Neuron.Tanh"] == ("classic", "(ctx, x)")  # in a class's body
    why = {m.module: m.why for m in found.failed}
    assert "scanpkg_missing_dependency" in why["scanpkg.broken"]
    assert "exit status 3" in why["scanpkg.exits"]
    assert "default dtype" in why["scanpkg.dtype"]
    assert {name for name in sys.modules if name.startswith("scanpkg")} == before


def test_discovery_goes_on_after_a_module_that_hangs(tmp_path, monkeypatch):
    """A module whose import never returns is named hung, and the next one is still imported."""
    pkg = tmp_path / "hangpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a_hangs.py").write_text("while True:\n    pass\n")
    (pkg / "b_fine.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = discover("hangpkg", timeout=1)
    assert [(m.module, m.status) for m in found.modules] == [
        ("hangpkg", OK),
        ("hangpkg.a_hangs", HUNG),
        ("hangpkg.b_fine", OK),
    ]


def test_modules_are_listed_without_importing(on_path):
    """The module list comes from the folders; an unknown package is an error naming it."""
    assert modules_of("scanpkg.ops") == ["scanpkg.ops"]
    assert "scanpkg.exits" in modules_of("scanpkg")
    with pytest.raises(OpZooError, match="no installed package named 'nosuchpkg_xyz'"):
        modules_of("nosuchpkg_xyz")
    with pytest.raises(OpZooError, match="no installed package named 'scanpkg.nothere'"):
        modules_of("scanpkg.nothere")


# -- inference -------------------------------------------------------------------------------------

#: What scan makes of each correct op of tests/scanpkg/ops.py: a declaration (its keyword arguments,
#: a by-design gradient as the start of its reason), or a piece of why it cannot infer one.
EXPECTED = {
    "SoftPlus": {},
    "Softmax": {"signature": "(n)->(n)", "params": ["dim"]},
    "Log": {"domain": (0.0, math.inf)},
    "Neuron.Tanh": {},
    "Heaviside": {"gradient": "by design: the forward is flat"},
    "GuidedReLU": {"gradient": "by design: the backward is not linear", "linear_in_grad": False},
    "Dropout": {"random": True},
    "Scaled": "'alpha' as a tensor or as a number",
    "Gram": "declare its signature",
}
#: The correct ops whose backward scan leaves unchecked as a derivative (by design).
NOT_CHECKED = {"Heaviside", "GuidedReLU"}
#: The correct ops that declare their own contract in the class: checked under it, nothing inferred.
DECLARED = {"DeclaredGram"}


def _shown(kwargs: dict) -> dict:
    """``kwargs`` as EXPECTED spells them: params by name, a by-design reason cut to EXPECTED's length."""
    out = {k: (list(v) if k == "params" else v) for k, v in kwargs.items()}
    if "gradient" in out:
        out["gradient"] = out["gradient"][: len("by design: the backward is not linear")]
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_inference_declares_only_what_it_can_tell(on_path, name):
    """Each correct op gets the declaration it needs, or "cannot infer" with why (never a guess)."""
    from opzoo.testing.scan._infer import infer

    rec = infer(f"scanpkg.ops:{name}")
    kwargs, why = declaration(rec)
    expected = EXPECTED[name]
    if isinstance(expected, str):
        assert kwargs is None and status_of(rec) == "cannot infer"
        assert expected in why, why
    else:
        gradient = expected.get("gradient", "")
        assert status_of(rec) == ("inferred, gradient not checked" if gradient else "inferred"), why
        got = _shown(kwargs)
        if gradient:
            got["gradient"] = got["gradient"][: len(gradient)]
        assert got == expected


def test_per_input_domains_and_shapes_become_input_sets_and_contract_fields():
    """An n-ary record's domains and undifferentiated inputs are declared as opzoo.Floats per input,
    its shape findings as broadcast/min_rank; the pasted text says the same, and declares."""
    import opzoo

    rec = Inferred("pkg.mod:Op", "classic", signature="(),()->()", tensors=("x", "y", "t"))
    rec.domain = {"x": (0.0, math.inf), "y": (0.0, 1.0)}
    rec.no_grad = ("t", "y")
    rec.broadcast, rec.min_rank = False, 1
    kwargs, why = declaration(rec)
    assert why == ""
    assert kwargs["inputs"] == {
        "x": opzoo.Floats(0.0, math.inf),
        "y": opzoo.Floats(0.0, 1.0, grad=False),
        "t": opzoo.Floats(grad=False),
    }
    assert (kwargs["broadcast"], kwargs["min_rank"]) == (False, 1)
    text = declaration_text(rec)
    sets = "'x': opzoo.Floats(0.0, math.inf), 'y': opzoo.Floats(0.0, 1.0, grad=False), "
    assert "inputs={" + sets + "'t': opzoo.Floats(grad=False)}," in text
    assert "broadcast=False," in text and "min_rank=1," in text


@pytest.mark.parametrize("name", ["SoftPlus", "Softmax", "Log", "Dropout"])
def test_a_wrong_twin_is_inferred_as_its_correct_op(on_path, name):
    """The backward is judged by the checks, never trusted by the inference: a wrong twin gets the
    same declaration as its correct op."""
    from opzoo.testing.scan._infer import infer

    assert declaration(infer(f"scanpkg.wrong:{name}")) == declaration(infer(f"scanpkg.ops:{name}"))


# -- the scan, whole -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scanned():
    """tests/scanpkg scanned once (the gradient property only: the point is the inference), and the
    package's modules this process had imported before and after."""
    from opzoo.testing.scan._scan import scan

    sys.path.insert(0, TESTS)
    try:
        before = {name for name in sys.modules if name.startswith("scanpkg")}
        report = scan("scanpkg", properties=["gradient"], jobs=2, timeout=60)
        after = {name for name in sys.modules if name.startswith("scanpkg")}
    finally:
        sys.path.remove(TESTS)
    return report, before, after


class NormAlong(torch.autograd.Function):
    """An L2 norm along a ``dim`` the caller must give (no default), as a new user's was."""

    @staticmethod
    def forward(ctx, x, dim, keepdim=False):
        return x.norm(dim=dim, keepdim=keepdim)

    @staticmethod
    def backward(ctx, g):
        raise NotImplementedError  # never called: scan reads the forward's arguments first


def test_a_dim_without_a_default_is_cannot_infer_with_what_to_declare():
    """A required argument named dim is no tensor: "cannot infer", saying to declare it a Dim (it
    was probed as a tensor: "sum(): argument 'dim' must be tuple of ints, not Tensor")."""
    from opzoo.testing.scan._infer import infer

    rec = infer("test_scan:NormAlong")
    assert status_of(rec) == "cannot infer"
    assert "forward takes 'dim' with no default" in rec.why and "{'dim': opzoo.Dim()}" in rec.why, rec.why


def test_a_function_with_its_own_contract_is_checked_under_it(on_path):
    """A Function whose class declares opzoo_contract (a Gram matrix, whose signature scan could not
    tell) is not probed: nothing inferred, nothing to paste, checked under its author's contract (a
    new user's Clamp01, declared with a reference and kinks, was offered a bare declare())."""
    from opzoo.testing.scan._infer import infer

    for name in DECLARED:
        rec = infer(f"scanpkg.ops:{name}")
        assert rec.own and not rec.why and status_of(rec) == "declared by its class"
        assert declaration(rec) == ({}, "")


def test_scan_never_makes_a_correct_op_red(scanned):
    """Every correct op of scanpkg/ops.py is green or "cannot infer" with why; none is red."""
    report, _, _ = scanned
    rows = {r.path.partition(":")[2]: r for r in report.rows if r.path.startswith("scanpkg.ops:")}
    assert set(rows) == set(EXPECTED) | DECLARED
    for name, row in rows.items():
        assert not row.failed, (name, row.verdict())
        if name in DECLARED:
            assert row.status == "declared by its class" and row.inferred == "its own opzoo_contract"
            assert row.verdict().startswith("green (1 pass, 0 fail") and row.declaration == ""
        elif isinstance(EXPECTED[name], str):
            assert row.status == "cannot infer" and row.why and not row.results
        elif name in NOT_CHECKED:
            assert row.status == "inferred, gradient not checked" and row.verdict().startswith("green (")
        else:
            assert row.status == "inferred" and row.verdict().startswith("green (1 pass, 0 fail")
            assert row.declaration.startswith(f"opzoo.declare(\n    scanpkg.ops.{name},")


def test_scan_finds_the_wrong_twin_of_each_inferred_op_red(scanned):
    """The wrong twins get the same declaration, and their gradient check fails."""
    report, _, _ = scanned
    wrong = {r.path: r.failed for r in report.rows if r.path.startswith("scanpkg.wrong:")}
    assert wrong == {f"scanpkg.wrong:{n}": ["gradient"] for n in ("SoftPlus", "Softmax", "Log", "Dropout")}
    assert report.red


def test_scan_lists_the_modules_it_did_not_use_and_imports_nothing_here(scanned):
    """The modules that failed, ended the process or changed torch's state are listed with why, in
    the table too; the calling process imported nothing of the package."""
    from opzoo.testing.scan._scan import table

    report, before, after = scanned
    assert [(m.module, m.status) for m in report.failures] == [
        ("scanpkg.broken", FAILED),
        ("scanpkg.dtype", CHANGED),
        ("scanpkg.exits", ENDED),
    ]
    assert after == before
    text = table(report)
    assert "not importable: scanpkg.exits (ended the process: " in text
    assert text.endswith(
        "scanpkg: 14 Function(s) in 6 module(s) (3 did not import): "
        "1 declared by their class and checked (1 green, 0 red), "
        "11 inferred and checked (7 green, 4 red), 2 cannot infer"
    )


def test_scan_command(tmp_path):
    """`opzoo scan`: JSON rows and exit 1 when an inferred verdict is red; an unknown package is one
    error line."""
    import json

    from conftest import run_opzoo

    env = {"PYTHONPATH": TESTS, "OPZOO_CACHE_DIR": str(tmp_path)}
    out = run_opzoo("scan", "scanpkg.wrong", "--property", "gradient", "-j", "2", "--json", env=env)
    assert out.returncode == 1, out.stderr
    rows = json.loads(out.stdout)["rows"]
    assert [(r["path"], r["verdict"].split(" (")[0]) for r in rows] == [
        ("scanpkg.wrong:SoftPlus", "red: gradient"),
        ("scanpkg.wrong:Softmax", "red: gradient"),
        ("scanpkg.wrong:Log", "red: gradient"),
        ("scanpkg.wrong:Dropout", "red: gradient"),
    ]
    out = run_opzoo("scan", "nosuchpkg_xyz", env=env)
    assert (out.returncode, out.stderr) == (2, "opzoo: error: no installed package named 'nosuchpkg_xyz'\n")


def test_probing_runs_under_the_time_limit(tmp_path, monkeypatch):
    """A Function whose forward never returns is "cannot infer" once the limit has passed, and the
    record says it timed out (its worker's other tasks are not run)."""
    from opzoo.testing.scan._infer import infer_task
    from opzoo.testing.scan._scan import _Target

    (tmp_path / "hangop.py").write_text(
        "import torch\n\n\nclass Op(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        while True:\n            pass\n\n"
        "    @staticmethod\n    def backward(ctx, g):\n        return g\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = infer_task(_Target("hangop:Op"), "infer", timeout=1)
    assert rec.timed_out and rec.why == "probing it ran past 1 s: it hung?"


def test_a_reduction_is_told_the_signature_it_likely_has():
    """Outputs of another shape stop scan (a guess is no declaration), but a reduction's message
    asks about the signature it likely has: along the last dimension (with its dim argument), one
    that keeps it, one of every element at a fixed rank; other shapes only say to declare one."""
    from opzoo.testing.scan._record import signature_hint

    def hint(*shapes, tensors=("x",), params=None):
        rec = Inferred("m:F", tensors=tensors, params=params or {})
        return signature_hint([torch.empty(s) for s in shapes], rec, (3, 4))

    along = hint((3,), params={"dim": ("dim", -1), "keepdim": ("flag", False)})
    assert along == (
        "outputs of shape [(3,)] from inputs of shape (3, 4): declare its signature (a reduction along "
        "the last dimension? signature='(n)->()', params={'dim': opzoo.Dim()})"
    )
    assert hint((3, 1)).endswith("signature='(n)->(1)')")
    assert hint((), tensors=("x", "y")).endswith("signature='(n,m),(n,m)->()', loop_dims=0)")
    assert "signature='(n)->(),()'" in hint((3,), (3,))
    assert hint((3, 3)) == "outputs of shape [(3, 3)] from inputs of shape (3, 4): declare its signature"
    assert hint((3,), (3, 1)).endswith("declare its signature")
