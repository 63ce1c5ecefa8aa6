"""The record part of the Redis store: one hash per thread's record, one script per write.

Every planned write is one script that compares the head fields, then
writes the head, the body and the journal entries the write names, the
record status index and the status the record imposes on its thread; a
claim or renewal reads the lease clock from the server (``TIME``) inside the
script, so workers with skewed clocks agree. A refused write returns the
head it compared, so naming the refusal needs no second read.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from agentflow.checkpoint.claims import (
    check_claim_request,
    claim_refusal,
    claimed_head,
    renew_refusal,
)
from agentflow.checkpoint.plans import Write, refusal
from agentflow.checkpoint.redis.keys import Keys, run_range
from agentflow.checkpoint.redis.rows import (
    create_args,
    encode_text,
    head_from,
    lease_from,
    run_row,
    write_args,
    write_id,
)
from agentflow.checkpoint.rows import summary_of
from agentflow.checkpoint.runs import RunsBase
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    CheckpointNotFound,
    DurableConflict,
    DurableCorrupted,
)
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.validators import validate_checkpoint_key

__all__ = ["RedisRuns"]

T = TypeVar("T")
#: Runs whose heads one listing script reads at most (Lua's unpack limit).
_HEADS_READ = 1_000
_APPLIED, _REFUSED, _MISSING, _DAMAGED = 1, 0, -1, 2


def _hash(reply: list[Any]) -> dict[bytes, bytes]:
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _key_of(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise DurableCorrupted(
            "checkpoint_row_invalid", "a run index holds a key that is not UTF-8"
        ) from exc


class RedisRuns(RunsBase, abc.ABC):
    """The record part of :class:`~agentflow.checkpoint.redis.RedisCheckpointer`."""

    _client: aioredis.Redis
    _keys: Keys
    _lua: dict[str, AsyncScript]

    @abc.abstractmethod
    async def _redis(self, operation: str, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` once the store is set up, with redis-py's errors as ours."""

    def _run_keys(self, key: str) -> list[bytes]:
        """What a record script takes: the record, the record status index, the
        summaries, status index and imposed statuses of the threads, and the
        holder index."""
        threads = self._keys.threads
        run, holders = self._keys.run(key), self._keys.holders
        return [run, self._keys.runs[1], threads[2], threads[3], threads[5], holders]

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        self._check_open()
        row = self._parts.encode_row(checkpoint)
        keys = self._run_keys(row.key)
        keys.insert(1, self._keys.runs[0])
        args = create_args(row, write_id(), row.key.encode(), checkpoint.run_definition_digest)
        created = await self._redis("create", lambda: self._lua["create"](keys=keys, args=args))
        if not created:
            raise CheckpointAlreadyExists(f"a record exists under {row.key!r}")

    async def load(self, key: str) -> DurableCheckpoint | None:
        run = self._keys.run(validate_checkpoint_key(key))
        found = await self._redis("load", lambda: self._client.hgetall(run))
        stored = cast(dict[bytes, bytes], found)
        return self._parts.decode_row(run_row(key, stored)) if stored else None

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        check_claim_request(cycle_index, claim_token, lease_ms)
        token = encode_text(claim_token, "checkpoint_claim_invalid", "claim token")
        keys = self._run_keys(validate_checkpoint_key(key))
        recovery = b"1" if mode is ClaimMode.RECOVERY else b"0"
        args = [b"%d" % cycle_index, token, b"%d" % lease_ms, recovery, write_id(), key.encode()]
        reply = await self._redis("claim", lambda: self._lua["claim"](keys=keys, args=args))
        if reply[0] == _APPLIED:
            return self._parts.decode_row(run_row(key, _hash(reply[1])))
        self._check_found(key, reply)
        now, head = int(reply[1]), head_from(key, reply[2])
        error = claim_refusal(head, cycle_index, now, mode)
        if error is None:  # only an overflow is left: raise it
            claimed_head(head, cycle_index, claim_token, now_ms=now, lease_ms=lease_ms, mode=mode)
        raise error or DurableConflict("the claim matched nothing")

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        check_claim_request(1, claim_token, lease_ms)
        token = encode_text(claim_token, "checkpoint_claim_invalid", "claim token")
        run = self._keys.run(validate_checkpoint_key(key))
        args = [token, b"%d" % lease_ms]
        reply = await self._redis("renew_claim", lambda: self._lua["renew"](keys=[run], args=args))
        if reply[0] == _APPLIED:
            return int(reply[1])
        self._check_found(key, reply)
        now, head = int(reply[1]), head_from(key, reply[2])
        error = renew_refusal(head, claim_token, now)
        raise error or DurableConflict("lease expiry is outside the JSON-safe range")

    def _check_found(self, key: str, reply: list[Any]) -> None:
        """Raise for a script's answer that names no head: no run, or a damaged one."""
        if reply[0] == _MISSING:
            raise CheckpointNotFound("no record under this key")
        if reply[0] == _DAMAGED:
            raise DurableCorrupted(
                "checkpoint_row_invalid",
                f"stored record {key!r} is damaged: its counts, status or fields",
            )

    def _applied(self, write: Write, reply: list[Any]) -> DurableCheckpoint:
        """The record a write script left (its reply), or the error that refused it."""
        if reply[0] == _APPLIED:
            return replace(write.record, lease_expires_at_ms=lease_from(write.key, reply[1]))
        if reply[0] == _REFUSED:
            raise refusal(head_from(write.key, reply[2]), write.guard)
        self._check_found(write.key, reply)
        raise DurableConflict("the stored journal is shorter than the snapshot's")

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        keys, args = self._run_keys(write.key), write_args(write, write_id(), write.key.encode())
        reply = await self._redis(operation, lambda: self._lua["write"](keys=keys, args=args))
        return self._applied(write, reply)

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        index = self._keys.runs[0 if status is None else 1]
        start, stop, skip = run_range(status, after)

        async def read() -> tuple[list[bytes], list[Any]]:
            found = await self._client.zrange(
                index, start, stop, bylex=True, offset=0, num=limit + 1
            )
            members = cast(list[bytes], found)
            heads: list[Any] = []
            for first in range(0, min(len(members), limit), _HEADS_READ):
                chunk = members[first : min(first + _HEADS_READ, limit)]
                runs = [self._keys.run(_key_of(member[skip:])) for member in chunk]
                heads += await self._lua["heads"](keys=[index, *runs], args=chunk)
            return members, heads

        members, heads = await self._redis("list_runs", read)
        keys = [_key_of(member[skip:]) for member in members]
        runs = [
            summary_of(key, head_from(key, values))
            for key, values in zip(keys, heads, strict=False)
            if values != 0  # left the index between the two reads
        ]
        return runs, keys[limit - 1] if len(keys) > limit else None
