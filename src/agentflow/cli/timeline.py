"""A thread's timeline, streamed: what ``history`` and a finished run print.

The history is read step by step and printed as it is read, so memory does
not grow with the thread: a row needs only the record before it (the nodes
that produced step N are the frontier of step N-1, the keys that changed are
a diff of their states). The table is printed a page of rows at a time with
fixed column widths, each page's borders joined to the last; ``--json`` is
one array written an element at a time, byte for byte what the whole list
would have been.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.segment import Segment, Segments
from rich.table import Column, Table
from rich.text import Text

from agentflow.checkpoint.base import Checkpoint
from agentflow.cli import render
from agentflow.cli.foreign import foreign_record
from agentflow.cli.text import inert

__all__ = ["Timeline", "print_timeline", "write_history_json"]

#: Rows rendered (and held) at a time.
PAGE_ROWS = 100
_HEADERS = ("step", "time", "event", "state changed")
#: Borders and padding of a four-column table: five rules, two spaces per column.
_CHROME = 5 + 4 * 2


@dataclass
class Timeline:
    """Turns checkpoints, in step order, into timeline rows; remembers only the
    record before (and, for an adapter's thread, its last checkpoint)."""

    previous: Checkpoint | None = None
    checkpoint: Checkpoint | None = None

    def row(self, cp: Checkpoint) -> tuple[str, str]:
        """What produced ``cp`` and which top-level state keys changed, as JSON
        Pointers (both raw)."""
        previous, self.previous = self.previous, cp
        record = foreign_record(cp)
        if record is not None and not record.stepwise:  # not a run's steps: checkpoints only
            if record.kind != "checkpoint":
                return render.event_of(previous, cp), "-"
            before, self.checkpoint = self.checkpoint, cp
            return render.event_of(previous, cp), _changed(before.state if before else {}, cp)
        known = previous if previous is not None and previous.step == cp.step - 1 else None
        if known is None and (cp.step != 0 or render.forked_from(cp) is not None):
            return render.event_of(known, cp), render.UNKNOWN
        return render.event_of(known, cp), _changed(known.state if known else {}, cp)


def _changed(before: Any, cp: Checkpoint) -> str:
    """The top-level keys that changed, as JSON Pointers (``/refund.amount``, a
    key ``a, b`` as ``/a, b``: each one starts with ``/``, which a key escapes)."""
    keys = {render.top_pointer(path) for path, *_ in render.diff_states(before, cp.state)}
    return ", ".join(sorted(keys)) or "-"


def _table(widths: list[int], title: str | None) -> Table:
    step, time_, event, changed = widths
    return Table(
        Column("step", no_wrap=True, width=step),
        Column("time", no_wrap=True, width=time_),
        Column("event", width=event, overflow="fold"),
        Column("state changed", width=changed, overflow="fold"),
        title=Text(inert(title)) if title is not None else None,
        show_header=title is not None,
    )


def _widths(rows: list[list[Text]], width: int, latest_step: int) -> list[int]:
    """Column widths for every page: the first page's natural ones (as a table
    of it alone would have), the step column wide enough for the latest step,
    and the text columns narrowed to fit ``width`` (later pages wrap in them)."""
    natural = [max([len(h), *(r[i].cell_len for r in rows)]) for i, h in enumerate(_HEADERS)]
    step, time_, event, changed = natural
    step = max(step, len(str(latest_step)))
    room = width - _CHROME - step - time_
    if event + changed > room:
        changed = min(changed, max(13, room // 3))
        event = max(20, room - changed)
    return [step, time_, event, changed]


async def print_timeline(
    console: Console, steps: AsyncIterable[Checkpoint], title: str, latest_step: int
) -> int:
    """Print the timeline of ``steps`` as one table, a page at a time; return
    how many steps it showed. ``latest_step`` sizes the step column."""
    timeline = Timeline()
    page: list[list[Text]] = []
    widths: list[int] | None = None
    bottom: list[Segment] | None = None
    count = 0

    def flush() -> None:
        nonlocal widths, bottom
        first = widths is None
        widths = widths or _widths(page, console.width, latest_step)
        table = _table(widths, title if first else None)
        for row in page:
            table.add_row(*row)
        lines = console.render_lines(table, console.options, pad=False, new_lines=False)
        bottom = lines[-1]
        shown = lines[:-1] if first else lines[1:-1]  # joined to the page before
        console.print(Segments([s for line in shown for s in (*line, Segment.line())]), end="")
        page.clear()

    async for cp in steps:
        event, changed = timeline.row(cp)
        page.append(
            [
                Text(str(cp.step)),
                Text(inert(cp.ts[11:23])),
                Text(inert(event)),
                Text(inert(changed)),
            ]
        )
        count += 1
        if len(page) == PAGE_ROWS:
            flush()
    if page or widths is None:
        flush()
    if bottom is not None:
        console.print(Segments([*bottom, Segment.line()]), end="")
    return count


async def write_history_json(
    steps: AsyncIterable[Checkpoint], latest_step: int, write: Callable[[str], None]
) -> int:
    """Write ``history --json`` (an indented array of rows, without states) an
    element at a time through ``write(text)``; return how many rows it wrote."""
    timeline = Timeline()
    count = 0
    async for cp in steps:
        event, _ = timeline.row(cp)
        row = render.checkpoint_json(cp, latest_step)
        del row["state"]
        element = render.dump_json(row | {"event": event}).replace("\n", "\n  ")
        write(("[\n  " if count == 0 else ",\n  ") + element)
        count += 1
    write("\n]\n" if count else "[]\n")
    return count
