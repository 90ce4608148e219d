"""A plugin's import is kept from ending, hanging or altering opzoo (opzoo/core/_guard.py): torch's
global state watched and restored (opzoo/core/_torch_state.py), the child's verdicts cached by what was
installed."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys

import pytest
import torch

from opzoo._records import Source
from opzoo.core import _guard, _probe
from opzoo.core._torch_state import TorchState


def test_changes_to_torchs_global_state_are_named_and_undone():
    """Flags, a module attribute replaced, a class attribute added over its base's (Tensor.__mul__
    lives on the C base class): each named, and restore() puts every one back."""
    relu, had_mul = torch.relu, "__mul__" in vars(torch.Tensor)
    before = TorchState.now()
    try:
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        torch.relu = lambda x: x
        torch.Tensor.__mul__ = lambda self, other: self
        assert before.changes() == [
            "grad mode turned off",
            "default dtype set to torch.float64",
            "torch.relu replaced",
            "torch.Tensor.__mul__ replaced",
        ]
        before.restore()
        assert before.changes() == []
        assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
        assert torch.relu is relu and ("__mul__" in vars(torch.Tensor)) == had_mul
        assert (torch.ones(2) * 3).tolist() == [3.0, 3.0]
    finally:  # whatever happened above, this process's torch is left as it was
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)
        torch.relu = relu
        if not had_mul and "__mul__" in vars(torch.Tensor):
            del torch.Tensor.__mul__


def test_torchs_own_wrapping_is_no_change():
    """Importing torch._dynamo replaces torch.manual_seed by a wrapper of it (functools.wraps, a
    torch module): a plugin that imports it has changed nothing."""
    seed = torch.manual_seed
    before = TorchState.now()
    try:
        torch.manual_seed = functools.wraps(seed)(lambda *a, **k: seed(*a, **k))
        assert before.changes() == []
        torch.manual_seed = lambda n: None  # not a wrapper of it: a change
        assert before.changes() == ["torch.manual_seed replaced"]
    finally:
        torch.manual_seed = seed


def test_a_verdict_is_tried_once_then_read_from_the_cache(tmp_path, monkeypatch):
    """The child is started once per entry and fingerprint, in this process and the next (a new
    Guard reading the same file); another time limit is another verdict."""
    calls = []

    def fake_trial(ref, timeout, call=None):
        calls.append((ref, timeout))
        return "importing it ended the process with exit status 0", []

    monkeypatch.setattr(_guard, "trial", fake_trial)
    source = Source("pluggy", "1.0", "opzoo.ops: x = some_plugin:Op", "entry point")
    path = tmp_path / "cache" / _guard.CACHE_FILE

    def guard(timeout=60.0):
        return _guard.Guard(probe=True, timeout=timeout, verdicts=_guard.Verdicts(path))

    first = guard()
    assert first.refusal("some_plugin:Op", source) == "importing it ended the process with exit status 0"
    assert first.refusal("some_plugin:Op", source) == "importing it ended the process with exit status 0"
    assert guard().refusal("some_plugin:Op", source) == "importing it ended the process with exit status 0"
    assert calls == [("some_plugin:Op", 60.0)]
    guard(timeout=5.0).refusal("some_plugin:Op", source)
    assert calls == [("some_plugin:Op", 60.0), ("some_plugin:Op", 5.0)]
    # opzoo's own ops are not probed, nor entries that no installed distribution declares
    assert guard().refusal("opzoo.ops.relu:MyReLU", Source("opzoo", "0.1.0")) is None
    assert guard().refusal("fake:Op", Source(None, None)) is None
    assert len(calls) == 2


def test_a_changed_installed_file_changes_the_fingerprint(tmp_path, monkeypatch):
    """A plugin reinstalled or edited (a file's size or time) is tried again."""
    site = tmp_path / "site"
    (site / "fakeplugin-1.0.dist-info").mkdir(parents=True)
    (site / "fakeplugin.py").write_text("x = 1\n")
    (site / "fakeplugin-1.0.dist-info" / "METADATA").write_text("Name: fakeplugin\nVersion: 1.0\n")
    (site / "fakeplugin-1.0.dist-info" / "RECORD").write_text(
        "fakeplugin.py,,\nfakeplugin-1.0.dist-info/METADATA,,\n"
    )
    monkeypatch.syspath_prepend(str(site))
    before = _guard._dist_fingerprint("fakeplugin")
    assert before and before == _guard._dist_fingerprint("fakeplugin")
    os.utime(site / "fakeplugin.py", ns=(1, 1))
    assert _guard._dist_fingerprint("fakeplugin") != before


def test_an_unreadable_or_foreign_cache_is_no_cache(tmp_path):
    """A cache file that is garbage, of another format, or a folder: every verdict is tried again,
    and nothing fails."""
    path = tmp_path / _guard.CACHE_FILE
    for text in (
        "not json",
        '{"format": 999, "verdicts": {"k": {"verdict": "x", "loaded": []}}}',
        '{"format": 2, "verdicts": [1]}',
        '{"format": 2, "verdicts": {"k": "x"}}',
        '{"format": 2, "verdicts": {"k": {"verdict": "x", "loaded": [["f", "big", 1, 1]]}}}',
    ):
        path.write_text(text)
        assert _guard.Verdicts(path).get("k") == (False, None)
    path.unlink()
    path.mkdir()
    verdicts = _guard.Verdicts(path)
    verdicts.put("k", None)  # cannot be written: no cache, no error
    assert path.is_dir()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the child is forked")
def test_the_probe_reports_an_exit_a_hang_a_change_and_a_clean_import(tmp_path, monkeypatch):
    """probe() itself, on four tiny modules (the hang's limit is 2 s; the others return at once)."""
    (tmp_path / "p_exit.py").write_text("import os\nos._exit(3)\n")
    (tmp_path / "p_hang.py").write_text("import threading\nthreading.Event().wait()\n")
    (tmp_path / "p_grad.py").write_text("import torch\ntorch.set_grad_enabled(False)\n")
    (tmp_path / "p_fine.py").write_text("import torch\nx = torch.ones(1)\nprint('noise')\n")
    (tmp_path / "p_raises.py").write_text("raise ValueError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _probe.probe("p_exit", 60.0).startswith("importing it ended the process with exit status 3")
    assert _probe.probe("p_hang", 2.0).startswith("importing it did not finish within 2 s")
    assert _probe.probe("p_grad", 60.0).startswith(
        "importing it changes torch's global state (grad mode turned off)"
    )
    assert _probe.probe("p_fine", 60.0) is None
    assert _probe.probe("p_raises", 60.0) is None  # raising is left to the import here, recorded as usual


#: A hook plugin's source, as the watch names it.
HOOK = Source("reach", "1.0", "opzoo: reach = reach", "hook")


def test_a_change_to_opzoos_own_code_is_refused_and_undone():
    """A module global, a field of a record in a table (frozen, yet object.__setattr__ sets it) and a
    function's code, changed in a watched import: each named, all undone, the plugin refused."""
    import opzoo.testing.properties as properties

    resolve, gradient, code = (
        properties._resolve,
        properties.PROPERTIES["gradient"],
        properties.choose.__code__,
    )
    guard = _guard.Guard(probe=False)
    try:
        with pytest.raises(_guard.Refused) as refused, guard.watching(HOOK):
            properties._resolve = lambda where: lambda *args, **kwargs: None
            object.__setattr__(gradient, "fixed", 0)
            properties.choose.__code__ = (lambda *args: None).__code__
        assert str(refused.value) == (
            "importing it changes opzoo's own code (opzoo.testing.properties._resolve replaced, "
            "opzoo.testing.properties.PROPERTIES['gradient'].fixed replaced, "
            "opzoo.testing.properties.choose's code replaced), which every op's verdict depends on: "
            "undone, and not loaded"
        )
        assert properties._resolve is resolve and gradient.fixed == 2 and properties.choose.__code__ is code
    finally:  # whatever happened above, the checker is left as it was
        properties._resolve = resolve
        object.__setattr__(gradient, "fixed", 2)
        properties.choose.__code__ = code


def test_opzoos_own_imports_and_runs_are_no_change():
    """Loading the rest of opzoo (submodules set as package attributes), loading a registry and
    checking an op (caches filled): nothing named."""
    from opzoo.core._own_state import OwnState

    before = OwnState.now()
    with before.seeing_loads():  # each module walked as it loads: opzoo's modules change no other's
        _probe.load_all_of_opzoo()
    import opzoo
    from opzoo.testing import check_property

    registry = opzoo.load(autoload=False)
    assert check_property(registry.info("myrelu"), "gradient", profile="ci", examples=2).status == "pass"
    assert before.changes() == [] and before.process_changes() == []


LOADS_THEN_PATCHES = """
import sys
from opzoo._records import Source
from opzoo.core import _guard

assert "opzoo.testing.checks._gradient" not in sys.modules
guard = _guard.Guard(probe=False)
try:
    with guard.watching(Source("reach", "1.0", "opzoo: reach = reach", "hook")):
        import opzoo.testing.checks._gradient as gradient
        original = gradient.gradient
        gradient.gradient = lambda *args, **kwargs: None
except _guard.Refused as refused:
    print(refused)
print(gradient.gradient is original)
"""


def test_a_checker_module_the_import_loads_then_patches_is_seen_and_undone():
    """The watch walks each opzoo module as soon as its own code has run: a module no one had loaded
    before the plugin's import, loaded by it and then patched, is named and put back (before: not
    in the snapshot, not seen). In a fresh process, where the gradient check is not loaded yet."""
    out = subprocess.run([sys.executable, "-c", LOADS_THEN_PATCHES], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "importing it changes opzoo's own code (opzoo.testing.checks._gradient.gradient replaced), which "
        "every op's verdict depends on: undone, and not loaded",
        "True",
    ]


def test_a_changed_working_directory_or_signal_is_undone_and_noted(tmp_path):
    """Not refused (no verdict depends on them): put back, and a note names the plugin and what it did."""
    here, term = os.getcwd(), signal.getsignal(signal.SIGTERM)
    guard = _guard.Guard(probe=False)
    try:
        with guard.watching(HOOK):
            os.chdir(tmp_path)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        assert os.getcwd() == here and signal.getsignal(signal.SIGTERM) is term
        assert guard.notes == [
            f"importing reach 1.0 (opzoo: reach = reach) changed the working directory to {str(tmp_path)!r}, "
            "ignored SIGTERM (undone)"
        ]
    finally:
        os.chdir(here)
        signal.signal(signal.SIGTERM, term)


def _fake_dist(site, name: str, version: str, files: dict[str, str]) -> None:
    """A distribution installed into ``site``: its files and a dist-info that lists them."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    for path, text in files.items():
        (site / path).write_text(text)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in files) + f"{info.name}/METADATA,,\n")


EXITS = "import os\nos._exit(0)\n"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the child is forked")
@pytest.mark.parametrize("how", ["upgraded", "edited in place", "touched"])
def test_a_dependency_that_changes_is_tried_again(tmp_path, monkeypatch, how):
    """A verdict holds while what the import loaded is unchanged, whichever distribution a file is
    in: a dependency upgraded (a dist-info renamed: its folder's time), edited in place (no folder
    changes: the loaded file's size), or only touched (its time). Before, the cached 'fine' held
    and `opzoo list` exited 0 with no output."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no __pycache__ to change the folder
    site = tmp_path / "site"
    _fake_dist(site, "plug-a", "1.0", {"plugA.py": "import depmod\n"})
    _fake_dist(site, "dep", "1.0", {"depmod.py": "VALUE = 1\n"})
    monkeypatch.syspath_prepend(str(site))
    source = Source("plug-a", "1.0", "opzoo.ops: pluga = plugA", "entry point")

    def guard():
        return _guard.Guard(probe=True, verdicts=_guard.Verdicts(tmp_path / "cache.json"))

    assert guard().refusal("plugA", source) is None
    folders = _guard._path_folders()
    depmod = site / "depmod.py"
    if how == "upgraded":
        depmod.write_text(EXITS)
        (site / "dep-1.0.dist-info").rename(site / "dep-2.0.dist-info")
        assert _guard._path_folders() != folders
    elif how == "edited in place":
        depmod.write_text(EXITS)
        assert _guard._path_folders() == folders  # only the loaded list sees it
    else:
        before = depmod.stat()
        os.utime(depmod, ns=(before.st_atime_ns, before.st_mtime_ns + 1))
        assert _guard.Verdicts(tmp_path / "cache.json").get(guard()._key("plugA", source, None)) == (
            False,
            None,
        )
        return
    refused = guard().refusal("plugA", source)
    assert refused is not None and refused.startswith("importing it ended the process with exit status 0")


FORKER = """
import os, signal
r, w = os.pipe()
if os.fork() == 0:  # the daemon: never returns to the import
    os.close(r)
    with open(os.environ["OPZOO_TEST_PIDS"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    os.write(w, b"x")
    while True:
        signal.pause()
os.close(w)
os.read(r, 1)  # the daemon's pid is on file before the import ends
"""

DETACHED = """
import os, signal
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # a classic daemon: a session of its own, its parent gone
        with open(os.environ["OPZOO_TEST_PIDS"], "a") as f:
            f.write(f"{os.getpid()}\\n")
        os.write(w, b"x")
        while True:
            signal.pause()
    os._exit(0)
os.close(w)
os.read(r, 1)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the child is forked")
def test_a_plugin_that_forks_at_import_is_judged_by_its_import_and_leaves_no_process(tmp_path, monkeypatch):
    """A daemon forked at import held the report's pipe open: the probe waited its whole limit, called
    the finished import 'did not finish', and left the daemon (a copy of `opzoo list`) behind. The
    probe now waits for the importer's exit, and ends every process the import left, detached or
    not. Exact: each daemon's pid is on file before its import ends, and the probe reaps every one
    before it returns, so no pid is left to signal."""
    (tmp_path / "p_fork.py").write_text(FORKER)
    (tmp_path / "p_detached.py").write_text(DETACHED)
    pids = tmp_path / "pids"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("OPZOO_TEST_PIDS", str(pids))
    try:
        assert _probe.probe("p_fork", 60.0) is None
        assert _probe.probe("p_detached", 60.0) is None
        daemons = [int(pid) for pid in pids.read_text().split()]
        assert len(daemons) == 2
        for pid in daemons:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:  # without the fix, the daemons are still there
        for pid in [int(p) for p in pids.read_text().split()] if pids.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_undo_compares_by_identity_and_keeps_what_opzoo_itself_sets():
    """A tensor in opzoo's globals replaced is named and put back without calling its __eq__
    (ambiguous for a tensor); the default registry, which a plugin may load through
    opzoo.registry(), stays."""
    import opzoo.testing.properties as properties
    from opzoo.core import _default

    before, ones = _default._default, torch.ones(2)
    properties.SCALE = ones
    try:
        with pytest.raises(_guard.Refused, match=r"opzoo\.testing\.properties\.SCALE replaced"):
            with _guard.Guard(probe=False).watching(HOOK):
                properties.SCALE = torch.zeros(2)
                _default._default = "loaded meanwhile"
        assert properties.SCALE is ones and _default._default == "loaded meanwhile"
    finally:
        _default._default = before
        vars(properties).pop("SCALE", None)


def test_a_snapshot_reuses_the_last_walk_only_while_nothing_changed():
    """The walk over opzoo's modules is reused while every place holds the same objects: a change
    made between two snapshots is the second one's starting point, a change after it is named."""
    import opzoo.testing.properties as properties
    from opzoo.core._own_state import OwnState

    resolve = properties._resolve
    try:
        first = OwnState.now()
        assert OwnState.now().places is first.places  # nothing changed: the same walk
        properties._resolve = lambda where: None  # before the next snapshot: its starting point
        second = OwnState.now()
        assert second.places is not first.places and second.changes() == []
        properties.choose = lambda *args: None
        assert second.changes() == ["opzoo.testing.properties.choose replaced"]
        second.restore()
        assert properties._resolve is not resolve and first.changes() == [
            "opzoo.testing.properties._resolve replaced"
        ]
    finally:
        first.restore()
    assert properties._resolve is resolve and first.changes() == []
