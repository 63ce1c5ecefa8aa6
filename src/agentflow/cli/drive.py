"""Carrying a run forward from the terminal: short timers, human answers.

Used by ``agentflow demo`` and ``agentflow resume``: a timer that comes due
within ``max_wait`` is counted down on screen and resumed (the runtime's
:meth:`~agentflow.runtime.CompiledGraph.run_until_settled` with a countdown
as its waiter); a human interrupt is answered by ``decide`` (flags or a
prompt), or the run is left suspended and the exact commands that continue
it are printed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson
from rich.console import Console

from agentflow.cli.text import inert
from agentflow.runtime import CompiledGraph, RunResult
from agentflow.runtime.settle import Waiter, seconds_until_due, settle

__all__ = ["Decide", "continue_commands", "count_down", "countdown", "drive"]

#: Answer a human interrupt: ``(True, value)``, or ``(False, None)`` to stop there.
Decide = Callable[[RunResult], tuple[bool, Any]]
_TICK = 0.1


async def count_down(console: Console, label: str, left: Callable[[], float], until: str) -> None:
    """Sleep until ``left()`` seconds are gone: a live countdown on a terminal,
    else one line saying how long and until when."""
    remaining = left()
    if remaining <= 0:
        return
    if not console.is_terminal:
        console.print(f"{label}: waiting {remaining:.1f}s (until {until})", soft_wrap=True)
        await asyncio.sleep(remaining)
        return
    with console.status(f"{label}: {remaining:.1f}s left") as status:
        while remaining > 0:
            await asyncio.sleep(min(_TICK, remaining))
            remaining = left()
            status.update(f"{label}: {max(remaining, 0):.1f}s left")
    console.print(f"{label}: done waiting")


def countdown(graph: CompiledGraph, console: Console) -> Waiter:
    """A waiter that sleeps until a run is due, with a live countdown on a terminal."""

    async def wait(result: RunResult) -> None:
        label = inert(str(result.interrupt_node))
        until = inert(str(result.wake_at))
        await count_down(console, label, lambda: seconds_until_due(graph, result), until)

    return wait


async def drive(
    graph: CompiledGraph,
    result: RunResult,
    *,
    console: Console,
    decide: Decide,
    max_wait: float,
) -> RunResult:
    """Resume ``result`` through short timers and answered interrupts."""
    wait = countdown(graph, console)
    while True:
        result = await settle(graph, result, max_wait=timedelta(seconds=max_wait), wait=wait)
        if result.status != "interrupted":
            return result
        answered, value = decide(result)
        if not answered:
            return result
        result = await graph.resume(result.thread, value, step=result.step)


def continue_commands(result: RunResult, command: Callable[..., str]) -> list[str]:
    """The exact commands that continue a suspended run; ``command(*words)``
    makes one pasteable ``agentflow`` command line."""
    if result.status == "waiting":
        return [
            f"{command('resume', result.thread, '--wait')}   # due at {inert(str(result.wake_at))}",
            f"{command('worker')}   # or leave it to a worker",
        ]
    pending = result.pending if isinstance(result.pending, dict) else {}
    choices = pending.get("choices")
    if isinstance(choices, list) and choices:
        values = [orjson.dumps(choice).decode() for choice in choices]
        return [command("resume", result.thread, "--value", value) for value in values]
    return [command("resume", result.thread, "--value", "<JSON>")]
