"""Run events: what ``stream``/``resume_stream`` yield, one as each thing happens.

A step produces ``node_started`` for every node of its frontier (in frontier
order, before any runs), ``node_finished`` for each node as it returns (in
completion order), then ``step_stored`` once its checkpoint is written. The
last event of a stream says where the run stopped: ``done``,
``interrupted`` (a human must answer) or ``waiting`` (a timer).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentflow.checkpoint.base import Checkpoint
from agentflow.runtime.result import RunResult

__all__ = ["EventKind", "RunEvent", "Sink", "final_event", "no_events", "stream_of"]

EventKind = Literal[
    "node_started", "node_finished", "step_stored", "interrupted", "waiting", "done"
]


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One thing that happened in a run."""

    kind: EventKind
    thread: str
    #: The step being computed (node events) or stored (the others).
    step: int
    #: The node, for ``node_started``/``node_finished`` and the suspending
    #: node of ``interrupted``/``waiting``.
    node: str | None = None
    #: What a finished node returned (``node_finished``).
    update: Mapping[str, Any] | None = None
    #: The checkpoint stored (``step_stored``) or where the run stopped.
    checkpoint: Checkpoint | None = None

    @property
    def result(self) -> RunResult | None:
        """For the last event of a stream, the result ``run``/``resume`` return."""
        if self.kind in ("done", "interrupted", "waiting") and self.checkpoint is not None:
            return RunResult(self.checkpoint)
        return None


#: Receives events as they happen; must not block.
Sink = Callable[[RunEvent], None]


def no_events(event: RunEvent) -> None:
    """The sink of ``run``/``resume``: nobody listens."""


def final_event(result: RunResult) -> RunEvent:
    """The event that ends a stream at ``result``."""
    cp = result.checkpoint
    kind: EventKind = "done"
    if cp.interrupted:
        kind = "waiting" if cp.wake_at is not None else "interrupted"
    return RunEvent(kind, cp.thread, cp.step, cp.interrupt_node, checkpoint=cp)


class _End:
    """Marks the end of a stream's queue."""


async def stream_of(start: Callable[[Sink], Awaitable[RunResult]]) -> AsyncIterator[RunEvent]:
    """Run ``start(sink)`` in a task and yield what it sends to ``sink``, then
    the final event. Its exception, if any, is raised after the events sent
    before it. Leaving the loop early cancels the run (as a crash would: the
    last stored step stays, and ``resume`` continues from it)."""
    queue: asyncio.Queue[RunEvent | _End] = asyncio.Queue()

    async def produce() -> None:
        try:
            queue.put_nowait(final_event(await start(queue.put_nowait)))
        finally:
            queue.put_nowait(_End())

    task = asyncio.create_task(produce())
    try:
        while not isinstance(event := await queue.get(), _End):
            yield event
        await task
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait([task])
