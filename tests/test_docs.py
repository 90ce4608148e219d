"""The Python examples in the docs run as written."""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import ROOT

DOCS = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
#: Pages with no Python example, and why.
NO_EXAMPLES = {
    "ops.md": "a table generated from the registry (test_ops checks it is current)",
    "real-world.md": "a record written by benchmarks/real_world.py, which runs its reproductions",
    "native-ops.md": "a record written by benchmarks/native_ops.py, which runs its reproductions",
}
#: A block whose first line starts so is a piece of a larger program, shown, not run.
FRAGMENT = "# (a fragment"


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("doc", DOCS)
def test_python_examples_run(doc, capsys):
    """Every python block of every docs page runs, in order, in one namespace (marked fragments
    excepted); a page without one is listed, with the reason, in NO_EXAMPLES."""
    blocks = python_blocks(ROOT / "docs" / doc)
    if doc in NO_EXAMPLES:
        assert not blocks, f"{doc} has examples now: remove it from NO_EXAMPLES"
        return
    namespace: dict = {}
    runnable = [b for b in blocks if not b.startswith(FRAGMENT)]
    assert runnable, f"docs/{doc} has no runnable python example"
    for block in runnable:
        exec(compile(block, f"docs/{doc}", "exec"), namespace)


def test_readme_plugin_example_installs_and_checks(tmp_path):
    """The README's ten-line plugin, installed as a real distribution, is listed, checked and trained."""
    import os
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n# my_ops.py\n(.*?)```", readme, flags=re.S).group(1)
    toml = re.search(r"```toml\n# pyproject.toml of your package\n(.*?)```", readme, flags=re.S).group(1)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "my_ops.py").write_text(code)
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "my-ops"\nversion = "0.1"\n[tool.setuptools]\npy-modules = ["my_ops"]\n' + toml
    )
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(pkg),
        ],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "opzoo", *args], capture_output=True, text=True, env=env)

    listing = run("list")
    assert "square" in listing.stdout and "my-ops 0.1" in listing.stdout
    check = run("check", "square", "--profile", "ci", "--device", "cpu")
    assert check.returncode == 0, check.stdout
    train = run(
        "train", "--activation", "square", "--steps", "5", "--d-in", "10", "--hidden", "4", "--lr", "1e-6"
    )
    assert train.returncode == 0, train.stderr
    # The README's own command, as written: it trains (no divergence) and the loss falls.
    command = re.search(r"```console\n(opzoo train --activation square[^\n]*)\n```", readme).group(1)
    readme_run = run(*shlex.split(command)[1:])
    assert readme_run.returncode == 0, readme_run.stderr
    logged = [float(line.split()[1]) for line in readme_run.stdout.splitlines()]
    assert len(logged) == 5 and logged[-1] < 1e-4 * logged[0]
