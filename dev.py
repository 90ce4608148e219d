#!/usr/bin/env python3
"""Set up a local environment on first use, then run opzoo or its tests in it.

    python3 dev.py train [ARGS]   the main job: opzoo train --activation myrelu (ARGS replace that)
    python3 dev.py test [ARGS]    the test suite but its long tier (-m long runs that; ARGS go to pytest)
    python3 dev.py opzoo ARGS     any opzoo command

Set-up needs only python3 and pip: a virtual environment in .venv with the CPU build of torch, opzoo
installed editable with its test extras, and the example plugins under plugins/. It runs again only
when a pyproject.toml or this file changes. OPZOO_TORCH overrides the torch requirement (e.g. a CUDA
build on a GPU machine).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".opzoo-setup"
# The CPU wheel: an unpinned torch would pull a CUDA build of several GB.
TORCH = os.environ.get("OPZOO_TORCH", "torch==2.13.0")


def _plugins() -> list[Path]:
    return sorted(
        p
        for p in (ROOT / "plugins").iterdir()
        if (p / "pyproject.toml").is_file() and not (p / ".test-only").exists()
    )


def _fingerprint() -> str:
    h = hashlib.sha256(TORCH.encode())
    for f in [ROOT / "dev.py", ROOT / "pyproject.toml", *(p / "pyproject.toml" for p in _plugins())]:
        h.update(str(f.relative_to(ROOT)).encode() + f.read_bytes())
    return h.hexdigest()


def _pip(*args: str) -> None:
    # --no-compile: pip byte-compiles what it installs on one core (torch alone: 13 s here); the
    # whole environment is compiled at the end on every core instead (_compile).
    cmd = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    subprocess.run([*cmd, *args], check=True)


def _compile() -> None:
    """Byte-compile the environment's packages on every core (the .pyc files pip would have
    written): where PYTHONDONTWRITEBYTECODE is set, as on this project's machines, nothing else
    would, and every process would compile torch from source as it imports it. The packages' own
    test folders (sympy's, scipy's, sklearn's, numpy's: a fifth of the source, never imported by
    opzoo or its tests) are left out: 17.7-20.7 s -> 13.5-15.4 s here."""
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(PYTHON), "-c", purelib], capture_output=True, text=True, check=True).stdout
    _compileall(site.strip(), exclude=r"site-packages[/\\].+[/\\]tests[/\\]")


#: A conftest that imports, under pytest's assertion rewriting, every module pytest rewrites in each
#: of its processes: those of the distributions that declare a pytest plugin (hypothesis, xdist).
_REWRITTEN = """
import importlib, importlib.metadata, pkgutil

def pytest_configure(config):
    for dist in importlib.metadata.distributions():
        if not any(ep.group == "pytest11" for ep in dist.entry_points):
            continue
        for file in dist.files or []:
            parts = file.parts
            if len(parts) == 1 and file.suffix == ".py" and not file.stem.startswith("__editable__"):
                top = file.stem
            elif len(parts) == 2 and parts[1] == "__init__.py":
                top = parts[0]
            else:
                continue
            try:
                module = importlib.import_module(top)
            except Exception:
                continue
            # a package's modules too ([] for a module: walk_packages(None) would walk sys.path)
            for found in pkgutil.walk_packages(getattr(module, "__path__", []), top + ".", lambda n: None):
                try:
                    importlib.import_module(found.name)
                except Exception:  # an optional dependency missing (hypothesis.extra.django)
                    pass
"""


def _cache_rewrites() -> None:
    """Write pytest's rewritten code of its plugins' packages (hypothesis, xdist) once, beside them.
    pytest rewrites the asserts of every module of a distribution that declares a pytest plugin and
    caches the result only where bytecode may be written: with PYTHONDONTWRITEBYTECODE set, as on
    this project's machines, every pytest process rewrote hypothesis's 80 modules again (0.6-1.4 s
    each; the suite starts dozens). A cached one is read whatever that variable says, and
    rewritten again by pytest itself when stale."""
    import tempfile

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="opzoo-rewrite-") as tmp:
        Path(tmp, "conftest.py").write_text(_REWRITTEN)
        cmd = [str(PYTHON), "-m", "pytest", "-q", "--co", "-p", "no:cacheprovider", tmp]
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(cmd, cwd=tmp, env=env, check=False, **quiet)


def _compile_here() -> None:
    """Byte-compile this checkout's own Python (opzoo, the tests' helpers, the plugins, the
    benchmarks) before the tests: where PYTHONDONTWRITEBYTECODE is set, every test process compiled
    them from source again (measured on a fresh clone: the suite 420.8 s and 806 CPU s without,
    389.0 s and 697 CPU s with). The .pyc files are read as usual, a stale one recompiled by its
    source's time and size; nothing the tests write elsewhere (a plugin in a temporary folder) gets
    one."""
    _compileall(*(str(ROOT / d) for d in ("opzoo", "tests", "plugins", "benchmarks") if (ROOT / d).is_dir()))


def _compileall(*paths: str, exclude: str | None = None) -> None:
    """compileall on every core (but the paths the regular expression ``exclude`` matches); a file
    that does not compile (a package's Python 2 example) is left out, as pip leaves it."""
    cmd = [str(PYTHON), "-m", "compileall", "-q", "-j", "0", *(["-x", exclude] if exclude else []), *paths]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)


def setup() -> None:
    """Create .venv and install everything into it, unless it is already up to date."""
    fingerprint = _fingerprint()
    if STAMP.is_file() and STAMP.read_text() == fingerprint and PYTHON.exists():
        return
    if not PYTHON.exists():
        print("dev.py: creating .venv", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print(f"dev.py: installing {TORCH}, opzoo and the example plugins into .venv", file=sys.stderr)
    _pip(TORCH, "setuptools>=68", "wheel")
    # No build isolation: the plugins build with the setuptools just installed, offline and fast.
    editable = ["-e", f"{ROOT}[test]"]
    for plugin in _plugins():
        editable += ["-e", str(plugin)]
    _pip("--no-build-isolation", *editable)
    # An egg-info left in a source folder shadows the installed metadata (and so the entry points)
    # whenever that folder is the current directory; the editable install does not need it.
    for stale in [*ROOT.glob("*.egg-info"), *ROOT.glob("plugins/*/*.egg-info")]:
        shutil.rmtree(stale, ignore_errors=True)
    _compile()
    _cache_rewrites()
    STAMP.write_text(fingerprint)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("train", "test", "opzoo", "setup"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    try:
        setup()
    except subprocess.CalledProcessError as exc:
        print(f"dev.py: error: set-up failed ({exc}); fix it and run again", file=sys.stderr)
        return 1
    if command == "setup":
        return 0
    if command == "test":
        # On every core (pytest-xdist), unless the arguments choose: -n 0 runs serially.
        chosen = any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in rest)
        parallel = [] if chosen else ["-n", "auto"]
        # loadgroup: load balancing, except that tests of one xdist_group share a worker (the
        # torchrun tests, which each want both cores; an op's property checks, in order).
        parallel += ["--dist", "loadgroup"] if parallel else []
        _compile_here()
        cmd = [str(PYTHON), "-m", "pytest", *parallel, *rest]
    elif command == "train":
        cmd = [str(PYTHON), "-m", "opzoo", "train", *(rest or ["--activation", "myrelu"])]
    else:
        cmd = [str(PYTHON), "-m", "opzoo", *rest]
    return subprocess.call(cmd, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
