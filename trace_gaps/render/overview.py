"""Render an Overview (`trace-gaps info`) as text or JSON."""

from __future__ import annotations

import dataclasses
import json

from trace_gaps import __version__
from trace_gaps.report.overview import TEXT_SETTINGS, Overview


def render_overview_text(overview: Overview) -> str:
    """Plain text for a terminal."""
    name_width = min(60, max((len(r.name) for r in overview.ranges), default=0))
    lines = [
        f"File: {overview.file} ({overview.size_bytes / 1e6:.1f} MB)",
        f"Nsight Systems {overview.nsys_version or 'unknown'}, export schema "
        f"{overview.schema_version or 'unknown'}, CUDA graph trace: {overview.graph_trace_mode}",
        "GPUs: " + ("; ".join(overview.gpus) or "not recorded"),
        "",
        "Rows per table:",
        *(f"  {table:40} {count:>12,}" for table, count in overview.row_counts.items()),
        "",
        "Processes and threads with CUDA calls or NVTX ranges:",
        *(
            f"  pid {t.pid:>8} tid {t.tid:>8}  {t.name or '?':24} {t.api_calls:>10,} API calls "
            f"{t.nvtx_ranges:>10,} NVTX ranges"
            for t in overview.threads
        ),
        "",
        "What `analyze` would take: "
        + (
            f"step range {overview.step_range!r} ({overview.step_reason})"
            if overview.step_range
            else f"no step range, each process as one step ({overview.step_reason})"
        ),
        *(
            f"  pid {p.pid:>8}  GPU {', '.join(map(str, p.gpus)) or 'none':8}"
            + (
                f" {p.steps:>6} steps: {p.analysed} analysed, {p.skipped} skipped as warm-up"
                if overview.step_range
                else ""
            )
            + (
                "; kinds, each analysed apart: "
                + ", ".join(f"{kind} {n}" for kind, n in p.kinds.items())
                if p.kinds
                else ""
            )
            for p in overview.process_steps
        ),
        "",
        "NVTX domains (pass one to --domain): "
        + (
            ", ".join(
                f"{d.name} ({d.ranges:,} ranges"
                + (", a library's: never steps or stages)" if d.library else ")")
                for d in overview.domains
            )
            or "none"
        ),
        "",
        "NVTX range families (library domains left out), most frequent first — pass one to --step:",
        *(
            f"  {r.count:>8,} × {r.name[:60]:{name_width}} depth {r.min_depth}"
            + (f", {r.names} names" if r.names > 1 else "")
            + (f", inside {', '.join(p[:30] for p in r.parents)}" if r.parents else "")
            for r in overview.ranges
        ),
    ]
    hidden_ranges = overview.range_names - len(overview.ranges)
    if hidden_ranges > 0:
        lines.append(f"  … {hidden_ranges} more range names (the least frequent)")
    if overview.capture_settings:
        lines += ["", "Capture settings:"]
        lines += [f"  {k} = {v}" for k, v in overview.capture_settings[:TEXT_SETTINGS]]
        hidden = len(overview.capture_settings) - TEXT_SETTINGS
        if hidden > 0:
            lines.append(f"  … {hidden} more (info -f json lists them all)")
    return "\n".join(lines) + "\n"


def render_overview_json(overview: Overview) -> str:
    """JSON with the Overview's fields as keys, after the version of trace-gaps that wrote it."""
    fields = {"tool_version": __version__, **dataclasses.asdict(overview)}
    return json.dumps(fields, indent=2, ensure_ascii=False) + "\n"
