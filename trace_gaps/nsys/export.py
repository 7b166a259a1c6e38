"""Open an export read-only and check it is an Nsight Systems export with GPU work.

Every read of an export, whole or in chunks, runs inside reading_export, so SQLite's errors
and values the typed reads refuse reach the user as one NotAnExportError line.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from trace_gaps.errors import MissingTableError, NoKernelsError, NotAnExportError
from trace_gaps.nsys import queries
from trace_gaps.nsys.convert import export_command, is_report
from trace_gaps.nsys.files import NotAPlainFile, not_a_plain_file, read_head
from trace_gaps.nsys.sql import BadValues, query_rows, query_value

SQLITE_MAGIC = b"SQLite format 3\x00"


@contextmanager
def open_export(path: Path, *, values: bool = True) -> Iterator[sqlite3.Connection]:
    """Open an export read-only (the file is never changed), after checking it is SQLite.

    values=False: a ValueError or TypeError raised while it is open is not taken for a
    bad value in the file (the streamed analysis runs inside; its reads say so themselves).
    """
    check_is_sqlite(path)
    uri = export_uri(path)
    try:
        connection = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as error:
        raise NotAnExportError(
            f"cannot be opened as SQLite ({error}); check the file and re-run nsys export",
            path=path,
        ) from error
    # Names are user strings (kernels, NVTX text): never let a stray byte stop the report.
    connection.text_factory = _decode_text
    try:
        with reading_export(path, values=values):
            yield connection
    finally:
        connection.close()


def export_uri(path: Path) -> str:
    """The read-only URI of an export. A WAL-mode export is opened immutable: reading it
    read-only otherwise creates -wal and -shm files beside it (and fails in a read-only folder)."""
    uri = path.resolve().as_uri() + "?mode=ro"
    return uri + "&immutable=1" if _is_wal_mode(path) else uri


def _is_wal_mode(path: Path) -> bool:
    # SQLite header bytes 18 and 19: file format write and read versions, 2 for WAL.
    try:
        header = read_head(path, 20)
    except (OSError, NotAPlainFile):
        return False
    return len(header) == 20 and header[18:20] == b"\x02\x02"


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


@contextmanager
def reading_export(path: Path, *, values: bool = True) -> Iterator[None]:
    """Turn SQLite errors met while reading (open, schema, any query) into NotAnExportError.

    values: also take a ValueError or TypeError for a value the typed read refused.
    """
    before = _file_version(path)
    try:
        yield
    except BadValues as error:  # counted in the whole table, not the chunk that met it
        raise NotAnExportError(error.counted(export_uri(path)).message) from error
    except UnicodeDecodeError as error:
        # SQLite's own message quoted garbage bytes of a damaged schema.
        raise NotAnExportError(
            _damaged(path, before, "its schema holds bytes that are not text"), path=path
        ) from error
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as error:
        # pandas wraps the sqlite3 error with the whole SQL text; keep only SQLite's words.
        cause = str(error.__cause__ or error).splitlines()[0]
        if "database is locked" in cause:
            raise NotAnExportError(
                "is locked by another program, which is writing it (SQLite: database is "
                "locked); wait until it is done, then run trace-gaps again",
                path=path,
            ) from error
        if "no such column" in cause or "no such table" in cause:
            raise NotAnExportError(
                f"has a schema trace-gaps cannot read ({cause}); please report it with the "
                "Nsight Systems version that wrote the export",
                path=path,
            ) from error
        raise NotAnExportError(_damaged(path, before, cause), path=path) from error
    except (ValueError, TypeError) as error:
        if not values:
            raise
        # A NULL or a string where nsys always writes a number: the typed read refuses it.
        cause = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise NotAnExportError(
            f"holds a value trace-gaps cannot read ({cause}); the export is damaged or from an "
            "unsupported nsys version: re-export it, and report it with the nsys version if "
            "that does not help",
            path=path,
        ) from error


def _file_version(path: Path) -> tuple[int, int] | None:
    """The file's size and modification time, None when it cannot be read."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _writer_evidence(path: Path, before: tuple[int, int] | None) -> str:
    """What shows that a program is writing the export now ("" when nothing does): it changed
    while it was read, or it is in WAL mode with SQLite's files of an open connection beside
    it (a write-ahead log emptied by a checkpoint, a shared-memory index)."""
    if _file_version(path) != before:
        return "it changed while trace-gaps read it"
    if not _is_wal_mode(path):
        return ""
    real = Path(os.path.realpath(path))
    open_files = [
        side.name
        for side in (real.with_name(real.name + suffix) for suffix in ("-wal", "-shm"))
        if side.exists()
    ]
    return f"{' and '.join(open_files)} beside it" if open_files else ""


def _damaged(path: Path, before: tuple[int, int] | None, cause: str) -> str:
    """What SQLite's refusal means: an export still being written is incomplete, not damaged."""
    writer = _writer_evidence(path, before)
    if writer:
        return (
            f"is being written by another program ({writer}; SQLite: {cause}), so it is "
            "incomplete: wait until that program is done, then run trace-gaps again "
            "(re-export it if none is)"
        )
    return (
        f"is damaged or truncated ({cause}); re-export it from the report: "
        f"{export_command(path.with_suffix('.nsys-rep'), path, overwrite=True)}"
    )


# First bytes of compressed files, with the command that undoes each.
_COMPRESSED = {
    b"\x1f\x8b": ("gzip", "gunzip -k"),
    b"\xfd7zXZ\x00": ("xz", "unxz -k"),
    b"\x28\xb5\x2f\xfd": ("zstd", "unzstd"),
    b"BZh": ("bzip2", "bunzip2 -k"),
    b"PK\x03\x04": ("zip", "unzip"),
}


def check_no_pending_writes(path: Path) -> None:
    """Raise when SQLite files beside the export hold writes not yet in it: a hot journal
    or a non-empty write-ahead log (a program is writing it, or stopped midway)."""
    real = Path(os.path.realpath(path))  # SQLite's side files are beside the real file
    for suffix, what in (("-journal", "a hot journal"), ("-wal", "a write-ahead log")):
        side = real.with_name(real.name + suffix)
        try:
            pending = side.stat().st_size > 0
        except OSError:
            continue
        if pending:
            shown = side.name if real == Path(os.path.abspath(path)) else side
            raise NotAnExportError(
                f"has {what} beside it ({shown}) with changes not yet in the file: a "
                "program is writing it, or stopped midway; wait until it is done (or open it "
                "once with sqlite3 to finish the write), then run trace-gaps again",
                path=path,
            )


def check_is_sqlite(path: Path) -> None:
    """Raise NotAnExportError unless the path is a readable file with SQLite's header."""
    if not path.exists():
        if path.is_symlink():  # exists() follows links: a loop, or a link to nowhere
            try:
                os.stat(path)
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise NotAnExportError(
                        "is a symbolic link that leads back to itself (a loop); point it at "
                        "the .sqlite file that `nsys export --type sqlite` wrote",
                        path=path,
                    ) from None
            raise NotAnExportError(
                f"is a symbolic link to {os.readlink(path)}, which does not exist; pass the "
                ".sqlite file that `nsys export --type sqlite` wrote",
                path=path,
            )
        raise NotAnExportError(
            "does not exist; pass the .sqlite file that `nsys export --type sqlite` wrote",
            path=path,
        )
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.sqlite"))[:3]
        found = f" (it holds {', '.join(inside)})" if inside else ""
        raise NotAnExportError(
            f"is a directory{found}; pass one .sqlite file that `nsys export --type sqlite` wrote",
            path=path,
        )
    problem = not_a_plain_file(path)
    try:
        header = b"" if problem else read_head(path, len(SQLITE_MAGIC))
    except NotAPlainFile as error:
        problem = str(error)
    except OSError as error:
        raise NotAnExportError(
            f"cannot be read ({error.strerror}); check its permissions", path=path
        ) from error
    if problem:
        raise NotAnExportError(
            f"is {problem}; pass the .sqlite file that `nsys export --type sqlite` wrote",
            path=path,
        )
    if header == SQLITE_MAGIC:
        check_no_pending_writes(path)
        return
    for magic, (kind, command) in _COMPRESSED.items():
        if header.startswith(magic):
            raise NotAnExportError(
                f"is compressed ({kind}), not an SQLite export; decompress it first: "
                f"{command} {shlex.quote(str(path))}",
                path=path,
            )
    if is_report(path):
        raise NotAnExportError(
            "is an Nsight Systems report, not its SQLite export, and nsys is not on PATH; "
            f"export it first: {export_command(path)}",
            path=path,
        )
    if not header:
        raise NotAnExportError(
            "is empty (0 bytes); re-run the export: nsys export --type sqlite -o OUT.sqlite "
            "REPORT.nsys-rep",
            path=path,
        )
    raise NotAnExportError(
        "is not a SQLite file; pass the file that `nsys export --type sqlite -o OUT.sqlite "
        "REPORT.nsys-rep` writes",
        path=path,
    )


def list_tables(connection: sqlite3.Connection, path: Path) -> tuple[str, ...]:
    """The export's table names, sorted; raise NotAnExportError when SQLite cannot read them."""
    with reading_export(path):
        rows = query_rows(connection, queries.TABLES)
    return tuple(sorted(str(row[0]) for row in rows))


def check_is_cuda_export(
    tables: tuple[str, ...], path: Path, connection: sqlite3.Connection | None = None
) -> None:
    """Raise unless the tables are those of an Nsight Systems export with CUDA GPU work."""
    if not tables:
        raise NotAnExportError(
            "is an empty SQLite database (no tables), not an Nsight Systems export; pass the "
            "file that `nsys export --type sqlite` wrote",
            path=path,
        )
    is_nsys = _has_any(tables, (queries.STRING_TABLE, *queries.EXPORT_META_TABLES)) or any(
        table.startswith("CUPTI_ACTIVITY_KIND_") for table in tables
    )
    if not is_nsys:
        shown = ", ".join(tables[:4]) + (", ..." if len(tables) > 4 else "")
        raise NotAnExportError(
            f"is a SQLite database from another program (tables: {shown}), not an Nsight "
            "Systems export; pass the file that `nsys export --type sqlite` wrote",
            path=path,
        )
    if _has_any(tables, queries.OP_TABLES):
        return
    if queries.RUNTIME_TABLE in tables:
        lost = _lost_records_evidence(connection, tables) if connection is not None else ""
        if lost:
            raise NoKernelsError(
                f"has CUDA API calls but no GPU activity records (no {queries.KERNEL_TABLE} "
                f"table) although {lost}: the records were lost, not the work (a process that "
                "dies at exit, or full buffers, lose them); capture again and let the program "
                "exit normally or call cudaProfilerStop() before it exits",
                path=path,
            )
        raise NoKernelsError(
            f"has CUDA API calls but no GPU work (no {queries.KERNEL_TABLE} table): no kernel "
            "ran while nsys was recording; capture a window in which the program runs on the GPU",
            path=path,
        )
    raise MissingTableError(
        f"has no {queries.KERNEL_TABLE} table: the capture did not trace CUDA; re-run "
        "nsys profile with --trace=cuda,nvtx and export again",
        path=path,
    )


def no_timed_ops_error(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...], untimed: int
) -> NoKernelsError:
    """The error for an export without a timed GPU op: none ran, or their records were lost."""
    launches = table_count(connection, tables, queries.RUNTIME_TABLE, queries.LAUNCH_CALL_COUNT)
    if launches:
        return NoKernelsError(
            f"has {launches} launch calls but no GPU activity records ({untimed} untimed rows "
            "left out): GPU tracing was off, or the records were lost (a process that exits "
            "abnormally can lose them, and full buffers drop them); capture again with "
            "--trace=cuda and GPU activity on, and let the program exit normally or call "
            "cudaProfilerStop() before it exits",
            path=path,
        )
    return NoKernelsError(
        f"has no timed GPU ops ({untimed} untimed rows left out): no kernel, copy or graph ran "
        "while nsys was recording; capture a window in which the program runs on the GPU",
        path=path,
    )


# What nsys writes when it could not keep every event (DIAGNOSTIC_EVENT texts).
LOST_EVENTS = re.compile(
    r"\blost\b|\bdropp|\bdiscard|overflow|not (?:been )?flushed|\bincomplete\b", re.IGNORECASE
)
# ... and what it writes on every capture stopped early ("Not all CUDA events might have been
# collected", seen on healthy captures too): quoted only where no GPU record is left.
MAYBE_LOST = re.compile(LOST_EVENTS.pattern + r"|not all .{0,40}collected", re.IGNORECASE)


def _lost_records_evidence(connection: sqlite3.Connection, tables: tuple[str, ...]) -> str:
    """What says GPU work happened whose records are missing: launch calls, graph node rows,
    nsys's own diagnostics; "" when nothing does."""
    found = []
    launches = table_count(connection, tables, queries.RUNTIME_TABLE, queries.LAUNCH_CALL_COUNT)
    if launches:
        found.append(f"it holds {launches} launch calls")
    nodes = table_count(
        connection, tables, queries.GRAPH_NODE_EVENTS_TABLE, queries.GRAPH_NODE_COUNT
    )
    if nodes:
        found.append(f"{nodes} CUDA graph node rows")
    if queries.DIAGNOSTIC_TABLE in tables:
        try:
            texts = [str(row[0]) for row in query_rows(connection, queries.DIAGNOSTICS)]
        except sqlite3.Error:
            texts = []
        lost = [t for t in dict.fromkeys(texts) if MAYBE_LOST.search(t)]
        if lost:
            found.append("nsys says " + "; ".join(repr(" ".join(t.split())) for t in lost[:2]))
    return ", ".join(found)


def _has_any(tables: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    return any(table in tables for table in wanted)


def table_count(
    connection: sqlite3.Connection, tables: tuple[str, ...], table: str, sql: str
) -> int:
    """A COUNT(*) query's answer, 0 when the export lacks its table."""
    return int(query_value(connection, sql)) if table in tables else 0


def count_rows(path: Path) -> dict[str, int]:
    """Row counts of the tables `trace-gaps info` reports on (absent tables are left out)."""
    with open_export(path) as connection:
        tables = list_tables(connection, path)
        return {
            table: int(query_value(connection, sql))
            for table, sql in queries.ROW_COUNTS.items()
            if table in tables
        }


def devices_per_process(path: Path) -> dict[int, list[int]]:
    """The GPUs (device ids) each process ran kernels, copies or memsets on."""
    devices: dict[int, set[int]] = {}
    with open_export(path) as connection:
        tables = list_tables(connection, path)
        for table, sql in queries.DEVICES_PER_PROCESS.items():
            if table not in tables:
                continue
            for pid, device_id in query_rows(connection, sql):
                if pid is not None and device_id is not None:
                    devices.setdefault(int(pid), set()).add(int(device_id))
    return {pid: sorted(ids) for pid, ids in sorted(devices.items())}
