"""Read-ahead: each streamed table's chunks made on a thread of its own while the analysis
works, the streams taking turns so that they stay level in time."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd

from trace_gaps.interrupts import stopping
from trace_gaps.model import START_NS

# Chunks read ahead of the analysis, per stream (each a read.CHUNK_ROWS frame: a few MB).
READ_AHEAD = 2


class Turns:
    """Whose turn it is to read a chunk: one stream at a time, and among the streams waiting
    for a turn, the one whose rows are furthest behind in time (on a tie, the first to ask).

    The analysis needs every stream read up to the same time: the CUDA API table holds about
    twice the kernel table's rows per second, so turns taken in any order leave it behind
    while the kernel stream reads ahead, and the first windows wait for it.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._busy = False
        self._waiting: dict[object, tuple[int, int]] = {}  # reader -> (reached, ask order)
        self._asked = 0

    @contextmanager
    def turn(self, reader: object, reached: int) -> Iterator[None]:
        """Hold the turn while reading one chunk; reached: the start of the reader's last row."""
        with self._changed:
            self._asked += 1
            self._waiting[reader] = (reached, self._asked)
            while self._busy or min(self._waiting.values()) != self._waiting[reader]:
                self._changed.wait()
            del self._waiting[reader]
            self._busy = True
        try:
            yield
        finally:
            with self._changed:
                self._busy = False
                self._changed.notify_all()


class ReadAhead:
    """produce()'s chunks, made on a thread of their own up to READ_AHEAD chunks ahead,
    from the moment this is made.

    An exception raised there is raised here, at the chunk it replaced. close() stops the
    thread after the chunk it is reading. One chunk is made at a time among the streams
    sharing `turns` (reading them all at once would only add their working memory up).
    """

    def __init__(self, produce: Callable[[], Iterator[pd.DataFrame]], turns: Turns) -> None:
        self._turns = turns
        self._made: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=READ_AHEAD)
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(
            target=self._work, args=(produce,), name="trace-gaps read-ahead", daemon=True
        )
        self._thread.start()

    def _hand_over(self, kind: str, value: object) -> bool:
        while not self._stop.is_set():
            try:
                self._made.put((kind, value), timeout=0.05)
            except queue.Full:
                continue
            return True
        return False

    def _work(self, produce: Callable[[], Iterator[pd.DataFrame]]) -> None:
        chunks = produce()
        try:
            reached = np.iinfo(np.int64).min  # the start of the last row handed over
            while True:
                with self._turns.turn(self, reached):
                    chunk = next(chunks, None)
                if chunk is None:
                    break
                if len(chunk):
                    reached = int(chunk[START_NS].iloc[-1])
                if not self._hand_over("chunk", chunk):
                    return
            self._hand_over("end", None)
        except BaseException as error:  # noqa: BLE001 - raised again in the reading thread
            self._hand_over("error", error)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> ReadAhead:
        return self

    def __next__(self) -> pd.DataFrame:
        if self._finished:
            raise StopIteration
        kind, value = self._made.get()
        if kind == "chunk":
            assert isinstance(value, pd.DataFrame)
            return value
        self.close()
        if kind == "error":
            assert isinstance(value, BaseException)
            raise value
        raise StopIteration

    def close(self) -> None:
        """Stop the thread after the chunk it is reading, and wait for it to end; not while a
        signal stops the process (interrupts.stopping): the thread may wait on a lock the
        signal left held in the queue's code, and as a daemon it ends with the process."""
        self._finished = True
        self._stop.set()
        if not stopping():
            self._thread.join()


class Readers:
    """The read-ahead threads of one open export: they take turns, and stop with it.

    Both readers read ahead. Arrow spends its time in C, without the GIL. The sqlite3 path
    builds Python rows under the GIL, but SQLite's own stepping releases it: on the 1M
    capture a thread took the sqlite3 path from 7.76 to 6.87 s for +88 MB (100,000-row
    chunks; with 250,000-row chunks it had gained little for +0.2 GB).
    """

    def __init__(self, *, threads: bool = True) -> None:
        self._threads = threads
        self._turns = Turns()
        self._started: list[ReadAhead] = []

    def start(self, produce: Callable[[], Iterator[pd.DataFrame]]) -> Iterator[pd.DataFrame]:
        if not self._threads:
            return produce()
        self._started.append(ReadAhead(produce, self._turns))
        return self._started[-1]

    def close(self) -> None:
        for started in self._started:
            started.close()


class Started:
    """A ChunkSource whose first chunks are read from the moment this is made (while the
    head is analysed); later calls start afresh. An error in starting it is raised where
    the chunks are first asked for, as without the early start."""

    def __init__(self, start: Callable[[], Iterator[pd.DataFrame]]) -> None:
        self._start = start
        self._first: Iterator[pd.DataFrame] | None
        try:
            self._first = start()
        except Exception as error:  # noqa: BLE001 - raised when the chunks are asked for
            self._first = raising(error)

    def __call__(self) -> Iterator[pd.DataFrame]:
        first, self._first = self._first, None
        return first if first is not None else lazily(self._start)

    def discard(self) -> None:
        """Stop the early reading (its chunks unused); a later call starts afresh."""
        first, self._first = self._first, None
        close = getattr(first, "close", None)
        if close is not None:
            close()


def raising(error: Exception) -> Iterator[pd.DataFrame]:
    raise error
    yield  # a generator: the error comes with the first chunk


def lazily(start: Callable[[], Iterator[pd.DataFrame]]) -> Iterator[pd.DataFrame]:
    """start()'s chunks, started when the first is asked for."""
    yield from start()
