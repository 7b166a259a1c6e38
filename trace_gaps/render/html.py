"""report.html: the bundle as one self-contained page, to attach to any tracker.

The verdict first, then the pictures (inlined as data: URIs), the report in the outline's
sections (report/outline.py: the same, in the same order, as text and Markdown), and the
provenance with the capture settings last. A Content Security
Policy of `default-src 'none'` (images from data: only, inline style) means the page loads
nothing from anywhere: it opens offline, and no request leaves it. Every user string (range,
kernel and file names) goes through html.escape.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape

from trace_gaps.records.report import Provenance, Report
from trace_gaps.report.descriptions import process_title
from trace_gaps.report.outline import Block, Heading, Items, Level, Lines, Medium, Tone, outline
from trace_gaps.report.tables import RIGHT, Table

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.5em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ccc; }
.verdict { background: #fff8e1; border-left: 4px solid #f2a900; padding: .6em 1em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 2px 8px; vertical-align: top; }
th { background: #f3f3f3; text-align: left; } td.num, th.num { text-align: right; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
code { word-break: break-all; }
"""
_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def render_page(
    report: Report, provenances: Sequence[Provenance], pictures: list[tuple[str, str, bytes]]
) -> str:
    """The page. pictures: (caption, file name, PNG bytes), in the order to show them."""
    title = "trace-gaps report: " + ", ".join(p.file for p in provenances)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        '<section id="verdict" class="verdict"><h2>Verdict</h2>',
    ]
    for process in report.processes:
        out.append(
            f"<p><strong>{escape(process_title(process))}: {escape(process.headline)}</strong></p>"
        )
        out += _list([c.verdict for c in process.candidates[:3]], ordered=True)
    out.append("</section>")
    out += ["<h2>Pictures</h2>"]
    for caption, name, data in pictures:
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        out.append(
            f'<figure><img src="{uri}" alt="{escape(caption)}" title="{escape(name)}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>"
        )
    out.append("<h2>Report</h2>")
    for section in outline(report, Medium.DOCUMENT):
        for block in section.blocks:
            out += _block(block)
    for provenance in provenances:
        out += _provenance(provenance)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _provenance(provenance: Provenance) -> list[str]:
    rows = [
        ["file", provenance.file],
        ["size", f"{provenance.size_bytes:,} bytes"],
        ["sha256", provenance.sha256],
        ["Nsight Systems", provenance.nsys_version or "unknown"],
        ["trace-gaps", provenance.trace_gaps_version],
    ]
    out = ["<h2>Provenance</h2>", *_table(Table("", ["", ""], ["left", "left"], rows))]
    if not provenance.capture_settings:
        return [*out, "<p>The export records no capture settings.</p>"]
    # The same words as report.md's (bundle.render_bundle_markdown).
    left_out = "environment variables and the user's name left out" + (
        ""
        if provenance.command_included
        else ", and the host name, working directory, program path and arguments: "
        "--include-command keeps them"
    )
    settings = Table(
        "", ["setting", "value"], ["left", "left"], [list(s) for s in provenance.capture_settings]
    )
    return [
        *out,
        f"<details><summary>Capture settings ({len(provenance.capture_settings)}; "
        f"{left_out})</summary>",
        *_table(settings),
        "</details>",
    ]


_HEADINGS = {
    Level.PART: "<h2>{}</h2>",
    Level.SECTION: "<h3>{}</h3>",
    Level.LABEL: "<p><strong>{}</strong></p>",
}
_LINES = {
    Tone.ANSWER: "<p><strong>{}</strong></p>",
    Tone.FACTS: "<p>{}</p>",
    Tone.WARNING: "<p><strong>{}</strong></p>",
    Tone.REMARK: "<p>{}</p>",
}


def _block(block: Block) -> list[str]:
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Heading):
        return [_HEADINGS[block.level].format(escape(block.text))]
    if isinstance(block, Lines):
        return [_LINES[block.tone].format(escape(line)) for line in block.lines]
    return _items(block)


def _items(items: Items) -> list[str]:
    """A bulleted list, or an ordered one numbered by its marks ("3." is item 3)."""
    if items.marks is None:
        return _list(items.items)
    numbered = [
        f'<li value="{mark.rstrip(".")}">{escape(item)}</li>'
        if mark
        else f"<li>{escape(item)}</li>"
        for item, mark in zip(items.items, items.marks, strict=True)
    ]
    return ["<ol>", *numbered, "</ol>"]


def _table(table: Table) -> list[str]:
    if not table.rows:
        return []
    numeric = [align == RIGHT for align in table.align]

    def cells(tag: str, row: list[str]) -> str:
        return "".join(
            f'<{tag} class="num">{escape(c)}</{tag}>' if is_num else f"<{tag}>{escape(c)}</{tag}>"
            for c, is_num in zip(row, numeric, strict=True)
        )

    caption = f"<caption>{escape(table.title)}</caption>" if table.title else ""
    return [
        f"<table>{caption}<thead><tr>{cells('th', table.columns)}</tr></thead><tbody>",
        *(f"<tr>{cells('td', row)}</tr>" for row in table.rows),
        "</tbody></table>",
    ]


def _list(lines: list[str], *, ordered: bool = False) -> list[str]:
    tag = "ol" if ordered else "ul"
    return [f"<{tag}>", *(f"<li>{escape(line)}</li>" for line in lines), f"</{tag}>"]
