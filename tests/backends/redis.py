"""Redis harness: a unique key prefix on the shared server, removed afterwards.

The store's checkpoints, records and events share it; the hooks reach each part's keys."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from agentflow.checkpoint.redis import Keys, RedisCheckpointer
from agentflow.checkpoint.redis.migration import upgrade_summary
from agentflow.checkpoint.redis.store import SCRIPTS
from agentflow.checkpoint.testing import BackendHarness
from tests.backends import server_missing

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
T = TypeVar("T")


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
    """No orphans: the namespace indexes agree with the summaries and the
    statuses records impose, every summary is its thread's latest step's, and
    an empty thread has no key."""
    keys = Keys(prefix, namespace)
    idx, _, sums, st, due, rs = keys.threads
    indexed = set(await admin.zrange(idx, 0, -1))
    summaries = cast(dict[bytes, bytes], await admin.hgetall(sums))
    imposed = cast(dict[bytes, bytes], await admin.hgetall(rs))
    assert set(summaries) == indexed
    letters = {imposed.get(t, s[:1]) + t for t, s in summaries.items()}
    assert set(await admin.zrange(st, 0, -1)) == letters
    waits = {s[1:19] + t for t, s in summaries.items() if s[:1] == b"w"}
    assert set(await admin.zrange(due, 0, -1)) == waits
    for thread in threads:
        s, d = keys.thread(thread)
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
        probe = aioredis.Redis.from_url(url)
        try:
            for _ in range(500):  # the socket file exists a moment before it accepts
                try:
                    if socket.exists() and await probe.ping():
                        break
                except (RedisConnectionError, OSError) as exc:
                    if isinstance(exc.__cause__, AuthenticationError):
                        break  # it answers (a server started with --requirepass)
                await asyncio.sleep(0.01)
        finally:
            await probe.aclose()
        yield url
    finally:
        process.terminate()
        await process.wait()


# -- watching a private server ----------------------------------------------------

_ARGUMENT = re.compile(rb'"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sent:
    """One command the server ran: by a client, or by a script (``lua``)."""

    lua: bool
    args: list[bytes]

    @property
    def name(self) -> str:
        return self.args[0].decode().upper()

    def fields(self) -> list[bytes]:
        """The fields an ``HSET`` writes."""
        assert self.name == "HSET"
        return self.args[2::2]


class Feed:
    """The server's MONITOR stream, cut into the commands of one call at a time."""

    def __init__(self, admin: aioredis.Redis, monitor: Any) -> None:
        self._admin, self._monitor = admin, monitor

    async def during(self, call: Awaitable[T]) -> tuple[T | BaseException, list[Sent]]:
        """What ``call`` returned (or raised) and the commands the server ran meanwhile."""
        await self._until_marker()  # what ran before is someone else's
        try:
            result: T | BaseException = await call
        except Exception as exc:
            result = exc
        return result, await self._until_marker()

    async def _until_marker(self) -> list[Sent]:
        marker = uuid.uuid4().hex.encode()
        await self._admin.echo(marker)
        sent: list[Sent] = []
        while True:
            line = cast(bytes, await self._monitor.connection.read_response())
            source, _, command = line.partition(b"] ")
            args = _ARGUMENT.findall(command)
            if args == [b"ECHO", marker]:
                return sent
            sent.append(Sent(source.endswith(b" lua"), args))


@asynccontextmanager
async def monitored(directory: Path) -> AsyncIterator[tuple[str, Feed]]:
    """A private server (nobody else's commands) and its MONITOR feed."""
    async with private_redis(directory) as url:
        admin = aioredis.Redis.from_url(url)
        try:
            for source in SCRIPTS.values():  # so no call below needs a SCRIPT LOAD
                await admin.script_load(source)
            async with admin.monitor() as monitor:
                yield url, Feed(admin, monitor)
        finally:
            await admin.aclose()


def by_client(sent: list[Sent]) -> list[str]:
    """The commands a client sent."""
    return [s.name for s in sent if not s.lua]


def by_script(sent: list[Sent]) -> list[str]:
    """The commands scripts ran."""
    return [s.name for s in sent if s.lua]


async def _part_field(
    admin: aioredis.Redis, keys: Keys, key: str, part: str
) -> tuple[bytes, bytes]:
    """The hash and field holding one part of a record or event: the record's
    ``body`` / ``jt.<i>``, or the event data field named by the event's sequence."""
    if part != "event":
        name = part if part == "body" else f"j{part[0]}.{part.partition('.')[2]}"
        return keys.run(key), name.encode()
    _, ids, data = keys.events
    found = await admin.hget(ids, key.encode())
    assert isinstance(found, bytes), f"no stored event {key!r}"
    return data, found.split(b":")[0]


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    admin = await admin_client()
    prefix = unique_prefix()

    def field(namespace: str | None, thread: str, step: int) -> tuple[bytes, bytes]:
        """The data hash of a thread and the field of one step's payload."""
        return Keys(prefix, namespace or "").thread(thread)[1], b"%020d" % step

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        data, name = field(namespace, thread, step)
        assert await admin.hexists(data, name)
        await admin.hset(data, name, b"\xff{")

    async def damage_revision(namespace: str | None, thread: str, step: int) -> None:
        data, name = field(namespace, thread, step)
        meta = await admin.hget(data, name + b"m")
        assert isinstance(meta, bytes), f"no stored step {(namespace, thread, step)}"
        await admin.hset(data, name + b"m", b"-7:" + meta.split(b":", 1)[1])

    async def read_payload(namespace: str | None, thread: str, step: int) -> bytes:
        payload = await admin.hget(*field(namespace, thread, step))
        assert isinstance(payload, bytes), f"no stored step {(namespace, thread, step)}"
        return payload

    async def write_payload(namespace: str | None, thread: str, step: int, payload: bytes) -> None:
        data, name = field(namespace, thread, step)
        assert await admin.hexists(data, name)
        await admin.hset(data, name, payload)

    async def corrupt_run(namespace: str | None, key: str) -> None:
        run = Keys(prefix, namespace or "").run(key)
        assert await admin.hexists(run, b"body"), f"no stored run {(namespace, key)}"
        await admin.hset(run, b"body", b'{"not": 1}')

    async def read_part(namespace: str | None, key: str, part: str) -> bytes:
        found = await admin.hget(
            *await _part_field(admin, Keys(prefix, namespace or ""), key, part)
        )
        assert isinstance(found, bytes), f"no stored {part} for {(namespace, key)}"
        return found

    async def write_part(namespace: str | None, key: str, part: str, data: bytes) -> None:
        name, field = await _part_field(admin, Keys(prefix, namespace or ""), key, part)
        assert await admin.hexists(name, field), f"no stored {part} for {(namespace, key)}"
        await admin.hset(name, field, data)

    try:
        yield BackendHarness(
            name="redis",
            factory=RedisCheckpointer,
            kwargs={"url": REDIS_URL, "prefix": prefix},
            corrupt=corrupt,
            damage_revision=damage_revision,
            read_payload=read_payload,
            write_payload=write_payload,
            corrupt_run=corrupt_run,
            contents=lambda: stored_keys(admin, prefix),
            read_part=read_part,
            write_part=write_part,
        )
    finally:
        await drop_prefix(admin, prefix)
        await admin.aclose()
