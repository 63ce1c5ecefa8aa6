from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable.stores.redis import RedisDurableStore
from agentflow.durable.stores.redis_events import RedisRunEventStore
from agentflow.durable.stores.redis_scripts import event_keys, run_key
from agentflow.durable.testing import DurableHarness
from tests.backends.redis import (
    REDIS_URL,
    admin_client,
    drop_prefix,
    stored_keys,
    unique_prefix,
)


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    admin = await admin_client()
    prefix = unique_prefix()

    async def corrupt(namespace: str | None, key: str) -> None:
        run = run_key(prefix, namespace or "", key)
        assert await admin.hexists(run, b"body"), f"no stored run {(namespace, key)}"
        await admin.hset(run, b"body", b'{"not": 1}')

    async def field_of(namespace: str | None, key: str, part: str) -> tuple[bytes, bytes]:
        """The hash and field holding one part: the run's ``body`` / ``jt.<i>``,
        or the event data hash's field named by the event's sequence."""
        if part != "event":
            name = part if part == "body" else f"j{part[0]}.{part.partition('.')[2]}"
            return run_key(prefix, namespace or "", key), name.encode()
        _, ids, data = event_keys(prefix, namespace or "")
        found = await admin.hget(ids, key.encode())
        assert isinstance(found, bytes), f"no stored event {(namespace, key)}"
        return data, found.split(b":")[0]

    async def read_part(namespace: str | None, key: str, part: str) -> bytes:
        found = await admin.hget(*await field_of(namespace, key, part))
        assert isinstance(found, bytes), f"no stored {part} for {(namespace, key)}"
        return found

    async def write_part(namespace: str | None, key: str, part: str, data: bytes) -> None:
        name, field = await field_of(namespace, key, part)
        assert await admin.hexists(name, field), f"no stored {part} for {(namespace, key)}"
        await admin.hset(name, field, data)

    def stores(namespace: str | None, sealing: KeyRing | None = None) -> RedisDurableStore:
        return RedisDurableStore(REDIS_URL, prefix=prefix, namespace=namespace, sealing=sealing)

    def event_stores(namespace: str | None, sealing: KeyRing | None = None) -> RedisRunEventStore:
        return RedisRunEventStore(REDIS_URL, prefix=prefix, namespace=namespace, sealing=sealing)

    try:
        yield DurableHarness(
            name="redis",
            stores=stores,
            event_stores=event_stores,
            corrupt=corrupt,
            readers=lambda namespace: RedisDurableStore(
                REDIS_URL, prefix=prefix, namespace=namespace, create=False
            ),
            contents=lambda: stored_keys(admin, prefix),
            sealed_stores=stores,
            sealed_event_stores=event_stores,
            read_part=read_part,
            write_part=write_part,
        )
    finally:
        await drop_prefix(admin, prefix)
        await admin.aclose()
