"""The subcommands that run nodes: resume, fork, worker, demo.

They go through a graph from the registry (``--graph``), found by the name
the thread stored; each returns an exit status.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import sys
from functools import partial
from typing import Any, NamedTuple, TextIO, cast

import orjson
from rich.prompt import Prompt
from rich.text import Text

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.timestamps import parse_instant, utc_now_iso
from agentflow.cli import render
from agentflow.cli.commands import print_history
from agentflow.cli.demo import DEMO_GRAPH, demo_input
from agentflow.cli.drive import Decide, continue_commands, count_down, countdown, drive
from agentflow.cli.errors import AnswerNeeded, UsageError
from agentflow.cli.interrupts import PromptInput, answer_or_none
from agentflow.cli.registry import GraphRegistry
from agentflow.cli.session import Session
from agentflow.cli.text import inert
from agentflow.runtime import CompiledGraph, RunResult, StepClaimed, Worker, status_of
from agentflow.runtime.section import runtime_of
from agentflow.runtime.settle import seconds_until_due, settle
from agentflow.runtime.worker import WorkerPass

__all__ = [
    "MAX_INLINE_WAIT",
    "demo",
    "fork",
    "Forked",
    "fork_thread",
    "parse_json",
    "resume",
    "worker",
]

#: Timers due within this many seconds are counted down instead of left to a worker
#: (and so is the claim of a resume that died here, killed mid-answer).
MAX_INLINE_WAIT = 60.0
#: Waited past a dead holder's claim, so the resume finds it lapsed on the store's clock.
_LAPSE_MARGIN_S = 0.25


def parse_json(text: str, flag: str) -> Any:
    """``text`` as JSON, or a :class:`UsageError` naming ``flag``."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(
            f"{flag} must be JSON (a string needs quotes, e.g. '\"approve\"'): {exc}"
        ) from exc


def _interactive(s: Session) -> bool:
    return not s.json and sys.stdin.isatty() and s.console.is_terminal


def _choices(payload: Any) -> list[Any] | None:
    """The answers a human interrupt offers (its payload's ``choices``), if any."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    return choices if isinstance(choices, list) and choices else None


def _prompt_decide(s: Session) -> Decide:
    """Ask on a terminal when the interrupt offers choices; otherwise stop there.
    Ctrl-C at the prompt ends the command at once; Ctrl-D means no answer now."""

    def decide(result: RunResult) -> tuple[bool, Any]:
        choices = _choices(result.pending)
        if not _interactive(s) or choices is None:
            return False, None
        pending = result.pending if isinstance(result.pending, dict) else {}
        question = Text(inert(render.question_of(result.pending)) if "question" in pending else "")
        if not question.plain:
            question = Text(f"{inert(str(result.interrupt_node))} needs an answer")
        ask = partial(
            Prompt.ask,
            question,
            choices=[str(c) for c in choices],
            console=s.console,
            stream=cast("TextIO", PromptInput()),  # rich calls only its readline()
        )
        answer = answer_or_none(ask, s.continuation)
        if answer is None:
            s.console.print()
            s.say("no answer now (end of input)")
            return False, None
        return True, next(c for c in choices if str(c) == answer)

    return decide


async def _report(s: Session, result: RunResult) -> None:
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
                "observations": [o.to_dict() for o in result.observations],
                "terminal": result.terminal,
            }
        )
        return
    if result.status == "reconciliation_required":
        s.say(
            ("reconciliation required", "red"),
            f" in {result.thread}: {len(result.observations)} call(s) may have acted "
            "and nobody knows; nothing runs until each is decided",
        )
        s.print_commands([s.command("journal", result.thread)], heading="see them with:")
        return
    if result.status == "failed":
        message = (result.terminal or {}).get("message", "")
        s.say(("failed", "red"), " ", result.thread, f": ended by a decision ({message})")
        return
    if result.status == "done":
        await print_history(s, result.thread, f"timeline of {result.thread}")
        s.say(("done", "green"), " ", result.thread, f" at step {result.step}")
        summary = s.registry.summary(result.checkpoint)
        if summary:
            s.say(summary)
        return
    if result.status == "running":
        s.say(
            result.thread,
            f" is being run by another process (at step {result.step}); follow it with: ",
            s.command("history", result.thread),
        )
        return
    if result.status == "waiting":
        s.say(("waiting", "cyan"), f" in {result.interrupt_node} until {result.wake_at}")
    else:
        question = render.question_of(result.pending)
        s.say(("paused", "yellow"), f" at {result.interrupt_node}: {question}")
    s.print_commands(continue_commands(result, s.command))


async def _finish(s: Session, result: RunResult, decide: Decide) -> RunResult:
    """Drive ``result`` on, then print where it stopped (with the timeline if done)."""
    graph = s.registry.compiled(str(runtime_of(result.checkpoint).get("graph")))
    result = await drive(graph, result, console=s.console, decide=decide, max_wait=MAX_INLINE_WAIT)
    await _report(s, result)
    return result


def _answer_needed(s: Session, latest: Checkpoint) -> AnswerNeeded:
    result = RunResult(latest)
    choices = _choices(latest.interrupt_payload)
    offered = f" (choices: {', '.join(map(str, choices))})" if choices else ""
    return AnswerNeeded(
        f"thread {latest.thread!r} waits for an answer from {latest.interrupt_node}: "
        f"{render.question_of(latest.interrupt_payload)}{offered}; answer with --value, "
        f"e.g.: {continue_commands(result, s.command)[0]}"
    )


def _answer(s: Session, latest: Checkpoint, text: str) -> Any:
    """``--value`` as JSON, one of the interrupt's choices when it offers some
    (a wrong answer is a usage error, and nothing runs)."""
    value = parse_json(text, "--value")
    choices = _choices(latest.interrupt_payload) if latest.interrupted else None
    if choices is not None and value not in choices:
        offered = ", ".join(orjson.dumps(c).decode() for c in choices)
        raise UsageError(
            f"thread {latest.thread!r} asks {render.question_of(latest.interrupt_payload)!r} "
            f"with the choices {offered}; --value {text} is not one of them, e.g.: "
            f"{continue_commands(RunResult(latest), s.command)[0]}"
        )
    return value


def _gone_holder_wait(claimed: StepClaimed) -> float | None:
    """Seconds until the claim of a resume that died on this machine lapses (its
    process is gone, so nobody renews it), or None: the holder is elsewhere or
    alive, its claim is not waiting to lapse, or it lapses beyond a short wait."""
    host, _, rest = claimed.holder.partition(":")
    pid = rest.partition(":")[0]
    if claimed.moved_on is not None or host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        left = (parse_instant(claimed.until) - parse_instant(utc_now_iso())) / 1e6
        return max(left, 0.0) + _LAPSE_MARGIN_S if left <= MAX_INLINE_WAIT else None
    except PermissionError:  # alive, another user's
        return None
    return None


async def _answer_step(
    s: Session, graph: CompiledGraph, thread: str, value: Any, step: int | None
) -> RunResult:
    """``graph.resume``; when a resume that died here still holds the step (killed
    mid-answer), wait out its claim, counted down, and resume then."""
    try:
        return await graph.resume(thread, value, step=step)
    except StepClaimed as claimed:
        wait = _gone_holder_wait(claimed)
        if wait is None:
            raise
        deadline = asyncio.get_running_loop().time() + wait

        def left() -> float:
            return deadline - asyncio.get_running_loop().time()

        label = inert(f"the claim of {claimed.holder} (its process is gone)")
        await count_down(s.console, label, left, claimed.until)
        return await graph.resume(thread, value, step=step)


async def resume(s: Session) -> int:
    thread = s.args.thread
    s.continuation.thread = thread
    graph = await s.registry.for_thread(thread)
    latest = await graph.get_state(thread)
    # Naming the step read means a late answer never lands on a later question.
    step = latest.step if latest.interrupted else None
    decide = _prompt_decide(s)
    if s.args.value is not None:
        value = _answer(s, latest, s.args.value)
        result = await _answer_step(s, graph, thread, value, step)
    elif latest.interrupted and latest.wake_at is None:
        answered, value = decide(RunResult(latest))
        if not answered:
            raise _answer_needed(s, latest)
        result = await _answer_step(s, graph, thread, value, step)
    elif latest.interrupted and (
        s.args.wait or seconds_until_due(graph, RunResult(latest)) <= MAX_INLINE_WAIT
    ):  # a timer: waited for with --wait, or counted down when due within a minute
        result = await settle(graph, RunResult(latest), wait=countdown(graph, s.console))
    else:
        result = await _answer_step(s, graph, thread, None, step)
    await _finish(s, result, decide)
    return 0


class Forked(NamedTuple):
    """What :func:`fork_thread` made: the new thread's checkpoint, the one it
    was forked from, and the update folded in (None without one)."""

    checkpoint: Checkpoint
    source: Checkpoint
    update: dict[str, Any] | None


async def fork_thread(
    registry: GraphRegistry,
    thread: str,
    step: int,
    *,
    to: str | None = None,
    update: str | None = None,
    keep_route: bool = False,
) -> Forked:
    """Fork ``thread`` at ``step`` into ``to`` (default ``THREAD-fork-RANDOM``),
    ``update`` (JSON object text) folded in and re-routed unless ``keep_route``."""
    graph = await registry.for_thread(thread, "fork")
    new_thread = to or f"{thread}-fork-{secrets.token_hex(3)}"
    changes = parse_json(update, "--update") if update is not None else None
    if changes is not None and not isinstance(changes, dict):
        raise UsageError("--update must be a JSON object")
    source = await graph.get_state(thread, step)
    cp = await graph.fork(
        thread, step, new_thread=new_thread, update=changes, reroute=not keep_route
    )
    return Forked(cp, source, changes)


async def fork(s: Session) -> int:
    cp, source, update = await fork_thread(
        s.registry,
        s.args.thread,
        s.args.step,
        to=s.args.to,
        update=s.args.update,
        keep_route=s.args.keep_route,
    )
    new_thread = cp.thread
    rerouted = cp.next != source.next
    if s.json:
        s.emit(render.checkpoint_json(cp, cp.step) | {"source_next": list(source.next)})
        return 0
    s.say("forked ", s.args.thread, f"@{cp.step} -> ", new_thread, f" ({status_of(cp)})")
    if update:
        before, after = ", ".join(source.next) or "END", ", ".join(cp.next) or "END"
        if rerouted:
            s.say(f"re-routed from the updated state: next was {before}, now {after}")
        elif s.args.keep_route:
            s.say(f"kept the stored route (--keep-route): next is {after}")
        else:
            s.say(f"the update leaves the route as it was: next is {after}")
    commands = (
        continue_commands(RunResult(cp), s.command)
        if cp.interrupted
        else [s.command("resume", new_thread)]
    )
    s.print_commands(commands)
    return 0


def _print_pass(s: Session, outcome: WorkerPass, seen: set[str] | None = None) -> None:
    """Print a scan's outcome. ``--once`` says so when nothing was due; a
    long-running worker (``seen`` given) prints nothing for idle scans and
    each skipped run once per reason."""
    taken = [(t, str(why)) for t, why in outcome.taken]
    unknown = list(outcome.unknown)
    if seen is not None:
        taken = [(t, why) for t, why in taken if f"{t}\0{why}" not in seen]
        unknown = [t for t in unknown if f"{t}\0unknown" not in seen]
        seen.update(f"{t}\0{why}" for t, why in taken)
        seen.update(f"{t}\0unknown" for t in unknown)
        if not (outcome.resumed or outcome.failed or taken or unknown):
            return
    if s.json:
        s.emit(
            {
                "resumed": [
                    {"thread": r.thread, "status": r.status, "step": r.step}
                    for r in outcome.resumed
                ],
                "taken": [{"thread": t, "reason": why} for t, why in taken],
                "failed": [{"thread": t, "error": str(e)} for t, e in outcome.failed],
                "unknown": unknown,
            },
            line=seen is not None,
        )
        return
    if not (outcome.resumed or outcome.failed or taken or unknown):
        s.say("nothing due")
    for result in outcome.resumed:
        s.say("woke ", result.thread, f" -> {result.status} at step {result.step}")
    for thread, why in taken:
        s.say("skipped ", thread, ": ", why)
    for thread, error in outcome.failed:
        s.say(("failed", "red"), " ", thread, ": ", str(error))
    for thread in unknown:
        s.say("skipped ", thread, ": its graph is not registered here (--graph)")


async def worker(s: Session) -> int:
    runner = Worker(
        s.registry.all_compiled(), concurrency=s.args.concurrency, worker_id=s.args.worker_id
    )
    # One read first: a store that cannot be used fails here, named, rather than
    # inside the worker's task group.
    empty = not (await s.store.list_threads_page(limit=1)).threads
    if s.args.once:
        _print_pass(s, await runner.run_once(recover=s.args.recover))
        return 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGTERM is how a service manager stops a worker: the scan in progress ends
    # first, and the exit is clean. Ctrl-C ends it at once, as every command.
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        if not s.json:
            s.say(f"worker polling every {s.args.interval}s (Ctrl-C to stop)")
            if empty:
                s.say(f"the store at {s.target.where} holds no threads yet: waiting for runs")
        seen: set[str] = set()
        await runner.run(
            interval=s.args.interval,
            stop=stop,
            on_pass=lambda p: _print_pass(s, p, seen),
            recover=s.args.recover,
        )
    finally:
        with contextlib.suppress(RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
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

    s.continuation.thread = thread
    if not s.json:
        s.say("refund agent for order ", s.args.order, ", thread ", (inert(thread), "bold"))
        s.say("kill it at any point; it continues with: ", s.command("resume", thread))
    await _finish(s, await graph.run(demo_input(s.args.order, s.args.hold), thread=thread), decide)
    return 0
