"""Render a Diff as text, Markdown or JSON (chosen in render/__init__.py)."""

from __future__ import annotations

import dataclasses
from io import StringIO

from trace_gaps.diff.bootstrap import CONFIDENCE_PCT
from trace_gaps.diff.build import Diff, ProcessDiff
from trace_gaps.diff.drift import CAPTURES_TO_SETTLE, MachineSplit, ratio
from trace_gaps.diff.verdicts import (
    describe_change,
    signed_ms,
    write_run_verdict,
    write_runs_verdict,
)
from trace_gaps.render.console import (
    NOT_A_TERMINAL,
    Terminal,
    new_console,
    plain,
    print_item,
    print_table,
)
from trace_gaps.render.diff_tables import (
    bucket_table,
    candidate_table,
    describe_side,
    dram_table,
    stage_lines,
    stage_table,
    wall_table,
)
from trace_gaps.render.json import render_json_value
from trace_gaps.render.markdown import escape_markdown, render_table
from trace_gaps.report.tables import Table


def _speed(pct: float | None, what: str) -> str:
    """ "the host ran ×1.10 slower", "the GPU ran ×1.02 faster", "at the same speed"."""
    if pct is None:
        return f"the {what}'s speed not measured"
    times = ratio(pct)
    if round(times, 2) == 1:
        return f"the {what} ran at the same speed (×1.00)"
    if times > 1:
        return f"the {what} ran ×{times:.2f} slower"
    return f"the {what} ran ×{1 / times:.2f} faster"


def drift_line(drift: MachineSplit, *, runs_known: bool) -> str:
    """One line: the code's part of the step change and the machine's, with both speeds.

    "No code change beyond noise; the host ran ×1.10 slower, the GPU ran at the same speed
    (×1.00): the machine +0.20 ms/step, the code −0.01 ms/step (…)"."""
    speeds = (
        f"{_speed(drift.host.time_change_pct, 'host')}, {_speed(drift.gpu.time_change_pct, 'GPU')}"
    )
    code = describe_change(
        "the code", drift.code, confidence_pct=CONFIDENCE_PCT, no_interval="no noise estimate"
    )
    machine = f"the machine {signed_ms(drift.machine_ns)}/step"
    if drift.code.is_beyond_noise is False:
        line = f"No code change beyond noise; {speeds}: {machine}, {code}"
    else:
        line = f"{code[0].upper()}{code[1:]}; {machine}: {speeds}"
    if drift.host.stages:
        stages = ", ".join(drift.host.stages)
        gpu = (
            f"{drift.gpu.ops_per_step} ops a step"
            if drift.gpu.ops_per_step
            else f"{drift.gpu.op_names} op names"
        )
        line += f" (host measured on {stages}; GPU on {gpu})"
    if not runs_known:
        line += (
            "; run-to-run noise unknown with one capture a side: "
            f"{CAPTURES_TO_SETTLE} captures a side (--repeats) measure it"
        )
    return line


def code_runs_line(diff: Diff) -> str | None:
    """diff --repeats: the runs' step time less each run's machine part, with its noise."""
    runs = diff.code_runs
    if runs is None:
        return None
    line = describe_change(
        "The code over the runs (each run's machine part taken out)",
        runs,
        confidence_pct=CONFIDENCE_PCT,
        no_interval="fewer than 3 runs in all, no run-to-run noise estimate",
        interval_from=" from the run-to-run spread",
    )
    if runs.is_beyond_noise is False:
        line += ": no code change beyond the run-to-run noise"
    return line


def run_drift_line(diff: Diff) -> str | None:
    """Several ranks compared: the code's part of the run's step change and the machine's."""
    run = diff.run
    if run is None or run.code is None or run.machine_ns is None:
        return None
    code = describe_change(
        "the code", run.code, confidence_pct=CONFIDENCE_PCT, no_interval="no noise estimate"
    )
    machine = f"the machine {signed_ms(run.machine_ns)}/step"
    head = "The run (its slowest rank): "
    if run.code.is_beyond_noise is False:
        return f"{head}no code change beyond noise; {machine}, {code} (each rank's speeds below)"
    return f"{head}{code}; {machine} (each rank's speeds below)"


def _drift_lines(diff: Diff) -> list[str]:
    """The code's and the machine's parts: the run's, one line per process compared (named
    where there are several), then the runs'."""
    several = len(diff.processes) > 1
    run, runs = run_drift_line(diff), code_runs_line(diff)
    # Beside the run's split, a rank's own keeps its measured waits for its peers: a rank
    # that waited less once its peer slowed reads as a code change of its own.
    alone = " (alone: its waits for peers as measured)" if run else ""
    lines = [
        (f"Process {p.before.pid} → {p.after.pid}{alone}: " if several else "")
        + drift_line(p.drift, runs_known=diff.code_runs is not None)
        for p in diff.processes
        if p.drift is not None
    ]
    return [line for line in (run, *lines, runs) if line]


def _tables(process: ProcessDiff) -> list[Table]:
    return [
        wall_table(process),
        bucket_table(process),
        stage_table(process),
        *[table for table in [dram_table(process)] if table.rows],
        candidate_table(process),
    ]


def render_diff_markdown(diff: Diff) -> str:
    """Render the Diff as a Markdown document."""
    out = ["# trace-gaps diff", ""]
    if diff.runs is not None:
        runs = write_runs_verdict(diff.runs, confidence_pct=CONFIDENCE_PCT)
        out += [f"**{escape_markdown(runs)}**", ""]
    if diff.run is not None:
        run = write_run_verdict(diff.run, confidence_pct=diff.confidence_pct)
        out += [f"**{escape_markdown(run)}**", ""]
    for process in diff.processes:
        out += [f"**{escape_markdown(process.verdict)}**", ""]
    for line in _drift_lines(diff):
        out += [escape_markdown(line), ""]
    for process in diff.processes:
        out += [f"## Process {process.before.pid} → {process.after.pid}", ""]
        out += [
            escape_markdown(describe_side(label, side)) + "  "
            for label, side in (("before", process.before), ("after", process.after))
        ] + [""]
        for table in _tables(process):
            out += render_table(table)
        out += [f"- {escape_markdown(line)}" for line in stage_lines(process)] + [""]
    if diff.notes:
        out += ["## Notes", ""] + [f"- {escape_markdown(note)}" for note in diff.notes] + [""]
    return "\n".join(out).rstrip() + "\n"


def render_diff_text(diff: Diff, terminal: Terminal = NOT_A_TERMINAL) -> str:
    """Render the Diff for a terminal of the given width, in colour or none."""
    buffer = StringIO()
    console = new_console(buffer, terminal)
    if diff.runs is not None:
        console.print(plain(write_runs_verdict(diff.runs, confidence_pct=CONFIDENCE_PCT)))
    if diff.run is not None:
        console.print(plain(write_run_verdict(diff.run, confidence_pct=diff.confidence_pct)))
    for process in diff.processes:
        console.print(plain(process.verdict))
    for line in _drift_lines(diff):
        console.print(plain(line))
    for process in diff.processes:
        console.print()
        console.rule(plain(f"Process {process.before.pid} → {process.after.pid}"))
        console.print(plain(describe_side("before", process.before)))
        console.print(plain(describe_side("after", process.after)))
        for table in _tables(process):
            if table.rows:
                console.print()
                print_table(console, table)
        lines = stage_lines(process)
        if lines:
            console.print()
        for line in lines:
            print_item(console, line)
    if diff.notes:
        console.print()
        console.print("Notes:")
        for note in diff.notes:
            print_item(console, note)
    return buffer.getvalue()


def render_diff_json(diff: Diff) -> str:
    """The whole Diff as indented JSON: schema_version and tool_version first, integer ns,
    every row."""
    first = ("schema_version", "tool_version")
    names = [*first, *(f.name for f in dataclasses.fields(diff) if f.name not in first)]
    return render_json_value({name: getattr(diff, name) for name in names})
