"""No control character from a plugin or an exception reaches the terminal: every such text is
shown escaped (opzoo.exceptions.printable; issue 30, point 7). The fixture is tests/hostile_text.py,
declared by a fake distribution whose version carries an escape too."""

from __future__ import annotations

import argparse
import os
import re

import pytest
from conftest import run_opzoo, run_pytest
from hostile_text import HOSTILE

from opzoo._records import Failure, Source
from opzoo._table import markdown_table, text_table
from opzoo.exceptions import one_line, printable
from opzoo.testing.running._result import Result

#: What a terminal acts on rather than shows (a newline aside): C0, DEL, C1, bidirectional controls.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """opzoo-escapes installed: the op `escapes`, the op `unloadable` (its import raises with escapes
    in the message) and a hook plugin whose opzoo_ops raises so; the dist's version has an escape."""
    site = tmp_path_factory.mktemp("escapes-site")
    info = site / "opzoo_escapes-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: opzoo-escapes\nVersion: 1.0\x1b[31m\n")
    (info / "entry_points.txt").write_text(
        "[opzoo.ops]\nescapes = hostile_text:Op\nunloadable = hostile_text:Unloadable\n\n"
        "[opzoo]\nescaping_hooks = hostile_text:hooks\n"
    )
    tests = os.path.dirname(__file__)
    cache = tmp_path_factory.mktemp("escapes-cache")
    # COLUMNS: wide enough that `list` cuts no summary before its clear-screen sequence
    env = {"PYTHONPATH": os.pathsep.join([str(site), tests]), "OPZOO_CACHE_DIR": str(cache)}
    return {**env, "COLUMNS": "250"}


def _shown_not_obeyed(text: str) -> None:
    assert not CONTROL.search(text), repr(CONTROL.search(text))
    assert "\\x1b[2J" in text  # the sequence is there, escaped, for the reader to see


@pytest.mark.parametrize(
    "argv, status",
    [
        (["list"], 0),
        (["list", "--format", "markdown"], 0),
        (["info", "escapes"], 0),
        (["info", "unloadable"], 2),
        (["check", "escapes", "-p", "gradient", "--device", "cpu", "--profile", "ci"], 1),
    ],
)
def test_no_control_character_of_a_plugin_or_an_exception_reaches_the_terminal(env, argv, status):
    """A summary, formula, param doc or version with escape sequences (title, clear screen, a fake
    green banner, a carriage return, U+202E, a C1 CSI, DEL), an import, a hook and a backward that
    raise with them: 5 to 9 ESC bytes reached the terminal from each command; now none."""
    out = run_opzoo(*argv, env=env)
    assert out.returncode == status, out.stderr
    _shown_not_obeyed(out.stdout + out.stderr)


def test_no_control_character_reaches_pytest_output(env, tmp_path):
    """pytest --opzoo: the failure report of the op and the load failure of `unloadable` escaped."""
    out = run_pytest(
        "-q", "--opzoo=escapes,unloadable", "--opzoo-property=gradient", "--opzoo-profile", "ci",
        "--opzoo-device", "cpu", env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout[-2000:]
    assert "FAILED ::load[unloadable]" in out.stdout and "FAILED ::gradient[escapes]" in out.stdout
    _shown_not_obeyed(out.stdout + out.stderr)


def test_printable_escapes_every_control_character_and_nothing_else():
    """C0 (tab and carriage return too), DEL, C1, bidirectional controls and the Unicode line
    separators become escapes; a newline only where lines are asked for; letters of any script
    stay; an escaped text is escaped again unchanged."""
    text = "a\x00\t\r\x1b[2J\x7f\x9b\u061c\u200e\u202e\u2028\u2066b\nc é 中 ∂ 🙂"
    one = "a\\x00\\t\\r\\x1b[2J\\x7f\\x9b\\u061c\\u200e\\u202e\\u2028\\u2066b"
    assert printable(text) == one + "\\nc é 中 ∂ 🙂"
    assert printable(text, lines=True) == one + "\nc é 中 ∂ 🙂"
    assert printable(printable(text)) == printable(text)
    assert one_line(ValueError("bad\x1b[2J\nsecond")) == "ValueError: bad\\x1b[2J"


def test_tables_show_every_cell_printable_on_one_line():
    """A cell with escapes or line breaks neither drives the terminal nor breaks the table."""
    rows = [("x\x1b[2J", "a\nb"), (None, "\u202eok")]
    assert text_table(("A", "B"), rows).splitlines() == [
        "A         B",
        "x\\x1b[2J  a\\nb",
        "          \\u202eok",
    ]
    md = markdown_table(("A", "B"), rows).splitlines()
    assert md[2:] == ["| x\\x1b[2J | a b |", "|  | \\u202eok |"]


def test_a_failure_report_and_check_lines_are_printable(capsys):
    """Result.report, and check's skipped, note and BROKEN lines, show a plugin's or an exception's
    words escaped, the report's own lines kept."""
    from opzoo.cli._check import _report

    fail = Result("op", "gradient", "cpu", "fail", reason="bad" + HOSTILE, repro="opzoo check op\nline 2")
    skip = Result("op", "layout", "cpu", "skip", reason="why" + HOSTILE, notes=["note" + HOSTILE])
    assert fail.report().splitlines() == [
        "FAIL gradient[op]: bad" + printable(HOSTILE),
        "  reproduce: opzoo check op",
        "             line 2",
    ]
    broken = [Failure(Source("dist\x1b[2J", "1"), "raised" + HOSTILE)]
    _report(argparse.Namespace(json=False), [fail, skip], ("cpu",), broken)
    _shown_not_obeyed(capsys.readouterr().out)
