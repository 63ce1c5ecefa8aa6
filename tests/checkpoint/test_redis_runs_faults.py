"""Redis store faults on records and events: scripts re-sent after a lost reply,
connections killed mid-write, an unreachable server."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.checkpoint.redis import RedisCheckpointer
from agentflow.checkpoint.redis.store import SCRIPTS
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable import EventCursor, EventOutboxEntry, event_payload_digest
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, take
from agentflow.durable.wire.validators import CapabilityRef
from agentflow.errors import StoreUnavailable
from tests.backends.redis import (
    REDIS_URL,
    admin_session,
    connections,
    private_redis,
    scratch_prefix,
)

admin = pytest.fixture(admin_session)
prefix = pytest.fixture(scratch_prefix)
_SCRIPT_NAMES = {
    hashlib.sha1(source.encode()).hexdigest(): name for name, source in SCRIPTS.items()
}


async def lifecycle(store: Store) -> list[Any]:
    """Every write of a run's life (its steps committed with the record's
    progress among them), each outcome as plain data (leases left out: they are
    clock readings)."""
    pending = EventOutboxEntry.pending("evt-end", {"type": "run_completed"})
    seen: list[Any] = []

    def keep(record: Any) -> Any:
        seen.append({**record.to_dict(), "lease_expires_at_ms": None})
        return record

    await store.create(make_record())
    record = keep(await take(store, "owner-a"))
    seen.append(await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS) > 0)
    entry = make_tool_entry("run-1", 1)
    record = keep(await store.record_operation(record, entry, claim_token="owner-a"))
    record = keep(await store.record_operation(record, entry.start(), claim_token="owner-a"))
    ambiguous = record.tool_journal[0].mark_ambiguous()
    record = keep(await store.record_operation(record, ambiguous, claim_token="owner-a"))
    record = keep(await store.suspend(record, claim_token="owner-a"))
    record = keep(await take(store, "owner-b", mode=ClaimMode.RECOVERY))
    settled = record.tool_journal[0].succeed({"ledger_row": 7})
    record = keep(await store.record_operation(record, settled, claim_token="owner-b"))
    record.shared_state = {"charged": True}
    record = keep(await store.progress(record, claim_token="owner-b"))
    step = make_checkpoint("run-1", 1, state={"charged": True})
    record = keep(await store.commit_step(step, record, [], claim_token="owner-b"))
    seen.append((await store.get("run-1")) == await store.get("run-1", 1))
    record = keep(await store.commit(replace(record, cycle_index=1), claim_token="owner-b"))
    record = keep(await take(store, "owner-b", cycle=2))
    final = replace(
        record,
        status=CheckpointStatus.COMPLETED,
        terminal_result={"status": "completed"},
        event_outbox=[pending],
    )
    record = keep(await store.finalize_claimed(final, claim_token="owner-b"))
    event = {"type": "run_completed", "run_id": "run-1"}
    appended = await store.append_once("evt-end", event_payload_digest(event), event)
    seen.append(appended.inserted)
    # the record keeps a cursor as data; the store's own are signed with its secret
    cursor = EventCursor(CapabilityRef("events.test", "1"), {"n": 1}, "evt-end")
    record = keep(
        await store.record_event_delivery(
            record,
            claim_token=None,
            event_id="evt-end",
            payload_digest=pending.payload_digest,
            cursor=cursor,
        )
    )
    keep(await store.acknowledge_terminal(record))
    seen.append([e.event_id for e in (await store.replay("run-1")).events])
    return seen


async def test_every_script_sent_twice_lands_once(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver re-sending each script after losing its reply changes nothing:
    every outcome is the one a store that sent it once gives."""
    client = aioredis.Redis.from_url(REDIS_URL)
    send = client.evalsha
    replies: list[tuple[str, Any, Any]] = []

    async def twice(sha: str, numkeys: int, *args: Any) -> Any:
        first = await send(sha, numkeys, *args)
        second = await send(sha, numkeys, *args)
        replies.append((_SCRIPT_NAMES[sha], first, second))
        return second

    monkeypatch.setattr(client, "evalsha", twice)
    try:
        async with RedisCheckpointer(client=client, prefix=prefix) as store:
            resent = await lifecycle(store)
            await store.put(make_checkpoint("run-1", 2))
            removed = await store.delete("run-1")
            assert await store.load("run-1") is None and await store.get("run-1") is None
            assert (await store.replay("run-1")).events == []
    finally:
        await client.aclose()
    async with MemoryCheckpointer() as memory:
        once = await lifecycle(memory)
    assert resent == once
    assert removed
    by_name: dict[str, list[tuple[Any, Any]]] = {}
    for name, first, second in replies:
        by_name.setdefault(name, []).append((first, second))
    assert by_name.pop("delete") == [([1, 1, 2], [1, 1, 2])]  # record, event, steps
    for first, second in by_name.pop("renew"):
        assert first[0] == second[0] == 1 and second[1] >= first[1]
    for name, pairs in by_name.items():
        assert all(first == second for first, second in pairs), name
    assert {"create", "claim", "write", "commit", "append", "put"} <= set(by_name)


class ReplyDropper:
    """A TCP proxy to the test server that, once armed, drops the next reply
    and closes that connection: the server ran the command, the client never
    hears of it."""

    def __init__(self) -> None:
        self.armed = False
        self.dropped = 0

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, replies: bool
    ) -> None:
        try:
            while data := await reader.read(65_536):
                if replies and self.armed:
                    self.armed = False
                    self.dropped += 1
                    return
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 6379)
        await asyncio.gather(
            self._pump(reader, up_writer, replies=False),
            self._pump(up_reader, writer, replies=True),
            return_exceptions=True,
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            server.close()


async def test_a_lost_reply_is_re_sent_by_the_driver_and_lands_once(prefix: str) -> None:
    if not REDIS_URL.startswith("redis://127.0.0.1:6379"):
        pytest.skip("the proxy forwards to 127.0.0.1:6379")
    proxy = ReplyDropper()
    async with proxy.running() as url:
        # A client that retries on a lost connection, as redis-py's default does.
        client = aioredis.Redis.from_url(
            url, retry=Retry(NoBackoff(), 3), retry_on_error=[RedisConnectionError]
        )
        try:
            async with RedisCheckpointer(client=client, prefix=prefix) as store:
                events = store
                await store.load("warm-up")
                await events.replay("warm-up")

                async def lost(call: Any) -> Any:
                    proxy.armed = True
                    result = await call
                    assert proxy.dropped == before + 1 and not proxy.armed
                    return result

                before = proxy.dropped
                await lost(store.create(make_record()))
                before = proxy.dropped
                record = await lost(take(store, "owner-a"))
                before = proxy.dropped
                entry = make_tool_entry("run-1", 1).start()
                record = await lost(store.record_operation(record, entry, claim_token="owner-a"))
                before = proxy.dropped
                step = make_checkpoint("run-1", 0)
                record = await lost(store.commit_step(step, record, [], claim_token="owner-a"))
                event = {"type": "step", "run_id": "run-1"}
                before = proxy.dropped
                appended = await lost(
                    events.append_once("evt-1", event_payload_digest(event), event)
                )
                loaded = await store.load("run-1")
                committed = await store.get("run-1", 0)
                page = await events.replay("run-1")
        finally:
            await client.aclose()
    assert proxy.dropped == 5
    assert record.revision == 3 and appended.inserted and set(appended.cursor) == {"cursor"}
    assert loaded is not None and loaded.to_dict() == record.to_dict()
    assert committed is not None and committed.revision == 1
    assert [e.event_id for e in page.events] == ["evt-1"]


async def _kill_once_paused(admin: aioredis.Redis, name: str) -> None:
    """Kill the connection ``name`` while its script waits out a write pause."""
    for _ in range(500):
        waiting = [
            c
            for c in await connections(admin, name)
            if c.get("cmd") == "evalsha" and "b" in c.get("flags", "")
        ]
        if waiting:
            await admin.client_kill_filter(_id=waiting[0]["id"])
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the script never reached the server")


@pytest.mark.parametrize(
    "operation", ["claim", "record_operation", "append_once", "commit_step", "delete"]
)
async def test_a_connection_killed_mid_write_lands_nothing(tmp_path: Path, operation: str) -> None:
    name = f"aftest-durable-{uuid.uuid4().hex}"
    async with private_redis(tmp_path) as url:
        admin = aioredis.Redis.from_url(url)
        store = RedisCheckpointer(f"{url}?client_name={name}")
        events = store
        try:
            # The store's own client never re-sends a command by itself.
            assert store._client.connection_pool.connection_kwargs["retry"].get_retries() == 0
            await store.create(make_record())
            await store.create(make_record("run-2"))
            record = await take(store, "owner-a")
            event = {"type": "step", "run_id": "run-1"}
            calls: dict[str, Callable[[], Awaitable[object]]] = {
                "claim": lambda: take(store, "owner-b", key="run-2"),
                "record_operation": lambda: store.record_operation(
                    record, make_tool_entry("run-1", 1), claim_token="owner-a"
                ),
                "append_once": lambda: events.append_once(
                    "evt-1", event_payload_digest(event), event
                ),
                "commit_step": lambda: store.commit_step(
                    make_checkpoint("run-1", 1), record, [], claim_token="owner-a"
                ),
                "delete": lambda: store.delete("run-2"),
            }
            await store.put(make_checkpoint("run-1", 0))
            await events.replay("run-1")
            await admin.client_pause(5_000, all=False)
            try:
                task = asyncio.ensure_future(calls[operation]())
                await _kill_once_paused(admin, name)
            finally:
                await admin.client_unpause()
            with pytest.raises(StoreUnavailable) as caught:
                await task
            assert caught.value.retryable and isinstance(
                caught.value.__cause__, RedisConnectionError
            )
            assert str(caught.value).startswith(f"redis {operation} on ")
            untouched = [await store.load(key) for key in ("run-1", "run-2")]
            assert [r.to_dict() if r else None for r in untouched] == [
                record.to_dict(),
                make_record("run-2").to_dict(),
            ]
            assert (await events.replay("run-1")).events == []
            assert [c.step async for c in store.history("run-1")] == [0]
            # The next call opens a new connection and goes through.
            await store.record_operation(record, make_tool_entry("run-1", 1), claim_token="owner-a")
        finally:
            await store.close()
            await admin.aclose()


async def test_an_unreachable_server_is_store_unavailable_without_the_password() -> None:
    url = "redis://agent:hunter2-secret@127.0.0.1:1/0"
    async with RedisCheckpointer(url) as store:
        with pytest.raises(StoreUnavailable) as caught:
            await store.load("run-1")
    assert "hunter2" not in str(caught.value) and "127.0.0.1:1" in str(caught.value)
