"""Shared fixtures. Hypothesis profiles are registered by opzoo.testing (see docs/testing.md)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import warm

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

# One intra-op thread per process, set before any worker starts (pytest-xdist's workers, and the
# subprocesses tests start, inherit it). The suite runs a worker per core and each starts processes
# of its own: torch's default of a thread per core in each oversubscribed the cores, and OpenMP
# threads that wait on each other spin (the property tests ran 1.3x faster with one). Set only if
# unset, so a run can still ask for more; tests that are about thread counts set their own.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# SIGINT at its default, as a terminal gives it. A suite started in the background by a shell without
# job control (`cmd &` in a script) inherits SIGINT ignored, and so would every command it starts: the
# tests that check what a plugin changed in the signal dispositions ("ignored SIGINT") then saw no
# change to report and failed, depending on how the suite was started. A handler (not an ignore) is
# reset to the default in the processes started from here, so each test's commands start alike.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# SIGHUP likewise: a suite started under `nohup` inherits it ignored, and so did the commands the
# tests signal, which then ran on to their end (test_hostile's SIGHUP test: exit 1, not 129).
if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

#: The examples of a sweep (one claim over many ops, each a test: "every registered op passes"): ten
#: in the default run, which keeps CI's suite within minutes; the profile's (ci: 50) in the long tier,
#: ``-m long``, whose record is docs/records/long-tests.md. The ``examples`` argument of such a test.
SWEEP = [10, pytest.param(None, marks=pytest.mark.long, id="all")]

# The ops the suite checks, by kind, derived rather than listed, so that a new op is tested without
# touching this file: the built-ins from opzoo's own pyproject.toml (the entry points it installs),
# the example plugins' ops from the registry (the README's set-up installs plugins/*, except those
# marked .test-only, which tests install themselves).


def _classify(entry_points: dict[str, str]) -> dict[str, list[str]]:
    """Each op's name under its kind: function (elementwise), general (another signature),
    learnable (an nn.Module) or surrogate (a declared surrogate gradient)."""
    import torch

    from opzoo.core._contract import contract_of
    from opzoo.core._registry import import_path

    kinds: dict[str, list[str]] = {"function": [], "general": [], "learnable": [], "surrogate": []}
    for name, path in entry_points.items():
        target = import_path(path)
        contract = contract_of(target)
        if issubclass(target, torch.nn.Module):
            kind = "learnable"
        elif contract.surrogate is not None:
            kind = "surrogate"
        else:
            kind = "function" if contract.sig.elementwise else "general"
        kinds[kind].append(name)
    return kinds


def example_dists() -> dict[str, Path]:
    """The example plugin distributions the set-up installs: name -> source folder."""
    found = {}
    for folder in sorted((ROOT / "plugins").iterdir()):
        if (folder / "pyproject.toml").is_file() and not (folder / ".test-only").exists():
            found[tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"]] = folder
    return found


BUILTIN_ENTRY_POINTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "entry-points"
]["opzoo.ops"]
_KINDS = _classify(BUILTIN_ENTRY_POINTS)
FUNCTIONS = _KINDS["function"]
# Beyond elementwise: n-ary ops and reductions, each with a gufunc signature.
GENERAL = _KINDS["general"]
LEARNABLE = _KINDS["learnable"]
# Surrogate-gradient ops: a backward that is deliberately not the derivative (docs/surrogates.md).
SURROGATE = _KINDS["surrogate"]


def _example_ops() -> list[str]:
    import opzoo

    dists = set(example_dists())
    reg = opzoo.load()
    return [name for name in reg.names() if any(s.dist in dists for s in reg.sources(name))]


EXAMPLE_OPS = _example_ops()


def run_opzoo(*args: str, env: dict[str, str] | None = None, timeout: float = 300, cold: bool = False, **kw):
    """Run ``python -m opzoo ARGS`` in a subprocess; return the CompletedProcess. Started warm
    (tests/warm.py: forked from a process that has imported torch) unless ``cold`` or where a warm
    start would differ; OPZOO_TEST_COLD=1 starts every one cold."""
    full_env = {**os.environ, **(env or {})}
    if not cold and (done := warm.run(list(args), full_env, timeout, **kw)) is not None:
        return done
    return subprocess.run(
        [sys.executable, "-m", "opzoo", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        **kw,
    )


def run_pytest(*args: str, env: dict[str, str], cwd: Path | str):
    """Run ``python -m pytest ARGS`` in a subprocess (no cache folder), started warm as ``run_opzoo``'s
    commands are; return the CompletedProcess."""
    argv = ["-p", "no:cacheprovider", *args]
    if (done := warm.run(argv, {**os.environ, **env}, None, module="pytest", cwd=str(cwd))) is not None:
        return done
    return subprocess.run(
        [sys.executable, "-m", "pytest", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )


def install_fixture(target: Path, name: str) -> str:
    """Install plugins/NAME into ``target`` (not into the environment); return it for PYTHONPATH.

    pip builds from a private copy of the source: built in place, the build/ and egg-info folders
    in plugins/NAME were shared by the xdist workers that install the same fixture at once, and one
    such install failed."""
    source = target.parent / f"{target.name}-source"
    shutil.copytree(ROOT / "plugins" / name, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"installing plugins/{name} failed:\n{out.stdout}{out.stderr}")
    return str(target)


@pytest.fixture(scope="session")
def broken_plugin_path(tmp_path_factory) -> str:
    """plugins/opzoo-broken-fixtures, installed into a private folder, for PYTHONPATH."""
    return install_fixture(tmp_path_factory.mktemp("broken-site"), "opzoo-broken-fixtures")


@pytest.fixture(scope="session")
def general_plugin_path(tmp_path_factory) -> str:
    """plugins/opzoo-general-fixtures, installed into a private folder, for PYTHONPATH."""
    return install_fixture(tmp_path_factory.mktemp("general-site"), "opzoo-general-fixtures")


@pytest.fixture(scope="session")
def surrogate_plugin_path(tmp_path_factory) -> str:
    """plugins/opzoo-surrogate-fixtures, installed into a private folder, for PYTHONPATH."""
    return install_fixture(tmp_path_factory.mktemp("surrogate-site"), "opzoo-surrogate-fixtures")


@pytest.fixture(autouse=True, scope="session")
def _no_time_limit_in_process():
    """Checks run in this process get no wall-clock limit: on a loaded machine (CI is one) a slow
    but correct check past the 60 s default would fail as 'hung', a verdict the machine chose, not
    the op (flat_where_wrong's shrinking took 60 s under a load of 5 on 2 cores, 9 s alone). The
    limit's own tests pass theirs (test_hostile); `opzoo check` subprocesses keep --timeout."""
    from opzoo.testing.running import _runner

    before, _runner.TIMEOUT = _runner.TIMEOUT, None
    yield
    _runner.TIMEOUT = before
