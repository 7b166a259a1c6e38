"""The bug-report bundle: files written, links that resolve, provenance right and private."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.builders import ExportBuilder
from tests.conftest import PEER_TRACES
from tests.test_plot import decode_loop
from trace_gaps.cli import app

BUNDLE_FILES = {
    "report.md",
    "report.json",
    "timeline-median.png",
    "timeline-worst.png",
    "steps.png",
    "report.html",
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_bundle(export: Path, out: Path, *options: str) -> str:
    result = CliRunner().invoke(app, ["report", str(export), "-o", str(out), *options])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str, str]:
    """A decode-loop export, its sha256 before, the bundle folder written from it, and stderr."""
    builder = decode_loop(ExportBuilder(tmp_path_factory.mktemp("export")))
    builder.meta("CUDA_TRACE_SCOPE", "ProcessTree", table="META_DATA_CAPTURE")
    builder.meta(
        "PROCESS_0:ENVIRONMENT_VARIABLE", 'HF_TOKEN="secret-token"', table="META_DATA_CAPTURE"
    )
    builder.meta("PROCESS_0:USER_NAME", "alice", table="META_DATA_CAPTURE")
    export = builder.write("decode.sqlite")
    before = sha256(export)
    out = tmp_path_factory.mktemp("bundle") / "bundle"
    return export, out, before, write_bundle(export, out)


def test_the_bundle_holds_the_report_its_json_and_three_pictures(bundled):
    _, out, _, stderr = bundled
    assert {p.name for p in out.iterdir()} == BUNDLE_FILES
    assert all(f"wrote {out / name}" in stderr for name in BUNDLE_FILES)
    for picture in ("timeline-median.png", "timeline-worst.png", "steps.png"):
        assert (out / picture).read_bytes().startswith(b"\x89PNG")
    markdown = (out / "report.md").read_text()
    assert "![Median step: decode\\_step #1, process 100](timeline-median.png)" in markdown
    assert "![Slowest step: decode\\_step #3, process 100](timeline-worst.png)" in markdown


def test_report_json_is_what_analyze_writes_as_json(bundled):
    export, out, _, _ = bundled
    analyzed = CliRunner().invoke(app, ["analyze", str(export), "-f", "json"])
    assert analyzed.exit_code == 0
    assert (out / "report.json").read_text() == analyzed.stdout
    assert json.loads(analyzed.stdout)["timelines"] == []


def test_every_link_in_report_md_resolves_to_a_file_written(bundled):
    _, out, _, _ = bundled
    markdown = (out / "report.md").read_text()
    targets = re.findall(r"\]\(([^)]+)\)", markdown)
    assert set(targets) == BUNDLE_FILES - {"report.md", "report.html"}
    assert all((out / target).is_file() for target in targets)
    assert all(not Path(target).is_absolute() for target in targets)


def test_the_provenance_header_has_the_right_sha256_and_no_private_settings(bundled):
    export, out, before, _ = bundled
    markdown = (out / "report.md").read_text()
    header = markdown.split("## Report")[0]
    assert f"| sha256 | `{before}` |" in header
    assert f"| size | {export.stat().st_size:,} bytes |" in header
    assert "| Nsight Systems | 2025.3.1.90 |" in header
    assert "CUDA\\_TRACE\\_SCOPE | ProcessTree" in header
    assert "ENVIRONMENT" not in markdown and "secret-token" not in markdown
    assert "alice" not in markdown
    # The Markdown report follows the header, its headings one level down.
    assert markdown.startswith("# trace-gaps report: decode.sqlite\n")
    assert "\n### Process 100 (python3)\n" in markdown
    assert markdown.count("\n# ") == 0


def test_writing_the_bundle_leaves_the_export_unchanged(bundled):
    export, _, before, _ = bundled
    assert sha256(export) == before
    assert sorted(p.name for p in export.parent.iterdir()) == ["decode.sqlite"]


def test_a_second_run_into_the_same_folder_is_refused_unless_forced(bundled):
    export, out, _, _ = bundled
    (out / "report.md").write_text("stale")
    refused = CliRunner().invoke(app, ["report", str(export), "-o", str(out)])
    assert (
        refused.exit_code == 1 and "is not empty" in refused.output and "--force" in refused.output
    )
    assert (out / "report.md").read_text() == "stale"
    write_bundle(export, out, "--force")
    assert (out / "report.md").read_text().startswith("# trace-gaps report")


def test_a_file_in_place_of_the_folder_is_a_user_error(bundled, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    result = CliRunner().invoke(app, ["report", str(bundled[0]), "-o", str(taken)])
    assert result.exit_code == 1
    assert "is a file. Give -o a folder" in result.output


MFU = PEER_TRACES / "nsys-ai" / "mfu_2gpu_before.sqlite"


@pytest.mark.skipif(not MFU.is_file(), reason="peer trace mfu_2gpu_before.sqlite absent")
def test_a_real_two_process_trace_bundles_with_every_link_resolving(tmp_path):
    out = tmp_path / "mfu"
    before = sha256(MFU)
    write_bundle(MFU, out)
    markdown = (out / "report.md").read_text()
    assert all((out / target).is_file() for target in re.findall(r"\]\(([^)]+)\)", markdown))
    assert f"`{before}`" in markdown and sha256(MFU) == before
    assert "torchrun" in markdown  # the capture's command is kept
    assert "ENVIRONMENT" not in markdown and "MODAL_TASK_SECRET" not in markdown


def test_report_md_gives_the_headline_and_verdict_before_the_settings_and_pictures(bundled):
    _, out, _, _ = bundled
    markdown = (out / "report.md").read_text()
    headline = json.loads((out / "report.json").read_text())["processes"][0]["headline"]
    verdict = markdown.index("## Verdict")
    assert verdict < markdown.index("## Provenance") < markdown.index("Capture settings")
    assert verdict < markdown.index("![")
    first_line = markdown[verdict:].splitlines()[2]
    assert first_line.startswith("**Process 100") and "GPU busy" in first_line
    assert headline.split(",")[0].replace("_", "\\_") in first_line


def test_a_bundle_of_several_processes_draws_them_on_one_axis_and_says_what_each_covers(
    tmp_path,
):
    from tests.test_plot import two_ranks

    export = two_ranks(ExportBuilder(tmp_path)).write("ranks.sqlite")
    out = tmp_path / "bundle"
    stderr = write_bundle(export, out)
    # Its top candidate is long host gaps (the host idles 1.1 ms after each kernel's launch):
    # the finding picture comes first, and median and slowest are its step, not drawn again.
    pictures = {"timeline-median-ranks.png", "timeline-finding.png"}
    assert {p.name for p in out.iterdir()} == BUNDLE_FILES | pictures
    assert f"wrote {out / 'timeline-median-ranks.png'}" in stderr
    markdown = (out / "report.md").read_text()
    assert markdown.index("(timeline-finding.png)") < markdown.index("(timeline-median.png)")
    assert "**Step where GPU idle in host code is largest (" in markdown
    assert (
        "![Every process on one time axis: decode\\_step #0 (the median step of process 100) "
        "of processes 100, 200](timeline-median-ranks.png)" in markdown
    )
    # Median and slowest are one step here: drawn once, its coverage said once.
    assert markdown.count("Covers process 100 only (the lowest pid with steps).") == 1
    assert "Covers every process, one panel each: 100, 200." in markdown
    assert all((out / t).is_file() for t in re.findall(r"\]\(([^)]+)\)", markdown))


def test_report_html_is_self_contained_with_the_verdict_before_the_tables(bundled):
    # Headless Chromium is not installed here: the page is checked structurally.
    from html.parser import HTMLParser

    _, out, _, _ = bundled
    page = (out / "report.html").read_text()

    class Collect(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: list[tuple[str, dict[str, str | None]]] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.tags.append((tag, dict(attrs)))

    parsed = Collect()
    parsed.feed(page)
    images = [attrs for tag, attrs in parsed.tags if tag == "img"]
    assert len(images) == 3  # median, slowest, steps
    assert all(str(a["src"]).startswith("data:image/png;base64,") for a in images)
    # Nothing is fetched: no URL, no link or script, and a policy that forbids any request.
    assert not re.search(r"https?://", page)
    assert not {tag for tag, _ in parsed.tags} & {"script", "link", "iframe", "object"}
    policy = next(a for t, a in parsed.tags if t == "meta" and a.get("http-equiv"))
    assert "default-src 'none'" in str(policy["content"])
    headline = json.loads((out / "report.json").read_text())["processes"][0]["headline"]
    assert page.index('id="verdict"') < page.index(headline[:40]) < page.index("<table")
    assert page.index("<img") < page.index("<table") < page.index("Capture settings")
    assert "secret-token" not in page and "alice" not in page


def test_report_md_says_at_its_top_how_to_attach_the_pictures(bundled):
    _, out, _, _ = bundled
    lines = (out / "report.md").read_text().splitlines()
    assert "drag the PNGs" in lines[2] and "report.html" in lines[2]


def test_a_forced_run_removes_the_pictures_of_an_earlier_run_and_keeps_other_files(tmp_path):
    from tests.test_plot import two_ranks

    ranks = two_ranks(ExportBuilder(tmp_path)).write("ranks.sqlite")
    out = tmp_path / "bundle"
    write_bundle(ranks, out)
    assert (out / "timeline-median-ranks.png").is_file()
    (out / "notes.txt").write_text("mine")
    (tmp_path / "single").mkdir()
    single = decode_loop(ExportBuilder(tmp_path / "single")).write("decode.sqlite")
    write_bundle(single, out, "--force")
    assert not (out / "timeline-median-ranks.png").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert "ranks.sqlite" not in (out / "report.html").read_text()
