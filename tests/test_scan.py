"""`opzoo scan`: discovery in children, inference that never makes a correct op red, the table."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from opzoo.core._discover import CHANGED, ENDED, FAILED, HUNG, OK, discover, modules_of
from opzoo.exceptions import OpZooError
from opzoo.testing.scan._record import NOT_YET, Inferred, declaration, declaration_text, status_of

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

#: What scan makes of each correct op of tests/scanpkg/ops.py: a declaration (its keyword arguments),
#: or a piece of why it cannot infer one.
EXPECTED = {
    "SoftPlus": {},
    "Softmax": {"signature": "(n)->(n)", "params": ["dim"]},
    "Log": {"domain": (0.0, math.inf)},
    "Heaviside": "the forward is flat",
    "GuidedReLU": "not linear in grad_output",
    "Dropout": "random=True",
    "Scaled": "'alpha' as a tensor or as a number",
    "Gram": "declare its signature",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_inference_declares_only_what_it_can_tell(on_path, name):
    """Each correct op gets the declaration it needs, or "cannot infer" with why (never a guess)."""
    from opzoo.testing.scan._infer import infer

    rec = infer(f"scanpkg.ops:{name}")
    kwargs, why = declaration(rec)
    expected = EXPECTED[name]
    if isinstance(expected, str):
        assert kwargs is None and status_of(rec) == "cannot infer"
        assert expected in why + rec.by_design, why
    else:
        assert status_of(rec) == "inferred", why
        assert {k: (list(v) if k == "params" else v) for k, v in kwargs.items()} == expected


def test_a_field_not_yet_declarable_is_named_with_its_point():
    """A record that needs a field the Contract lacks says which, and the point of issue 29 that adds
    it; its declaration is still shown as it will be spelled."""
    rec = Inferred("pkg.mod:Op", "classic", signature="(),()->()", tensors=("x", "y"))
    rec.domain = {"x": (0.0, math.inf), "y": (0.0, math.inf)}
    rec.broadcast = False
    kwargs, why = declaration(rec)
    assert kwargs is None
    assert why == f"needs {NOT_YET['domain']}; {NOT_YET['broadcast']}"
    text = declaration_text(rec)
    assert "inputs={'x': opzoo.Floats(0.0, math.inf), 'y': opzoo.Floats(0.0, math.inf)}," in text
    assert "broadcast=False," in text


@pytest.mark.parametrize("name", ["SoftPlus", "Softmax", "Log"])
def test_a_wrong_twin_is_inferred_as_its_correct_op(on_path, name):
    """The backward is judged by the checks, never trusted by the inference: a wrong twin gets the
    same declaration as its correct op."""
    from opzoo.testing.scan._infer import infer

    assert declaration(infer(f"scanpkg.wrong:{name}")) == declaration(infer(f"scanpkg.ops:{name}"))
