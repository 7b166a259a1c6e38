"""One grammar across the commands (issue 44's edges): a --domain that matches nothing is an
error naming the domains on every command, info lists the domains, the step kinds and the range
families and says its version, open --steps ranges on plot (timeline and steps) and export
perfetto, gpu0 (gpu100, gpu-5) is no lever, and an unknown option suggests only a close one."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_TRACES, shipped_trace
from trace_gaps import __version__
from trace_gaps.cli import app

runner = CliRunner()
EAGER = str(SAMPLE_TRACES / "spec_eager.sqlite")


def test_a_domain_that_matches_nothing_is_an_error_naming_the_domains_present():
    result = runner.invoke(app, ["analyze", EAGER, "--domain", "nosuch", "-q"])
    assert result.exit_code == 1, result.output
    assert "has no NVTX ranges in domain 'nosuch'" in result.stderr
    assert "pass one of these to --domain: default, CCCL" in result.stderr
    assert runner.invoke(app, ["analyze", EAGER, "--domain", "default", "-q"]).exit_code == 0


# Each command that takes --domain, EXPORT standing for the export and each output a name.
DOMAIN_COMMANDS = [
    ["report", "EXPORT", "-o", "bundle"],
    ["plot", "timeline", "EXPORT", "-o", "timeline.png"],
    ["plot", "steps", "EXPORT", "-o", "steps.png"],
    ["export", "perfetto", "EXPORT", "-o", "trace.json"],
    ["diff", "EXPORT", "EXPORT"],
]


def domain_command(command: list[str], export: str, tmp_path) -> list[str]:
    """The command with its export and its outputs under tmp_path, and --domain nosuch."""
    outputs = (".png", ".json", "bundle")
    args = [str(tmp_path / a) if a.endswith(outputs) else a for a in command]
    return [export if a == "EXPORT" else a for a in args] + ["--domain", "nosuch", "-q"]


@pytest.mark.parametrize("command", DOMAIN_COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_every_command_with_domain_refuses_one_that_matches_nothing(command, tmp_path):
    # Nothing is written when the domain is refused.
    result = runner.invoke(app, domain_command(command, EAGER, tmp_path))
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1
    assert "has no NVTX ranges in domain 'nosuch'" in result.stderr
    assert "pass one of these to --domain: default, CCCL" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", DOMAIN_COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_every_command_names_the_export_as_typed_when_it_refuses_a_domain(
    command, tmp_path, monkeypatch
):
    # diff named it by its absolute path, every other command as typed.
    monkeypatch.chdir(SAMPLE_TRACES)
    result = runner.invoke(app, domain_command(command, "spec_eager.sqlite", tmp_path))
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: spec_eager.sqlite: has no NVTX ranges in domain")


def test_info_lists_the_nvtx_domains_and_its_json_says_the_version():
    text = runner.invoke(app, ["info", EAGER]).stdout
    assert "NVTX domains (pass one to --domain): CCCL (120 ranges, a library's" in text
    assert "default (90 ranges)" in text
    found = json.loads(runner.invoke(app, ["info", EAGER, "-f", "json"]).stdout)
    assert found["tool_version"] == __version__
    assert found["domains"] == [
        {"name": "CCCL", "ranges": 120, "library": True},
        {"name": "default", "ranges": 90, "library": False},
    ]


def test_info_lists_the_step_kinds_and_the_range_families():
    # serving_batch_names: steps named step[DECODE bs=3 tokens=3], ... in two kinds.
    export = str(shipped_trace("serving_batch_names"))
    text = runner.invoke(app, ["info", export]).stdout
    assert "kinds, each analysed apart: DECODE 67, PREFILL 24" in text
    assert "25 × step[PREFILL bs=* tokens=*] depth 0, 23 names" in text
    found = json.loads(runner.invoke(app, ["info", export, "-f", "json"]).stdout)
    assert [p["kinds"] for p in found["process_steps"]] == [{"DECODE": 67, "PREFILL": 24}]
    assert {"step[DECODE bs=* tokens=*]", "forward"} <= {r["name"] for r in found["ranges"]}


def test_plot_and_export_take_an_open_steps_range(tmp_path):
    picture = tmp_path / "late.png"
    result = runner.invoke(app, ["plot", "timeline", EAGER, "--steps", "12:", "-o", str(picture)])
    assert result.exit_code == 0, result.output
    assert picture.stat().st_size > 0
    late, early = tmp_path / "late.json", tmp_path / "early.json"
    for steps, path in (("12:", late), (":3", early)):
        result = runner.invoke(
            app, ["export", "perfetto", EAGER, "--steps", steps, "-o", str(path)]
        )
        assert result.exit_code == 0, result.output
    # spec_eager has steps 0 to 14: 12: is three steps, as :3.
    counts = [
        sum(1 for e in json.loads(p.read_text())["traceEvents"] if e.get("name") == "decode_step")
        for p in (late, early)
    ]
    assert counts[0] == counts[1] > 0
    wrong = runner.invoke(app, ["plot", "timeline", EAGER, "--steps", "5:3", "-o", str(picture)])
    assert wrong.exit_code == 2 and "is not a range A:B" in wrong.stderr


@pytest.mark.parametrize("steps", ["12:", ":3", "3:6"])
def test_plot_steps_takes_the_steps_range_of_the_other_commands(steps, tmp_path):
    # The analysis' --steps, as analyze and report take it: the steps outside are drawn as
    # warm-up (faded).
    picture = tmp_path / "steps.png"
    result = runner.invoke(app, ["plot", "steps", EAGER, "--steps", steps, "-o", str(picture)])
    assert result.exit_code == 0, result.output
    assert picture.stat().st_size > 0


def test_plot_steps_refuses_a_steps_range_as_the_other_commands_do(tmp_path):
    picture = tmp_path / "steps.png"
    wrong = runner.invoke(app, ["plot", "steps", EAGER, "--steps", "5:3", "-o", str(picture)])
    assert wrong.exit_code == 2 and "is not a range A:B" in wrong.stderr
    assert not picture.exists()


@pytest.mark.parametrize("lever", ["gpu0", "gpu100", "gpu-5"])
def test_a_gpu_lever_outside_1_to_99_is_no_lever(lever):
    # A usage error (exit 2), as every other ill-formed --what-if, refused before any work.
    result = runner.invoke(app, ["analyze", EAGER, "--what-if", f"x={lever}"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert f"unknown lever {lever!r}" in result.stderr and "N 1-99" in result.stderr


def test_an_unknown_option_suggests_only_a_close_one():
    bogus = runner.invoke(app, ["analyze", EAGER, "--bogus"])
    assert bogus.exit_code == 2
    assert "No such option: --bogus" in bogus.output and "--jobs" not in bogus.output
    typo = runner.invoke(app, ["analyze", EAGER, "--kernal"])
    assert "Possible options: --kernels" in typo.output
