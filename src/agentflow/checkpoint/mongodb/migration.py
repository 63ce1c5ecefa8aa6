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
import graphlib
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
    """Each event id's (q, rp, pp): a topological order of version 2's constraints,
    the events taken in (run, place) order, so every migrator computes the same."""
    found = sorted(
        found, key=lambda doc: (doc.get("r") is None, doc.get("r") or "", _place(doc, "rs", 1))
    )
    own = {(doc.get("r"), _place(doc, "rs", 1)): doc["_id"]["e"] for doc in found}
    kids = {(doc["p"], _place(doc, "ps", 1)): doc["_id"]["e"] for doc in found if "p" in doc}

    def at(index: dict[tuple[Any, int], str], run: Any, place: int) -> str | None:
        if place == 0:
            return None
        if (run, place) not in index:
            raise CheckpointCorrupted(
                f"the events of namespace {namespace!r} are damaged: run {run!r} has no "
                f"event number {place}"
            )
        return index[run, place]

    links: dict[str, tuple[str | None, str | None]] = {}
    before: dict[str, set[str | None]] = {}
    for doc in found:
        event, run, parent = doc["_id"]["e"], doc.get("r"), doc.get("p")
        links[event] = (at(own, run, _place(doc, "rs", 1) - 1), None)
        before[event] = {links[event][0], at(kids, run, _place(doc, "rc", 0))}
        if parent is not None:
            links[event] = (links[event][0], at(kids, parent, _place(doc, "ps", 1) - 1))
            before[event] |= {links[event][1], at(own, parent, _place(doc, "po", 0))}
        before[event].discard(None)
    try:
        order = list(graphlib.TopologicalSorter(before).static_order())
    except graphlib.CycleError as exc:
        raise CheckpointCorrupted(
            f"the events of namespace {namespace!r} order in a cycle"
        ) from exc
    numbers = {event: q for q, event in enumerate(order, 1)}
    return {
        event: (numbers[event], numbers.get(run_before or "", 0), numbers.get(kid_before or "", 0))
        for event, (run_before, kid_before) in links.items()
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
