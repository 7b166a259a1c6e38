"""report.html: the bundle as one self-contained page, to attach to any tracker.

The verdict first, then the pictures (inlined as data: URIs), each process's tables and
evidence, the notes, and the provenance with the capture settings last. A Content Security
Policy of `default-src 'none'` (images from data: only, inline style) means the page loads
nothing from anywhere: it opens offline, and no request leaves it. Every user string (range,
kernel and file names) goes through html.escape.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape

from trace_gaps.records import Provenance, Report
from trace_gaps.render.tables import (
    RIGHT,
    Table,
    candidate_table,
    cross_process_table,
    describe_export,
    describe_steps,
    evidence_lines,
    graph_lines,
    kinds_table,
    ledger_table,
    long_gap_table,
    process_title,
    stage_table,
)

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
    out += ["<h2>Report</h2>", *_paragraphs(describe_export(report))]
    out += _table(kinds_table(report))
    for process in report.processes:
        out.append(f"<h2>{escape(process_title(process))}</h2>")
        out += _paragraphs(describe_steps(process))
        for table in (
            candidate_table(process),
            ledger_table(process),
            stage_table(process),
            long_gap_table(process),
        ):
            out += _table(table)
        graphs = graph_lines(process)
        if graphs:
            out += ["<h3>CUDA graphs</h3>", *_list(graphs)]
        sections = evidence_lines(
            process,
            export=None if report.other_exports else report.export,
            several_processes=len(report.processes) > 1,
        )
        if sections:
            out.append("<h3>Evidence</h3>")
            for heading, lines in sections:
                out += [f"<p><strong>{escape(heading)}</strong></p>", *_list(lines)]
    out += _table(cross_process_table(report))
    if report.notes:
        out += ["<h2>Integrity notes</h2>", *_list([note.text for note in report.notes])]
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


def _paragraphs(lines: list[str]) -> list[str]:
    return [f"<p>{escape(line)}</p>" for line in lines]
