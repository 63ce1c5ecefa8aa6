"""Redis harness: a unique key prefix on the shared server, removed afterwards."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from agentflow.checkpoint.redis import RedisCheckpointer, namespace_keys, thread_keys
from agentflow.checkpoint.redis.migration import upgrade_summary
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


async def admin_session() -> AsyncIterator[aioredis.Redis]:
    """Fixture body (``admin = pytest.fixture(admin_session)``): a raw client."""
    client = await admin_client()
    yield client
    await client.aclose()


async def scratch_prefix(admin: aioredis.Redis) -> AsyncIterator[str]:
    """Fixture body (``prefix = pytest.fixture(scratch_prefix)``): a key prefix,
    its keys removed after."""
    name = unique_prefix()
    yield name
    await drop_prefix(admin, name)


def named_url(name: str) -> str:
    """The test server's URL for a client that names its connections ``name``."""
    return f"{REDIS_URL}?client_name={name}"


async def connections(admin: aioredis.Redis, name: str) -> list[dict[str, str]]:
    """The server's connections named ``name``."""
    return [c for c in await admin.client_list() if c.get("name") == name]


async def stored_keys(admin: aioredis.Redis, prefix: str) -> set[bytes]:
    """Every key starting with ``prefix`` (which holds no glob characters)."""
    return {cast(bytes, k) async for k in admin.scan_iter(match=f"{prefix}*")}


async def assert_consistent(
    admin: aioredis.Redis, prefix: str, namespace: str, threads: list[str]
) -> None:
    """No orphans: the namespace indexes agree with the summaries, every
    summary is its thread's latest step's, and an empty thread has no key."""
    idx, _, sums, st, due, _ = namespace_keys(prefix, namespace)
    indexed = set(await admin.zrange(idx, 0, -1))
    summaries = cast(dict[bytes, bytes], await admin.hgetall(sums))
    assert set(summaries) == indexed
    assert set(await admin.zrange(st, 0, -1)) == {s[:1] + t for t, s in summaries.items()}
    waits = {s[1:19] + t for t, s in summaries.items() if s[:1] == b"w"}
    assert set(await admin.zrange(due, 0, -1)) == waits
    for thread in threads:
        s, d = thread_keys(prefix, namespace, thread)
        steps = set(cast(list[bytes], await admin.zrange(s, 0, -1)))
        if not steps:
            assert await admin.exists(s, d) == 0, thread
            assert thread.encode() not in indexed, thread
            continue
        data = cast(dict[bytes, bytes], await admin.hgetall(d))
        assert set(data) == steps | {step + b"m" for step in steps}
        latest = data[max(steps) + b"m"].split(b":", 3)[3]
        if latest.startswith(b"{"):  # written by layout 1
            latest = upgrade_summary(latest)
        assert summaries[thread.encode()] == latest


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

    async def read_payload(namespace: str | None, thread: str, step: int) -> bytes:
        data = thread_keys(prefix, namespace or "", thread)[1]
        payload = await admin.hget(data, b"%020d" % step)
        assert isinstance(payload, bytes), f"no stored step {(namespace, thread, step)}"
        return payload

    async def write_payload(namespace: str | None, thread: str, step: int, payload: bytes) -> None:
        data = thread_keys(prefix, namespace or "", thread)[1]
        assert await admin.hexists(data, b"%020d" % step)
        await admin.hset(data, b"%020d" % step, payload)

    try:
        yield BackendHarness(
            name="redis",
            factory=RedisCheckpointer,
            kwargs={"url": REDIS_URL, "prefix": prefix},
            corrupt=corrupt,
            damage_revision=damage_revision,
            read_payload=read_payload,
            write_payload=write_payload,
        )
    finally:
        await drop_prefix(admin, prefix)
        await admin.aclose()
