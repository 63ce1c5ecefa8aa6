"""A durable checkpointer on plain Redis 7 or Valkey (no modules).

Every mutation is one Lua script, so it is atomic and costs one round trip.
The scripts and the key layout they work on (one hash tag per thread, one per
namespace) are in :mod:`~agentflow.checkpoint.redis_scripts`; ``docs/redis.md``
gives the reasons.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agentflow.checkpoint.base import AsyncClosing, Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.codec import (
    decode,
    encode,
    parse_instant,
    validate_namespace,
    validate_step,
    validate_thread,
)
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.checkpoint.paging import check_page_args, check_prune_bounds
from agentflow.checkpoint.redaction import redact_none
from agentflow.checkpoint.redis_scripts import (
    LUA_DELETE,
    LUA_LATEST,
    LUA_LIST,
    LUA_PRUNE,
    LUA_PUT,
    check_prefix,
    namespace_keys,
    sortable_instant,
    step_member,
    thread_keys,
    utf8,
)
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    StoreUnavailable,
)

__all__ = ["RedisCheckpointer", "namespace_keys", "thread_keys"]

_BACKEND = "redis"
#: Step ids per history index read, and the most payloads per data read.
_BATCH = 128
#: Payload bytes a history data read aims for, so memory stays bounded even
#: when single states are megabytes.
_HISTORY_BYTES = 4 * 1024 * 1024
#: Steps removed per prune script, bounding how long one call holds the server.
_PRUNE_BATCH = 1024


@contextmanager
def _driver_errors(action: str) -> Iterator[None]:
    """Translate redis-py errors; CancelledError is not an Exception and passes."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, ReadOnlyError) as exc:
        raise StoreUnavailable(f"redis {action} failed: {exc}") from exc
    except ResponseError as exc:
        text = str(exc)
        if text.startswith(("AGENTFLOW_CORRUPT", "WRONGTYPE")):
            raise CheckpointCorrupted(f"redis {action}: stored data is damaged: {text}") from exc
        raise CheckpointError(f"redis {action} failed: {text}") from exc
    except RedisError as exc:
        raise CheckpointError(f"redis {action} failed: {exc}") from exc


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


class RedisCheckpointer(AsyncClosing):
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
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "agentflow",
        redact: Redactor | None = None,
        namespace: str | None = None,
        ttl: float | None = None,
    ) -> None:
        self._prefix = check_prefix(prefix)
        self._namespace = validate_namespace(namespace)
        self._ttl_ms = _ttl_ms(ttl)
        self._redact = redact or redact_none
        if client is not None and client.connection_pool.connection_kwargs.get("decode_responses"):
            raise InvalidArgument("the redis client must use decode_responses=False")
        self._owned = client is None
        self._client: aioredis.Redis = client or aioredis.Redis.from_url(
            url, decode_responses=False, retry=Retry(NoBackoff(), 0)
        )
        self._ns_keys = namespace_keys(self._prefix, self._namespace)
        self._put_script = self._client.register_script(LUA_PUT)
        self._latest_script = self._client.register_script(LUA_LATEST)
        self._delete_script = self._client.register_script(LUA_DELETE)
        self._prune_script = self._client.register_script(LUA_PRUNE)
        self._list_script = self._client.register_script(LUA_LIST)
        self._closed = False

    async def close(self) -> None:
        """Close the client if we created it; an injected client stays open."""
        if self._owned and not self._closed:
            self._closed = True
            await self._client.aclose()

    def _thread_keys(self, thread: str) -> list[bytes]:
        return thread_keys(self._prefix, self._namespace, thread)

    async def _call(
        self, script: AsyncScript, keys: Sequence[bytes], args: Sequence[Any], action: str
    ) -> Any:
        with _driver_errors(action):
            return await script(keys=keys, args=args)

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        if if_revision is not None and (
            isinstance(if_revision, bool) or not isinstance(if_revision, int) or if_revision < 0
        ):
            raise InvalidArgument(f"if_revision must be None or an int >= 0, got {if_revision!r}")
        enc = encode(cp, self._redact)
        summary = orjson.dumps(
            {
                "latest_step": enc.step,
                "interrupted": enc.interrupted,
                "done": enc.done,
                "ts": enc.ts,
                "wake_at": enc.wake_at,
            }
        )
        tail = b"%s:%s:%s" % (os.urandom(16).hex().encode(), sortable_instant(enc.ts_us), summary)
        expected = b"" if if_revision is None else b"%d" % if_revision
        args = (
            step_member(enc.step),
            enc.payload,
            tail,
            expected,
            self._ttl_ms,
            utf8(enc.thread),
        )
        keys = [*self._thread_keys(enc.thread), *self._ns_keys]
        written, revision = await self._call(self._put_script, keys, args, "put")
        if not written:
            raise CheckpointConflict(enc.thread, enc.step, if_revision or 0, int(revision))
        return f"{enc.thread}:{enc.step}"

    def _decode(
        self, thread: str, steps: list[bytes], values: list[Any], indexed: bool
    ) -> Iterator[Checkpoint]:
        """Decode one at a time, so a caller that drops each checkpoint keeps
        at most one decoded state alive (and the garbage collector idle).

        ``values`` alternate payload and metadata. ``indexed`` steps came from
        the step index in the same snapshot, so data missing for them is
        damage, not absence."""
        for member, payload, meta in zip(steps, values[::2], values[1::2], strict=True):
            if payload is None and meta is None and not indexed:
                continue
            try:
                if meta is None:
                    raise ValueError("no metadata")
                revision = int(meta.split(b":", 1)[0])
            except ValueError as exc:
                raise CheckpointCorrupted(
                    f"thread {thread!r} step {member.decode()}: metadata is damaged"
                ) from exc
            if payload is None:
                raise CheckpointCorrupted(f"thread {thread!r} step {member.decode()}: no payload")
            cp = decode(payload, revision)
            if cp.thread != thread or cp.step != int(member):
                raise CheckpointCorrupted(
                    f"thread {thread!r} step {member.decode()} holds another checkpoint"
                )
            yield cp

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        thread = validate_thread(thread)
        index, data = self._thread_keys(thread)[:2]
        if step is None:
            rows = await self._call(self._latest_script, (index, data), (), "get")
            steps, values = rows or ([], [])
        else:
            steps = [step_member(validate_step(step))]
            with _driver_errors("get"):
                values = await self._client.hmget(data, [steps[0], steps[0] + b"m"])
        return next(self._decode(thread, steps, values, indexed=step is None), None)

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        """Reads step ids in keyset batches, then their data in reads sized by
        the payload bytes seen so far: plain commands, no payload through Lua.

        Each data read is one ``HMGET`` (payload and revision from one
        instant). A step pruned between the two reads is skipped; a step still
        indexed but without data is damage."""
        thread = validate_thread(thread)
        index, data = self._thread_keys(thread)[:2]
        start, chunk = b"-", 1
        while True:
            with _driver_errors("history"):
                steps = cast(
                    list[bytes],
                    await self._client.zrange(index, start, b"+", bylex=True, offset=0, num=_BATCH),
                )
            done = 0
            while done < len(steps):
                part = steps[done : done + chunk]
                done += len(part)
                fields = [field for step in part for field in (step, step + b"m")]
                with _driver_errors("history"):
                    values = await self._client.hmget(data, fields)
                    gone = [s.decode() for s, v in zip(part, values[::2], strict=True) if v is None]
                    still = await self._client.zmscore(index, gone) if gone else []
                    if any(score is not None for score in still):
                        raise CheckpointCorrupted(f"thread {thread!r}: indexed steps lack data")
                size = sum(len(v) for v in values[::2] if v is not None)
                chunk = max(1, min(_BATCH, _HISTORY_BYTES * len(part) // max(size, 1)))
                for cp in self._decode(thread, part, values, indexed=False):
                    yield cp
            if len(steps) < _BATCH:
                return
            start = b"(" + steps[-1]

    async def _summaries(self, names: list[bytes]) -> list[ThreadInfo | None]:
        """Summaries of ``names`` in one round trip; None where the thread
        expired or was deleted since the index was read."""
        try:
            threads = [name.decode() for name in names]
        except UnicodeDecodeError as exc:
            raise CheckpointCorrupted("the thread index holds an id that is not UTF-8") from exc
        async with self._client.pipeline(transaction=False) as pipe:
            for thread in threads:
                pipe.get(self._thread_keys(thread)[2])
            with _driver_errors("list"):
                raws = await pipe.execute()
        infos: list[ThreadInfo | None] = []
        for thread, raw in zip(threads, raws, strict=True):
            try:
                infos.append(None if raw is None else ThreadInfo(thread, **orjson.loads(raw)))
            except (TypeError, ValueError) as exc:
                raise CheckpointCorrupted(f"summary of thread {thread!r} is damaged") from exc
        return infos

    async def _collect(
        self, start: bytes, offset: int, limit: int
    ) -> tuple[list[ThreadInfo], bool]:
        """Up to ``limit`` live threads from ``start``, and whether more follow.

        Index entries whose summary is gone are skipped and the scan goes on,
        so a page stays full while expired threads await their sweep."""
        infos: list[ThreadInfo] = []
        while True:
            want = limit - len(infos) + 1
            args = (start, offset, want)
            names = await self._call(self._list_script, self._ns_keys, args, "list")
            for info in await self._summaries(names):
                if info is None:
                    continue
                if len(infos) == limit:
                    return infos, True
                infos.append(info)
            if len(names) < want:
                return infos, False
            start, offset = b"(" + names[-1], 0

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        check_page_args(limit, offset)
        infos, _ = await self._collect(b"-", offset, limit)
        return infos

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        check_page_args(limit)
        start = b"-"
        if cursor is not None:
            start = b"(" + decode_cursor(_BACKEND, self._namespace, cursor).encode()
        infos, more = await self._collect(start, 0, limit)
        next_cursor = encode_cursor(_BACKEND, self._namespace, infos[-1].thread) if more else None
        return ThreadPage(infos, next_cursor)

    async def delete_thread(self, thread: str) -> None:
        thread = validate_thread(thread)
        keys = [*self._thread_keys(thread), *self._ns_keys]
        await self._call(self._delete_script, keys, (utf8(thread),), "delete_thread")

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        cutoff = (
            b""
            if older_than is None
            else sortable_instant(parse_instant(older_than, what="older_than"))
        )
        thread = validate_thread(thread)
        keys = [*self._thread_keys(thread), *self._ns_keys]
        before = b"+" if before_step is None else b"(" + step_member(before_step)
        removed, resume = 0, b"-"
        while resume:
            args = (before, cutoff, utf8(thread), _PRUNE_BATCH, resume)
            count, resume = await self._call(self._prune_script, keys, args, "prune")
            removed += int(count)
        return removed
