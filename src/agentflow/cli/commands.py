"""The subcommands. Each takes a :class:`Session` and returns an exit code.

Reads go straight to the checkpointer; anything that runs nodes (resume,
fork, worker, demo) goes through a graph from the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shlex
import signal
import sys
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson
from rich.console import Console
from rich.prompt import Prompt

from agentflow.checkpoint.base import Checkpoint, Checkpointer, ThreadInfo
from agentflow.cli import render
from agentflow.cli.demo import DEMO_GRAPH, demo_input
from agentflow.cli.drive import Decide, continue_commands, drive, wait_until_due
from agentflow.cli.registry import GraphRegistry
from agentflow.errors import InvalidArgument
from agentflow.runtime import RunResult, ThreadNotFound, Worker, status_of
from agentflow.runtime.claims import runtime_of
from agentflow.runtime.engine import read_checkpoint
from agentflow.runtime.worker import WorkerPass

__all__ = ["COMMANDS", "Session"]

#: Timers due within this many seconds are counted down instead of left to a worker.
MAX_INLINE_WAIT = 60.0


@dataclass
class Session:
    """What every subcommand needs: parsed flags, the store, the terminal."""

    args: Any
    store: Checkpointer
    console: Console
    #: ``agentflow`` plus the flags a printed follow-up command must repeat.
    prefix: str
    graph_specs: list[str]

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @cached_property
    def registry(self) -> GraphRegistry:
        return GraphRegistry(self.store, self.graph_specs)

    def emit(self, value: Any, *, line: bool = False) -> None:
        """Print ``value`` as JSON: indented, or as one line for a stream."""
        print(orjson.dumps(value).decode() if line else render.dump_json(value), flush=line)


def _parse_json(text: str | None, flag: str) -> Any:
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(
            f"{flag} must be JSON (a string needs quotes, e.g. '\"approve\"'): {exc}"
        ) from exc


async def _history(store: Checkpointer, thread: str) -> list[Checkpoint]:
    steps = [cp async for cp in store.history(thread)]
    if not steps:
        raise ThreadNotFound(f"thread {thread!r} not found")
    return steps


async def threads(s: Session) -> int:
    wanted, limit = s.args.status, s.args.limit
    found: list[ThreadInfo] = []
    cursor = s.args.cursor
    while len(found) < limit:
        page = await s.store.list_threads_page(limit=limit - len(found), cursor=cursor)
        found.extend(i for i in page.threads if wanted is None or status_of(i) == wanted)
        cursor = page.next_cursor
        if cursor is None:
            break
    if s.json:
        s.emit({"threads": [render.info_json(i) for i in found], "next_cursor": cursor})
    else:
        render.print_threads(s.console, found, cursor)
    return 0


async def history(s: Session) -> int:
    steps = await _history(s.store, s.args.thread)
    if s.json:
        rows = []
        for previous, cp in zip([None, *steps], steps, strict=False):
            row = render.checkpoint_json(cp)
            del row["state"]
            rows.append(row | {"event": render.event_of(previous, cp)})
        s.emit(rows)
    else:
        render.print_timeline(s.console, steps, f"history of {s.args.thread}")
    return 0


async def show(s: Session) -> int:
    cp = await read_checkpoint(s.store, s.args.thread, s.args.step)
    if s.json:
        s.emit(render.checkpoint_json(cp))
    else:
        render.print_checkpoint(s.console, cp)
    return 0


async def diff(s: Session) -> int:
    a = await read_checkpoint(s.store, s.args.thread, s.args.a)
    b = await read_checkpoint(s.store, s.args.thread, s.args.b)
    changes = render.diff_states(a.state, b.state)
    if s.json:
        s.emit(
            {
                "thread": s.args.thread,
                "a": a.step,
                "b": b.step,
                "changes": render.diff_json(changes),
            }
        )
    else:
        render.print_diff(s.console, changes, a.step, b.step)
    return 0


def _interactive(s: Session) -> bool:
    return not s.json and sys.stdin.isatty() and s.console.is_terminal


def _prompt_decide(s: Session) -> Decide:
    """Ask on a terminal when the interrupt offers choices; otherwise stop there."""

    def decide(result: RunResult) -> tuple[bool, Any]:
        pending = result.pending if isinstance(result.pending, dict) else {}
        choices = pending.get("choices")
        if not _interactive(s) or not isinstance(choices, list):
            return False, None
        question = str(pending.get("question", f"{result.interrupt_node} needs an answer"))
        return True, Prompt.ask(question, choices=[str(c) for c in choices], console=s.console)

    return decide


def _report(s: Session, result: RunResult, history_steps: list[Checkpoint] | None) -> None:
    if s.json:
        s.emit(
            {
                "thread": result.thread,
                "status": result.status,
                "step": result.step,
                "state": result.state,
                "interrupt_node": result.interrupt_node,
                "pending": result.pending,
                "wake_at": result.wake_at,
            }
        )
        return
    if history_steps is not None:
        render.print_timeline(s.console, history_steps, f"timeline of {result.thread}")
    if result.status == "done":
        s.console.print(f"[green]done[/] {result.thread} at step {result.step}")
        summary = s.registry.summary(result.checkpoint)
        if summary:
            s.console.print(summary, markup=False)
        return
    if result.status == "running":
        s.console.print(
            f"{result.thread} is being run by another process (at step {result.step}); "
            f"follow it with: {s.prefix} history {shlex.quote(result.thread)}",
            markup=False,
        )
        return
    if result.status == "waiting":
        s.console.print(f"[cyan]waiting[/] in {result.interrupt_node} until {result.wake_at}")
    else:
        question = render.question_of(result.pending)
        s.console.print(f"[yellow]paused[/] at {result.interrupt_node}: {question}")
    s.console.print("continue with:")
    for line in continue_commands(result, s.prefix):
        s.console.print(f"  {line}", highlight=False, markup=False)


async def _finish(s: Session, result: RunResult, decide: Decide) -> RunResult:
    """Drive ``result`` on, then print where it stopped (with the timeline if done)."""
    graph = s.registry.compiled(str(runtime_of(result.checkpoint).get("graph")))
    result = await drive(graph, result, console=s.console, decide=decide, max_wait=MAX_INLINE_WAIT)
    steps = await _history(s.store, result.thread) if result.status == "done" else None
    _report(s, result, steps)
    return result


async def resume(s: Session) -> int:
    graph = await s.registry.for_thread(s.args.thread)
    if s.args.wait:
        latest = await graph.get_state(s.args.thread)
        if latest.wake_at is not None and latest.interrupted:
            await wait_until_due(graph, latest.wake_at, s.console, str(latest.interrupt_node))
    value = _parse_json(s.args.value, "--value")
    result = await graph.resume(s.args.thread, value)
    await _finish(s, result, _prompt_decide(s))
    return 0


async def fork(s: Session) -> int:
    graph = await s.registry.for_thread(s.args.thread)
    new_thread = s.args.to or f"{s.args.thread}-fork-{secrets.token_hex(3)}"
    update = _parse_json(s.args.update, "--update")
    if update is not None and not isinstance(update, dict):
        raise InvalidArgument("--update must be a JSON object")
    cp = await graph.fork(s.args.thread, s.args.step, new_thread=new_thread, update=update)
    if s.json:
        s.emit(render.checkpoint_json(cp))
    else:
        s.console.print(f"forked {s.args.thread}@{cp.step} -> {new_thread} ({status_of(cp)})")
        s.console.print("continue with:")
        commands = (
            continue_commands(RunResult(cp), s.prefix)
            if cp.interrupted
            else [f"{s.prefix} resume {shlex.quote(new_thread)}"]
        )
        for line in commands:
            s.console.print(f"  {line}", markup=False, highlight=False)
    return 0


async def prune(s: Session) -> int:
    await read_checkpoint(s.store, s.args.thread)
    removed = await s.store.prune(
        s.args.thread, before_step=s.args.before_step, older_than=s.args.older_than
    )
    if s.json:
        s.emit({"thread": s.args.thread, "removed": removed})
    else:
        s.console.print(f"pruned {removed} checkpoint(s) of {s.args.thread}")
    return 0


async def delete(s: Session) -> int:
    await read_checkpoint(s.store, s.args.thread)
    await s.store.delete_thread(s.args.thread)
    if s.json:
        s.emit({"thread": s.args.thread, "deleted": True})
    else:
        s.console.print(f"deleted {s.args.thread}")
    return 0


def _print_pass(s: Session, outcome: WorkerPass, quiet: set[str] | None = None) -> None:
    """Print a scan's outcome. In a long-running worker (``quiet`` given) idle
    scans print nothing and each run of an unknown graph is reported once."""
    if quiet is not None:
        outcome.unknown = [t for t in outcome.unknown if t not in quiet]
        quiet.update(outcome.unknown)
        if not (outcome.resumed or outcome.failed or outcome.unknown):
            return
    if s.json:
        s.emit(
            {
                "resumed": [
                    {"thread": r.thread, "status": r.status, "step": r.step}
                    for r in outcome.resumed
                ],
                "taken": outcome.taken,
                "failed": [{"thread": t, "error": str(e)} for t, e in outcome.failed],
                "unknown": outcome.unknown,
            },
            line=quiet is not None,
        )
        return
    for result in outcome.resumed:
        s.console.print(f"woke {result.thread} -> {result.status} at step {result.step}")
    for thread, error in outcome.failed:
        s.console.print(f"[red]failed[/] {thread}: {error}")
    for thread in outcome.unknown:
        s.console.print(f"skipped {thread}: its graph is not registered here")


async def worker(s: Session) -> int:
    runner = Worker(s.registry.all_compiled(), concurrency=s.args.concurrency)
    if s.args.once:
        _print_pass(s, await runner.run_once())
        return 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        s.console.print(f"worker polling every {s.args.interval}s (Ctrl-C to stop)")
        reported: set[str] = set()
        await runner.run(
            interval=s.args.interval, stop=stop, on_pass=lambda p: _print_pass(s, p, reported)
        )
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(RuntimeError):
                loop.remove_signal_handler(signum)
    return 0


async def demo(s: Session) -> int:
    graph = s.registry.compiled(DEMO_GRAPH)
    thread = s.args.thread or f"refund-{s.args.order}-{secrets.token_hex(3)}"
    preset = "approve" if s.args.approve else "reject" if s.args.reject else None
    prompt = _prompt_decide(s)

    def decide(result: RunResult) -> tuple[bool, Any]:
        if preset is not None and result.interrupt_node == "request_approval":
            return True, preset
        return prompt(result)

    if not s.json:
        s.console.print(f"refund agent for order {s.args.order}, thread [bold]{thread}[/]")
        s.console.print(
            f"kill it at any point; it continues with: {s.prefix} resume {thread}", markup=False
        )
    await _finish(s, await graph.run(demo_input(s.args.order, s.args.hold), thread=thread), decide)
    return 0


COMMANDS = {
    "threads": threads,
    "history": history,
    "show": show,
    "diff": diff,
    "resume": resume,
    "fork": fork,
    "prune": prune,
    "delete": delete,
    "worker": worker,
    "demo": demo,
}
