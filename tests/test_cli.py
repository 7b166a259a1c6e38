"""The command line: exit codes, stdout and stderr for happy paths and user errors; help."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.test_csv_cells import csv_header
from tests.test_report import eager_and_graph_export
from trace_gaps.cli import app

runner = CliRunner()


def test_analyze_prints_the_ledger_and_verdicts(export_builder):
    path = eager_and_graph_export(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "--skip", "0"])
    assert result.exit_code == 0, result.output
    assert "Step ledger" in result.stdout
    assert "Verdict" in result.stdout
    assert "draft" in result.stdout and "verify" in result.stdout


@pytest.mark.parametrize("fmt", ["text", "md", "json", "csv"])
def test_analyze_writes_each_format_to_a_file(export_builder, tmp_path, fmt):
    path = eager_and_graph_export(export_builder())
    out = tmp_path / f"out.{fmt}"
    result = runner.invoke(app, ["analyze", str(path), "-f", fmt, "-o", str(out), "--top", "3"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    text = out.read_text()
    if fmt == "json":
        assert len(json.loads(text)["processes"][0]["candidates"]) == 3
    elif fmt == "csv":
        assert text.splitlines()[0] == csv_header()
    elif fmt == "md":
        assert text.startswith("# trace-gaps report")


def test_analyze_an_unknown_step_name_is_a_one_line_error(export_builder):
    path = eager_and_graph_export(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "--step", "nope"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {path}: no NVTX range named 'nope'")
    assert "decode_step, draft, verify" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_analyze_an_unknown_process_is_a_one_line_error(export_builder):
    path = eager_and_graph_export(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "--process", "4242"])
    assert result.exit_code == 1
    assert "has no process 4242" in result.stderr


def test_info_lists_ranges_threads_and_row_counts(export_builder):
    path = eager_and_graph_export(export_builder())
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 0, result.output
    assert "decode_step" in result.stdout
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in result.stdout
    data = json.loads(runner.invoke(app, ["info", str(path), "--json"]).stdout)
    assert data["row_counts"]["CUPTI_ACTIVITY_KIND_KERNEL"] == 4 * 30 + 4 * 3
    assert data["ranges"][0]["name"] == "decode_step"


def test_every_command_and_option_has_help():
    import typer.main

    root = typer.main.get_command(app)
    stack = [((), root)]
    seen = 0
    while stack:
        path, command = stack.pop()
        for name, sub in getattr(command, "commands", {}).items():
            stack.append(((*path, name), sub))
        if getattr(command, "commands", None):
            continue
        seen += 1
        assert command.help, f"{path} has no help"
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"{path} option {param.name} has no help"
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0
    assert seen >= 2


def test_version_and_short_help():
    from trace_gaps import __version__

    result = runner.invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"trace-gaps {__version__}\n")
    for args in (["-h"], ["analyze", "-h"], ["plot", "-h"], ["plot", "timeline", "-h"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, args
        assert "Usage" in result.stdout


def test_every_command_takes_quiet_and_format_where_it_prints():
    import typer.main

    root = typer.main.get_command(app)
    commands = {
        name: sub for name, sub in root.commands.items() if not getattr(sub, "commands", None)
    }
    commands.update({f"plot {n}": c for n, c in root.commands["plot"].commands.items()})
    for name, command in commands.items():
        options = {o for p in command.params for o in p.opts}
        assert {"-q", "--quiet"} <= options, name
        if name in ("analyze", "info", "diff"):
            assert {"-f", "--format"} <= options, name
    hidden = [p for p in commands["info"].params if "--json" in p.opts]
    assert hidden and hidden[0].hidden  # kept as an alias, not listed


def test_info_format_json_and_its_hidden_alias_agree(export_builder):
    path = eager_and_graph_export(export_builder())
    by_format = runner.invoke(app, ["info", str(path), "-f", "json"])
    by_alias = runner.invoke(app, ["info", str(path), "--json"])
    assert by_format.exit_code == 0, by_format.output
    assert by_format.stdout == by_alias.stdout
    assert "--json" not in runner.invoke(app, ["info", "--help"]).stdout


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "--demo", "x.sqlite"],
        ["info", "--demo", "x.sqlite"],
        ["plot", "timeline", "--demo", "x.sqlite", "-o", "t.png"],
        ["plot", "steps", "--demo", "x.sqlite", "-o", "t.png"],
        ["report", "--demo", "x.sqlite", "-o", "bundle"],
        ["export", "perfetto", "--demo", "x.sqlite", "-o", "t.json"],
    ],
)
def test_demo_with_an_export_is_a_usage_error_in_one_line(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.sqlite").write_bytes(b"")
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --demo ") and "give no export" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "t.png").exists() and not (tmp_path / "bundle").exists()


def test_wrote_lines_go_to_stderr_and_quiet_silences_them(export_builder, tmp_path):
    path = eager_and_graph_export(export_builder())
    out = tmp_path / "out.md"
    loud = runner.invoke(app, ["analyze", str(path), "-f", "md", "-o", str(out)])
    assert (loud.exit_code, loud.stdout, loud.stderr) == (0, "", f"wrote {out}\n")
    quiet = runner.invoke(app, ["analyze", str(path), "-f", "md", "-o", str(out), "-q"])
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
    png = tmp_path / "steps.png"
    drawn = runner.invoke(app, ["plot", "steps", str(path), "-o", str(png), "-q", "--skip", "0"])
    assert (drawn.exit_code, drawn.stderr) == (0, "") and png.stat().st_size > 0


def test_usage_errors_exit_2_and_bad_input_exits_1(tmp_path):
    assert runner.invoke(app, ["analyze", "--no-such-option"]).exit_code == 2
    assert runner.invoke(app, ["analyze", "--depth", "9"]).exit_code == 2
    assert runner.invoke(app, ["analyze", str(tmp_path / "missing.sqlite")]).exit_code == 1


def test_the_command_line_loads_no_heavy_module_until_a_command_needs_it():
    import subprocess
    import sys

    probe = (
        "import sys\nfrom trace_gaps.cli import app\n"
        "print(' '.join(m for m in ('pandas', 'numpy', 'matplotlib') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""  # start-up time: benchmarks/bench_startup.py


def test_a_longest_gap_gives_its_export_time_and_the_command_that_draws_its_step(
    export_builder, tmp_path
):
    import re

    from trace_gaps.analysis.engine.pipeline import AnalysisOptions
    from trace_gaps.report.timeline import choose_request
    from trace_gaps.run.one import load_and_report

    path = eager_and_graph_export(export_builder())
    text = runner.invoke(app, ["analyze", str(path), "--skip", "0"]).stdout
    gap = re.search(r"gap of .* at (\d+\.\d{6}) s in the export's timeline", text)
    command = re.search(r"see it: (trace-gaps plot timeline (\S+) --step-index (\d+) .*)", text)
    assert gap and command, text
    assert command.group(2) == str(path)  # as given: it runs from where analyze ran
    at_ns = round(float(gap.group(1)) * 1e9)
    index = int(command.group(3))
    request = choose_request(step_index=index)
    _, report = load_and_report(path, AnalysisOptions(skip=0), timelines=(request,))
    (timeline,) = report.timelines
    start_ns = report.export.trace_start_ns + timeline.start_offset_ns
    assert start_ns <= at_ns < start_ns + timeline.wall_ns  # the step drawn holds the gap
    drawn = runner.invoke(
        app,
        ["plot", "timeline", str(path), "--step-index", str(index), "-o", str(tmp_path / "s.png")],
    )
    assert drawn.exit_code == 0, drawn.output


def test_info_shows_what_analyze_would_take_and_never_cuts_silently(export_builder):
    builder = export_builder()
    for i in range(45):
        builder.meta(f"SETTING_{i:02}", str(i), table="META_DATA_CAPTURE")
    path = eager_and_graph_export(builder)
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 0, result.output
    analysed = json.loads(runner.invoke(app, ["analyze", str(path), "-f", "json"]).stdout)
    steps = analysed["processes"][0]["steps"]
    pid = analysed["processes"][0]["pid"]
    assert f"What `analyze` would take: step range '{steps['name']}'" in result.stdout
    assert (
        f"pid {pid:>8}  GPU 0        {steps['steps_analysed'] + steps['steps_skipped']:>6} steps: "
        f"{steps['steps_analysed']} analysed, {steps['steps_skipped']} skipped as warm-up"
    ) in result.stdout
    settings = result.stdout.split("Capture settings:")[1].strip().splitlines()
    assert len(settings) == 41 and settings[-1].strip() == "… 5 more (info -f json lists them all)"
    data = json.loads(runner.invoke(app, ["info", str(path), "-f", "json"]).stdout)
    assert len(data["capture_settings"]) == 45
    assert data["step_range"] == steps["name"]
    assert data["process_steps"] == [
        {
            "pid": pid,
            "steps": steps["steps_analysed"] + steps["steps_skipped"],
            "analysed": steps["steps_analysed"],
            "skipped": steps["steps_skipped"],
            "gpus": [0],
            "kinds": {},
        }
    ]


ANALYSIS_COMMANDS = [
    ["analyze"],
    ["diff"],
    ["plot", "timeline"],
    ["plot", "steps"],
    ["report"],
    ["export", "perfetto"],
]


@pytest.mark.parametrize("path", ANALYSIS_COMMANDS, ids=" ".join)
def test_every_analysis_command_offers_every_analysis_option(path):
    from typer.main import get_command

    from trace_gaps.commands.analysis_options import ANALYSIS_OPTIONS

    command = get_command(app)
    for name in path:
        command = command.commands[name]
    offered = {p.name for p in command.params}
    assert {o.name for o in ANALYSIS_OPTIONS if o.shared} <= offered
    # --steps (the analysed range) and --kernels only where a command asks for them: plot
    # timeline and export perfetto have a --steps of their own (the steps drawn).
    unshared = {o.name for o in ANALYSIS_OPTIONS if not o.shared}
    assert unshared == {"steps", "kernels"}
    if path in (["analyze"], ["report"]):
        assert unshared <= offered
    else:
        assert not {"kernels"} & offered


def test_the_analysis_options_become_one_analysis_options():
    import typer

    from trace_gaps.analysis.engine.pipeline import AnalysisOptions
    from trace_gaps.commands.analysis_options import analysis_options

    received = []
    probe = typer.Typer()

    @probe.command()
    @analysis_options()
    def command(*, options: AnalysisOptions, top: int = 1) -> None:
        received.append((options, top))

    args = ["--step", "decode", "--skip", "2", "--depth", "2", "--kind", "DECODE"]
    args += ["--domain", "default", "--process", "7", "--collective", "ar_", "--top", "3"]
    result = CliRunner().invoke(probe, args)
    assert result.exit_code == 0, result.output
    assert received == [(AnalysisOptions("decode", 2, 2, 7, "DECODE", "default", ("ar_",)), 3)]
    assert CliRunner().invoke(probe, []).exit_code == 0
    assert received[-1] == (AnalysisOptions(), 1)
    assert CliRunner().invoke(probe, ["--steps", "3:6"]).exit_code == 2  # not offered


def test_the_offered_options_become_analysis_options_too():
    import typer

    from trace_gaps.analysis.engine.pipeline import AnalysisOptions
    from trace_gaps.analysis.step_range import StepRange
    from trace_gaps.commands.analysis_options import analysis_options

    received = []
    probe = typer.Typer()

    @probe.command()
    @analysis_options(offer=("steps", "kernels"))
    def command(*, options: AnalysisOptions) -> None:
        received.append(options)

    for args, expected in [
        (
            ["--steps", "3:6", "--kernels"],
            AnalysisOptions(step_range=StepRange(3, 6), kernel_summary=True),
        ),
        (["--steps", "10:"], AnalysisOptions(step_range=StepRange(10, None))),
        (["--steps", ":4"], AnalysisOptions(step_range=StepRange(0, 4))),
        ([], AnalysisOptions()),
    ]:
        result = CliRunner().invoke(probe, args)
        assert result.exit_code == 0, result.output
        assert received[-1] == expected
