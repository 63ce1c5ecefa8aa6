"""An accepted-once event store on Redis, one script per append.

Events of a namespace share one hash tag: a sequence counter, an id index
(event id -> sequence, digest and write id) and the event data, plus one
sorted set per run (and one per parent run) of its events' sequences. An
append is one script that accepts an id exactly once, so concurrent appends
of one id across processes agree; a re-sent append finds its own write id
and answers as the first one did. Replay reads one run's index (and its
children's) from a sequence on: a page costs O(log n + page). Cursors are
``{"sequence": n}``. Every event read back is checked against its digest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from agentflow.durable.canonical import canonical_json
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.events import (
    AcceptedEvent,
    AppendOnceResult,
    check_append,
    repeated_append,
    run_member,
    sequence_of,
    stored_event,
)
from agentflow.durable.paged import ReplayedEvents
from agentflow.durable.parts import RunParts
from agentflow.durable.stores.redis_client import RedisStoreBase
from agentflow.durable.stores.redis_rows import encode_text, write_id
from agentflow.durable.stores.redis_scripts import LUA_APPEND, LUA_REPLAY, event_index, event_keys
from agentflow.durable.validators import CapabilityRef

__all__ = ["RedisRunEventStore"]


def _stored(event_id: str, found: bytes | None) -> tuple[str, int] | None:
    """The digest and sequence the id index holds for ``event_id``, None for none."""
    if found is None:
        return None
    parts = found.split(b":")
    if len(parts) != 3 or not parts[0].isdigit() or len(parts[1]) != 64:
        raise DurableCorrupted("checkpoint_row_invalid", f"stored event {event_id!r} is damaged")
    return parts[1].decode("ascii", "replace"), int(parts[0])


def _accepted(
    parts: RunParts, sequence: bytes, data: bytes | None, meta: bytes | None
) -> AcceptedEvent:
    digest, _, raw_id = (meta or b"").partition(b":")
    try:
        event_id = raw_id.decode()
    except UnicodeDecodeError:
        event_id = ""
    where = f"stored event {event_id!r} (sequence {sequence.decode('ascii', 'replace')})"
    if not event_id or not isinstance(data, bytes) or not sequence.isdigit():
        raise DurableCorrupted("checkpoint_row_invalid", f"{where} is damaged")
    cursor = {"sequence": int(sequence)}
    return stored_event(
        parts, event_id, digest.decode("ascii", "replace"), data, cursor=cursor, where=where
    )


class RedisRunEventStore(ReplayedEvents, RedisStoreBase):
    """A :class:`~agentflow.durable.DurableEventStore` in Redis.

    Takes the arguments of :class:`~agentflow.durable.stores.redis.RedisDurableStore`.
    """

    def _register(self) -> None:
        self._events = event_keys(self._prefix, self._namespace)
        self._append = self._script(LUA_APPEND)
        self._replay_script = self._script(LUA_REPLAY)

    @property
    def store_ref(self) -> CapabilityRef:
        return CapabilityRef("events.redis", "1")

    def _index(self, run_id: str, *, parent: bool) -> bytes:
        return event_index(self._prefix, self._namespace, run_id, parent=parent)

    async def append_once(
        self, event_id: str, payload_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        computed = check_append(event_id, payload_digest, event)
        name = encode_text(event_id, "checkpoint_value_invalid", "event_id")
        if computed == payload_digest:
            indexes = [
                self._index(run, parent=parent)
                for member, parent in (("run_id", False), ("parent_run_id", True))
                if (run := run_member(event, member)) is not None
            ]
            data = self._parts.seal_event(event_id, canonical_json(event, what="event payload"))
            args = [name, payload_digest.encode(), data, write_id()]
            keys = [*self._events, *indexes]
            reply = await self._redis("append_once", lambda: self._append(keys=keys, args=args))
            if reply[0] == 1:
                return AppendOnceResult(True, {"sequence": int(reply[1])})
            found: bytes | None = reply[1]
        else:  # refused either way; the stored digest decides which error
            ids = self._events[1]
            found = cast(
                bytes | None,
                await self._redis("append_once", lambda: self._client.hget(ids, name)),
            )
        return repeated_append(event_id, payload_digest, computed, _stored(event_id, found))

    async def _replay(
        self, run_id: str, after: Mapping[str, Any] | None, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        start = sequence_of(after)
        encode_text(run_id, "checkpoint_value_invalid", "run_id")
        keys = [self._events[2], self._index(run_id, parent=False)]
        if include_children:
            keys.append(self._index(run_id, parent=True))
        args = [b"%d" % start, b"%d" % count]
        reply = await self._redis("replay", lambda: self._replay_script(keys=keys, args=args))
        return [
            _accepted(self._parts, reply[i], reply[i + 1], reply[i + 2])
            for i in range(0, len(reply), 3)
        ]
