from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.durable.stores.redis import RedisDurableStore
from agentflow.durable.stores.redis_events import RedisRunEventStore
from agentflow.durable.stores.redis_scripts import run_key
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

    try:
        yield DurableHarness(
            name="redis",
            stores=lambda namespace: RedisDurableStore(
                REDIS_URL, prefix=prefix, namespace=namespace
            ),
            event_stores=lambda namespace: RedisRunEventStore(
                REDIS_URL, prefix=prefix, namespace=namespace
            ),
            corrupt=corrupt,
            readers=lambda namespace: RedisDurableStore(
                REDIS_URL, prefix=prefix, namespace=namespace, create=False
            ),
            contents=lambda: stored_keys(admin, prefix),
        )
    finally:
        await drop_prefix(admin, prefix)
        await admin.aclose()
