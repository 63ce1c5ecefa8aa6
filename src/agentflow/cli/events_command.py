"""``agentflow events THREAD [--follow] [--json]``: a run's lifecycle events, as delivered.

The events are read from the store's accepted-once event log with the store's
own replay API (the one a consumer uses), page by page in acceptance order, so
what is printed is what a consumer would receive. ``--follow`` keeps polling
after the last event's cursor until Ctrl-C; ``--json`` prints one JSON object
per event and line (JSON Lines), so a stream can be piped into another tool as
it comes. Events still pending in the record's outbox (their writer died before
delivering them) are not in the log yet: the next holder of the run delivers
them, and they show then.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from agentflow.cli.session import Session
from agentflow.durable import AcceptedEvent
from agentflow.runtime import ThreadNotFound

__all__ = ["events"]

#: Events read per replay page.
_PAGE = 200
#: Payload members shown after the event's type, in this order, when present.
_DETAILS = ("decision", "receipt_state", "risk", "interruption_reason", "resume_attempt")


def _when(event: dict[str, Any]) -> str:
    created = event.get("created_at")
    if isinstance(created, int | float) and not isinstance(created, bool):
        return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
    return "-"


def _line(s: Session, accepted: AcceptedEvent) -> None:
    event = accepted.event
    if s.json:
        s.emit({"event_id": accepted.event_id, "cursor": accepted.cursor, **event}, line=True)
        return
    details = [f"{name}={event[name]}" for name in _DETAILS if event.get(name) is not None]
    operation = event.get("operation_id")
    s.say(
        _when(event),
        "  ",
        str(event.get("type")),
        f"  cycle {event.get('cycle_index')}",
        f"  {operation}" if isinstance(operation, str) else "",
        f"  {' '.join(details)}" if details else "",
    )


async def events(s: Session) -> int:
    thread: str = s.args.thread
    after: dict[str, Any] | None = None
    seen = 0
    while True:
        page = await s.store.replay(thread, after=after, limit=_PAGE)
        for accepted in page.events:
            _line(s, accepted)
        seen += len(page.events)
        if page.events:
            after = dict(page.events[-1].cursor)
        if page.next_after is not None:
            continue
        if seen == 0 and not s.args.follow:
            if await s.store.get(thread) is None and await s.store.load(thread) is None:
                raise ThreadNotFound(f"thread {thread!r} not found")
            if not s.json:
                s.say(thread, ": no events yet (a durable run's first is checkpoint_created)")
            return 0
        if not s.args.follow:
            return 0
        await asyncio.sleep(s.args.interval)
