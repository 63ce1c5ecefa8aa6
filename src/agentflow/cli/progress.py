"""Progress of long work (``copy``, ``rekey``): done out of a total, and an ETA.

On a terminal (stderr) a live bar; otherwise one line on stderr every few
seconds, so a log or a CI job shows the work moving. Stdout is left to the
command's result. The estimate is the rate of this run so far applied to
what is left (work a resumed run did before is counted as done, not as
speed).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeRemainingColumn
from rich.progress import Progress as Bar

from agentflow.cli.text import inert

__all__ = ["Progress", "eta"]

#: Seconds between progress lines without a terminal (unless the command says otherwise).
EVERY_S = 5.0


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def eta(done: int, start: int, total: int, elapsed: float) -> str:
    """``about N left`` from the rate since ``start`` (done at this run's start)."""
    if done >= total:
        return "finishing"
    if done <= start or elapsed <= 0:
        return "time left not known yet"
    left = (total - done) * elapsed / (done - start)
    return f"about {_duration(left)} left"


class Progress:
    """``what``: ``done`` of ``total`` ``unit``, with ``detail`` (counts) and an ETA."""

    def __init__(
        self,
        what: str,
        total: int,
        *,
        unit: str = "threads",
        start: int = 0,
        every: float = EVERY_S,
        console: Console | None = None,
    ) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.start = self.done = start
        self.detail = ""
        self.every = every
        self._began = self._printed = time.monotonic()
        self._console = console or Console(stderr=True, markup=False, emoji=False, highlight=False)
        self._bar: Bar | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> Progress:
        if self._console.is_terminal:
            self._bar = Bar(
                TextColumn(inert(self.what)),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TimeRemainingColumn(),
                console=self._console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.what, total=self.total, completed=self.done)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)

    def update(self, done: int, detail: str = "") -> None:
        """``done`` of the total so far; a line is printed when one is due."""
        self.done, self.detail = done, detail
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done)
            return
        now = time.monotonic()
        if now - self._printed >= self.every:
            self._printed = now
            print(inert(self.line()), file=sys.stderr, flush=True)

    async def keep_reporting(self, read: Callable[[], tuple[int, str]]) -> None:
        """Update from ``read()`` (done, detail) every ``every`` seconds until
        cancelled: a line is printed on time even while one long piece of work
        (a thread of many steps) has not finished."""
        while True:
            await asyncio.sleep(self.every)
            self.update(*read())

    def line(self) -> str:
        """e.g. ``copy: 120 of 500 threads (24%), 2,400 checkpoints; about 40 s left``."""
        share = f" ({100 * self.done // self.total}%)" if self.total else ""
        detail = f", {self.detail}" if self.detail else ""
        left = eta(self.done, self.start, self.total, time.monotonic() - self._began)
        return f"{self.what}: {self.done:,} of {self.total:,} {self.unit}{share}{detail}; {left}"
