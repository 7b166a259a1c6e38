"""A command's progress bar on stderr, with the real total (windows, or exports) and its ETA."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Progress:
    """A progress bar on stderr with the real total (windows, or exports) and its ETA.

    Nothing is shown with --quiet or when stderr is not a terminal (pipes, CI, tests).
    rich.progress is imported only once a bar is shown.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None  # rich.progress.Progress, once started
        self.task: Any = None

    def __call__(self, description: str, done: int | None = None, total: int | None = None) -> None:
        """Name what runs now and, where known, how much of a known total is done."""
        if not self.enabled:
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar

            self.bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
                auto_refresh=False,  # no refresh thread: diff forks its sides from here
            )
            self.bar.start()
            self.task = self.bar.add_task(description, total=total)
        if total is None:
            self.bar.update(self.task, description=description, refresh=True)
        else:
            self.bar.update(
                self.task, description=description, completed=done or 0, total=total, refresh=True
            )

    def stop(self) -> None:
        self.enabled = False
        if self.bar is not None:
            self.bar.stop()


@contextmanager
def progress(quiet: bool) -> Iterator[Progress]:
    """A Progress for one command; it is cleared when the command ends, however it ends."""
    stderr = sys.stderr  # None when the command runs with stderr closed (2>&-)
    shown = Progress(enabled=not quiet and stderr is not None and stderr.isatty())
    try:
        yield shown
    finally:
        shown.stop()
