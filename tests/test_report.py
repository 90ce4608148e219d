"""`opzoo report`: one self-contained HTML file of verdicts, derivative plots and error histograms."""

from __future__ import annotations

import builtins
import html
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import run_opzoo
from hostile_ops import ON_PATH

import opzoo
from opzoo.cli import main
from opzoo.exceptions import ConfigError
from opzoo.report import _report

# One worker runs this module, so that its `report` (a run of the checks and the plots) is made once.
pytestmark = pytest.mark.xdist_group("report")

WRONG = "wrong_ops:WrongSign"  # an import path: reported with no registration (tests/ is on sys.path)


class _Page(HTMLParser):
    """Every tag's attributes, and whether the page parsed to its end."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.closed_html = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        self.closed_html |= tag == "html"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    """A report of myrelu and a wrong op, through the command line: its path, its text, its exit."""
    path = tmp_path_factory.mktemp("report") / "report.html"
    args = ["report", "myrelu", WRONG, "--html", str(path), "-p", "gradient", "--examples", "3", "-j", "1"]
    code = main(args)
    return path, path.read_text(encoding="utf-8"), code


def test_the_report_parses_and_embeds_every_plot(report):
    """The HTML parses; it has one <img> per plot (a derivative plot and a histogram per elementwise
    op), each a base64 PNG data: URI; nothing refers outside the file."""
    path, text, code = report
    page = _Page()
    page.feed(text)
    page.close()
    assert page.closed_html
    imgs = [attrs for tag, attrs in page.tags if tag == "img"]
    assert len(imgs) == 4  # two ops, each a derivative plot and an error histogram
    assert all((a.get("src") or "").startswith("data:image/png;base64,") for a in imgs)
    assert not [tag for tag, _ in page.tags if tag in ("script", "link", "iframe", "object")]
    refs = [v for _, attrs in page.tags for k, v in attrs.items() if k in ("src", "href") and v]
    assert all(v.startswith("data:") for v in refs), refs
    assert "http:" not in text and "https:" not in text


def test_a_failing_op_is_reported_with_its_reproduce_line(report):
    """The wrong op fails gradient: exit 1, a FAIL in the verdict table, and its reproduce command
    in the page."""
    _, text, code = report
    assert code == 1
    assert "<td class=fail" in text
    assert html.escape(f"opzoo check {WRONG} --property gradient --profile ci --examples 3") in text


def test_missing_matplotlib_is_one_line(monkeypatch, capsys, tmp_path):
    """Without matplotlib, `opzoo report` says in one line how to get it, exits 2 and writes nothing."""
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    path = tmp_path / "r.html"
    assert main(["report", "myrelu", "--html", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == "opzoo: error: opzoo report needs matplotlib: pip install 'opzoo[train]'\n"
    assert not path.exists()


def test_the_mutation_section_gives_the_score_and_each_verdict():
    """--mutate: the score, and each mutant's verdict with the property that killed it (two
    mutants on myrelu: the sign flip killed, the identity control unchanged)."""
    section = _report.mutation_section([opzoo.info("myrelu")], "ci", mutants=["identity", "sign"])
    assert section.startswith("<h2>Mutation score: 100.0%</h2>"), section
    assert "<td>sign</td><td>killed</td>" in section, section


def test_the_mutation_section_runs_the_reports_properties():
    """`opzoo report -p hygiene --mutate` judges each mutant by hygiene alone, as `opzoo mutate -p
    hygiene` does: the sign flip, which only a derivative sees, survives (it ran every property)."""
    section = _report.mutation_section([opzoo.info("myrelu")], "ci", mutants=["sign"], props=["hygiene"])
    assert "<td>sign</td><td>survived</td>" in section, section


def test_the_report_is_written_as_every_opzoo_file(tmp_path):
    """As opzoo/_files.py writes every file: a regular file replaced whole (no temp file left), a
    folder refused with one line, a symlink followed (the file it names replaced, the link kept)."""
    target = tmp_path / "r.html"
    target.write_text("old")
    _report.write(target, "<html></html>")
    assert target.read_text() == "<html></html>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    with pytest.raises(ConfigError, match="it is a folder"):
        _report.write(tmp_path, "x")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    _report.write(link, "<html>new</html>")
    assert link.is_symlink() and target.read_text() == "<html>new</html>"


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_the_report_renders_in_a_headless_browser(report, tmp_path):
    """Chromium renders the file (file://, nothing else reachable) to a screenshot that is not blank:
    its pixels vary, as text and plots make them. In CI a missing browser is a failure, not a skip:
    .ci/run installs Debian's chromium, so that the one page a person looks at is looked at."""
    browser = _browser()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("no headless browser, in CI: .ci/run installs one (apt-get install chromium)")
        pytest.skip("no headless browser installed (apt-get install chromium; in CI this fails)")
    plt = _report.pyplot()
    path, _, _ = report
    shot = tmp_path / "shot.png"
    args = [
        browser,
        "--headless",
        # The page is opzoo's own file, with no script: no sandbox (which needs namespaces a container
        # or root may not have), no GPU, and none of the connections Chromium makes on its own, which a
        # closed network refuses; a fresh profile, so that no other run's state is read.
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--hide-scrollbars",
        "--window-size=1000,1400",
    ]
    out = subprocess.run(
        [*args, f"--screenshot={shot}", path.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert shot.exists(), out.stderr[-2000:]
    pixels = plt.imread(shot)[..., :3]
    assert pixels.std() > 0.05  # a blank page is one colour: std 0
    assert (pixels < 0.5).mean() > 0.005  # some dark pixels: text and lines were drawn


# -- the op's code runs on the workers, the evidence included -------------------------------------


def _report_of(op: str, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    """`opzoo report hostile_ops:OP` run in ``tmp_path`` with the checks of the forward alone, so
    that its backward runs only on the plot's grid and in the error measurement."""
    path = tmp_path / "r.html"
    argv = ("report", f"hostile_ops:{op}", "--html", str(path), "-p", "accepts", "--examples", "3", *args)
    out = run_opzoo(*argv, env=ON_PATH, cwd=tmp_path)
    assert "Traceback" not in out.stderr
    assert path.is_file(), out.stderr
    return out, path.read_text(encoding="utf-8")


@pytest.mark.parametrize("op, raised", [("ExitBackward", "SystemExit: 0"), ("BaseExcBackward", "Weird: odd")])
def test_an_op_that_raises_anything_on_the_plot_grid_still_gets_its_report(tmp_path, op, raised):
    """SystemExit or a BaseException of the op's own on the grid is a note, as an Exception is
    (before: exit 0 with no file and no message, or a traceback)."""
    out, page = _report_of(op, tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"no plot: {raised}" in page and f"no error histogram: {raised}" in page


@pytest.mark.parametrize(
    "op, args, why",
    [
        ("OsExitBackward", (), "the check ended its worker process (exit status 0)"),
        ("HangBackward", ("--timeout", "2"), "timed out after 2 s: the op hung?"),
    ],
)
def test_an_op_that_ends_or_hangs_its_worker_fails_the_report_which_is_written(tmp_path, op, args, why):
    """An op that calls os._exit or never returns on the grid: the report is written, says so, and
    the command exits 1 (before: exit 0 with no file, or a hang past --timeout)."""
    out, page = _report_of(op, tmp_path, *args)
    assert out.returncode == 1, out.stderr
    assert f"no plot and no error histogram: {why}" in page
    assert out.stdout.rstrip().endswith("0 failed check(s), 1 op(s) that ended or hung their worker")


def test_the_report_writes_nothing_in_the_working_directory(tmp_path):
    """Only the file asked for: no `.hypothesis/` folder of cached constants in the working
    directory (before: 57 files under ./.hypothesis/constants/ from the error samples)."""
    out = run_opzoo("report", "myrelu", "--html", "r.html", "-p", "accepts", "--examples", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
