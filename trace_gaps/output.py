"""Writing what the user asked for: never onto an input, never half a file.

Every -o file is written to a temporary file in the same folder, then renamed over the
target, so a full disk or an interrupted run leaves the old file (or none), never a
truncated one. Before any work, each output path is compared with every input. An -o that
stands for a descriptor this process holds (/dev/stdout, /dev/fd/N, a file that is stdout's
own) is written through it, never replaced: `-o /dev/stdout >> build.log` appends.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from trace_gaps.errors import TraceGapsError
from trace_gaps.interrupts import last_resort, signals_held

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# C0 controls but tab and newline, DEL, C1 controls: in a name they would move the
# cursor, retitle the terminal or clear it (ESC [ 2 J), or cut a line (CR, NUL). And the
# Unicode bidirectional controls (ALM, LRM, RLM, the embeddings, overrides and isolates): a
# name holding U+202E shows the rest of its line, numbers included, right to left.
_CONTROL_CHARACTERS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def escape_control_characters(text: str) -> str:
    """Write each control character of the text as `\\u001b`: visible, inert on a terminal,
    and the same escape JSON uses, so a JSON text keeps its meaning."""
    return _CONTROL_CHARACTERS.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


# Files SQLite keeps beside a database: writing one of them would damage the export too.
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def _real(path: Path) -> Path:
    """The path with every symlink followed (os.path.realpath: a symlink loop does not raise,
    as Path.resolve does; it stays a path that matches no input)."""
    return Path(os.path.realpath(path))


def _same_file(output: Path, input_path: Path) -> bool:
    """Are these one file: the same inode when both exist, else the same real path?"""
    try:
        if output.exists() and input_path.exists():
            return os.path.samefile(output, input_path)
    except OSError:
        pass
    return _real(output) == _real(input_path)


def refuse_inputs_as_outputs(outputs: Iterable[Path], inputs: Iterable[Path | None]) -> None:
    """Raise TraceGapsError when an output path is, or resolves to, an input (or its
    SQLite side files), or standard input: `trace-gaps analyze r.sqlite -o r.sqlite` must
    not replace the export, nor `-o /dev/stdin < notes.txt` the notes.

    The side files are named after the real file, symlinks followed: SQLite puts the journal
    of `link.sqlite -> runs/r.sqlite` beside the file it opens, as runs/r.sqlite-journal."""
    given = [path for path in inputs if path is not None]
    for output in outputs:
        held_descriptor(output)  # raises for standard input
        for input_path in given:
            real = _real(input_path)
            sides = [
                side.with_name(side.name + suffix)
                for side in {input_path, real}
                for suffix in SQLITE_SIDE_FILES
            ]
            if _same_file(output, input_path) or any(_same_file(output, s) for s in sides):
                raise TraceGapsError(
                    f"is the input {input_path}; writing there would destroy it. "
                    "Choose another -o path.",
                    path=output,
                )


# Names of a descriptor of this process: /dev/fd/N, /proc/self/fd/N, /proc/<its pid>/fd/N.
_DESCRIPTOR_NAME = re.compile(r"/(?:dev/fd|proc/(?:self|thread-self|(\d+))/fd)/(\d+)")
_STANDARD_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def held_descriptor(output: Path) -> int | None:
    """The descriptor of this process that output stands for, to write through instead of
    replacing a file: the one its name gives (/dev/stdout, /dev/stderr, /dev/fd/N,
    /proc/self/fd/N), else stdout or stderr when output is their file, as in
    `-o build.log >> build.log`; None for a path to write by name.

    Raises TraceGapsError for standard input (/dev/stdin, fd 0, or its file when it is a
    regular one): writing there would destroy what the command was given to read."""
    name = os.path.normpath(os.path.abspath(output))
    found = _DESCRIPTOR_NAME.fullmatch(name)
    descriptor = _STANDARD_NAMES.get(name)
    if found and (found.group(1) is None or int(found.group(1)) == os.getpid()):
        descriptor = int(found.group(2))
    if descriptor is None:
        descriptor = _standard_stream_of(output)
    if descriptor == 0:
        raise TraceGapsError(
            "is standard input; writing there would destroy what it reads from. "
            "Choose another -o path.",
            path=output,
        )
    return descriptor


def _standard_stream_of(output: Path) -> int | None:
    """1 or 2 when output is the file of stdout or stderr, 0 when it is the regular file
    of stdin; else None."""
    try:
        target = os.stat(output)
    except OSError:
        return None
    for descriptor in (1, 2, 0):
        try:
            held = os.fstat(descriptor)
        except OSError:
            continue
        if os.path.samestat(target, held) and (descriptor != 0 or stat.S_ISREG(held.st_mode)):
            return descriptor
    return None


def write_atomically(output: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call write(handle) on a temporary file beside `output`, then rename it over `output`.

    A failure removes the temporary file and leaves `output` as it was. A symlink is
    followed (its target is replaced); a device or FIFO is written directly; a descriptor this
    process holds (held_descriptor: -o /dev/stdout, or stdout's own file) is written through,
    at its offset (appended after `>>`), never replaced.
    """
    descriptor = held_descriptor(output)
    if descriptor is not None:
        _write_through(descriptor, write)
        return
    if output.is_symlink():
        _refuse_symlink_loop(output)
    target = _real(output) if output.is_symlink() else output
    if target.exists() and not target.is_file():
        with target.open("wb") as handle:
            write(handle)
        return
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666
    temporary = hidden_sibling(target, f".{secrets.token_hex(4)}.tmp")
    owned = False

    def remove_temporary() -> None:
        if owned:
            temporary.unlink(missing_ok=True)

    try:
        with last_resort(remove_temporary):  # a signal's clean-up that never ends
            # Held: a Ctrl-C or SIGTERM just after the file is made would leave it behind.
            with signals_held():
                # O_EXCL: never write into a file someone else put there; the umask applies.
                descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
                handle = os.fdopen(descriptor, "wb")
                owned = True
            with handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
    except BaseException:
        remove_temporary()
        raise


def _write_through(descriptor: int, write: Callable[[BinaryIO], None]) -> None:
    """Call write(handle) on a duplicate of the descriptor: it shares the file's offset and
    append mode; what Python's own stdout and stderr hold is flushed first, to keep the order."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    with os.fdopen(os.dup(descriptor), "wb") as handle:
        write(handle)


NAME_MAX = 255  # bytes in one file name, on Linux's and macOS's file systems


def hidden_sibling(path: Path, ending: str, *, room_for: str = "") -> Path:
    """A hidden file beside path named after it, `.NAME{ending}`, NAME cut so that the whole
    (and the whole plus room_for, a suffix added later) stays within NAME_MAX bytes: a name
    that is valid for the file must not fail for its temporary's ("File name too long")."""
    room = NAME_MAX - 1 - len(os.fsencode(ending + room_for))
    return path.with_name("." + os.fsdecode(os.fsencode(path.name)[:room]) + ending)


def _refuse_symlink_loop(output: Path) -> None:
    """Raise OSError (ELOOP) when following the symlink never ends: the rename would
    otherwise replace the link itself."""
    try:
        os.stat(output)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise
        # A dangling link: its target is written, as for a link to an existing file.


def write_text_atomically(output: Path, text: str | list[str]) -> None:
    """write_atomically for UTF-8 text (a string, or its pieces one after the other: each
    encoded as it is written)."""
    pieces = [text] if isinstance(text, str) else text

    def write(handle: BinaryIO) -> None:
        for piece in pieces:
            handle.write(piece.encode("utf-8"))

    write_atomically(output, write)


# User strings ($ in Scala or JVM names, `Main$$anonfun$main$1`) are drawn as written:
# no mathtext parsing, no LaTeX, whatever the user's matplotlibrc says.
LITERAL_TEXT: dict[Any, Any] = {"text.parse_math": False, "text.usetex": False}


def write_figure_atomically(output: Path, figure: Figure) -> None:
    """write_atomically for a figure, its format (png, svg) chosen by the file's suffix."""

    def write(handle: BinaryIO) -> None:
        from matplotlib import rc_context  # imported here: start-up stays fast

        with rc_context(LITERAL_TEXT), warnings.catch_warnings():  # tick labels: user strings
            # A name's character the font lacks is drawn as a box; matplotlib's warning about
            # it is no news to the user, and quotes the character raw (a NUL) on stderr.
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
            figure.savefig(handle, format=output.suffix.lower().lstrip("."))

    write_atomically(output, write)
