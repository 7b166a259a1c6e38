"""Unicode bidirectional controls in names (issue 45): written as `\\u202e` escapes in text,
Markdown, CSV and the bundle's HTML, as control characters are; JSON keeps the name."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
from tests.test_errors import invoke

NAME = "fw\u202edrawkcab\u2066x\u2069\u200f"
BIDI = "\u202e\u2066\u2069\u200f"


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = Path(shutil.copy(SAMPLE_TRACES / "plain_decode.sqlite", tmp_path / "r.sqlite"))
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'forward'", (NAME,))
    return path


@pytest.mark.parametrize("fmt", ["text", "md", "csv"])
def test_bidi_controls_are_escaped_in_text_markdown_and_csv(fmt, export):
    result = invoke(["analyze", str(export), "-f", fmt, "--no-color"])
    assert result.exit_code == 0, result.output
    assert not any(c in result.stdout for c in BIDI)
    assert "fw\\u202edrawkcab" in result.stdout


def test_json_keeps_a_name_with_bidi_controls(export):
    result = invoke(["analyze", str(export), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert not any(c in result.stdout for c in BIDI)
    assert NAME in result.stdout.encode().decode("unicode_escape") or NAME in json.dumps(
        json.loads(result.stdout), ensure_ascii=False
    )


def test_bidi_controls_are_escaped_in_the_bundles_pages(export, tmp_path):
    bundle = tmp_path / "bundle"
    result = invoke(["report", str(export), "-o", str(bundle), "-q"])
    assert result.exit_code == 0, result.output
    pages = [p for p in bundle.rglob("*") if p.suffix in (".html", ".md", ".json")]
    assert pages
    for page in pages:
        assert not any(c in page.read_text() for c in BIDI), page.name


@pytest.mark.parametrize("command", [["plot", "timeline"], ["plot", "steps"]])
def test_characters_the_font_lacks_draw_without_a_warning(command, export, tmp_path):
    """matplotlib warned of each glyph the font lacks, quoting a NUL raw on stderr, even
    under -q (issue 45)."""
    import warnings

    with sqlite3.connect(export) as connection:
        connection.execute(
            "UPDATE NVTX_EVENTS SET text = 'fw' || char(0) || char(1) || ? WHERE text = ?",
            ("\U0001d518\U00010348", NAME),
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke([*command, str(export), "-o", str(tmp_path / "p.png"), "-q"])
    assert result.exit_code == 0, result.output
    assert not [w for w in caught if "Glyph" in str(w.message)]
    assert result.stderr == ""
