"""Redis harness: a unique key prefix on the shared server, removed afterwards."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from agentflow.checkpoint.redis import RedisCheckpointer, thread_keys
from agentflow.checkpoint.testing import BackendHarness
from tests.backends import server_missing

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


async def admin_client() -> aioredis.Redis:
    """A raw client on the test server, or a skip (a failure under CI)."""
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except (RedisConnectionError, OSError) as exc:
        await client.aclose()
        server_missing(f"Redis at {REDIS_URL}", exc)
    return client


async def drop_prefix(client: aioredis.Redis, prefix: str) -> None:
    """Delete every key under ``prefix`` (the prefix holds no glob characters)."""
    async for batch in _scan_batches(client, f"{prefix}:*"):
        await client.unlink(*batch)


async def _scan_batches(client: aioredis.Redis, pattern: str) -> AsyncIterator[list[bytes]]:
    batch: list[bytes] = []
    async for key in client.scan_iter(match=pattern, count=1_000):
        batch.append(key)
        if len(batch) == 500:
            yield batch
            batch = []
    if batch:
        yield batch


def unique_prefix() -> str:
    return f"aftest-{uuid.uuid4().hex}"


@asynccontextmanager
async def private_redis(directory: Path, *flags: str) -> AsyncIterator[str]:
    """A redis-server of our own on a unix socket in ``directory`` (nobody else
    can take it), started with ``flags``; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        server_missing("redis-server", "not on PATH")
        raise AssertionError("unreachable")
    socket = directory / "redis.sock"
    process = await asyncio.create_subprocess_exec(
        binary,
        *("--port", "0", "--unixsocket", str(socket), "--save", "", "--appendonly", "no"),
        *("--dir", str(directory), *flags),
        stdout=asyncio.subprocess.DEVNULL,
    )
    url = f"unix://{socket}"
    try:
        for _ in range(500):
            if socket.exists():
                break
            await asyncio.sleep(0.01)
        yield url
    finally:
        process.terminate()
        await process.wait()


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    admin = await admin_client()
    prefix = unique_prefix()

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        data = thread_keys(prefix, namespace or "", thread)[1]
        assert await admin.hexists(data, b"%020d" % step)
        await admin.hset(data, b"%020d" % step, b"\xff{")

    async def damage_revision(namespace: str | None, thread: str, step: int) -> None:
        data = thread_keys(prefix, namespace or "", thread)[1]
        meta = await admin.hget(data, b"%020dm" % step)
        assert isinstance(meta, bytes), f"no stored step {(namespace, thread, step)}"
        await admin.hset(data, b"%020dm" % step, b"-7:" + meta.split(b":", 1)[1])

    try:
        yield BackendHarness(
            name="redis",
            factory=RedisCheckpointer,
            kwargs={"url": REDIS_URL, "prefix": prefix},
            corrupt=corrupt,
            damage_revision=damage_revision,
        )
    finally:
        await drop_prefix(admin, prefix)
        await admin.aclose()
