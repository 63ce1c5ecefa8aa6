"""Reading delta chains back whole, over a store's reads.

A chained delta (:mod:`agentflow.checkpoint.deltas`) lists the steps its state
is replayed from, so one read of exactly those records (a store's multi-step
read) gives what it needs; every link is checked (each delta names its base
and its base's token) as the chain is replayed. The base of every agentflow
store reads through here (``get``, ``history``, ``prune``), so every backend
gives the same states and refuses the same damage.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

from agentflow.checkpoint.deltas import MAX_SPAN, ChainLink, ChainRecord, replayed
from agentflow.checkpoint.model import Checkpoint
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.checkpoint.validation import StepRange
from agentflow.errors import CheckpointCorrupted

__all__ = ["Decoded", "RangeRead", "Replaying", "StepsRead", "cut_off"]

#: A stored step as the base decoded it: a plain checkpoint, or a chained record.
Decoded = Checkpoint | ChainRecord
#: A store's range read, decoded: the steps of one thread that a range holds.
RangeRead = Callable[[StepRange], AsyncGenerator[Decoded, None]]
#: A store's read of some steps of one thread, decoded, by step (a missing one absent).
StepsRead = Callable[[Sequence[int]], Awaitable[dict[int, Decoded]]]

_State = dict[str, Any]


class Replaying:
    """The states of the chained records one read yields, from as few records as it can.

    Each state is replayed from the deepest record of its chain whose state is
    already known (kept from the record before, which a history's next record
    usually builds on), reading the rest of its chain in one read. So a history
    reads each stored record about once, and holds at most one chain's states.
    With ``in_place`` (a ``get``: only the last state is handed out) the states
    are built in one mapping; otherwise each is a new one, and the states of one
    read share the values a step did not change: copy one before changing it
    in place.
    """

    def __init__(self, read: StepsRead, *, in_place: bool = False) -> None:
        self._read = read
        self._in_place = in_place
        #: The states known of the last record's chain, and their links.
        self._known: dict[int, tuple[ChainRecord, _State, ChainLink]] = {}

    async def whole(self, record: ChainRecord) -> Checkpoint:
        """The checkpoint ``record`` stores, its state replayed."""
        return record.whole(await self.state(record))

    def link(self, step: int) -> ChainLink | None:
        """The link of a record whose state the last read replayed."""
        known = self._known.get(step)
        return None if known is None else known[2]

    async def state(self, record: ChainRecord) -> _State:
        if not record.chain:
            return self._start(record)
        known, chain = self._known, record.chain
        hit = known.get(record.step)
        if hit is not None and hit[0].token == record.token and hit[0].chain == chain:
            self._known = {step: known[step] for step in (*chain, record.step) if step in known}
            return hit[1]
        base = known.get(chain[-1])
        if base is None or base[0].token != record.base_token:
            rows = await self._read([step for step in chain if step not in known])
        else:
            rows = {}
        # Back from the base to the first record whose state is known or whole,
        # each the one its successor was stored on (its token says so).
        start, expected = len(chain) - 1, record.base_token
        members: list[ChainRecord] = []
        while True:
            if start < 0:
                raise _corrupted(record, "its chain holds no full state")
            step = chain[start]
            held = known.get(step)
            if held is not None and held[0].token == expected:
                first, state, link = held
                in_place = False
                break
            row = rows.get(step)
            if not isinstance(row, ChainRecord) or row.token != expected:
                raise _corrupted(
                    record,
                    f"step {step}, which it is stored on as a change, is gone or was rewritten",
                )
            if not row.chain:
                first, state = row, _full(row)
                link = row.link(state, None)
                in_place = self._in_place
                break
            members.append(row)
            start, expected = start - 1, row.base_token
        kept = {step: known[step] for step in chain[:start] if step in known}
        kept[first.step] = (first, state, link)
        base_record = first
        for member in (*reversed(members), record):
            state = replayed(state, member, base_record, in_place=in_place)
            link = member.link(state, link)
            kept[member.step] = (member, state, link)
            base_record, in_place = member, in_place or self._in_place
        self._known = kept
        return state

    def _start(self, record: ChainRecord) -> _State:
        """The state of a full record, kept as the start of what follows it."""
        state = _full(record)
        self._known = {record.step: (record, state, record.link(state, None))}
        return state


def _corrupted(record: ChainRecord, what: str) -> CheckpointCorrupted:
    stored = record.stored
    return CheckpointCorrupted(f"thread {stored.thread!r} step {stored.step}: {what}")


def _full(record: ChainRecord) -> _State:
    """The state a full chained record holds (read_chained checked its shape)."""
    state: _State = record.stored.state["full"]
    return state


async def cut_off(
    read: RangeRead, before_step: int | None, cutoff_us: int | None
) -> list[ChainRecord]:
    """The steps a prune keeps that are stored as a change of a step it deletes,
    oldest first: each must be stored as its full state first.

    A kept step stored on a kept step needs nothing (once the steps below it do
    not). ``prune(before_step=)`` alone keeps every step from ``before_step``
    on, and no delta lies more than :data:`~agentflow.checkpoint.deltas.MAX_SPAN`
    steps above its full state, so the steps up to that far above the bound are
    all it reads. With ``older_than`` a kept step may be anywhere: it reads the
    thread up to that far above ``before_step`` (the whole thread without it).
    """
    if cutoff_us is None:
        assert before_step is not None
        span = StepRange(before_step - 1, before_step + MAX_SPAN + 1)
    else:
        span = StepRange(-1, None if before_step is None else before_step + MAX_SPAN + 1)

    def deleted(step: int, ts: str) -> bool:
        return (before_step is None or step < before_step) and (
            cutoff_us is None or parse_instant(ts) < cutoff_us
        )

    gone: set[int] = set()
    cut: list[ChainRecord] = []
    rows = read(span)
    try:
        async for row in rows:
            if deleted(row.step, row.ts):
                gone.add(row.step)
            elif isinstance(row, ChainRecord) and row.chain:
                base = row.chain[-1]
                if base in gone or (cutoff_us is None and base < span.after + 1):
                    cut.append(row)
    finally:
        await rows.aclose()
    return cut
