"""Loads versus lookups, and the warm-up rule that must never empty an analysis."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.builders import ExportBuilder
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.analysis.steps import IS_WARMUP, WARMUP_RULE
from trace_gaps.cli import app
from trace_gaps.errors import NoAnalysedStepsError
from trace_gaps.model import CallCategory
from trace_gaps.nsys.calls import classify_call
from trace_gaps.nsys.load import load_trace

runner = CliRunner()
STEP_NS = 1_000_000


@pytest.mark.parametrize(
    "name",
    ["cuModuleLoadData", "cuModuleLoadDataEx", "cuLibraryLoadData", "cuLibraryLoadFromFile",
     "cudaLibraryLoadData", "cuLinkCreate", "cuLinkComplete", "nvrtcCompileProgram"],
)  # fmt: skip
def test_calls_that_load_or_build_code_are_loads(name):
    assert classify_call(name) is CallCategory.MODULE_LOAD


@pytest.mark.parametrize(
    "name",
    ["cudaGetFuncBySymbol", "cuLibraryGetKernel", "cuKernelGetFunction", "cuModuleGetFunction",
     "cuKernelGetName", "cuModuleGetGlobal", "cuLibraryGetModule", "cudaGetKernel",
     "cuGetProcAddress", "cudaGetDriverEntryPointByVersion"],
)  # fmt: skip
def test_lookups_are_never_loads(name):
    assert classify_call(name) is CallCategory.LOOKUP


def decode_loop(
    builder: ExportBuilder,
    *,
    steps: int = 20,
    loads_in: frozenset[int] = frozenset(),
    long_steps: frozenset[int] = frozenset(),
    lookups: bool = False,
) -> Path:
    """`steps` steps of one stage `forward` with 3 launches; chosen steps load code (a
    cuLibraryLoadData after a 200 us host gap) or last 10x longer."""
    t = 0
    for i in range(steps):
        length = STEP_NS * (10 if i in long_steps else 1)
        builder.range("decode_step", t, t + length)
        builder.range("forward", t, t + length)
        for k in range(3):
            at = t + 1_000 + k * 20_000
            if lookups:
                builder.call("cuLibraryGetKernel", at - 800, at - 200)
            builder.launch("k", at, at + 5_000, at + 6_000, at + 16_000)
        if i in loads_in:
            builder.call("cuLibraryLoadData", t + 300_000, t + 400_000)
        t += length + 10_000
    return builder.write("loop.sqlite")


def warmup_of(path: Path, **options: object) -> tuple[list[bool], set[str]]:
    trace = load_trace(path)
    steps = analyse_trace(trace, AnalysisOptions(**options)).steps  # type: ignore[arg-type]
    return steps[IS_WARMUP].tolist(), set(steps[WARMUP_RULE])


def test_lookups_in_every_step_are_not_warmup(export_builder):
    path = decode_loop(export_builder(), loads_in=frozenset({0}), lookups=True)
    warm, rule = warmup_of(path)
    assert warm == [True] + [False] * 19
    assert rule == {"loads"}


def test_a_leading_run_of_loading_steps_is_warmup(export_builder):
    path = decode_loop(export_builder(), loads_in=frozenset({0, 1, 2, 7}))
    warm, _ = warmup_of(path)
    # Step 7 loads too, but after steady steps: it is analysed (and reported), not skipped.
    assert warm == [True] * 3 + [False] * 17


def test_loads_in_most_steps_are_steady_state(export_builder):
    loads = frozenset(i for i in range(20) if i % 4 != 3)  # 15 of 20 steps load code
    path = decode_loop(export_builder(), loads_in=loads, long_steps=frozenset({0}))
    warm, rule = warmup_of(path)
    assert warm == [True] + [False] * 19  # only the long first step
    assert rule == {"steady_loads"}


def test_a_rule_leaving_under_half_the_steps_falls_back_to_the_length_rule(export_builder):
    # Steps 0-3 are long, 4-10 load code (7 of 20: not steady state). The leading run of
    # unusual steps is 11 long, leaving 9 < 10 of 20: only the 4 long steps are skipped.
    long_steps, loads = frozenset(range(4)), frozenset(range(4, 11))
    path = decode_loop(export_builder(), loads_in=loads, long_steps=long_steps)
    warm, rule = warmup_of(path)
    assert warm == [True] * 4 + [False] * 16
    assert rule == {"length_only"}
    # Up to 10 leading unusual steps of 20 still leave half: they are all warm-up.
    path = decode_loop(export_builder(), loads_in=frozenset(range(4, 10)), long_steps=long_steps)
    warm, rule = warmup_of(path)
    assert warm == [True] * 10 + [False] * 10 and rule == {"loads"}


def test_the_rule_note_says_why_steady_loads_are_analysed(export_builder):
    loads = frozenset(range(20))
    path = decode_loop(export_builder(), loads_in=loads, long_steps=frozenset({0}))
    result = runner.invoke(app, ["analyze", str(path), "-f", "md"])
    assert result.exit_code == 0, result.output
    assert "19 analysed, 1 skipped" in result.stdout
    assert "steady state, not warm-up" in result.stdout
    assert "code loads per step" in result.stdout  # the finding, in the verdict


def test_an_empty_analysis_is_refused_with_a_working_skip(export_builder):
    path = decode_loop(export_builder(), steps=6, long_steps=frozenset({0, 1}))
    with pytest.raises(NoAnalysedStepsError, match=r"pass --skip 2 "):
        analyse_trace(load_trace(path), AnalysisOptions(skip=6))


@pytest.mark.parametrize(
    "command",
    [["analyze"], ["plot", "timeline"], ["plot", "steps"], ["report"], ["diff"]],
    ids=lambda c: "-".join(c),
)
def test_every_command_exits_non_zero_on_an_empty_analysis(export_builder, tmp_path, command):
    path = decode_loop(export_builder(), steps=6, long_steps=frozenset({0}))
    args = [*command, str(path)]
    if command == ["diff"]:
        args.append(str(path))
    if command[0] in ("plot", "report"):
        args += ["-o", str(tmp_path / ("out.png" if command[0] == "plot" else "bundle"))]
    result = runner.invoke(app, [*args, "--skip", "6"])
    assert result.exit_code == 1, result.output
    assert "nothing is left to analyse" in result.stderr
    assert "pass --skip 1 " in result.stderr  # step 0 is the outlier: never --skip 0 here
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.png").exists() and not (tmp_path / "bundle").exists()


def test_trailing_empty_steps_do_not_make_the_real_ones_warmup(tmp_path):
    """issue 45: 20 empty 1 ms step ranges after the 19 real ones (~12 ms each) made the
    median step 1 ms and every real step "warm-up": 1.00 ms/step, GPU busy 0.0 %."""
    import shutil
    import sqlite3

    from tests.conftest import SAMPLE_TRACES

    path = Path(shutil.copy(SAMPLE_TRACES / "plain_decode.sqlite", tmp_path / "p.sqlite"))
    with sqlite3.connect(path) as connection:
        (last_end, tid, event_type), *_ = connection.execute(
            "SELECT end, globalTid, eventType FROM NVTX_EVENTS WHERE text = 'decode_step' "
            "ORDER BY end DESC LIMIT 1"
        )
        connection.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
            "VALUES (?, ?, ?, 'decode_step', ?, 0)",
            [
                (
                    last_end + (2 * k + 1) * STEP_NS,
                    last_end + (2 * k + 2) * STEP_NS,
                    event_type,
                    tid,
                )
                for k in range(20)
            ],
        )
    analysis = analyse_trace(load_trace(path), AnalysisOptions())
    steps = analysis.steps
    real = steps[steps["end_ns"] - steps["start_ns"] > 2 * STEP_NS]
    assert len(real) == 19
    assert real[IS_WARMUP].sum() == 1  # the one the clean export skips (it loads CUDA modules)
