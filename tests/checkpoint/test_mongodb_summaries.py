"""The MongoDB thread summaries: what listings and list_due cost, how summaries stay
true under racing writers, and the upgrade from the layout that had none."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient, IndexModel

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.mongodb.documents import summary_of_stored
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.checkpoint.timestamps import parse_instant, utc_now_iso
from agentflow.errors import CheckpointConflict, IncompatibleSchema
from tests.backends.mongodb import Commands, MongoStore, mongo_store

Doc = dict[str, Any]
NOW = "2026-06-01T12:00:00+00:00"


@pytest.fixture
async def store() -> AsyncIterator[MongoStore]:
    async with mongo_store() as opened:
        yield opened


async def _fill(cp: MongoCheckpointer, checkpoints: list[Checkpoint], window: int = 64) -> None:
    for start in range(0, len(checkpoints), window):
        await asyncio.gather(*(cp.put(c) for c in checkpoints[start : start + window]))


def _timer(thread: str, wake_at: str, step: int = 0) -> Checkpoint:
    return make_checkpoint(thread, step, next=("n",), interrupted=True, wake_at=wake_at)


# -- what a page costs ---------------------------------------------------------


async def test_reads_and_listing_walk_indexes(store: MongoStore) -> None:
    """The profiler shows what the checkpointer's own queries did, not a replica of them."""
    async with store.open() as cp:
        await _fill(
            cp, [make_checkpoint(f"thread-{i:03d}", s) for s in range(5) for i in range(60)]
        )
        async with store.profiling() as ops:
            latest = await cp.get("thread-007")
            page = await cp.list_threads_page(limit=10)
            second = await cp.list_threads_page(limit=10, cursor=page.next_cursor)
    assert latest is not None and latest.step == 4
    assert [i.thread for i in second.threads] == [f"thread-{i:03d}" for i in range(10, 20)]
    assert all(i.latest_step == 4 for i in second.threads)
    queries = [op for op in ops if op["op"] == "query"]
    assert [op["planSummary"] for op in queries] == [
        "IXSCAN { _id: 1 }",
        *["IXSCAN { tn: 1, tt: 1 }"] * 2,
    ]
    for listing in queries[1:]:
        # A page and its peek: 11 summaries, each one key and one small document.
        assert listing["nreturned"] == 11, listing
        assert listing["keysExamined"] <= 12 and listing["docsExamined"] == 11, listing


async def _page_cost(store: MongoStore, steps: int) -> list[tuple[int, int]]:
    """``(keysExamined, docsExamined)`` of each listing query over 3 threads of
    ``steps`` checkpoints each, paged 2 at a time."""
    namespace = f"len-{steps}"
    async with store.open(namespace=namespace, journal=False) as cp:
        for thread in ("a", "b", "c"):
            await cp.put(make_checkpoint(thread, 0))
            await store.raw.insert_many(
                [
                    {"_id": {"n": namespace, "t": thread, "s": s}, "n": namespace, "t": thread}
                    | {"s": s, "rev": 1}
                    for s in range(1, steps - 1)
                ]
            )
            await cp.put(make_checkpoint(thread, steps - 1, interrupted=True, next=("n",)))
        async with store.profiling() as ops:
            page = await cp.list_threads_page(limit=2)
            rest = await cp.list_threads_page(limit=2, cursor=page.next_cursor)
    assert [(i.thread, i.latest_step, i.interrupted) for i in page.threads] == [
        ("a", steps - 1, True),
        ("b", steps - 1, True),
    ]
    assert [i.thread for i in rest.threads] == ["c"] and rest.next_cursor is None
    return [(op["keysExamined"], op["docsExamined"]) for op in ops if op["op"] == "query"]


async def test_a_listing_page_costs_the_same_whatever_the_threads_length(
    store: MongoStore,
) -> None:
    short, long = await _page_cost(store, 5), await _page_cost(store, 2_000)
    assert short == long, (short, long)
    assert [docs for _, docs in short] == [3, 1]


async def test_a_page_after_thousands_of_deletes_is_one_command_and_listing_never_writes(
    store: MongoStore,
) -> None:
    async with store.open(journal=False) as cp:
        await _fill(cp, [make_checkpoint(f"a-{i:04d}", 0) for i in range(2_000)])
        await _fill(cp, [make_checkpoint(f"b-{i:02d}", 0) for i in range(20)])
        for start in range(0, 2_000, 100):
            await asyncio.gather(
                *(cp.delete_thread(f"a-{i:04d}") for i in range(start, start + 100))
            )
    listener = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(store.uri, event_listeners=[listener])
    try:
        async with MongoCheckpointer(client=client, database=store.database) as cp:
            await cp.setup()
            await cp.list_threads_page(limit=1)  # reads the cursor secret once
            listener.sent.clear()
            page = await cp.list_threads_page(limit=10)
            assert listener.names() == ["find"]
            assert [i.thread for i in page.threads] == [f"b-{i:02d}" for i in range(10)]
            rest = await cp.list_threads_page(limit=10, cursor=page.next_cursor)
            assert len(rest.threads) == 10 and rest.next_cursor is None
            for status in ("running", "done"):
                await cp.list_threads_page(limit=5, status=status)
            await cp.list_due(NOW)
            await cp.list_threads(offset=5)
            assert set(listener.names()) == {"find"}, listener.names()
    finally:
        await client.close()


async def test_the_status_filter_reads_only_its_page(store: MongoStore) -> None:
    async with store.open(journal=False) as cp:
        threads = [make_checkpoint(f"t-{i:03d}", 0, next=("n",)) for i in range(300)]
        human = {f"t-{i:03d}" for i in range(7, 300, 50)}
        threads += [make_checkpoint(t, 1, next=("n",), interrupted=True) for t in sorted(human)]
        await _fill(cp, threads)
        seen: list[str] = []
        cursor = None
        async with store.profiling() as ops:
            while True:
                page = await cp.list_threads_page(limit=2, cursor=cursor, status="interrupted")
                seen += [i.thread for i in page.threads]
                if (cursor := page.next_cursor) is None:
                    break
    assert seen == sorted(human)
    queries = [op for op in ops if op["op"] == "query"]
    assert {op["planSummary"] for op in queries} == {"IXSCAN { tn: 1, st: 1, rs: 1, tt: 1 }"}
    assert sum(op["docsExamined"] for op in queries) <= len(human) + len(queries)
    assert all(op["keysExamined"] <= 4 for op in queries), queries


async def test_list_due_reads_the_due_rows_and_a_peek_per_page(store: MongoStore) -> None:
    due = {f"due-{i:03d}" for i in range(45)}
    async with store.open(journal=False) as cp:
        # Many due timers share one wake instant: the keyset must step through them.
        timers = [_timer(t, "2026-06-01T11:00:00Z" if i % 3 else NOW) for i, t in enumerate(due)]
        timers += [_timer(f"later-{i:03d}", "2026-06-02T00:00:00Z") for i in range(400)]
        human = [
            make_checkpoint(f"h-{i:03d}", 0, next=("n",), interrupted=True) for i in range(400)
        ]
        await _fill(cp, timers + human)
        seen: list[str] = []
        cursor = None
        async with store.profiling() as ops:
            while True:
                page = await cp.list_due(NOW, limit=10, cursor=cursor)
                seen += [i.thread for i in page.threads]
                if (cursor := page.next_cursor) is None:
                    break
    assert sorted(seen) == sorted(due) and len(seen) == len(due)
    queries = [op for op in ops if op["op"] == "query"]
    assert len(queries) == 5
    assert sum(op["docsExamined"] for op in queries) <= len(due) + len(queries)
    assert sum(op["keysExamined"] for op in queries) <= 2 * len(due)


# -- summaries stay true -------------------------------------------------------


def _random_checkpoint(rng: random.Random, thread: str, writer: int) -> Checkpoint:
    kind = rng.choice(["running", "human", "timer", "done"])
    fields: Doc = {"state": {"writer": writer, "kind": kind}}
    if kind != "done":
        fields["next"] = ("n",)
    if kind in ("human", "timer"):
        fields["interrupted"] = True
    if kind == "timer":
        fields["wake_at"] = f"2026-06-01T{rng.randrange(24):02d}:00:00Z"
    return make_checkpoint(thread, rng.randrange(6), **fields)


async def _assert_summaries_true(store: MongoStore, cp: MongoCheckpointer) -> None:
    """Every summary is exactly the one the thread's latest checkpoint gives."""
    for info in await cp.list_threads(limit=10_000):
        latest = await store.raw.find_one(
            {"n": "", "t": info.thread}, sort=[("s", -1)], projection={"payload": 0}
        )
        assert latest is not None
        wanted = summary_of_stored("", latest)
        summary = await store.raw.find_one({"_id": {"n": "", "t": info.thread}})
        assert summary is not None
        assert {k: summary.get(k) for k in wanted} == wanted, info.thread


async def test_summaries_converge_under_racing_writers(store: MongoStore) -> None:
    """Six clients write random steps of few threads, unconditionally, with
    if_revision=0 and as compare-and-sets, deleting and pruning as they go."""
    clients = [AsyncMongoClient[Doc](store.uri) for _ in range(6)]
    try:
        writers = [
            MongoCheckpointer(client=c, database=store.database, journal=False) for c in clients
        ]
        await writers[0].setup()

        async def work(writer: int) -> None:
            rng = random.Random(writer)
            cp = writers[writer]
            for _ in range(120):
                thread = f"t{rng.randrange(3)}"
                cp_ = _random_checkpoint(rng, thread, writer)
                roll = rng.random()
                if roll < 0.05:
                    await cp.delete_thread(thread)
                elif roll < 0.1:
                    await cp.prune(thread, before_step=rng.randrange(6))
                elif roll < 0.4:
                    stored = await cp.get(thread, cp_.step)
                    with contextlib.suppress(CheckpointConflict):
                        await cp.put(cp_, if_revision=stored.revision if stored else 0)
                else:
                    await cp.put(cp_)

        await asyncio.gather(*(work(w) for w in range(len(writers))))
        await _assert_summaries_true(store, writers[0])
        for thread in ("t0", "t1", "t2"):
            listed = {i.thread for i in await writers[0].list_threads()}
            assert (thread in listed) == (await writers[0].get(thread) is not None)
    finally:
        for client in clients:
            await client.close()


async def test_a_thread_is_listed_exactly_while_it_has_checkpoints(store: MongoStore) -> None:
    """Puts racing a delete or a prune of their thread, many times over: whatever
    order they land in, the thread is listed, with its latest step, if and only if a
    checkpoint of it is left."""
    async with store.open(journal=False) as writer, store.open(journal=False) as deleter:
        for round_ in range(150):
            step = round_ % 3
            removal = (
                deleter.delete_thread("t") if round_ % 2 else deleter.prune("t", before_step=step)
            )
            await asyncio.gather(
                writer.put(make_checkpoint("t", step, next=("n",))),
                removal,
                writer.put(make_checkpoint("t", (step + 1) % 3, interrupted=True, next=("n",))),
                writer.put(make_checkpoint("other", round_)),
            )
            listed = {i.thread: i.latest_step for i in await deleter.list_threads()}
            latest = await writer.get("t")
            assert listed.get("t") == (None if latest is None else latest.step), round_
        await _assert_summaries_true(store, writer)


async def test_a_retry_after_a_lost_summary_write_repairs_the_summary(
    store: MongoStore,
) -> None:
    """A crash between a put's two statements leaves the checkpoint without its
    summary; the caller's retry, even one that loses as a conflict, repairs it."""
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0, next=("n",)))
        await cp.put(make_checkpoint("t", 1, next=("n",), interrupted=True))
        for if_revision in (0, 7):
            await store.raw.update_one({"tt": "t"}, {"$set": {"ls": 0, "st": "running"}})
            with pytest.raises(CheckpointConflict):
                await cp.put(make_checkpoint("t", 1, next=("n",)), if_revision=if_revision)
            [info] = await cp.list_threads()
            assert (info.latest_step, info.status) == (1, "interrupted")
        await store.raw.delete_one({"tt": "t"})
        await cp.put(make_checkpoint("t", 1, next=("n",), interrupted=True))
        [info] = await cp.list_threads()
        assert (info.latest_step, info.status) == (1, "interrupted")
        await _assert_summaries_true(store, cp)


async def test_a_live_thread_never_drops_out_of_a_listing(store: MongoStore) -> None:
    """Threads deleted and written around it never hide a thread that has checkpoints."""
    async with store.open(journal=False) as writer, store.open(journal=False) as reader:
        await writer.put(make_checkpoint("live", 0))
        stop = asyncio.Event()

        async def churn() -> None:
            for i in range(200):
                await writer.put(make_checkpoint(f"tmp-{i % 5}", i))
                await writer.delete_thread(f"tmp-{(i + 2) % 5}")
                await writer.put(make_checkpoint("live", i + 1))
            stop.set()

        async def watch() -> int:
            pages = 0
            while not stop.is_set():
                for status in (None, "done"):
                    page = await reader.list_threads_page(limit=100, status=status)
                    assert "live" in [i.thread for i in page.threads]
                    pages += 1
            return pages

        _, pages = await asyncio.gather(churn(), watch())
        assert pages > 10


# -- the upgrade from the layout without summaries ------------------------------


def _old_checkpoint(namespace: str, cp: Checkpoint) -> Doc:
    """A checkpoint document as the previous layout wrote it."""
    ts = cp.ts or utc_now_iso()
    payload = JsonCodec().encode(
        dataclasses.replace(cp, ts=ts), RecordKey(namespace, cp.thread, cp.step)
    )
    key = {"n": namespace, "t": cp.thread, "s": cp.step}
    return {
        "_id": key,
        **key,
        "rev": 1,
        "payload": payload,
        "ts": ts,
        "ts_us": parse_instant(ts),
        "interrupted": cp.interrupted,
        "done": cp.done,
        "wake_at": cp.wake_at,
    }


async def _old_store(store: MongoStore, namespace: str) -> None:
    """A store as the previous version left it: checkpoints, registry entries holding
    only the thread's id, one entry of a deleted thread marked empty, and one thread
    whose entry went missing; its two indexes, no version document."""
    raw = store.raw
    await raw.create_indexes(
        [
            IndexModel([("n", 1), ("t", 1), ("s", -1)], name="agentflow_threads"),
            IndexModel(
                [("tn", 1), ("tt", 1)],
                name="agentflow_thread_registry",
                partialFilterExpression={"tn": {"$exists": True}},
            ),
        ]
    )
    checkpoints = [
        make_checkpoint("run", 0, next=("n",)),
        make_checkpoint("run", 1, next=("n",)),
        make_checkpoint("human", 0, next=("n",), interrupted=True),
        _timer("timer", "2026-06-01T11:00:00+00:00"),
        _timer("later", "2026-06-02T11:00:00+00:00"),
        make_checkpoint("fin", 0, next=("n",)),
        make_checkpoint("fin", 1),
        make_checkpoint("orphan", 3, next=("n",)),
    ]
    await raw.insert_many([_old_checkpoint(namespace, c) for c in checkpoints])
    registered = ["run", "human", "timer", "later", "fin", "gone"]
    await raw.insert_many(
        [{"_id": {"n": namespace, "t": t}, "tn": namespace, "tt": t} for t in registered]
    )
    await raw.update_one(
        {"_id": {"n": namespace, "t": "gone"}},
        {"$set": {"empty_since": datetime.now(UTC) - timedelta(minutes=1)}},
    )


async def test_a_store_of_the_previous_layout_is_upgraded_on_setup(store: MongoStore) -> None:
    await _old_store(store, "")
    await _old_store(store, "acme")
    clients = [AsyncMongoClient[Doc](store.uri) for _ in range(4)]
    try:
        # Several processes set up at once: one migrates, the others wait for it.
        racers = [MongoCheckpointer(client=c, database=store.database) for c in clients]
        await asyncio.gather(*(cp.setup() for cp in racers))
        cp = racers[0]
        infos = {i.thread: (i.latest_step, i.status) for i in await cp.list_threads()}
        assert infos == {
            "fin": (1, "done"),
            "human": (0, "interrupted"),
            "later": (0, "waiting"),
            "orphan": (3, "running"),
            "run": (1, "running"),
            "timer": (0, "waiting"),
        }
        assert [i.thread for i in (await cp.list_due(NOW)).threads] == ["timer"]
        page = await cp.list_threads_page(status="running")
        assert [i.thread for i in page.threads] == ["orphan", "run"]
        got = await cp.get("run")
        assert got is not None and got.step == 1 and got.revision == 1
        await cp.put(make_checkpoint("human", 1))
        assert [i.thread for i in (await cp.list_threads_page(status="done")).threads] == [
            "fin",
            "human",
        ]
        async with store.open(namespace="acme") as acme:
            assert len(await acme.list_threads()) == 6
    finally:
        for client in clients:
            await client.close()
    assert await store.raw.count_documents({"tt": "gone"}) == 0
    assert await store.raw.count_documents({"tn": {"$exists": True}, "ls": {}}) == 0
    version = await store.raw.find_one({"_id": {"m": "schema"}})
    assert version == {"_id": {"m": "schema"}, "v": 4}


async def test_a_stale_migration_lease_is_taken_over(store: MongoStore) -> None:
    await _old_store(store, "")
    await store.raw.insert_one(
        {"_id": {"m": "schema"}, "v": 1, "owner": "died", "lease": datetime.now(UTC)}
    )
    async with store.open() as cp:
        await cp.setup()
        assert len(await cp.list_threads()) == 6


async def test_a_newer_layout_is_refused_and_left_alone(store: MongoStore) -> None:
    await store.raw.insert_one({"_id": {"m": "schema"}, "v": 5})
    async with store.open() as cp:
        with pytest.raises(IncompatibleSchema):
            await cp.put(make_checkpoint("t", 0))
        with pytest.raises(IncompatibleSchema):
            await cp.list_threads()
    assert await store.raw.count_documents({}) == 1
