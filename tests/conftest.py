"""Shared fixtures. Hypothesis profiles are registered by opzoo.testing (see docs/testing.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The built-in ops, by kind, and the ops of the example plugins under plugins/ (which the README's
# set-up installs). Named here, not read from the registry, so that collecting a test module never
# depends on what is installed.
FUNCTIONS = [
    "myrelu",
    "leaky_relu",
    "elu",
    "selu",
    "softplus",
    "silu",
    "mish",
    "gelu",
    "gelu_tanh",
    "hardtanh",
    "hardsigmoid",
    "hardswish",
    "softsign",
    "legendre_p3",
]
# Beyond elementwise: n-ary ops and reductions, each with a gufunc signature.
GENERAL = ["linear", "sse", "softmax", "logsumexp", "layer_norm"]
LEARNABLE = ["prelu", "swish_beta"]
# Surrogate-gradient ops: a backward that is deliberately not the derivative (docs/surrogates.md).
SURROGATE = ["ste_round", "ste_sign", "heaviside", "grad_reverse"]
EXAMPLE_OPS = ["bentid", "isru", "logcosh"]


def run_opzoo(*args: str, env: dict[str, str] | None = None, timeout: float = 300, **kw):
    """Run ``python -m opzoo ARGS`` in a subprocess; return the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "opzoo", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        **kw,
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
