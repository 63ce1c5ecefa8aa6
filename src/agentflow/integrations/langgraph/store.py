"""Reads and writes of LangGraph records through the public Checkpointer protocol.

Costs, in protocol calls (each one round trip):

- ``put``: one conditional ``put`` (``if_revision=0``); a second id on the same
  step, or a re-put of the same id, adds a ``get`` and a ``put``.
- ``put_writes``: one conditional ``put`` of the step's writes record, merged
  in memory with what this process last wrote there; a race with another
  writer costs a ``get`` and a retry. Calls for one checkpoint are serialized
  in the process, so parallel branches never lose a write. Writes that arrive
  while their thread's checkpoint put is in flight wait for the next
  checkpoint put of that thread (LangGraph chains them, so one follows at
  once) and are sent in the same loop turn, so a group-committing backend
  (SQLite) commits them with it; if none comes within a few loop turns after
  the chain goes idle, they are written alone.
- ``get_tuple`` by id: two ``get`` calls at once (checkpoint, writes).
- ``get_tuple`` latest: one ``get``, two when the latest record is writes.
- ``list``: a newest-first ``history`` of the (thread, namespace) below
  ``before``, in pages sized by what ``limit`` leaves to find (a checkpoint and
  its writes record each), so ``list(limit=1)`` reads one page of a few
  records whatever the length of the thread; several namespaces are merged by
  id as their pages come.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter, OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.errors import CheckpointConflict, CheckpointCorrupted
from agentflow.integrations.langgraph.records import (
    KEY,
    Record,
    checkpoint_key,
    parse_thread,
    record,
    registry_thread,
    stored_record,
)
from agentflow.integrations.langgraph.tuples import TupleCodec, merge_writes

__all__ = ["Pair", "RecordStore"]

#: A live checkpoint and its writes record (None when it has none).
Pair = tuple[Record, Record | None]

#: Writes records this process remembers (revision and entries), per store.
_CACHED_WRITES: Final = 4096
_LOCK_STRIPES: Final = 64
#: Loop turns parked writes wait, once their thread's chain went idle, for the next
#: checkpoint put (LangGraph starts it two turns after the previous one returns).
_IDLE_TURNS: Final = 4
#: Records per newest-first page when a listing's limit leaves many to find.
_PAGE: Final = 256


@dataclass(slots=True)
class _Parked:
    """One ``put_writes`` call waiting to be sent with its thread's next checkpoint."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    entries: list[Any]
    done: asyncio.Future[None]


class _LoopState:
    """What the writers on one event loop share."""

    __slots__ = ("committing", "locks", "parked", "tasks")

    def __init__(self) -> None:
        self.locks = [asyncio.Lock() for _ in range(_LOCK_STRIPES)]
        #: Checkpoint puts in flight, per agentflow thread.
        self.committing: Counter[str] = Counter()
        #: Writes that arrived meanwhile, per agentflow thread, in arrival order.
        self.parked: dict[str, list[_Parked]] = {}
        #: Writing tasks started here, kept alive until they finish.
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class RecordStore:
    """LangGraph's records in one agentflow checkpointer (and so one namespace)."""

    def __init__(self, checkpointer: Checkpointer, codec: TupleCodec) -> None:
        self.checkpointer = checkpointer
        self.codec = codec
        self._namespaces: set[tuple[str, str]] = set()
        self._writes: OrderedDict[tuple[str, int], tuple[int, list[Any]]] = OrderedDict()
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState]
        self._loops = weakref.WeakKeyDictionary()

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _LoopState()
        return state

    async def read(self, thread: str, step: int | None) -> Record | None:
        cp = await self.checkpointer.get(thread, step)
        if cp is None:
            return None
        rec = stored_record(cp)
        if rec is None:
            raise CheckpointCorrupted(f"thread {thread!r} step {cp.step} is not a LangGraph record")
        return rec

    # -- namespaces ------------------------------------------------------------

    async def namespaces(self, thread_id: str) -> list[str]:
        """Every namespace of ``thread_id`` that may hold checkpoints, root first."""
        rec = await self.read(registry_thread(thread_id), 0)
        if rec is None:
            return [""]
        if rec.kind != "namespaces" or not all(type(n) is str for n in rec.fields["namespaces"]):
            raise CheckpointCorrupted(f"the namespace list of thread {thread_id!r} is damaged")
        return ["", *rec.fields["namespaces"]]

    async def register(self, thread_id: str, checkpoint_ns: str) -> None:
        """Add a child namespace to its thread's list (once per process)."""
        if not checkpoint_ns or (thread_id, checkpoint_ns) in self._namespaces:
            return
        thread = registry_thread(thread_id)
        while True:
            rec = await self.read(thread, 0)
            known = [] if rec is None else rec.fields["namespaces"]
            if checkpoint_ns in known:
                break
            fields = {"id": None, "thread_id": thread_id, "namespaces": [*known, checkpoint_ns]}
            try:
                await self.checkpointer.put(
                    record(thread, 0, "namespaces", fields),
                    if_revision=0 if rec is None else rec.revision,
                )
                break
            except CheckpointConflict:
                continue
        self._namespaces.add((thread_id, checkpoint_ns))

    async def forget(self, thread_id: str, threads: list[str]) -> None:
        """Delete every namespace thread of ``thread_id`` and its list."""
        for thread in threads:
            await self.checkpointer.delete_thread(thread)
        await self.checkpointer.delete_thread(registry_thread(thread_id))
        self._namespaces = {key for key in self._namespaces if key[0] != thread_id}
        for key in [key for key in self._writes if key[0] in threads]:
            del self._writes[key]

    # -- writing -------------------------------------------------------------

    async def put_checkpoint(self, cp: Checkpoint, checkpoint_id: str) -> None:
        """Store a checkpoint record; a re-put of its id replaces it, another id is refused.

        Writes of the thread parked while its previous checkpoint was in flight
        are sent first, in the same loop turn.
        """
        state = self._state()
        thread = cp.thread
        parked = state.parked.pop(thread, None)
        state.committing[thread] += 1
        try:
            if parked is not None:
                self._send(state, thread, parked)
                await asyncio.sleep(0)  # the writes' tasks reach the backend first
            await self._put_checkpoint(cp, checkpoint_id)
        finally:
            state.committing[thread] -= 1
            if not state.committing[thread]:
                del state.committing[thread]
                if thread in state.parked:
                    state.start(self._send_when_idle(state, thread))

    async def _put_checkpoint(self, cp: Checkpoint, checkpoint_id: str) -> None:
        expected = 0
        while True:
            try:
                await self.checkpointer.put(cp, if_revision=expected)
                return
            except CheckpointConflict as conflict:
                stored = await self.read(cp.thread, cp.step)
                if stored is None:
                    expected = 0
                elif stored.kind == "deleted" or stored.checkpoint_id == checkpoint_id:
                    expected = stored.revision
                else:
                    raise CheckpointConflict(cp.thread, cp.step, 0, stored.revision) from conflict

    async def put_writes(
        self, thread: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str, new: list[Any]
    ) -> None:
        """Store pending writes; returns once they are stored (see the module's costs)."""
        state = self._state()
        if not state.committing[thread]:
            await self._put_writes(thread, thread_id, checkpoint_ns, checkpoint_id, new)
            return
        done = asyncio.get_running_loop().create_future()
        parked = _Parked(thread_id, checkpoint_ns, checkpoint_id, new, done)
        state.parked.setdefault(thread, []).append(parked)
        await done

    def _send(self, state: _LoopState, thread: str, parked: list[_Parked]) -> None:
        """Start writing parked calls: one task per checkpoint, its calls merged in order."""
        by_checkpoint: dict[str, list[_Parked]] = {}
        for call in parked:
            if not call.done.cancelled():
                by_checkpoint.setdefault(call.checkpoint_id, []).append(call)
        for calls in by_checkpoint.values():
            state.start(self._put_parked(thread, calls))

    async def _send_when_idle(self, state: _LoopState, thread: str) -> None:
        for _ in range(_IDLE_TURNS):
            await asyncio.sleep(0)
            if state.committing[thread] or thread not in state.parked:
                return  # a checkpoint put took them, or will
        self._send(state, thread, state.parked.pop(thread))

    async def _put_parked(self, thread: str, calls: list[_Parked]) -> None:
        first = calls[0]
        entries = [entry for call in calls for entry in call.entries]
        try:
            await self._put_writes(
                thread, first.thread_id, first.checkpoint_ns, first.checkpoint_id, entries
            )
        except asyncio.CancelledError:
            for call in calls:
                call.done.cancel()
            raise
        except Exception as exc:
            for call in calls:
                if not call.done.done():
                    call.done.set_exception(exc)
        else:
            for call in calls:
                if not call.done.done():
                    call.done.set_result(None)

    async def _put_writes(
        self, thread: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str, new: list[Any]
    ) -> None:
        step = 2 * (checkpoint_key(checkpoint_id) or 0) + 1
        key = (thread, step)
        async with self._state().locks[hash(key) % _LOCK_STRIPES]:
            revision, entries = self._writes.get(key, (0, []))
            while True:
                merged = merge_writes(entries, new)
                if merged is None and revision:
                    return
                merged = merged if merged is not None else entries
                cp = self.codec.writes_record(
                    thread, thread_id, checkpoint_ns, checkpoint_id, merged
                )
                try:
                    await self.checkpointer.put(cp, if_revision=revision)
                except CheckpointConflict:
                    stored = await self.read(thread, step)
                    revision = 0 if stored is None else stored.revision
                    live = stored is not None and stored.kind == "writes"
                    entries = stored.fields["writes"] if live and stored else []
                    continue
                self._writes[key] = (revision + 1, merged)
                self._writes.move_to_end(key)
                if len(self._writes) > _CACHED_WRITES:
                    self._writes.popitem(last=False)
                return

    def forget_writes(self, thread: str) -> None:
        for key in [key for key in self._writes if key[0] == thread]:
            del self._writes[key]

    # -- reading -------------------------------------------------------------

    async def by_id(self, thread: str, checkpoint_id: str) -> Pair | None:
        key = checkpoint_key(checkpoint_id)
        if key is None:
            return None
        cp, writes = await asyncio.gather(
            self.read(thread, 2 * key), self.read(thread, 2 * key + 1)
        )
        if cp is None or cp.kind != "checkpoint" or cp.checkpoint_id != checkpoint_id:
            return None
        if writes is not None and (
            writes.kind != "writes" or writes.checkpoint_id != checkpoint_id
        ):
            writes = None
        return cp, writes

    async def latest(self, thread: str) -> Pair | None:
        top = await self.read(thread, None)
        if top is None:
            return None
        if top.kind == "checkpoint":
            return top, None
        if top.kind == "writes":
            below = await self.read(thread, top.step - 1)
            if below is not None and below.kind == "checkpoint":
                return below, top
        elif top.kind == "deleted" and top.fields["live"] is not None:
            live = await self.read(thread, top.fields["live"])
            if live is not None and live.kind == "checkpoint":
                return await self.by_id(thread, live.checkpoint_id)
        # A write that landed before its checkpoint, or a stale pointer: the newest
        # live checkpoint below, read newest first.
        newest = self.newest_pairs(thread, wanted=1)
        try:
            return await anext(newest, None)
        finally:
            await newest.aclose()

    async def threads(self) -> AsyncIterator[str]:
        """Every agentflow thread of the namespace that holds LangGraph checkpoints
        (a page of 500 at a time, plus one ``get`` each to tell them from others)."""
        cursor: str | None = None
        while True:
            page = await self.checkpointer.list_threads_page(limit=500, cursor=cursor)
            for info in page.threads:
                if parse_thread(info.thread) is None:
                    continue
                top = await self.checkpointer.get(info.thread)
                if top is not None and KEY in top.extra:
                    yield info.thread
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def records(self, thread: str) -> AsyncIterator[Record]:
        async for cp in self.checkpointer.history(thread):
            rec = stored_record(cp)
            if rec is None:
                raise CheckpointCorrupted(
                    f"thread {thread!r} step {cp.step} is not a LangGraph record"
                )
            yield rec

    async def newest_pairs(
        self, thread: str, *, before: int | None = None, wanted: int | None = None
    ) -> AsyncGenerator[Pair, None]:
        """The live checkpoints of ``thread`` below step ``before`` with their writes,
        newest first: bounded history reads, each page sized for the ``wanted``
        checkpoints not found yet (a checkpoint and its writes record each)."""
        left = wanted
        writes: Record | None = None
        while True:
            page = None if left is None else min(_PAGE, 2 * left + 1)
            read = 0
            rows = self.checkpointer.history(thread, before=before, limit=page, newest_first=True)
            try:
                async for cp in rows:
                    read += 1
                    before = cp.step
                    rec = stored_record(cp)
                    if rec is None:
                        raise CheckpointCorrupted(
                            f"thread {thread!r} step {cp.step} is not a LangGraph record"
                        )
                    if rec.kind == "writes":
                        writes = rec
                        continue
                    if rec.kind == "checkpoint":
                        held = writes if _writes_of(writes, rec) else None
                        yield rec, held
                        if left is not None:
                            left -= 1
                    writes = None
            finally:
                await _closed(rows)
            if page is None or read < page or left == 0:
                return

    async def pairs(self, thread: str) -> list[Pair]:
        """Every live checkpoint of ``thread`` with its writes, in id order."""
        pairs: list[Pair] = []
        async for rec in self.records(thread):
            if rec.kind == "checkpoint":
                pairs.append((rec, None))
            elif (
                rec.kind == "writes"
                and pairs
                and pairs[-1][1] is None
                and pairs[-1][0].checkpoint_id == rec.checkpoint_id
            ):
                pairs[-1] = (pairs[-1][0], rec)
        return pairs


def _writes_of(writes: Record | None, cp: Record) -> bool:
    """Whether ``writes`` is the writes record of the checkpoint ``cp``."""
    return (
        writes is not None
        and writes.step == cp.step + 1
        and writes.checkpoint_id == cp.checkpoint_id
    )


async def _closed(rows: AsyncIterator[Any]) -> None:
    """Close a history read left before its end (an async generator is not closed
    by the loop that left it)."""
    close = getattr(rows, "aclose", None)
    if close is not None:
        await close()
