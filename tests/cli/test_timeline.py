"""``history`` streams: rows are printed while the history is still being read,
so memory does not grow with the thread; the output is what the whole list
would have printed."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator

from rich.console import Console

from agentflow.checkpoint.base import Checkpoint
from agentflow.cli.render import dump_json
from agentflow.cli.timeline import PAGE_ROWS, Timeline, print_timeline, write_history_json

STEPS = PAGE_ROWS * 3 + 7


def _checkpoint(step: int) -> Checkpoint:
    return Checkpoint(
        "t", step, {"n": step, "log": ["x"] * step}, next=("work",), parent=f"t:{step - 1}"
    )


async def _steps(
    seen: list[int], printed: list[int], out: io.StringIO | list[str]
) -> AsyncIterator[Checkpoint]:
    for step in range(STEPS):
        seen.append(step)
        text = out.getvalue() if isinstance(out, io.StringIO) else "".join(out)
        printed.append(len(text))
        yield _checkpoint(step)


async def test_the_table_is_printed_a_page_at_a_time_as_one_table() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100, markup=False, highlight=False)
    seen: list[int] = []
    printed: list[int] = []
    shown = await print_timeline(console, _steps(seen, printed, out), "history of t", STEPS - 1)
    assert shown == STEPS
    assert printed[PAGE_ROWS - 1] == 0 and printed[PAGE_ROWS + 1] > 0  # a page out, the rest unread
    lines = out.getvalue().splitlines()
    rows = [line for line in lines if line.startswith("│ ") and line[2].isdigit()]
    assert [int(line.split()[1]) for line in rows] == list(range(STEPS))
    assert sum(line.startswith("┏") for line in lines) == 1  # one top, one header
    assert sum(line.startswith("└") for line in lines) == 1  # one bottom
    assert len({len(line) for line in lines[1:]}) == 1  # every page's columns line up


async def test_the_json_array_is_written_an_element_at_a_time() -> None:
    writes: list[str] = []
    seen: list[int] = []
    printed: list[int] = []
    count = await write_history_json(_steps(seen, printed, writes), STEPS - 1, writes.append)
    assert count == STEPS and printed[1] > 0  # the first row is out before the second is read
    text = "".join(writes)
    rows = json.loads(text)
    assert text == dump_json(rows) + "\n" and [r["step"] for r in rows] == list(range(STEPS))
    assert all("state" not in row for row in rows)


def test_the_keys_that_changed_are_json_pointers_that_tell_keys_apart() -> None:
    states = [
        {"refund": {"amount": 0}, "refund.amount": 0, "a, b": 0, "a": 0, "b": 0, "x/y~": 0},
        {"refund": {"amount": 0}, "refund.amount": 1, "a, b": 0, "a": 1, "b": 1, "x/y~": 0},
        {"refund": {"amount": 1}, "refund.amount": 1, "a, b": 1, "a": 1, "b": 1, "x/y~": 1},
    ]
    timeline = Timeline()
    rows = [timeline.row(Checkpoint("t", step, state)) for step, state in enumerate(states)]
    assert [changed for _, changed in rows] == [
        "/a, /a, b, /b, /refund, /refund.amount, /x~1y~0",
        "/a, /b, /refund.amount",  # the literal dotted key, not /refund
        "/a, b, /refund, /x~1y~0",  # the key "a, b" alone, not /a and /b
    ]
