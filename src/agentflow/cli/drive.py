"""Carrying a run forward from the terminal: short timers, human answers.

Used by ``agentflow demo`` and ``agentflow resume``: a timer that comes due
within ``max_wait`` is counted down on screen and resumed; a human interrupt
is answered by ``decide`` (flags or a prompt), or the run is left suspended
and the exact command that continues it is printed.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
from rich.console import Console

from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointConflict
from agentflow.runtime import CompiledGraph, RunResult
from agentflow.runtime.claims import instant_us

__all__ = ["Decide", "continue_commands", "drive", "wait_until_due"]

#: Answer a human interrupt: ``(True, value)``, or ``(False, None)`` to stop there.
Decide = Callable[[RunResult], tuple[bool, Any]]
_TICK = 0.1


def _seconds_until(wake_at: str, now: datetime) -> float:
    return (parse_instant(wake_at) - instant_us(now)) / 1e6


async def wait_until_due(graph: CompiledGraph, wake_at: str, console: Console, label: str) -> None:
    """Sleep until ``wake_at``, with a live countdown on a terminal."""
    left = _seconds_until(wake_at, graph.clock())
    if left <= 0:
        return
    if not console.is_terminal:
        console.print(f"{label}: waiting {left:.1f}s (until {wake_at})")
        await asyncio.sleep(left)
        return
    with console.status(f"{label}: {left:.1f}s left") as status:
        while left > 0:
            await asyncio.sleep(min(_TICK, left))
            left = _seconds_until(wake_at, graph.clock())
            status.update(f"{label}: {max(left, 0):.1f}s left")
    console.print(f"{label}: done waiting")


async def drive(
    graph: CompiledGraph,
    result: RunResult,
    *,
    console: Console,
    decide: Decide,
    max_wait: float,
) -> RunResult:
    """Resume ``result`` through short timers and answered interrupts."""
    while True:
        if result.status == "waiting" and result.wake_at is not None:
            if _seconds_until(result.wake_at, graph.clock()) > max_wait:
                return result
            await wait_until_due(graph, result.wake_at, console, f"{result.interrupt_node}")
            try:
                result = await graph.resume(result.thread, step=result.step)
            except CheckpointConflict:
                console.print(f"a worker resumed {result.thread} first; it continues there")
                return RunResult(await graph.get_state(result.thread))
        elif result.status == "interrupted":
            answered, value = decide(result)
            if not answered:
                return result
            result = await graph.resume(result.thread, value, step=result.step)
        else:
            return result


def continue_commands(result: RunResult, prefix: str) -> list[str]:
    """The exact commands that continue a suspended run."""
    thread = shlex.quote(result.thread)
    if result.status == "waiting":
        return [f"{prefix} resume {thread}   # after {result.wake_at}", f"{prefix} worker"]
    pending = result.pending if isinstance(result.pending, dict) else {}
    choices = pending.get("choices")
    values = choices if isinstance(choices, list) and choices else ["<JSON>"]
    return [
        f"{prefix} resume {thread} --value "
        + (shlex.quote(orjson.dumps(v).decode()) if v != "<JSON>" else "'<JSON>'")
        for v in values
    ]
