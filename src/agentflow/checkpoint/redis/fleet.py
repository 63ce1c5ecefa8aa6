"""A Redis store's batch claims of due runs, and its runs listed by holder.

A batch reads a page of the due index (wake order), then claims in one script
(:data:`~agentflow.checkpoint.redis.fleet_scripts.LUA_CLAIM_DUE`) every run
of the page the claim rules admit, each with its own token, until the tokens
run out: Redis runs one script at a time, so racing batches never claim one
run twice, and a run another batch took since the page was read is skipped.
A limit is counted in the same script, over the holder index (the claimed
runs, ``P:{d.N}:ct``), so it holds across any number of workers. Leases run
on the server's clock. Claims made before the holder index existed (layout 3
without it) are not listed by holder; they lapse as they always did.
"""

from __future__ import annotations

import abc
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Final, cast

from agentflow.checkpoint.fleet import DueClaim, DueRun, FleetBase, held_range, is_record_key
from agentflow.checkpoint.redis.rows import head_from, run_row, write_id
from agentflow.checkpoint.redis.runs import RedisRuns
from agentflow.checkpoint.rows import summary_of
from agentflow.durable.store import RunSummary

__all__ = ["RedisFleet"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: Due threads a batch reads at least per page (more for a large batch).
_PAGE: Final = 64


class RedisFleet(RedisRuns, FleetBase, abc.ABC):
    """The record part of :class:`~agentflow.checkpoint.redis.RedisCheckpointer`,
    with a fleet's batch claims and holder listing."""

    async def _claim_due(self, request: DueClaim) -> list[DueRun]:
        claimed: list[DueRun] = []
        now = _EPOCH + timedelta(microseconds=request.now_us)
        page = max(_PAGE, 4 * len(request.tokens))
        definitions = list(request.definitions or ())
        limit = b"" if request.max_concurrent is None else b"%d" % request.max_concurrent
        cursor: str | None = None
        while len(claimed) < len(request.tokens):
            due = await self.list_due(now, limit=page, cursor=cursor)
            found = [
                (info.thread, info.latest_step)
                for info in due.threads
                if info.thread not in request.exclude and is_record_key(info.thread)
            ]
            tokens = request.tokens[len(claimed) :]
            if found:
                keys = [self._keys.holders, *(self._keys.run(thread) for thread, _ in found)]
                args: list[Any] = [write_id(), b"%d" % request.lease_ms, request.scope, limit]
                args += [len(tokens), *tokens, len(definitions), *definitions]
                room, *reply = await self._redis("claim_due", partial(self._batch, keys, args))
                for place, recovery, fields in reply:
                    thread, step = found[place - 1]
                    stored = dict(zip(fields[::2], fields[1::2], strict=True))
                    record = self._parts.decode_row(run_row(thread, stored))
                    claimed.append(DueRun(thread, step, record, recovery == 1))
                if len(reply) >= room:
                    break  # the tokens or the limit ran out
            cursor = due.next_cursor
            if cursor is None:
                break
        return claimed

    async def _batch(self, keys: list[bytes], args: list[Any]) -> Any:
        return await self._lua["claim_due"](keys=keys, args=args)

    async def _held(
        self, holder: str, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        lo, hi = held_range(holder)
        index = self._keys.holders
        start = b"[" + lo.encode() if after is None else b"(" + after.encode()

        async def read() -> tuple[list[bytes], list[Any]]:
            found = await self._client.zrange(
                index, start, b"(" + hi.encode(), bylex=True, offset=0, num=limit + 1
            )
            members = cast(list[bytes], found)[:limit]
            runs = [member.rsplit(b"\0", 1)[1] for member in members]
            heads = await self._lua["heads"](keys=[index, *runs], args=members) if runs else []
            return cast(list[bytes], found), heads

        members, heads = await self._redis("list_held", read)
        runs = []
        for member, values in zip(members, heads, strict=False):
            if values != 0:  # it left the index between the two reads
                key = self._keys.key_of_run(member.rsplit(b"\0", 1)[1])
                runs.append(summary_of(key, head_from(key, values)))
        return runs, members[limit - 1].decode() if len(members) > limit else None
