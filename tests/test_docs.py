"""The docs hold: their Python examples run as written, their links and the paths they name lead
somewhere, the guides carry no records (hashes, dates), and the numbers they state are the code's."""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import ROOT, run_opzoo

DOCS = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
#: Pages that keep records (measured, dated, at a commit), apart from the guides.
RECORDS = {"real-world.md", "native-ops.md"}
#: Every page a reader may open: the guides, the records, and the READMEs of the repo and its parts.
PAGES = sorted(
    {
        ROOT / "README.md",
        ROOT / "ARCHITECTURE.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "benchmarks").glob("*.md"),
        *(ROOT / "plugins").glob("*/README.md"),
    }
)
#: The guides: the README and every docs page that is no record and is not generated.
GUIDES = [ROOT / "README.md", *(ROOT / "docs" / d for d in DOCS if d not in RECORDS | {"ops.md"})]
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

    def run(*args):
        return run_opzoo(*args, env={"PYTHONPATH": str(site)})

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


def _prose(path):
    """The page without its fenced code blocks (a link or a path shown as code output is not one)."""
    return re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)


def _anchors(path):
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces to
    hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.*)$", _prose(path), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        yield slug if n == 0 else f"{slug}-{n}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_somewhere(page):
    """Each relative link of the page names a file or folder that exists, and its #anchor a heading
    of the page it names."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in set(_anchors(file)):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page):
    """A file of the repo named in the text (`opzoo/cli/_train.py`, tests/test_x.py) exists: a module
    moved or renamed is not left behind in the docs."""
    text = page.read_text()
    named = re.findall(r"(?<![\w/.$-])((?:opzoo|tests|benchmarks|plugins|docs)/[\w./-]*[\w/])", text)
    missing = sorted({n for n in named if not (ROOT / n).exists()})
    assert not missing, missing


@pytest.mark.parametrize("page", GUIDES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_guides_carry_no_records(page):
    """A guide says what opzoo does; when and at which commit something was measured belongs to a
    record page (docs/records/, docs/real-world.md, docs/native-ops.md, benchmarks/RESULTS.md)."""
    text = page.read_text()
    dates = re.findall(r"\b20\d\d-[01]\d-[0-3]\d\b", text)
    commits = [w for w in re.findall(r"\b(?:at|commit) ([0-9a-f]{7,40})\b", text) if re.search(r"\d", w)]
    assert not dates and not commits, (dates, commits)


def test_the_profiles_table_is_the_profiles():
    """docs/testing.md's table of profiles gives each profile's number of examples as the code does."""
    from opzoo.testing import PROFILES

    text = (ROOT / "docs" / "testing.md").read_text()
    table = text.split("| profile | examples |", 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)`[^|]* \| (\d+) \|", table, flags=re.M))
    assert rows == {name: str(values["max_examples"]) for name, (_, values) in PROFILES.items()}
