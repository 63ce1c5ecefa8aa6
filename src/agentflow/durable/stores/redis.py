"""A :class:`~agentflow.durable.DurableStore` on plain Redis 7 or Valkey, one Lua script per write.

A run is one hash under its own hash tag (see
:mod:`~agentflow.durable.stores.redis_scripts` for the layout and the
scripts): every planned write is one script that compares the head fields,
then writes the head, the body and the journal entries the write names; a
claim or renewal reads the lease clock from the server (``TIME``) inside the
script, so workers with skewed clocks agree. The namespace keeps a run index
and a status index, written by the same scripts, so a listing page reads only
its own runs' heads.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    CheckpointNotFound,
    DurableConflict,
    DurableCorrupted,
)
from agentflow.durable.leases import check_claim_request, claim_refusal, claimed_head, renew_refusal
from agentflow.durable.paged import ListedRuns
from agentflow.durable.planned import PlannedWrites
from agentflow.durable.record import DurableCheckpoint
from agentflow.durable.rows import RunSummary
from agentflow.durable.stores.redis_client import RedisStoreBase
from agentflow.durable.stores.redis_rows import (
    create_args,
    encode_text,
    head_from,
    lease_from,
    run_row,
    write_args,
    write_id,
)
from agentflow.durable.stores.redis_scripts import (
    LUA_CLAIM,
    LUA_CREATE,
    LUA_DELETE,
    LUA_HEADS,
    LUA_RENEW,
    LUA_WRITE,
    STATUS_LETTERS,
    namespace_keys,
    run_key,
)
from agentflow.durable.transitions import (
    Write,
    refusal,
)
from agentflow.durable.validators import validate_checkpoint_key

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["RedisDurableStore", "from_url"]

#: Runs whose heads one listing script reads at most.
_HEADS_READ = 1_000
_APPLIED, _REFUSED, _MISSING, _DAMAGED = 1, 0, -1, 2


def _hash(reply: list[Any]) -> dict[bytes, bytes]:
    return dict(zip(reply[::2], reply[1::2], strict=True))


class RedisDurableStore(PlannedWrites, ListedRuns, RedisStoreBase):
    """Durable records of runs in Redis, beside the checkpointer's threads.

    Takes the connection arguments of
    :class:`~agentflow.checkpoint.redis.RedisCheckpointer` (``url`` or
    ``client``, ``prefix``) and a ``namespace``. Needs Redis 7.0+ or Valkey
    7.2+ and a single primary (the scripts use the run's hash tag and the
    namespace's, like the checkpointer's).
    """

    def _register(self) -> None:
        self._all, self._statuses, _ = namespace_keys(self._prefix, self._namespace)
        self._create = self._script(LUA_CREATE)
        self._claim = self._script(LUA_CLAIM)
        self._renew = self._script(LUA_RENEW)
        self._write = self._script(LUA_WRITE)
        self._delete = self._script(LUA_DELETE)
        self._heads = self._script(LUA_HEADS)

    def _keys(self, key: str) -> tuple[bytes, bytes]:
        """The run's hash and the member it has in the run index."""
        return run_key(self._prefix, self._namespace, key), key.encode()

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        row = self._parts.encode_row(checkpoint)
        run, member = self._keys(row.key)
        args = create_args(row, write_id(), member)
        created = await self._redis(
            "create", lambda: self._create(keys=[run, self._all, self._statuses], args=args)
        )
        if not created:
            raise CheckpointAlreadyExists(f"a record exists under {row.key!r}")

    async def load(self, key: str) -> DurableCheckpoint | None:
        run, _ = self._keys(validate_checkpoint_key(key))
        stored = cast(
            dict[bytes, bytes], await self._redis("load", lambda: self._client.hgetall(run))
        )
        return self._parts.decode_row(run_row(key, stored)) if stored else None

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        check_claim_request(cycle_index, claim_token, lease_ms)
        token = encode_text(claim_token, "checkpoint_claim_invalid", "claim token")
        run, member = self._keys(validate_checkpoint_key(key))
        recovery = b"1" if mode is ClaimMode.RECOVERY else b"0"
        args = [b"%d" % cycle_index, token, b"%d" % lease_ms, recovery, write_id(), member]
        reply = await self._redis(
            "claim", lambda: self._claim(keys=[run, self._statuses], args=args)
        )
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
        run, _ = self._keys(validate_checkpoint_key(key))
        args = [token, b"%d" % lease_ms]
        reply = await self._redis("renew_claim", lambda: self._renew(keys=[run], args=args))
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

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        """Apply a planned write as its one script; if it did not apply, say why."""
        run, member = self._keys(write.key)
        args = write_args(write, write_id(), member)
        reply = await self._redis(
            operation, lambda: self._write(keys=[run, self._statuses], args=args)
        )
        if reply[0] == _APPLIED:
            return replace(write.record, lease_expires_at_ms=lease_from(write.key, reply[1]))
        if reply[0] == _REFUSED:
            raise refusal(head_from(write.key, reply[2]), write.guard)
        self._check_found(write.key, reply)
        raise DurableConflict("the stored journal is shorter than the snapshot's")

    async def delete(self, key: str) -> bool:
        run, member = self._keys(validate_checkpoint_key(key))
        gone = run_key(self._prefix, self._namespace, key, b"gone")
        keys, args = [run, self._all, self._statuses, gone], [member, write_id()]
        removed = await self._redis("delete", lambda: self._delete(keys=keys, args=args))
        return bool(removed)

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        index, start, stop, skip = self._range(status, after)

        async def read() -> tuple[list[bytes], list[Any]]:
            members = cast(
                list[bytes],
                await self._client.zrange(index, start, stop, bylex=True, offset=0, num=limit + 1),
            )
            heads: list[Any] = []
            for first in range(0, min(len(members), limit), _HEADS_READ):
                chunk = members[first : min(first + _HEADS_READ, limit)]
                runs = [self._keys(_key_of(member[skip:]))[0] for member in chunk]
                heads += await self._heads(keys=[index, *runs], args=chunk)
            return members, heads

        members, heads = await self._redis("list_runs", read)
        keys = [_key_of(member[skip:]) for member in members]
        runs = [
            RunSummary.of(key, head_from(key, values))
            for key, values in zip(keys, heads, strict=False)
            if values != 0  # left the index between the two reads
        ]
        return runs, keys[limit - 1] if len(keys) > limit else None

    def _range(
        self, status: CheckpointStatus | None, after: str | None
    ) -> tuple[bytes, bytes, bytes, int]:
        """The index of a listing, its ``BYLEX`` bounds after ``after``, and the
        bytes each member has before the run key."""
        tail = b"" if after is None else after.encode()
        if status is None:
            return self._all, b"-" if after is None else b"(" + tail, b"+", 0
        letter = STATUS_LETTERS[status]
        start = b"[" + letter if after is None else b"(" + letter + tail
        return self._statuses, start, b"(" + bytes([letter[0] + 1]), 1


def _key_of(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise DurableCorrupted(
            "checkpoint_row_invalid", "a run index holds a key that is not UTF-8"
        ) from exc


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    create: bool = True,
    sealing: KeyRing | None = None,
) -> RedisDurableStore:
    """``redis://`` or ``rediss://`` URL (redis-py's query options apply), as the checkpointer's."""
    return RedisDurableStore(url, namespace=namespace, create=create, sealing=sealing)
