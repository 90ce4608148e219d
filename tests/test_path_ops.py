"""`opzoo check`, `opzoo mutate`, `opzoo report` and `pytest --opzoo` take an op by import path
(``pkg.mod:Class``, core/_path_op.py; check's one-line errors are in test_declare.py): the module is
tried in a forked child, then imported in the workers only, never in the command's own process; a
path that does not import, whose import raises, ends its process or hangs, is one line."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import run_opzoo, run_pytest

#: A correct Function, with a summary, in a module that writes the pid of each process importing it
#: (and that process's parent's) to the file named by OPZOO_TEST_MARKS.
MARKED = (
    "import os, torch\n"
    "with open(os.environ['OPZOO_TEST_MARKS'], 'a') as f:\n"
    "    f.write(f'{os.getpid()} {os.getppid()}\\n')\n"
    "class Twice(torch.autograd.Function):\n"
    '    """Twice its input, marked."""\n'
    "    @staticmethod\n"
    "    def forward(ctx, x):\n"
    "        return 2 * x\n"
    "    @staticmethod\n"
    "    def backward(ctx, g):\n"
    "        return 2 * g\n"
)


def _marked(tmp_path) -> dict[str, str]:
    (tmp_path / "marked.py").write_text(MARKED)
    return {"PYTHONPATH": str(tmp_path), "OPZOO_TEST_MARKS": str(tmp_path / "marks")}


def _importers(tmp_path) -> tuple[set[int], set[int]]:
    """The pids of the processes that imported the module, and of their parents."""
    lines = [tuple(map(int, line.split())) for line in (tmp_path / "marks").read_text().splitlines()]
    assert len(lines) >= 2, lines  # the child that tried it, and a worker at least
    return {pid for pid, _ in lines}, {ppid for _, ppid in lines}


def _never_here(tmp_path, command: int | None = None) -> None:
    """Every process that imported the module was forked by one process (the command, ``command``
    where its pid is known), which did not import it itself (had it, its forks would have
    inherited the module, and it would be written once)."""
    pids, parents = _importers(tmp_path)
    assert len(parents) == 1 and not pids & parents, (pids, parents)
    if command is not None:
        assert parents == {command} and command not in pids, (command, pids)


def test_check_never_imports_an_import_paths_module(tmp_path):
    """A child of the command tries the path first (a path that does not import is one line), each
    worker imports it again: the command itself never."""
    argv = ("check", "marked:Twice", "-p", "hygiene", "--profile", "ci", "--device", "cpu", "-j", "1")
    out = run_opzoo(*argv, env=_marked(tmp_path))
    assert out.returncode == 0 and "1 passed, 0 failed" in out.stdout, out.stdout + out.stderr
    _never_here(tmp_path)


def test_mutate_never_imports_an_import_paths_module(tmp_path):
    """The control's checks, the facts and the mutant's checks all run in workers: the command
    makes the control and the mutants of a spec it never resolves."""
    argv = ("mutate", "marked:Twice", "-p", "accepts,gradient", "-m", "sign", "--profile", "ci", "-j", "1")
    out = run_opzoo(*argv, env=_marked(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "score: 1 of 1 mutant(s) killed (100.0%)" in out.stdout, out.stdout
    assert "marked:Twice  sign" in out.stdout and "gradient" in out.stdout
    _never_here(tmp_path)


def test_report_never_imports_an_import_paths_module(tmp_path):
    """The checks, the plot's curves, the error samples and the mutation score come from workers;
    the page shows the op's summary, which the child that tried the path read."""
    page = tmp_path / "r.html"
    argv = ("report", "marked:Twice", "--html", str(page), "-p", "accepts", "--examples", "3", "--mutate")
    out = run_opzoo(*argv, "-j", "1", env=_marked(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"wrote {page}: 1 op(s), 2 plot(s), 0 failed check(s)"), out.stdout
    text = page.read_text()
    assert "<p>Twice its input, marked.</p>" in text and "<h2>Mutation score:" in text
    assert "<td>marked:Twice</td><td>sign</td><td>survived</td>" in text  # judged by -p accepts alone
    _never_here(tmp_path)


def test_the_pytest_plugin_never_imports_an_import_paths_module(tmp_path):
    """The collecting process (pytest's own, whose pid a conftest writes) never imports it, under
    --opzoo and --opzoo-mutate alike."""
    env = _marked(tmp_path)
    (tmp_path / "conftest.py").write_text(
        f"import os\nwith open({str(tmp_path / 'pytest.pid')!r}, 'w') as f:\n    f.write(str(os.getpid()))\n"
    )
    args = ("--opzoo=marked:Twice", "--opzoo-property=accepts,gradient", "--opzoo-profile=ci", "-q")
    mutate = ("--opzoo-mutate=marked:Twice", "--opzoo-mutant=sign")
    out = run_pytest(*args, *mutate, "--opzoo-device", "cpu", "-n", "0", env=env, cwd=tmp_path)
    assert out.returncode == 0 and "4 passed" in out.stdout, out.stdout + out.stderr
    _never_here(tmp_path, int((tmp_path / "pytest.pid").read_text()))


#: (path, the module's text, why): a path that does not import, and a module that raises, ends its
#: process or hangs at import; each is said in one line.
BAD = {
    "missing": ("nosuch.module:Op", None, "ModuleNotFoundError: No module named 'nosuch'"),
    "raises": ("rude:Op", "raise ValueError('not today')\n", "ValueError: not today"),
    "exits": (
        "rude:Op",
        "import os\nos._exit(0)\n",
        "importing it ended the process with exit status 0 (os._exit? a crash?)",
    ),
    "hangs": (
        "rude:Op",
        "import time\ntime.sleep(3600)\n",
        "importing it did not finish within 2 s (OPZOO_IMPORT_TIMEOUT)",
    ),
}


def _bad(tmp_path, case: str) -> tuple[str, dict[str, str], str]:
    path, text, why = BAD[case]
    if text is not None:
        (tmp_path / "rude.py").write_text(text)
    env = {"PYTHONPATH": str(tmp_path), "OPZOO_IMPORT_TIMEOUT": "2"}
    return path, env, f"cannot import {path!r}: {why}"


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("command", ["mutate", "report"])
def test_a_bad_import_path_is_one_line(tmp_path, command, case):
    """Exit 2 and one line, before anything runs (before: a module ending its process at import
    ended the command, which its supervisor made 70; one that hung, hung it)."""
    path, env, line = _bad(tmp_path, case)
    extra = ["--html", str(tmp_path / "r.html")] if command == "report" else []
    out = run_opzoo(command, path, "-p", "accepts", *extra, env=env, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.splitlines() == [f"opzoo: error: {line}"], out.stderr
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_import_path_is_one_failing_test_of_the_pytest_plugin(tmp_path, case):
    """The op's one load test fails with the line (an op that fails to load is a failing test,
    not one per property, as for a plugin's op); pytest itself goes on and exits 1."""
    path, env, line = _bad(tmp_path, case)
    args = (f"--opzoo={path}", "--opzoo-property=accepts,gradient", "--opzoo-device", "cpu", "-q")
    out = run_pytest(*args, "-n", "0", env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"failed to load: {line}" in out.stdout.splitlines(), out.stdout
    assert out.stdout.splitlines()[-1].startswith("1 failed in"), out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_the_child_reads_the_summary_and_the_workers_resolve_the_rest(tmp_path, monkeypatch):
    """In this process: by_path's PathSpec carries the name and the summary the child read, and
    imports nothing until a field the child did not send is asked for; a mutant made of it is a
    PathSpec too, resolved where it is used."""
    from opzoo.core._path_op import PathSpec, by_path, settled
    from opzoo.testing.mutation._mutant_ops import mutant_spec

    env = _marked(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("OPZOO_TEST_MARKS", env["OPZOO_TEST_MARKS"])
    monkeypatch.delitem(sys.modules, "marked", raising=False)
    spec = by_path("marked:Twice")
    assert isinstance(spec, PathSpec) and spec.name == "marked:Twice"
    assert spec.summary == "Twice its input, marked."
    control = mutant_spec(spec, "identity")
    assert isinstance(control, PathSpec) and control.name == "marked:Twice~identity"
    (mark,) = (tmp_path / "marks").read_text().splitlines()
    assert int(mark.split()[1]) == os.getpid()  # the child only
    assert settled(control).target.__qualname__ == "Twice~identity" and settled(spec).kind == "function"
    assert len((tmp_path / "marks").read_text().splitlines()) == 2  # now here, once
    del sys.modules["marked"]


def test_the_opzoo_script_finds_a_module_of_the_folder_it_runs_in(tmp_path):
    """`opzoo check mine:Twice` run in the folder that holds mine.py, with no PYTHONPATH, as
    `python -m` and pytest find it (the console script has no such sys.path entry: a new user's
    'cannot import ... ModuleNotFoundError' for the module beside them)."""
    import subprocess

    from test_declare import TWICE

    (tmp_path / "mine.py").write_text("import torch\n" + TWICE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = os.path.join(os.path.dirname(sys.executable), "opzoo")
    out = subprocess.run(
        [script, "check", "mine:Twice", "-p", "accepts", "--device", "cpu", "-j", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed, 0 failed" in out.stdout
