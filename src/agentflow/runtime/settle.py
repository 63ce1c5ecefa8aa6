"""Carrying a run through its timer waits until it settles.

A run *settles* when it is done, waits for a human, waits on a timer further
away than the caller will wait, or is being advanced by another process. Until
then each timer is waited out (by default with ``asyncio.sleep`` against the
graph's clock) and the run resumed, so callers need no ``NotDue``/sleep loop.
If a worker resumes the run first, the run is followed from where that worker
left it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Protocol

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointConflict
from agentflow.runtime.errors import NotDue
from agentflow.runtime.leases import instant_us
from agentflow.runtime.result import RunResult

__all__ = ["Settling", "Waiter", "seconds_until_due", "settle"]

#: Called with a ``waiting`` result; returns once its ``wake_at`` has come.
Waiter = Callable[[RunResult], Awaitable[None]]
#: How often a run another process holds is looked at again.
_POLL = 0.1


class Settling(Protocol):
    """What settling needs of a compiled graph: its clock, resume, and the latest state."""

    @property
    def clock(self) -> Callable[[], datetime]: ...

    async def resume(
        self, thread: str, value: object = None, *, step: int | None = None
    ) -> RunResult: ...

    async def get_state(self, thread: str, step: int | None = None) -> Checkpoint: ...


def seconds_until_due(graph: Settling, result: RunResult) -> float:
    """Seconds from the graph's clock until ``result``'s timer is due (<= 0: due)."""
    assert result.wake_at is not None
    return (parse_instant(result.wake_at) - instant_us(graph.clock())) / 1e6


async def settle(
    graph: Settling,
    result: RunResult,
    *,
    max_wait: timedelta | None = None,
    wait: Waiter | None = None,
) -> RunResult:
    """Wait out and resume ``result``'s timers until the run settles."""

    async def sleep_until_due(waiting: RunResult) -> None:
        await asyncio.sleep(max(0.0, seconds_until_due(graph, waiting)))

    waiter = wait or sleep_until_due
    while result.status == "waiting":
        if max_wait is not None and seconds_until_due(graph, result) > max_wait.total_seconds():
            return result
        await waiter(result)
        try:
            result = await graph.resume(result.thread, step=result.step)
        except NotDue:
            continue  # the waiter returned early; wait again
        except CheckpointConflict:
            # Another resume or worker took this wait: follow the run from
            # where it is now, giving a live holder a moment to move it.
            await asyncio.sleep(_POLL)
            result = RunResult(await graph.get_state(result.thread))
    return result
