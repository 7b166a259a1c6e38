"""Bad inputs give one line `error: <file>: what is wrong; what to do` (exit 1, no traceback);
odd but readable exports give a report with integrity notes."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.builders import ExportBuilder, note_facts
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.nsys.export import list_tables, open_export
from trace_gaps.records.notes import Figures, NoteCode, NoteNumber, Severity

runner = CliRunner()

COMMANDS = [["analyze"], ["analyze", "-f", "md"], ["analyze", "-f", "json"], ["info"]]


def invoke(args: list[str]) -> Result:
    result = runner.invoke(app, args)
    # CliRunner turns an uncaught exception into exit code 1 too: tell them apart.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def error_line(args: list[str], path: Path | str) -> str:
    """Run a command that must fail cleanly; return its one line of stderr."""
    result = invoke(args)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}: "), lines[0]
    return lines[0]


def small_export(builder: ExportBuilder) -> ExportBuilder:
    """Three decode steps, each with a draft stage launching one kernel."""
    for offset in (0, 10_000, 20_000):
        builder.range("decode_step", offset, offset + 10_000)
        builder.range("draft", offset, offset + 4_000)
        builder.launch("gemm", offset + 100, offset + 600, offset + 1_000, offset + 3_000)
    return builder


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_file_says_it_does_not_exist(command, tmp_path):
    path = tmp_path / "nope.sqlite"
    line = error_line([*command, str(path)], path)
    assert "does not exist" in line and "nsys export --type sqlite" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_says_it_is_one_and_names_the_exports_inside(command, tmp_path):
    (tmp_path / "run1.sqlite").write_bytes(b"")
    line = error_line([*command, str(tmp_path)], tmp_path)
    assert "is a directory (it holds run1.sqlite)" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_an_empty_file_says_it_is_empty(command, tmp_path):
    path = tmp_path / "run.sqlite"
    path.write_bytes(b"")
    assert "is empty (0 bytes); re-run the export" in error_line([*command, str(path)], path)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_text_file_is_not_sqlite(command, tmp_path):
    path = tmp_path / "run.sqlite"
    path.write_text("start,end\n1,2\n")
    assert "is not a SQLite file" in error_line([*command, str(path)], path)


def fake_report(tmp_path: Path, name: str = "run.nsys-rep") -> Path:
    path = tmp_path / name
    path.write_bytes(b"NVIDIA Tegra Profiler Report 2024@4@1@61" + bytes(200))
    return path


def test_a_report_without_nsys_prints_the_exact_export_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    path = fake_report(tmp_path)
    line = error_line(["analyze", str(path)], path)
    assert "is an Nsight Systems report, not its SQLite export, and nsys is not on PATH" in line
    assert line.endswith(
        f"export it first: nsys export --type sqlite -o {tmp_path / 'run.sqlite'} {path}"
    )


def test_a_report_renamed_to_sqlite_is_recognised_by_its_header(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    path = fake_report(tmp_path, "run.sqlite")
    assert "is an Nsight Systems report" in error_line(["info", str(path)], path)


def install_fake_nsys(tmp_path: Path, export: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put an `nsys` on PATH that 'exports' by copying `export` to the -o path; log its args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    script.write_text(
        f"#!{sys.executable}\n"
        "import shutil, sys\n"
        f"open({str(bin_dir / 'args.txt')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "out = sys.argv[sys.argv.index('-o') + 1]\n"
        f"shutil.copy({str(export)!r}, out)\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir / "args.txt"


def test_a_report_is_exported_beside_itself_when_nsys_is_on_path(
    export_builder, tmp_path, monkeypatch
):
    export = small_export(export_builder()).write("made.sqlite")
    log = install_fake_nsys(tmp_path, export, monkeypatch)
    reports = tmp_path / "reports"
    reports.mkdir()
    report = fake_report(reports)
    result = invoke(["analyze", str(report), "--skip", "0"])
    assert result.exit_code == 0, result.output
    written = reports / "run.sqlite"
    assert result.stderr.splitlines() == [
        f"note: {report} is an Nsight Systems report; exported it with nsys to {written}"
    ]
    assert "Step ledger" in result.stdout
    # nsys writes to a temporary name beside the report, renamed once it succeeded.
    assert re.fullmatch(
        rf"export --type sqlite -o {re.escape(str(reports))}/\.run\.partial-\d+-[0-9a-f]{{8}}\.sqlite "
        rf"{re.escape(str(report))}\n",
        log.read_text(),
    )
    assert sorted(p.name for p in reports.iterdir()) == ["run.nsys-rep", "run.sqlite"]
    # The next run reuses that export instead of exporting again.
    again = invoke(["info", str(report)])
    assert again.exit_code == 0, again.output
    assert "reusing its export" in again.stderr
    assert log.read_text().count("\n") == 1


def test_an_older_export_beside_the_report_is_not_overwritten(
    export_builder, tmp_path, monkeypatch
):
    export = small_export(export_builder()).write("made.sqlite")
    install_fake_nsys(tmp_path, export, monkeypatch)
    stale = tmp_path / "run.sqlite"
    stale.write_bytes(b"old")
    os.utime(stale, (1_000, 1_000))
    report = fake_report(tmp_path)
    result = invoke(["info", str(report)])
    assert result.exit_code == 0, result.output
    assert stale.read_bytes() == b"old"
    written = Path(result.stderr.split("exported it with nsys to ")[1].strip())
    assert written.name == "run.sqlite" and written.parent != tmp_path and written.is_file()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only folder")
def test_a_report_in_a_read_only_folder_is_exported_to_a_temporary_folder(
    export_builder, tmp_path, monkeypatch
):
    export = small_export(export_builder()).write("made.sqlite")
    install_fake_nsys(tmp_path, export, monkeypatch)
    folder = tmp_path / "ro"
    folder.mkdir()
    report = fake_report(folder)
    folder.chmod(0o555)
    try:
        result = invoke(["info", str(report)])
    finally:
        folder.chmod(0o755)
    assert result.exit_code == 0, result.output
    assert not (folder / "run.sqlite").exists()


def test_a_failing_nsys_export_is_a_clean_error_with_the_command(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text(
        f"#!{sys.executable}\nimport sys\nsys.exit('Error: report is damaged')\n"
    )
    (bin_dir / "nsys").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    report = fake_report(tmp_path)
    line = error_line(["analyze", str(report)], report)
    assert "`nsys export` failed (exit 1: Error: report is damaged)" in line
    assert "export it yourself: nsys export --type sqlite" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_truncated_export_says_to_export_again(command, export_builder, tmp_path):
    export = small_export(export_builder()).write()
    data = export.read_bytes()
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[: len(data) // 2])
    line = error_line([*command, str(path)], path)
    assert "is damaged or truncated" in line
    assert "nsys export --type sqlite --force-overwrite=true -o" in line


def export_with_a_corrupt_kernel_page(builder: ExportBuilder, tmp_path: Path) -> Path:
    """An export whose schema reads fine but whose kernel table has a page of garbage."""
    for i in range(3_000):
        builder.launch("gemm", i * 100, i * 100 + 10, i * 100 + 20, i * 100 + 90)
    path = builder.write()
    with sqlite3.connect(path) as connection:
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        root = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'"
        ).fetchone()[0]
    data = bytearray(path.read_bytes())
    # Zero the table's root page (an interior b-tree page pointing to its leaves).
    start = (root - 1) * page_size
    data[start : start + page_size] = bytes(page_size)
    bad = tmp_path / "midway.sqlite"
    bad.write_bytes(bytes(data))
    return bad


def test_an_export_damaged_inside_a_table_fails_mid_query_with_the_same_hint(
    export_builder, tmp_path
):
    path = export_with_a_corrupt_kernel_page(export_builder(), tmp_path)
    with open_export(path) as connection:  # the schema still reads: the damage is met later
        assert "CUPTI_ACTIVITY_KIND_KERNEL" in list_tables(connection, path)
    line = error_line(["analyze", str(path)], path)
    assert "is damaged or truncated" in line and "re-export it from the report" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_database_of_another_program_is_not_an_export(command, tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    line = error_line([*command, str(path)], path)
    assert "is a SQLite database from another program (tables: users)" in line


def test_a_database_without_tables_is_not_an_export(tmp_path):
    path = tmp_path / "blank.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE t (x)")
        connection.execute("DROP TABLE t")
    assert "is an empty SQLite database (no tables)" in error_line(["analyze", str(path)], path)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_capture_without_cuda_tracing_says_to_add_trace_cuda(command, export_builder):
    # nsys profile -t nvtx,osrt: NVTX ranges, no CUPTI tables at all.
    path = (
        export_builder().range("decode_step", 0, 1_000).range("decode_step", 2_000, 3_000).write()
    )
    line = error_line([*command, str(path)], path)
    assert "has no CUPTI_ACTIVITY_KIND_KERNEL table: the capture did not trace CUDA" in line
    assert "--trace=cuda,nvtx" in line


def test_a_capture_with_cuda_calls_but_no_gpu_work_says_so(export_builder):
    path = export_builder().call("cudaMalloc", 0, 1_000).write()
    line = error_line(["analyze", str(path)], path)
    assert "has CUDA API calls but no GPU work" in line


def test_an_unknown_step_name_lists_the_names_that_exist(export_builder):
    path = small_export(export_builder()).write()
    line = error_line(["analyze", str(path), "--step", "decode"], path)
    assert "no NVTX range named 'decode'" in line
    assert "decode_step" in line and "draft" in line


def test_an_unknown_step_name_with_newlines_in_range_names_stays_one_line(export_builder):
    builder = small_export(export_builder())
    path = builder.range("two\nlines", 0, 10).write()
    line = error_line(["analyze", str(path), "--step", "nope"], path)
    assert "two lines" in line


def test_an_unknown_process_lists_the_processes_with_cuda_activity(export_builder):
    path = small_export(export_builder()).write()
    line = error_line(["analyze", str(path), "--process", "4242"], path)
    assert "has no process 4242 with CUDA activity; pass one of these to --process: 100" in line


def test_no_export_and_no_demo_is_a_usage_error_in_one_line():
    result = invoke(["analyze"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no export given")


def test_an_unwritable_output_path_is_a_clean_error(export_builder, tmp_path):
    path = small_export(export_builder()).write()
    out = tmp_path / "no" / "such" / "dir" / "report.md"
    result = invoke(["analyze", str(path), "-o", str(out)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: cannot write {out}: No such file or directory. Choose another -o path."
    ]


def test_an_export_missing_a_column_we_read_names_the_schema_problem(tmp_path):
    # NVTX_EVENTS without domainId: older than anything we support.
    builder = small_export(ExportBuilder(tmp_path))
    path = builder.write()
    with sqlite3.connect(path) as connection:
        connection.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN domainId")
    line = error_line(["analyze", str(path)], path)
    assert "has a schema trace-gaps cannot read (no such column: e.domainId)" in line


# Odd but readable exports: a report, with an integrity note that says what is affected.


def notes_of(path: Path, *options: str) -> list[dict[str, object]]:
    """The report's notes as its JSON carries them."""
    result = invoke(["analyze", str(path), "-f", "json", *options])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["notes"]


def numbers_of(path: Path, skip: int | None = 0) -> dict[NoteCode, dict[str, NoteNumber]]:
    """Per note code the analysis finds, the numbers its sentence is written from."""
    return {
        code: note.numbers for code, note in note_facts(path, AnalysisOptions(skip=skip)).items()
    }


def test_no_nvtx_table_falls_back_to_whole_trace_analysis_and_says_so(export_builder):
    path = export_builder().launch("gemm", 0, 100, 200, 900).write()
    (note,) = notes_of(path)
    assert note["code"] == NoteCode.NO_NVTX
    assert (note["severity"], note["figures"]) == (Severity.PARTIAL, [Figures.STEPS])


def test_no_repeating_range_falls_back_to_whole_trace_analysis_and_says_so(export_builder):
    path = export_builder().range("once", 0, 1_000).launch("gemm", 0, 100, 200, 900).write()
    assert [note["code"] for note in notes_of(path)] == [NoteCode.NO_STEP_RANGE]


def test_a_graph_level_trace_says_kernels_inside_graphs_are_not_visible(export_builder):
    builder = small_export(export_builder())
    builder.call("cudaGraphLaunch", 4_100, 4_200, correlation_id=500)
    path = builder.graph_replay(4_300, 6_000, correlation_id=500).write()
    assert numbers_of(path)[NoteCode.GRAPH_LEVEL_TRACE] == {"graph_replays": 1}


def test_unclosed_ranges_and_ranges_closed_on_another_thread_are_noted(export_builder):
    builder = small_export(export_builder())
    builder.range("verify", 5_000, None).range("accept", 6_000, 7_000, end_tid=101)
    numbers = numbers_of(builder.write())
    assert numbers[NoteCode.UNCLOSED_RANGES] == {"ranges": 1}
    assert numbers[NoteCode.RANGES_CLOSED_ELSEWHERE] == {"ranges": 1}


def test_untimed_rows_are_left_out_and_counted(export_builder):
    builder = small_export(export_builder())
    path = builder.kernel("late", 0, 0, correlation_id=900).write()
    assert numbers_of(path)[NoteCode.UNTIMED_ROWS] == {"rows": 1}


def test_ops_without_a_launching_call_are_counted(export_builder):
    path = small_export(export_builder()).kernel("orphan", 5_000, 6_000).write()
    assert numbers_of(path)[NoteCode.OPS_WITHOUT_LAUNCH_CALL] == {"missing": 1, "ops": 4}


def test_profiler_overhead_inside_steps_is_noted(export_builder):
    path = small_export(export_builder()).overhead(12_000, 13_000).write()
    assert numbers_of(path)[NoteCode.PROFILER_OVERHEAD_IN_STEPS] == {
        "rows": 1,
        "duration_ns": 1_000,
    }


def test_several_processes_and_gpus_are_noted(export_builder):
    builder = small_export(export_builder())
    builder.call("cudaLaunchKernel", 100, 200, pid=200, tid=200, correlation_id=700)
    builder.kernel("rank1", 300, 900, pid=200, device_id=1, correlation_id=700)
    builder.kernel("peer", 1_000, 1_500, device_id=1)
    numbers = numbers_of(builder.write())
    # 100 on GPU 0 and 1, 200 on GPU 1: one (pid, gpu) pair each.
    assert numbers[NoteCode.SEVERAL_PROCESSES] == {
        "pids": (100, 100, 200),
        "gpus": (0, 1, 1),
        "collectives": False,
    }
    assert numbers[NoteCode.PROCESS_ON_SEVERAL_GPUS] == {"pid": 100, "gpus": 2}


def test_a_time_sliced_export_is_noted(export_builder):
    builder = small_export(export_builder()).meta("EXPORT_PARAM_TIMES_TO_EXPORT", "1s-2s")
    assert numbers_of(builder.write())[NoteCode.TIME_WINDOW_EXPORT] == {
        "settings": ("EXPORT_PARAM_TIMES_TO_EXPORT",),
        "values": ("1s-2s",),
    }


def test_an_old_schema_is_read_and_noted(export_builder):
    # Before 2023: EXPORT_META_DATA, NVTX names inline (no textId), no graphNodeId.
    builder = export_builder().without("META_DATA_EXPORT")
    for offset in (0, 10_000, 20_000):
        builder.range("decode_step", offset, offset + 10_000, inline_text=True)
        builder.range("draft", offset, offset + 4_000, inline_text=True)
        builder.launch("gemm", offset + 100, offset + 600, offset + 1_000, offset + 3_000)
    path = builder.write()
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT)")
        connection.execute(
            "INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_PRODUCT_VERSION', '2022.2.1.31')"
        )
        connection.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN textId")
        connection.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN graphNodeId")
    result = invoke(["analyze", str(path), "-f", "json", "--skip", "0"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["export"]["nsys_version"] == "2022.2.1.31"
    assert report["processes"][0]["steps"]["name"] == "decode_step"
    assert [note["code"] for note in report["notes"]] == [
        NoteCode.OLDER_SCHEMA,
        NoteCode.NVTX_WITHOUT_TEXT_ID,
        NoteCode.KERNELS_WITHOUT_GRAPH_NODE_ID,
    ]
    assert numbers_of(path)[NoteCode.OLDER_SCHEMA] == {
        "nsys_version": "2022.2.1.31",
        "schema_version": "",
    }


def test_non_utf8_bytes_in_names_are_replaced_not_fatal(export_builder):
    path = small_export(export_builder()).write()
    with sqlite3.connect(path) as connection:
        connection.execute(
            "UPDATE StringIds SET value = CAST(X'6472616674FF' AS TEXT) WHERE value = 'draft'"
        )
    result = invoke(["analyze", str(path), "-f", "md", "--skip", "0"])
    assert result.exit_code == 0, result.output
    assert "draft\ufffd" in result.stdout


def test_diff_with_a_missing_export_is_our_one_line_error_not_a_usage_box(export_builder, tmp_path):
    path = small_export(export_builder()).write()
    missing = tmp_path / "after.sqlite"
    result = invoke(["diff", str(path), str(missing)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: {missing.resolve()}: does not exist; pass the .sqlite file that "
        "`nsys export --type sqlite` wrote"
    ]


def test_a_process_with_steps_but_no_gpu_ops_is_all_idle_not_a_crash(export_builder):
    # pid 100: steps that launch kernels; pid 200 (a scheduler): steps and calls, no GPU op.
    builder = small_export(export_builder())
    for offset in (0, 10_000, 20_000):
        builder.range("decode_step", offset, offset + 10_000, pid=200, tid=200)
        builder.range("draft", offset, offset + 4_000, pid=200, tid=200)
        builder.call("cudaMalloc", offset + 10, offset + 20, pid=200, tid=200)
    path = builder.write()
    assert numbers_of(path)[NoteCode.STEPS_WITHOUT_GPU_WORK] == {"steps": 3}
    result = invoke(["analyze", str(path), "--process", "200", "-f", "json", "--skip", "0"])
    assert result.exit_code == 0, result.output
    (process,) = json.loads(result.stdout)["processes"]
    assert {row["busy_ns"] for row in process["step_rows"]} == {0}
