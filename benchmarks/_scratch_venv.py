"""A scratch virtual environment for the records: torch 2.13.0 (the CPU wheel), opzoo from this
checkout, and pinned packages, reused when it already holds exactly those.

Used by benchmarks/real_world.py; not part of opzoo and not run by CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
# The CPU wheel, pinned: an unpinned torch would pull a CUDA build of several GB.
TORCH = "torch==2.13.0"
# opzoo's own small dependencies, at the versions the project's .venv holds: hypothesis draws the
# examples, so its version is part of what a derandomized `--profile ci` run sees.
OPZOO_DEPS = ("pluggy==1.7.0", "hypothesis==6.170.17", "numpy==2.4.6", "setuptools>=68", "wheel")


def python_of(path: Path) -> Path:
    """The interpreter of the virtual environment at ``path``."""
    return path / ("Scripts" if os.name == "nt" else "bin") / ("python.exe" if os.name == "nt" else "python")


def ensure(path: Path, pinned: Sequence[str], *, log: bool = True) -> Path:
    """Create the environment at ``path`` with torch, opzoo (editable, from this checkout) and the
    ``pinned`` packages (installed ``--no-deps``), unless a stamp says it already holds exactly
    those; return its interpreter."""
    python = python_of(path)
    stamp = path / ".opzoo-records"
    wanted = "\n".join([TORCH, *OPZOO_DEPS, f"-e {ROOT}", *pinned])
    if python.exists() and stamp.is_file() and stamp.read_text() == wanted:
        return python
    if log:
        print(f"setting up the scratch venv {path} ({len(pinned)} pinned packages)", file=sys.stderr)
    has_pip = (
        python.exists()
        and not subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode
    )
    if not has_pip:
        # missing, or half made (a run interrupted while ensurepip ran left one without pip): afresh
        venv.EnvBuilder(with_pip=True, clear=True).create(path)

    def pip(*args: str) -> None:
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args], check=True
        )

    pip(TORCH, *OPZOO_DEPS)
    # No build isolation: opzoo (and an sdist among the pinned) build with the setuptools just
    # installed, offline; --no-deps: nothing else comes along (torch stays the CPU build).
    pip("--no-build-isolation", "--no-deps", "-e", str(ROOT))
    if pinned:
        pip("--no-build-isolation", "--no-deps", *pinned)
    stamp.write_text(wanted)
    return python
