"""Version 2 to 3: the durable store's collections of version 2 moved into the one store.

Version 2's durable store kept a run per document of ``<collection>_durable_runs``
(``_id: {n, k}``, with a layout document ``{m: "durable"}`` of version 1) and
numbered events per run in ``<collection>_durable_events`` (``rs``, its place in
its run; ``rc``, how many children of its run were stored before it; ``ps``,
``po``, the same for its parent). Version 3 keeps a record in its thread's
document and numbers events in one sequence per namespace (``q``, with the
links ``rp``/``pp``). Each step can be run again from the start, so a migrator
that dies is taken over (its lease lapses) and the next one finishes:

1. every run's fields are ``$set`` on its thread document (and ``rs``, the
   thread status its status imposes);
2. every namespace's events are numbered in an order that keeps each run's
   order, each parent's children's order, and each recorded "stored before"
   between the two (a topological order; ties by run and place, so any
   migrator computes the same numbers while the old fields are there);
3. the old event fields and indexes go, then the runs collection.

Nothing else may write the old collections meanwhile: stop the processes of
the older release first (docs/mongodb.md).
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Awaitable, Callable
from typing import Any, Final

from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import OperationFailure

from agentflow.checkpoint.mongodb.documents import Document, plain
from agentflow.checkpoint.store_base import RUN_STATUSES
from agentflow.errors import CheckpointCorrupted, IncompatibleSchema

__all__ = ["absorb_durable", "check_durable_layout"]

#: Documents one round trip writes.
_BATCH: Final = 500
_LAYOUT_ID: Final = {"m": "durable"}
#: The durable layout version 2 wrote, the only one this migration reads.
_DURABLE_LAYOUT: Final = 1
#: Indexes of version 2 that version 3 replaces.
_OLD_THREAD_INDEXES: Final = ("agentflow_thread_status",)
_OLD_EVENT_INDEXES: Final = ("agentflow_durable_run_events", "agentflow_durable_child_events")
_OLD_EVENT_FIELDS: Final = ("rs", "rc", "ps", "po")
_IMPOSED: Final = {status.value: imposed for status, imposed in RUN_STATUSES.items()}
Renew = Callable[[], Awaitable[None]]


def _runs(coll: AsyncCollection[Document]) -> AsyncCollection[Document]:
    return coll.database.get_collection(f"{coll.name}_durable_runs")


async def check_durable_layout(coll: AsyncCollection[Document]) -> None:
    """Refuse, before anything is written, a durable layout this migration cannot read."""
    runs = _runs(coll)
    layout = await runs.find_one({"_id": _LAYOUT_ID})
    version = plain(layout.get("v")) if layout else _DURABLE_LAYOUT
    if type(version) is not int:
        raise CheckpointCorrupted(f"{runs.full_name!r} holds an invalid durable layout version")
    if version > _DURABLE_LAYOUT:
        raise IncompatibleSchema(
            f"{runs.full_name!r} has durable layout version {version}, newer than this "
            f"agentflow migrates ({_DURABLE_LAYOUT}); upgrade agentflow"
        )


async def absorb_durable(
    coll: AsyncCollection[Document], events: AsyncCollection[Document], renew: Renew
) -> None:
    """Bring a version-2 database to version 3 (a fresh one passes through at no cost)."""
    await check_durable_layout(coll)
    for name in _OLD_THREAD_INDEXES:
        await _drop_index(coll, name)
    runs = _runs(coll)
    await _move_runs(coll, runs, renew)
    await _number_events(events, renew)
    await runs.drop()


async def _drop_index(coll: AsyncCollection[Document], name: str) -> None:
    with contextlib.suppress(OperationFailure):  # already gone: IndexNotFound
        await coll.drop_index(name)


async def _move_runs(
    coll: AsyncCollection[Document], runs: AsyncCollection[Document], renew: Renew
) -> None:
    writes: list[UpdateOne] = []
    async for doc in runs.find({"_id.k": {"$type": "string"}}):
        ident = doc.pop("_id")
        imposed = _IMPOSED.get(str(doc.get("status")))
        fields = doc if imposed is None else doc | {"rs": imposed}
        thread = {"_id": {"n": ident["n"], "t": ident["k"]}}
        writes.append(UpdateOne(thread, {"$set": fields}, upsert=True))
        if len(writes) == _BATCH:
            await coll.bulk_write(writes, ordered=False)
            await renew()
            writes = []
    if writes:
        await coll.bulk_write(writes, ordered=False)


def _place(doc: Document, name: str, low: int) -> int:
    value = plain(doc.get(name))
    if type(value) is not int or value < low:
        raise CheckpointCorrupted(f"the event {doc.get('_id')!r} of version 2 is damaged")
    return value


def _numbered(found: list[Document], namespace: str) -> dict[str, tuple[int, int, int]]:
    """Each event id's (q, rp, pp): a topological order of version 2's constraints
    (Kahn's, the ready events taken in (run, place, id) order)."""
    own = {(doc.get("r"), _place(doc, "rs", 1)): doc["_id"]["e"] for doc in found}
    kids = {(doc["p"], _place(doc, "ps", 1)): doc["_id"]["e"] for doc in found if "p" in doc}

    def at(index: dict[tuple[Any, int], str], run: Any, place: int, event: str) -> str | None:
        if place == 0:
            return None
        if (run, place) not in index:
            raise CheckpointCorrupted(
                f"the events of namespace {namespace!r} are damaged: run {run!r} has no "
                f"event {place} before {event!r}"
            )
        return index[run, place]

    links: dict[str, tuple[str | None, str | None]] = {}
    preds: dict[str, set[str]] = {}
    rank: dict[str, tuple[bool, str, int, str]] = {}
    for doc in found:
        event, run, place = doc["_id"]["e"], doc.get("r"), _place(doc, "rs", 1)
        if not isinstance(event, str):
            raise CheckpointCorrupted(f"the event {doc['_id']!r} of version 2 is damaged")
        links[event] = (at(own, run, place - 1, event), None)
        seen = {links[event][0], at(kids, run, _place(doc, "rc", 0), event)}
        if "p" in doc:
            parent = doc["p"]
            links[event] = (links[event][0], at(kids, parent, _place(doc, "ps", 1) - 1, event))
            seen |= {links[event][1], at(own, parent, _place(doc, "po", 0), event)}
        preds[event] = {pred for pred in seen if pred is not None}
        rank[event] = (run is None, run or "", place, event)
    successors: dict[str, list[str]] = {}
    waiting = {event: len(before) for event, before in preds.items()}
    for event, before in preds.items():
        for pred in before:
            successors.setdefault(pred, []).append(event)
    ready = [rank[event] for event, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    numbers: dict[str, int] = {}
    while ready:
        event = heapq.heappop(ready)[-1]
        numbers[event] = len(numbers) + 1
        for successor in successors.get(event, ()):
            waiting[successor] -= 1
            if waiting[successor] == 0:
                heapq.heappush(ready, rank[successor])
    if len(numbers) != len(found):
        raise CheckpointCorrupted(f"the events of namespace {namespace!r} order in a cycle")
    return {
        event: (q, numbers.get(run_before or "", 0), numbers.get(parent_before or "", 0))
        for event, q in numbers.items()
        for run_before, parent_before in [links[event]]
    }


async def _number_events(events: AsyncCollection[Document], renew: Renew) -> None:
    if await events.find_one({"q": {"$exists": False}}) is not None:
        fields = {"_id": 1, "r": 1, "p": 1, **dict.fromkeys(_OLD_EVENT_FIELDS, 1)}
        for namespace in await events.distinct("_id.n"):
            found = await events.find({"_id.n": namespace}, fields).to_list()
            numbered = _numbered(found, namespace)
            writes = []
            for doc in found:
                q, rp, pp = numbered[doc["_id"]["e"]]
                links = {"q": q, "rp": rp} | ({"pp": pp} if "p" in doc else {})
                writes.append(UpdateOne({"_id": doc["_id"]}, {"$set": links}))
            for start in range(0, len(writes), _BATCH):
                await events.bulk_write(writes[start : start + _BATCH], ordered=False)
                await renew()
    for name in _OLD_EVENT_INDEXES:  # unique on fields about to go
        await _drop_index(events, name)
    await events.update_many(
        {"rs": {"$exists": True}}, {"$unset": dict.fromkeys(_OLD_EVENT_FIELDS, "")}
    )
