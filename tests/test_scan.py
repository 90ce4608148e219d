"""`opzoo scan`: discovery in children, inference that never makes a correct op red, the table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from opzoo.core._discover import CHANGED, ENDED, FAILED, HUNG, OK, discover, modules_of
from opzoo.exceptions import OpZooError

TESTS = str(Path(__file__).parent)


@pytest.fixture
def on_path(monkeypatch):
    """tests/ on sys.path, so that scanpkg is an installed package (the forked children inherit it)."""
    monkeypatch.syspath_prepend(TESTS)


def test_discovery_judges_each_module_in_a_child_and_imports_nothing_here(on_path):
    """Each module's verdict (ok, failed, ended the process, changed torch's state) and the Functions
    of the good ones, with nothing of the package imported in the asking process."""
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
    assert not any(name.startswith("scanpkg") for name in sys.modules)


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
    assert "scanpkg" not in sys.modules
    with pytest.raises(OpZooError, match="no installed package named 'nosuchpkg_xyz'"):
        modules_of("nosuchpkg_xyz")
    with pytest.raises(OpZooError, match="no installed package named 'scanpkg.nothere'"):
        modules_of("scanpkg.nothere")
