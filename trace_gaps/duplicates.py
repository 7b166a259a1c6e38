"""The exports a command was given, each exactly once: the same export twice is refused.

Given twice, an export's processes would be analysed twice: every collective then "waits" for
its own copy and the ledgers double (busy 27.23 + idle 29.80 ms inside a 28.51 ms step, seen
with one real export given twice). Two arguments are one export when they are

- the same file: the same path, a symbolic link to it, or a hard link (same device and inode);
- the same content under two names: equal sha256 (only files of equal size are hashed);
- the same capture session exported twice: equal session start, to the nanosecond
  (TARGET_INFO_SESSION_START_TIME), which two sessions of a run never share.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

from trace_gaps.errors import NotAnExportError, TraceGapsError
from trace_gaps.nsys.files import not_a_plain_file
from trace_gaps.nsys.head import read_session_start

_HASH_CHUNK_BYTES = 1 << 20


def refuse_duplicate_exports(paths: Sequence[Path]) -> None:
    """Raise TraceGapsError naming the first two arguments that are one export, and how.

    Files that cannot be read are left to the analysis, which names them."""
    if len(paths) < 2:
        return
    readable = [path for path in paths if path.is_file() and not_a_plain_file(path) is None]
    _first_repeat(readable, _inode, "the same file")
    # Only files of one size whose first MiB is the same too are hashed whole: two ranks'
    # exports can be of one size (SQLite grows by pages), and hashing GBs takes seconds.
    alike: dict[tuple[int, str], list[Path]] = {}
    for path in readable:
        alike.setdefault((path.stat().st_size, _sha256(path, limit=_HASH_CHUNK_BYTES)), []).append(
            path
        )
    for same_start in alike.values():
        _first_repeat(same_start, _sha256, "the same content, sha256 {key:.12}")
    _first_repeat(readable, _session_start, "the same capture session, started at {key} ns")


def _first_repeat(paths: list[Path], key_of: Callable[[Path], Hashable | None], how: str) -> None:
    if len(paths) < 2:
        return
    seen: dict[Hashable, Path] = {}
    for path in paths:
        key = key_of(path)
        if key is None:
            continue
        if key in seen:
            raise TraceGapsError(
                f"{seen[key]} and {path} are one export ({how.format(key=key)}): each export of "
                "a run must be given once, or its processes are counted twice. Drop one of them."
            )
        seen[key] = path


def _inode(path: Path) -> tuple[int, int]:
    found = path.stat()
    return found.st_dev, found.st_ino


def _sha256(path: Path, limit: int | None = None) -> str:
    """The sha256 of the file, or of its first `limit` bytes."""
    digest = hashlib.sha256()
    left = limit
    with path.open("rb") as handle:
        while (left is None or left > 0) and (chunk := handle.read(_HASH_CHUNK_BYTES)):
            chunk = chunk if left is None else chunk[:left]
            digest.update(chunk)
            left = None if left is None else left - len(chunk)
    return digest.hexdigest()


def _session_start(path: Path) -> int | None:
    try:
        return read_session_start(path)
    except NotAnExportError:  # not an export (a .nsys-rep, a damaged file): named later
        return None
