"""Damaged exports: flipped, zeroed or cut bytes, and odd values, give a clean error or a report.

Never a traceback: exit 1 with one line `error: <file>: ...`, or exit 0 with a report.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.builders import ExportBuilder
from tests.conftest import peer_trace_paths, sample_trace_paths
from trace_gaps.cli import app

runner = CliRunner()

CASES = 30  # the thorough run's; a default run takes the first QUICK_CASES
QUICK_CASES = 3  # one per command
SEED = 20_261_129
COMMANDS = (["analyze", "-f", "md"], ["analyze", "-f", "json"], ["info"])


def base_export(directory: Path) -> Path:
    """The smallest real export at hand (sample, else peer trace), else a synthetic one."""
    real = sample_trace_paths() or peer_trace_paths()
    if real:
        return min(real, key=lambda p: p.stat().st_size)
    builder = ExportBuilder(directory)
    for offset in range(0, 200_000, 10_000):
        builder.range("decode_step", offset, offset + 10_000).range("draft", offset, offset + 6_000)
        builder.launch("gemm", offset + 100, offset + 600, offset + 1_000, offset + 3_000)
        builder.call("cudaStreamSynchronize", offset + 700, offset + 3_100)
    return builder.write("base.sqlite")


def damage(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One random kind of damage, described."""
    buffer = bytearray(data)
    kind = rng.choice(["truncate", "flip", "zero_page", "scramble_data"])
    if kind == "truncate":
        cut = rng.randrange(0, len(buffer))
        return f"truncate at {cut}", bytes(buffer[:cut])
    if kind == "flip":
        spots = [rng.randrange(len(buffer)) for _ in range(rng.randint(1, 8))]
        for spot in spots:
            buffer[spot] ^= 1 << rng.randrange(8)
        return f"flip bits at {spots}", bytes(buffer)
    if kind == "zero_page":
        page_size = int.from_bytes(data[16:18], "big") or 65_536
        page = rng.randrange(len(buffer) // page_size)
        buffer[page * page_size : (page + 1) * page_size] = bytes(page_size)
        return f"zero page {page + 1}", bytes(buffer)
    # Past the schema pages, where table rows live.
    spots = [rng.randrange(len(buffer) // 5, len(buffer)) for _ in range(rng.randint(1, 40))]
    for spot in spots:
        buffer[spot] = rng.randrange(256)
    return f"scramble {len(spots)} data bytes", bytes(buffer)


def assert_clean(args: list[str], path: Path, what: str) -> None:
    result = runner.invoke(app, [*args, str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{what}: {result.exception!r}"
    )
    if result.exit_code == 0:
        assert result.stdout.strip(), what
        return
    assert result.exit_code == 1, (what, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), (what, result.stderr)


@pytest.mark.parametrize(
    "case",
    [c if c < QUICK_CASES else pytest.param(c, marks=pytest.mark.thorough) for c in range(CASES)],
)
def test_a_damaged_export_gives_a_clean_error_or_a_report(case, tmp_path):
    base = base_export(tmp_path)
    rng = random.Random(SEED + case)
    what, data = damage(base.read_bytes(), rng)
    path = tmp_path / "damaged.sqlite"
    path.write_bytes(data)
    assert_clean(COMMANDS[case % len(COMMANDS)], path, f"{base.name}: {what}")


# Values nsys would not write, each set on one row of a small valid export.
ODD_VALUES = {
    "a string as a kernel start": (
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = 2"
    ),
    "a float as a kernel start": (
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 1.5 WHERE rowid = 2"
    ),
    "a kernel ending before it starts": (
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 5000 WHERE rowid = 2'
    ),
    "negative kernel times": (
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -100, "end" = -50 WHERE rowid = 2'
    ),
    "a kernel ending at int64 max": (
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = 9223372036854775807 WHERE rowid = 2'
    ),
    "a kernel name id with no string": (
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 999 WHERE rowid = 2"
    ),
    "a NULL kernel globalPid": (
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL WHERE rowid = 2"
    ),
    "a NULL call globalTid": (
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL WHERE rowid = 2"
    ),
    "a call name id with no string": (
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 999 WHERE rowid = 2"
    ),
    "a call ending before it starts": (
        'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = start - 100000 WHERE rowid = 2'
    ),
    "every call sharing one correlation id": (
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 1"
    ),
    "a range ending before it starts": 'UPDATE NVTX_EVENTS SET "end" = start - 1 WHERE rowid = 3',
    "a NULL range globalTid": "UPDATE NVTX_EVENTS SET globalTid = NULL WHERE rowid = 3",
    "a range text id with no string": "UPDATE NVTX_EVENTS SET textId = 999 WHERE rowid = 3",
    "a string as an event type": "UPDATE NVTX_EVENTS SET eventType = 'x' WHERE rowid = 3",
    "a number as a string": "UPDATE StringIds SET value = 42 WHERE id = 1",
    "a blob as a string": "UPDATE StringIds SET value = X'FF00FE' WHERE id = 1",
    "a thread row of NULLs": "INSERT INTO ThreadNames VALUES (NULL, NULL, NULL)",
    "a process row of NULLs": "INSERT INTO PROCESSES VALUES (NULL, NULL, NULL)",
    "a GPU row of NULLs": "INSERT INTO TARGET_INFO_GPU VALUES (NULL, NULL, NULL)",
    "a NULL nsys version": "UPDATE META_DATA_EXPORT SET value = NULL",
    "every kernel untimed": 'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 0, "end" = 0',
    "an empty kernel table": "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "an empty call table": "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME",
    "an empty range table": "DELETE FROM NVTX_EVENTS",
}


@pytest.mark.parametrize("sql", ODD_VALUES.values(), ids=ODD_VALUES.keys())
def test_an_export_with_odd_values_gives_a_clean_error_or_a_report(sql, tmp_path):
    builder = ExportBuilder(tmp_path).thread_name("main")
    for offset in (0, 10_000, 20_000, 30_000):
        builder.range("decode_step", offset, offset + 10_000).range("draft", offset, offset + 5_000)
        builder.launch("gemm", offset + 100, offset + 600, offset + 1_000, offset + 3_000)
        builder.call("cudaStreamSynchronize", offset + 700, offset + 3_100)
    path = builder.write()
    with sqlite3.connect(path) as connection:
        connection.execute(sql)
    for args in COMMANDS:
        assert_clean(list(args), path, sql)


def test_the_untouched_base_export_gives_a_report(tmp_path):
    # The fuzz cases start from a readable export; without this they could all fail "cleanly".
    path = tmp_path / "copy.sqlite"
    shutil.copy(base_export(tmp_path), path)
    result = runner.invoke(app, ["analyze", str(path), "-f", "md"])
    assert result.exit_code == 0, result.output
    assert "# trace-gaps report" in result.stdout
