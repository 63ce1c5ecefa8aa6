"""A store on plain Redis 7 or Valkey (no modules): a namespace's checkpoints, records and events.

Every mutation is one Lua script, so it is atomic and costs one round trip;
``commit_step`` (a step's checkpoint and its calls' receipts) and a thread's
delete are one script each. The key layout is in
:mod:`~agentflow.checkpoint.redis.keys`, the scripts in
:mod:`~agentflow.checkpoint.redis.scripts` and
:mod:`~agentflow.checkpoint.redis.run_scripts`; ``docs/redis.md`` gives the
reasons. The scripts span a thread's hash tag, its record's and the
namespace's, so the store needs a single primary (not Redis Cluster).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript

from agentflow.checkpoint.backend import EncodedCheckpoint, StepRange, StoredRow
from agentflow.checkpoint.base import Redactor, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.plans import Write
from agentflow.checkpoint.redis import events, fleet_scripts, run_scripts, scripts
from agentflow.checkpoint.redis.errors import driver_error
from agentflow.checkpoint.redis.events import RedisEvents
from agentflow.checkpoint.redis.fleet import RedisFleet
from agentflow.checkpoint.redis.keys import (
    Keys,
    check_prefix,
    due_range,
    instant_bound,
    listing_range,
    sortable_instant,
    step_member,
    utf8,
)
from agentflow.checkpoint.redis.migration import prepare, upgrade_summary
from agentflow.checkpoint.redis.records import stored_row, summary_of, thread_info
from agentflow.checkpoint.redis.rows import write_args, write_id
from agentflow.checkpoint.store_base import StoreBase
from agentflow.checkpoint.stores import safe_url
from agentflow.durable.errors import ClaimActive, DurableCorrupted
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.errors import AgentflowError, CheckpointCorrupted, InvalidArgument, InvalidStoreUrl

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["SCRIPTS", "RedisCheckpointer", "from_url"]

T = TypeVar("T")
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
#: What HMGET gives a client without decode_responses.
_Values = list[bytes | None]
#: Every script of the store, by name ("put", "commit", "delete", ...).
SCRIPTS = {
    name.removeprefix("LUA_").lower(): getattr(module, name)
    for module in (scripts, run_scripts, fleet_scripts, events)
    for name in module.__all__
    if name.startswith("LUA_") and name not in ("LUA_COMMON", "LUA_THREADS")
}


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


class RedisCheckpointer(RedisFleet, RedisEvents, StoreBase):
    """A namespace's checkpoints, records and events in Redis (a Store).

    Pass a ``url`` (we create, own and close the client) or an async
    ``client`` (it stays yours: ``close()`` leaves it open; it must use
    ``decode_responses=False``). The client we create never retries a command
    by itself: a retried script could land twice. An injected client may
    retry; every write carries a random write id, and a script that finds its
    own id already stored answers as the first did instead of writing again.

    ``ttl`` (seconds) makes a thread's checkpoints expire that long after its
    last write by a store with a ttl; a write without ttl makes them
    permanent. Records and events never expire.

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
        sealing: KeyRing | None = None,
        create: bool = True,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec, sealing=sealing)
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
        self._keys = Keys(self._prefix, self._namespace)
        self._lua: dict[str, AsyncScript] = {
            name: self._client.register_script(source) for name, source in SCRIPTS.items()
        }
        #: The largest payload the server takes; 0 until :meth:`_setup` ran.
        self._max_payload = 0
        self._setup_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"RedisCheckpointer({self._where!r}, prefix={self._prefix!r})"

    @property
    def database(self) -> str:
        db = self._client.connection_pool.connection_kwargs.get("db", 0)
        return f"redis://{self._where}/{db} prefix={self._prefix!r}"

    async def _setup(self) -> None:
        """Once per store: learn the server's size limit, and bring the
        namespace onto this layout unless it is there (refusing a newer one)."""
        if self._max_payload:
            return
        async with self._setup_lock:
            if self._max_payload:
                return
            self._max_payload = await prepare(
                self._client, self._keys, self._namespace, create=self._may_create
            )

    async def _redis(self, operation: str, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` of a record or event operation once the store is set up;
        redis-py's errors become agentflow's (damage as DurableCorrupted)."""
        self._check_open()
        try:
            await self._setup()
            return await job()
        except Exception as exc:
            self._reraise_part(exc, operation)

    def _thread_keys(self, thread: str) -> list[bytes]:
        """The keys of ``thread`` and of the namespace indexes it is in."""
        return [*self._keys.thread(thread), *self._keys.threads]

    def _encoded(
        self, thread: str, step: int, encode: Callable[[], EncodedCheckpoint]
    ) -> list[bytes]:
        """The step, payload and metadata tail ("write-id:instant:summary") of a put."""
        enc = encode()
        if len(enc.payload) > self._max_payload:
            raise InvalidArgument(
                f"thread {thread!r} step {step}: the encoded checkpoint is {len(enc.payload):,} "
                f"bytes; this Redis accepts at most {self._max_payload:,} (proto-max-bulk-len)"
            )
        tail = b"%s:%s:%s" % (write_id(), sortable_instant(enc.ts_us), summary_of(enc))
        return [step_member(step), enc.payload, tail]

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        await self._setup()
        step_, payload, tail = self._encoded(thread, step, encode)
        expected = b"" if if_revision is None else b"%d" % if_revision
        args = (step_, payload, tail, expected, self._ttl_ms, utf8(thread))
        written, revision = await self._lua["put"](keys=self._thread_keys(thread), args=args)
        return None if written else int(revision)

    async def _commit_step(
        self, thread: str, step: int, encode: Callable[[], EncodedCheckpoint], write: Write
    ) -> tuple[int | None, DurableCheckpoint]:
        """One script: the step as a new put and ``write``, both or neither."""
        await self._setup()
        step_, payload, tail = self._encoded(thread, step, encode)
        args = [step_, payload, tail, self._ttl_ms, *write_args(write, tail[:32], utf8(thread))]
        keys = [*self._thread_keys(thread), self._keys.run(thread), self._keys.runs[1]]
        reply = await self._lua["commit"](keys=[*keys, self._keys.holders], args=args)
        if reply[0] == 4:
            return int(reply[1]), write.record
        return None, self._applied(write, reply)

    async def _read_step(self, thread: str, step: int | None) -> StoredRow | None:
        await self._setup()
        index, data = self._keys.thread(thread)
        if step is None:
            reply = await self._lua["latest"](keys=(index, data))
            if not reply:
                return None
            (member,), (payload, meta) = reply
            return stored_row(thread, member, payload, meta)
        member = step_member(step)
        payload, meta = cast(_Values, await self._client.hmget(data, [member, member + b"m"]))
        return (
            None if payload is None and meta is None else stored_row(thread, member, payload, meta)
        )

    async def _read_history(self, thread: str, steps: StepRange) -> AsyncIterator[StoredRow]:
        """Reads step ids in keyset batches (a lex range of the step index, no
        more ids than are left to yield), then their data in reads sized by the
        payload bytes seen so far: plain commands, no payload through Lua.

        Each data read is one ``HMGET`` (payload and revision from one
        instant). A step pruned between the two reads is skipped; a step still
        indexed but without data is damage."""
        await self._setup()
        index, data = self._keys.thread(thread)
        low = b"-" if steps.after < 0 else b"(" + step_member(steps.after)
        high = b"+" if steps.before is None else b"(" + step_member(steps.before)
        chunk, left = 1, steps.limit
        while True:
            asked = _BATCH if left is None else min(_BATCH, left)
            bounds = (high, low) if steps.newest_first else (low, high)
            ids = await self._client.zrange(
                index, *bounds, desc=steps.newest_first, bylex=True, offset=0, num=asked
            )
            found = cast(list[bytes], ids)
            done = 0
            while done < len(found):
                part = found[done : done + chunk]
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
                        if left is not None:
                            left -= 1
                        yield stored_row(thread, member, payload, meta)
            if len(found) < asked or left == 0:
                return
            if steps.newest_first:
                high = b"(" + found[-1]
            else:
                low = b"(" + found[-1]

    async def _read_steps(self, thread: str, steps: Sequence[int]) -> list[StoredRow]:
        """One ``HMGET`` for every step asked for (a record's chain): payloads and
        revisions from one instant."""
        await self._setup()
        _, data = self._keys.thread(thread)
        members = [step_member(step) for step in steps]
        values = cast(
            _Values, await self._client.hmget(data, [f for m in members for f in (m, m + b"m")])
        )
        return [
            stored_row(thread, member, payload, meta)
            for member, payload, meta in zip(members, values[::2], values[1::2], strict=True)
            if payload is not None or meta is not None
        ]

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
            last, *found = await self._lua["page"](keys=[*self._keys.threads, target], args=args)
            infos += [thread_info(*found[i : i + 3]) for i in range(0, len(found), 3)]
            if not last or len(infos) == limit:
                return infos
            start = b"(" + last

    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        target = self._keys.threads[0 if status is None else 3]
        return await self._scan(target, listing_range(status, after), limit)

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        return await self._scan(self._keys.threads[4], due_range(now_us, after), limit)

    async def _delete(self, thread: str, parts: bytes, *, force: bool = False) -> list[int]:
        """One delete script over ``parts`` of ``thread`` (``r`` record, ``e``
        events, ``c`` checkpoints): [record existed, events, steps deleted]."""
        await self._setup()
        k = self._keys
        keys = [*self._thread_keys(thread), k.run(thread), k.run(thread, b"gone"), *k.runs[:2]]
        keys += [*k.events[1:], k.event_index(thread, parent=False), k.holders]
        args = [utf8(thread), write_id(), parts, b"1" if force else b"0"]
        reply = cast(list[int], await self._lua["delete"](keys=keys, args=args))
        if reply == [-2]:
            raise ClaimActive(f"run {thread!r} is held by a live lease; delete it with force")
        if reply == [2]:
            raise DurableCorrupted("checkpoint_row_invalid", f"stored record {thread!r} is damaged")
        return reply

    async def _delete_thread(self, thread: str, force: bool) -> bool:
        return any(await self._delete(thread, b"rec", force=force))

    async def _delete_run(self, key: str, *, force: bool) -> bool:
        return bool((await self._delete(key, b"r", force=force))[0])

    async def _delete_events(self, run_id: str) -> int:
        return (await self._delete(run_id, b"e"))[1]

    async def _delete_rows(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        if before_step is None and cutoff_us is None:
            return (await self._delete(thread, b"c"))[2]
        before = b"+" if before_step is None else b"(" + step_member(before_step)
        cutoff = b"" if cutoff_us is None else instant_bound(cutoff_us)
        keys, name = self._thread_keys(thread), utf8(thread)
        removed, resume, hint = 0, b"-", (b"", b"", b"")
        while resume:
            args = (before, cutoff, name, _PRUNE_BATCH, resume, *hint)
            reply = await self._lua["prune"](keys=keys, args=args)
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
        stored = await self._client.set(self._keys.secret, mine, nx=True, get=True)
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
    sealing: KeyRing | None = None,
    create: bool = True,
) -> RedisCheckpointer:
    """``redis://`` or ``rediss://`` URL (redis-py's query options apply)."""
    return RedisCheckpointer(url, namespace=namespace, codec=codec, sealing=sealing, create=create)
