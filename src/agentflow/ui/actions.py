"""What the console's buttons do, through the functions the command line runs.

An action is planned from the post (its input checked, the thread read:
the step the operator saw must still be the latest, or the action is refused
as stale), confirmed by the operator, then run: ``resume`` is
``CompiledGraph.resume`` at the step read, as ``agentflow resume`` does;
``reconcile`` is :func:`~agentflow.cli.records.reconcile_call` (the decision
recorded with the console as its owner); ``fork`` is
:func:`~agentflow.cli.run_commands.fork_thread`; ``delete`` is
:func:`~agentflow.cli.commands.delete_whole`. Each one done is printed on
the console's terminal, as the command would have printed it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from agentflow.cli.commands import delete_whole
from agentflow.cli.errors import UsageError
from agentflow.cli.records import decision_of, reconcile_call
from agentflow.cli.run_commands import MAX_INLINE_WAIT, fork_thread, parse_json
from agentflow.cli.session import Session
from agentflow.durable import OperationKind
from agentflow.errors import AgentflowError
from agentflow.runtime import CompiledGraph, RunResult
from agentflow.runtime.settle import seconds_until_due, settle
from agentflow.ui.html import Child, el, url
from agentflow.ui.views import load_thread

__all__ = ["ACTIONS", "Console", "Done", "Plan", "StaleView", "thread_url"]

_log = logging.getLogger("agentflow.ui")
#: Notes kept for the pages actions redirect to (the oldest go first).
_NOTES = 200


class StaleView(AgentflowError):
    """The thread moved on since the page the operator acted from was shown."""

    code = "stale_view"


def thread_url(thread: str, **query: str | int | None) -> str:
    return url("/thread", id=thread, **query)


@dataclass(frozen=True)
class Done:
    """An action carried out: what to tell the operator, and where to show it."""

    note: str
    location: str


@dataclass(frozen=True)
class Plan:
    """An action checked and ready: the confirmation's words, and the deed."""

    title: str
    what: list[Child]
    verb: str
    run: Callable[[], Awaitable[Done]]


@dataclass
class Console:
    """What the actions work on: the command's session (store, graphs,
    terminal), and the runs whose short timers the console waits out."""

    session: Session
    notes: OrderedDict[str, str] = field(default_factory=OrderedDict)
    followed: set[asyncio.Task[RunResult]] = field(default_factory=set)

    def note(self, text: str) -> str:
        """Keep ``text`` for the page an action redirects to; its key."""
        key = secrets.token_urlsafe(9)
        self.notes[key] = text
        while len(self.notes) > _NOTES:
            self.notes.popitem(last=False)
        return key

    def follow(self, graph: CompiledGraph, result: RunResult) -> None:
        """Wait out a timer due within the command line's inline wait, then resume
        (as ``agentflow resume`` counts one down); a later one is a worker's."""
        if result.status != "waiting" or seconds_until_due(graph, result) > MAX_INLINE_WAIT:
            return
        limit = timedelta(seconds=MAX_INLINE_WAIT)
        task = asyncio.create_task(settle(graph, result, max_wait=limit))
        self.followed.add(task)
        task.add_done_callback(self._followed)

    def _followed(self, task: asyncio.Task[RunResult]) -> None:
        self.followed.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.warning("resuming a timer failed: %s", task.exception())
        elif not task.cancelled():
            result = task.result()
            self.session.say(
                "resumed ", result.thread, f" -> {result.status} at step {result.step}"
            )

    async def stop(self) -> None:
        """Stop waiting for timers (the runs stay waiting, for a worker)."""
        for task in list(self.followed):
            task.cancel()
        await asyncio.gather(*self.followed, return_exceptions=True)


Form = Mapping[str, str]
Planner = Callable[[Console, str, Form, Form], Awaitable[Plan]]


def _given(form: Form, name: str) -> str | None:
    """A field's text, None when absent or empty (an empty field is a flag not given)."""
    value = form.get(name)
    return value if value else None


def _step(query: Form) -> int:
    try:
        return int(query["step"])
    except (KeyError, ValueError):
        raise UsageError("the post names no step (reload the page)") from None


def _stale(thread: str, seen: int, latest: int) -> StaleView:
    return StaleView(
        f"thread {thread!r} moved on to step {latest} since step {seen} was shown: "
        "look at it again before acting"
    )


async def _resume(c: Console, thread: str, query: Form, form: Form) -> Plan:
    seen = _step(query)
    graph = await c.session.registry.for_thread(thread)
    latest = await graph.get_state(thread)
    if latest.step != seen:
        raise _stale(thread, seen, latest.step)
    text = form.get("value")
    value = parse_json(text, "value") if text is not None else None
    if latest.interrupted and latest.wake_at is None and text is None:
        raise UsageError(f"{latest.interrupt_node} waits for an answer: give a value")
    step = latest.step if latest.interrupted else None
    what: list[Child] = [el("p", "resume ", el("code", thread), f" at step {latest.step}")]
    if text is not None:
        what.append(el("p", "with the value ", el("code", text)))

    async def run() -> Done:
        result = await graph.resume(thread, value, step=step)
        c.session.say("resumed ", thread, f" -> {result.status} at step {result.step}")
        c.follow(graph, result)
        waits = f" until {result.wake_at}" if result.status == "waiting" else ""
        return Done(f"resumed: {result.status}{waits} at step {result.step}", thread_url(thread))

    return Plan(f"Resume {thread}", what, "Resume", run)


async def _reconcile(c: Console, thread: str, query: Form, form: Form) -> Plan:
    operation = query.get("operation", "")
    decision = form.get("decision", "")
    fields = {name: _given(form, name) for name in ("receipt", "error_code", "message")}
    decision_of(OperationKind.TOOL, decision, **fields)  # the flags' checks, before confirming
    view = await load_thread(c.session.store, thread)
    entry = next((op for op in view.operations if op["id"] == operation), None)
    name = str(entry["name"]) if entry is not None else "?"
    # the attempt the page showed (a decision never settles a later attempt)
    shown = query.get("attempt") or (str(entry["attempt"]) if entry is not None else "")
    if not shown.isdigit():
        raise UsageError("a decision names the attempt of the call it settles")
    attempt = int(shown)
    what: list[Child] = [
        el("p", "record ", el("strong", decision), " for the call ", el("code", operation)),
        el("p", f"({name}, attempt {attempt}) of ", el("code", thread)),
    ]
    what += [el("p", f"{k}: ", el("code", v)) for k, v in fields.items() if v is not None]

    async def run() -> Done:
        chosen, stored = await reconcile_call(
            c.session.store,
            thread,
            operation,
            decision,
            attempt=attempt,
            tool="agentflow-ui",
            **fields,
        )
        c.session.say(f"recorded {chosen.kind.value} for ", operation, " of ", thread)
        if stored.terminal_result is not None:
            note = f"recorded {chosen.kind.value}; the run ended as {stored.status.value}"
        else:
            note = f"recorded {chosen.kind.value}; resume the run to go on"
        return Done(note, thread_url(thread))

    return Plan(f"Settle a call of {thread}", what, "Record decision", run)


async def _fork(c: Console, thread: str, query: Form, form: Form) -> Plan:
    step = _step(query)
    to, update = _given(form, "to"), _given(form, "update")
    keep_route = form.get("keep_route") == "yes"
    if update is not None:
        parse_json(update, "update")
    what: list[Child] = [
        el("p", "fork ", el("code", thread), f" at step {step} into ", el("code", to or "a new id"))
    ]
    if update is not None:
        what.append(el("p", "with the update ", el("code", update)))

    async def run() -> Done:
        forked = await fork_thread(
            c.session.registry, thread, step, to=to, update=update, keep_route=keep_route
        )
        new = forked.checkpoint.thread
        c.session.say("forked ", thread, f"@{step} -> ", new)
        return Done(f"forked from {thread} at step {step}", thread_url(new))

    return Plan(f"Fork {thread}", what, "Fork", run)


async def _delete(c: Console, thread: str, query: Form, form: Form) -> Plan:
    force = form.get("force") == "yes"
    held = " even while a process holds its lease" if force else ""
    what: list[Child] = [
        el("p", "delete ", el("code", thread), f" whole{held}: checkpoints, record and events")
    ]

    async def run() -> Done:
        forced = "tick “even while a process holds its lease” to delete it anyway"
        await delete_whole(c.session.store, thread, force=force, forced=forced)
        c.session.say("deleted ", thread)
        return Done(f"deleted {thread}", "/")

    return Plan(f"Delete {thread}", what, "Delete", run)


#: The actions by the name in their URL (``/act/NAME``).
ACTIONS: dict[str, Planner] = {
    "resume": _resume,
    "reconcile": _reconcile,
    "fork": _fork,
    "delete": _delete,
}
