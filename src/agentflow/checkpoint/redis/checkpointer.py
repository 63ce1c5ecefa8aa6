"""A durable checkpointer on plain Redis 7 or Valkey (no modules).

Every mutation is one Lua script, so it is atomic and costs one round trip.
The scripts and the key layout they work on (one hash tag per thread, one per
namespace) are in :mod:`~agentflow.checkpoint.redis.scripts`; ``docs/redis.md``
gives the reasons.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import cast

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from agentflow.checkpoint.backend import CheckpointerBase, EncodedCheckpoint, StoredRow
from agentflow.checkpoint.base import Redactor, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.redis.errors import driver_error
from agentflow.checkpoint.redis.migration import migrate_namespace, upgrade_summary
from agentflow.checkpoint.redis.records import stored_row, summary_of, thread_info
from agentflow.checkpoint.redis.scripts import (
    LAYOUT_VERSION,
    LUA_DELETE,
    LUA_LATEST,
    LUA_PAGE,
    LUA_PRUNE,
    LUA_PUT,
    check_prefix,
    due_range,
    instant_bound,
    listing_range,
    namespace_keys,
    secret_key,
    sortable_instant,
    step_member,
    thread_keys,
    utf8,
)
from agentflow.checkpoint.stores import safe_url
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    IncompatibleSchema,
    InvalidArgument,
    InvalidStoreUrl,
    StoreNotFound,
)

__all__ = ["RedisCheckpointer", "from_url"]

#: Step ids per history index read, and the most payloads per data read.
_BATCH = 128
#: Payload bytes a history data read aims for, so memory stays bounded even
#: when single states are megabytes.
_HISTORY_BYTES = 4 * 1024 * 1024
#: Steps removed per prune script, bounding how long one call holds the server.
_PRUNE_BATCH = 1024
#: Index members one listing script reads at most (Lua unpacks them, and
#: unpack takes at most ~8,000 values).
_PAGE_READ = 1_000
#: Redis's default ``proto-max-bulk-len``: the largest payload it accepts,
#: used when the server does not tell its own.
_DEFAULT_MAX_BULK = 512 * 1024 * 1024
#: What HMGET gives a client without decode_responses.
_Values = list[bytes | None]


def _ttl_ms(ttl: object) -> bytes:
    if ttl is None:
        return b""
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not 0 < ttl <= 10 * 365 * 86_400
    ):
        raise InvalidArgument(f"ttl must be None or seconds in (0, 10 years], got {ttl!r}")
    return b"%d" % max(1, round(ttl * 1000))


def _address(client: aioredis.Redis) -> str:
    """host:port (or the socket path) of ``client``; never its password."""
    options = client.connection_pool.connection_kwargs
    if "path" in options:
        return str(options["path"])
    return f"{options.get('host', 'localhost')}:{options.get('port', 6379)}"


class RedisCheckpointer(CheckpointerBase):
    """Checkpoints in Redis, one atomic Lua script per write.

    Pass a ``url`` (we create, own and close the client) or an async
    ``client`` (it stays yours: ``close()`` leaves it open; it must use
    ``decode_responses=False``). The client we create never retries a command
    by itself: a retried script could land twice. An injected client may
    retry; every write carries a random write id, and a script that finds its
    own id already stored returns the stored revision instead of writing
    again, so a driver-level re-send after a lost reply is harmless.

    ``ttl`` (seconds) makes a thread expire that long after its last write by
    a checkpointer with a ttl; a write without ttl makes the thread permanent.

    With ``create=False`` a namespace that has no keys under ``prefix`` raises
    :class:`~agentflow.errors.StoreNotFound` on the first call, and no key is
    written (not even the cursor secret).
    """

    kind = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "agentflow",
        redact: Redactor | None = None,
        namespace: str | None = None,
        ttl: float | None = None,
        codec: CheckpointCodec | None = None,
        create: bool = True,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec)
        self._may_create = bool(create)
        self._prefix = check_prefix(prefix)
        self._ttl_ms = _ttl_ms(ttl)
        if client is not None and client.connection_pool.connection_kwargs.get("decode_responses"):
            raise InvalidArgument("the redis client must use decode_responses=False")
        self._owned = client is None
        try:
            self._client: aioredis.Redis = client or aioredis.Redis.from_url(
                url, decode_responses=False, retry=Retry(NoBackoff(), 0)
            )
        except ValueError as exc:
            raise InvalidStoreUrl(f"not a Redis URL: {safe_url(url)!r}") from exc
        self._where = _address(self._client)
        self._ns = namespace_keys(self._prefix, self._namespace)
        self._put = self._client.register_script(LUA_PUT)
        self._latest = self._client.register_script(LUA_LATEST)
        self._delete = self._client.register_script(LUA_DELETE)
        self._prune = self._client.register_script(LUA_PRUNE)
        self._page = self._client.register_script(LUA_PAGE)
        #: The largest payload the server takes; 0 until :meth:`_setup` ran.
        self._max_payload = 0
        self._setup_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"RedisCheckpointer({self._where!r}, prefix={self._prefix!r})"

    async def _setup(self) -> None:
        """Once per checkpointer: learn the server's size limit, and bring the
        namespace onto this layout unless it is there (refusing a newer one)."""
        if self._max_payload:
            return
        async with self._setup_lock:
            if self._max_payload:
                return
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.get(self._ns[5])
                pipe.config_get("proto-max-bulk-len")
                version, config = await pipe.execute(raise_on_error=False)
            if isinstance(version, Exception):
                raise version
            if version is None:
                if not self._may_create and not await self._client.exists(self._ns[0]):
                    ns = (
                        f"namespace {self._namespace!r}" if self._namespace else "default namespace"
                    )
                    where = f"prefix {self._prefix!r}"
                    raise StoreNotFound(f"no store: the {ns} has no keys under {where}")
                await migrate_namespace(self._client, self._prefix, self._namespace)
            elif version != LAYOUT_VERSION:
                raise IncompatibleSchema(
                    f"namespace {self.namespace!r} under prefix {self._prefix!r} has Redis "
                    f"layout {version!r}, newer than this agentflow's ({LAYOUT_VERSION.decode()})"
                )
            limit = str(config.get("proto-max-bulk-len")) if isinstance(config, dict) else ""
            self._max_payload = int(limit) if limit.isdigit() else _DEFAULT_MAX_BULK

    def _thread(self, thread: str) -> list[bytes]:
        """The keys of ``thread`` and of the namespace indexes it is in."""
        return [*thread_keys(self._prefix, self._namespace, thread), *self._ns[:5]]

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        await self._setup()
        enc = encode()
        if len(enc.payload) > self._max_payload:
            raise InvalidArgument(
                f"thread {thread!r} step {step}: the encoded checkpoint is {len(enc.payload):,} "
                f"bytes; this Redis accepts at most {self._max_payload:,} (proto-max-bulk-len)"
            )
        write_id = os.urandom(16).hex().encode()
        tail = b"%s:%s:%s" % (write_id, sortable_instant(enc.ts_us), summary_of(enc))
        expected = b"" if if_revision is None else b"%d" % if_revision
        args = (step_member(step), enc.payload, tail, expected, self._ttl_ms, utf8(thread))
        written, revision = await self._put(keys=self._thread(thread), args=args)
        return None if written else int(revision)

    async def _read_step(self, thread: str, step: int | None) -> StoredRow | None:
        await self._setup()
        index, data = thread_keys(self._prefix, self._namespace, thread)
        if step is None:
            reply = await self._latest(keys=(index, data))
            if not reply:
                return None
            (member,), (payload, meta) = reply
            return stored_row(thread, member, payload, meta)
        member = step_member(step)
        payload, meta = cast(_Values, await self._client.hmget(data, [member, member + b"m"]))
        return (
            None if payload is None and meta is None else stored_row(thread, member, payload, meta)
        )

    async def _read_history(self, thread: str) -> AsyncIterator[StoredRow]:
        """Reads step ids in keyset batches, then their data in reads sized by
        the payload bytes seen so far: plain commands, no payload through Lua.

        Each data read is one ``HMGET`` (payload and revision from one
        instant). A step pruned between the two reads is skipped; a step still
        indexed but without data is damage."""
        await self._setup()
        index, data = thread_keys(self._prefix, self._namespace, thread)
        start, chunk = b"-", 1
        while True:
            steps = cast(
                list[bytes],
                await self._client.zrange(index, start, b"+", bylex=True, offset=0, num=_BATCH),
            )
            done = 0
            while done < len(steps):
                part = steps[done : done + chunk]
                done += len(part)
                fields = [f for s in part for f in (s, s + b"m")]
                values = cast(_Values, await self._client.hmget(data, fields))
                pairs = list(zip(part, values[::2], values[1::2], strict=True))
                gone = [s for s, payload, meta in pairs if payload is None and meta is None]
                still = await self._client.zmscore(index, cast(list[str], gone)) if gone else []
                if any(score is not None for score in still):
                    raise CheckpointCorrupted(f"thread {thread!r}: indexed steps lack data")
                size = sum(len(v) for v in values[::2] if v is not None)
                chunk = max(1, min(_BATCH, _HISTORY_BYTES * len(part) // max(size, 1)))
                for member, payload, meta in pairs:
                    if payload is not None or meta is not None:
                        yield stored_row(thread, member, payload, meta)
            if len(steps) < _BATCH:
                return
            start = b"(" + steps[-1]

    async def _scan(
        self, target: bytes, bounds: tuple[bytes, bytes, int], limit: int
    ) -> list[ThreadInfo]:
        """Up to ``limit`` unexpired threads of one namespace index, in scripts
        of at most ``_PAGE_READ`` members each: an expired member not yet
        swept is skipped and the scan goes on, so a page stays full."""
        await self._setup()
        start, stop, skip = bounds
        infos: list[ThreadInfo] = []
        while True:
            args = (start, stop, min(limit - len(infos), _PAGE_READ), skip)
            last, *found = await self._page(keys=[*self._ns[:5], target], args=args)
            infos += [thread_info(n, s) for n, s in zip(found[::2], found[1::2], strict=True)]
            if not last or len(infos) == limit:
                return infos
            start = b"(" + last

    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        target = self._ns[0] if status is None else self._ns[3]
        return await self._scan(target, listing_range(status, after), limit)

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        return await self._scan(self._ns[4], due_range(now_us, after), limit)

    async def _delete_steps(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        await self._setup()
        keys, name = self._thread(thread), utf8(thread)
        if before_step is None and cutoff_us is None:
            return int(await self._delete(keys=keys, args=(name,)))
        before = b"+" if before_step is None else b"(" + step_member(before_step)
        cutoff = b"" if cutoff_us is None else instant_bound(cutoff_us)
        removed, resume, hint = 0, b"-", (b"", b"", b"")
        while resume:
            args = (before, cutoff, name, _PRUNE_BATCH, resume, *hint)
            reply = await self._prune(keys=keys, args=args)
            if reply[0] == -1:  # the new latest step has a layout-1 summary
                hint = (reply[1], reply[2], upgrade_summary(reply[2].split(b":", 3)[3]))
                continue
            removed += int(reply[0])
            resume = reply[1]
        return removed

    async def _cursor_secret(self) -> bytes:
        if not self._may_create:
            await self._setup()  # a reader creates no secret in a store that is not there
        mine = os.urandom(SECRET_BYTES)
        stored = await self._client.set(secret_key(self._prefix), mine, nx=True, get=True)
        if stored is None:
            return mine
        if not isinstance(stored, bytes) or len(stored) != SECRET_BYTES:
            raise CheckpointCorrupted(f"the cursor secret of prefix {self._prefix!r} is damaged")
        return stored

    async def _close_store(self) -> None:
        if self._owned:
            await self._client.aclose()

    def _driver_error(self, exc: Exception, operation: str) -> AgentflowError | None:
        return driver_error(exc, operation, self._where)


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    codec: CheckpointCodec | None = None,
    create: bool = True,
) -> RedisCheckpointer:
    """``redis://`` or ``rediss://`` URL (redis-py's query options apply)."""
    return RedisCheckpointer(url, namespace=namespace, codec=codec, create=create)
