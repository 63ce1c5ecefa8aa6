"""What only the MongoDB backend promises: its layout, indexes, races, expiry and faults."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import ConnectionFailure, WriteConcernError

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    StoreUnavailable,
)
from tests.backends.mongodb import assert_owns_port, private_mongod, scratch_database
from tests.support.mongod import MongodProcess

Doc = dict[str, Any]


class Store:
    """A fresh database on the session's mongod and a client of the test's own."""

    def __init__(self, uri: str, client: AsyncMongoClient[Doc], database: str) -> None:
        self.uri, self.client, self.database = uri, client, database
        self.raw: AsyncCollection[Doc] = client[database]["checkpoints"]

    def open(self, **kwargs: Any) -> MongoCheckpointer:
        kwargs.setdefault("database", self.database)
        return MongoCheckpointer(client=self.client, **kwargs)


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with scratch_database() as (uri, client, database):
        yield Store(uri, client, database)


def _key(thread: str, step: int, namespace: str = "") -> Doc:
    return {"n": namespace, "t": thread, "s": step}


# -- ownership and configuration -------------------------------------------


async def test_owned_client_is_closed_once_and_injected_client_stays_open(store: Store) -> None:
    owned = MongoCheckpointer(store.uri, database=store.database)
    await owned.put(make_checkpoint("t", 0))
    await owned.close()
    await owned.close()
    with pytest.raises(CheckpointError):
        await owned.get("t")
    async with store.open() as injected:
        assert await injected.get("t") is not None
    # One document per checkpoint, and one registry entry per thread.
    assert await store.raw.count_documents({"s": {"$exists": True}}) == 1
    assert await store.raw.count_documents({"tn": {"$exists": True}}) == 1


async def test_bad_configuration_is_refused(store: Store) -> None:
    for ttl in (0, -5, float("nan"), True, "60"):
        with pytest.raises(InvalidArgument):
            store.open(ttl=ttl)
    with pytest.raises(InvalidArgument):
        store.open(database="bad.name")
    for uri in ("http://x", "mongodb://user:s3cret@", "mongodb://user:s3cret@127.0.0.1:99999"):
        with pytest.raises(InvalidArgument) as info:
            MongoCheckpointer(uri)
        assert "s3cret" not in str(info.value)
    unacknowledged: AsyncMongoClient[Doc] = AsyncMongoClient(store.uri, w=0)
    try:
        with pytest.raises(InvalidArgument):
            MongoCheckpointer(client=unacknowledged, database=store.database)
    finally:
        await unacknowledged.close()
    async with store.open() as cp:
        with pytest.raises(InvalidArgument):
            await cp.put(make_checkpoint("t", 0), if_revision=-1)
    assert await store.raw.count_documents({}) == 0


async def test_journal_option_asks_for_the_journal(store: Store) -> None:
    async with store.open(journal=True) as cp:
        assert cp._coll.write_concern.document.get("j") is True
        await cp.put(make_checkpoint("t", 0))
        assert (await cp.get("t")) is not None


async def test_a_collection_with_a_collation_is_refused(store: Store) -> None:
    await store.client[store.database].create_collection(
        "checkpoints", collation={"locale": "en", "strength": 2}
    )
    async with store.open() as cp:
        with pytest.raises(InvalidArgument):
            await cp.put(make_checkpoint("t", 0))
    assert await store.raw.count_documents({}) == 0


# -- layout and indexes ----------------------------------------------------


async def test_setup_is_idempotent_and_creates_no_ttl_index_without_ttl(store: Store) -> None:
    async with store.open() as cp:
        await cp.setup()
        await cp.setup()
        await cp.put(make_checkpoint("t", 0))
    indexes = await store.raw.index_information()
    assert set(indexes) == {"_id_", "agentflow_threads", "agentflow_thread_registry"}
    threads = indexes["agentflow_threads"]
    assert threads["key"] == [("n", 1), ("t", 1), ("s", -1)]
    assert not threads.get("unique") and "partialFilterExpression" not in threads
    registry = indexes["agentflow_thread_registry"]
    assert registry["key"] == [("tn", 1), ("tt", 1)]
    assert registry["partialFilterExpression"] == {"tn": {"$exists": True}}
    entry = await store.raw.find_one({"_id": {"n": "", "t": "t"}})
    assert entry == {"_id": {"n": "", "t": "t"}, "tn": "", "tt": "t"}


async def test_payload_is_binary_and_hostile_state_round_trips(store: Store) -> None:
    state = {
        "a.b": 1,
        "$set": {"rev": 999},
        "$where": "sleep(10000)",
        "q": {"$gt": ""},
        "$": [{"..": None}],
    }
    threads = ["$where", '{"$gt": ""}', "a.b", "$set", "plain"]
    async with store.open() as cp:
        for thread in threads:
            await cp.put(make_checkpoint(thread, 0, state=state))
        for thread in threads:
            got = await cp.get(thread)
            assert got is not None and got.thread == thread and got.state == state
            assert got.revision == 1
        assert [i.thread for i in await cp.list_threads()] == sorted(threads)
    raw = await store.raw.find_one({"_id": _key("$where", 0)})
    assert raw is not None and isinstance(raw["payload"], bytes) and raw["rev"] == 1
    assert set(raw) == {
        *("_id", "n", "t", "s", "rev", "payload"),
        *("ts", "ts_us", "interrupted", "done", "wake_at"),
    }
    assert (raw["n"], raw["t"], raw["s"]) == ("", "$where", 0)


async def test_listing_is_code_point_order_including_astral_characters(store: Store) -> None:
    # UTF-16 order would put the astral U+10000 before U+FFFF; code points do not.
    threads = ["\U00010000", "\uffff", "\ue000", "\U0010ffff", "é", "Z", "a", "\x7f", "aa", "a\x01"]
    async with store.open() as cp:
        for thread in threads:
            await cp.put(make_checkpoint(thread, 0))
        assert [i.thread for i in await cp.list_threads()] == sorted(threads)
        paged: list[str] = []
        cursor = None
        while True:
            page = await cp.list_threads_page(limit=3, cursor=cursor)
            paged += [i.thread for i in page.threads]
            if (cursor := page.next_cursor) is None:
                break
    assert paged == sorted(threads)
    assert sorted(threads).index("\uffff") < sorted(threads).index("\U00010000")


async def _profiled(store: Store) -> list[Doc]:
    """Queries and aggregations on the collection, in order, from the profiler."""
    profile = store.client[store.database]["system.profile"]
    ops = profile.find({"ns": f"{store.database}.checkpoints", "op": {"$in": ["query", "command"]}})
    return [doc async for doc in ops]


async def test_reads_and_listing_walk_indexes(store: Store) -> None:
    """The profiler shows what the checkpointer's own queries did, not a replica of them."""
    async with store.open() as cp:
        for i in range(60):
            for step in range(5):
                await cp.put(make_checkpoint(f"thread-{i:03d}", step))
        db = store.client[store.database]
        await db.command("profile", 2)
        try:
            latest = await cp.get("thread-007")
            page = await cp.list_threads_page(limit=10)
            second = await cp.list_threads_page(limit=10, cursor=page.next_cursor)
        finally:
            await db.command("profile", 0)
    assert latest is not None and latest.step == 4
    assert [i.thread for i in second.threads] == [f"thread-{i:03d}" for i in range(10, 20)]
    assert all(i.latest_step == 4 for i in second.threads)
    ops = await _profiled(store)
    # One latest read, then per page one aggregation: a keyset range of the registry
    # index joined to one key of the listing index per thread.
    assert [op["planSummary"] for op in ops] == [
        "IXSCAN { _id: 1 }",
        *["IXSCAN { tn: 1, tt: 1 }"] * 2,
    ]
    for listing in ops[1:]:
        assert "aggregate" in listing["command"], listing
        # 11 registry entries (a page and a peek), each with its latest checkpoint.
        assert listing["nreturned"] == 11, listing
        assert listing["keysExamined"] <= 2 * 11 and listing["docsExamined"] <= 2 * 11, listing


async def _page_cost(store: Store, steps: int) -> list[tuple[int, int]]:
    """``(keysExamined, docsExamined)`` of each listing round trip over 3 threads of
    ``steps`` checkpoints each, paged 2 at a time (the lookup's work included)."""
    async with store.open(namespace=f"len-{steps}") as cp:
        for thread in ("a", "b", "c"):
            await cp.put(make_checkpoint(thread, 0))
            await store.raw.insert_many(
                [
                    {"_id": _key(thread, s, f"len-{steps}"), "n": f"len-{steps}", "t": thread}
                    | {"s": s, "rev": 1}
                    for s in range(1, steps - 1)
                ]
            )
            await cp.put(make_checkpoint(thread, steps - 1, interrupted=True, next=("n",)))
        db = store.client[store.database]
        await db.command("profile", 2)
        try:
            page = await cp.list_threads_page(limit=2)
            rest = await cp.list_threads_page(limit=2, cursor=page.next_cursor)
        finally:
            await db.command("profile", 0)
    assert [(i.thread, i.latest_step, i.interrupted) for i in page.threads] == [
        ("a", steps - 1, True),
        ("b", steps - 1, True),
    ]
    assert [i.thread for i in rest.threads] == ["c"] and rest.next_cursor is None
    ops = [op for op in await _profiled(store) if "aggregate" in op["command"]]
    await db["system.profile"].drop()
    return [(op["keysExamined"], op["docsExamined"]) for op in ops]


async def test_a_listing_page_costs_the_same_whatever_the_threads_length(store: Store) -> None:
    short, long = await _page_cost(store, 5), await _page_cost(store, 2_000)
    # Per round trip: the registry entries read (page + peek, or what is left) and
    # one key of the listing index per entry; nothing grows with the 2,000 steps.
    assert short == long == [(6, 6), (2, 2)], (short, long)
    explained = await store.client[store.database].command(
        "explain",
        {
            "aggregate": "checkpoints",
            "pipeline": [
                {"$match": {"tn": "len-2000"}},
                {"$sort": {"tn": 1, "tt": 1}},
                {"$limit": 3},
                {
                    "$lookup": {
                        "from": "checkpoints",
                        "let": {"t": "$tt"},
                        "pipeline": [
                            {"$match": {"n": "len-2000", "$expr": {"$eq": ["$t", "$$t"]}}},
                            {"$sort": {"s": -1}},
                            {"$limit": 1},
                        ],
                        "as": "latest",
                    }
                },
            ],
            "cursor": {},
        },
        verbosity="executionStats",
    )
    [lookup] = [stage["$lookup"] | stage for stage in explained["stages"] if "$lookup" in stage]
    assert lookup["indexesUsed"] == ["agentflow_threads"] and lookup["collectionScans"] == 0
    assert lookup["totalKeysExamined"] == 3, lookup


async def test_deleted_threads_leave_a_marked_entry_that_listing_skips_then_removes(
    store: Store,
) -> None:
    async with store.open() as writer, store.open() as deleter:
        for thread in ("a", "b", "c"):
            await writer.put(make_checkpoint(thread, 0))
        await deleter.delete_thread("b")
        assert await deleter.prune("c", before_step=1) == 1
        entries = {e["tt"]: e async for e in store.raw.find({"tn": ""})}
        assert set(entries) == {"a", "b", "c"}
        assert "empty_since" not in entries["a"]
        assert isinstance(entries["b"]["empty_since"], datetime)
        # The writer's registration is fresh, so its put skips it: the marked entry
        # still lists the thread, and a listing never deletes an entry with checkpoints.
        await writer.put(make_checkpoint("c", 5))
        assert [(i.thread, i.latest_step) for i in await deleter.list_threads()] == [
            ("a", 0),
            ("c", 5),
        ]
        # Once the mark is older than the grace period, a listing deletes the entry...
        old = datetime.now(UTC) - timedelta(hours=1)
        await store.raw.update_many(
            {"empty_since": {"$exists": True}}, {"$set": {"empty_since": old}}
        )
        assert [i.thread for i in await deleter.list_threads()] == ["a", "c"]
        assert {e["tt"] async for e in store.raw.find({"tn": ""})} == {"a", "c"}
        # ...and the next put of the thread registers it again.
        await deleter.put(make_checkpoint("b", 1))
        assert [i.thread for i in await writer.list_threads()] == ["a", "b", "c"]
        assert await store.raw.count_documents({"empty_since": {"$exists": True}}) == 1  # "c"


async def test_a_checkpoint_without_its_entry_is_registered_again_by_the_cleanup(
    store: Store,
) -> None:
    """A put landing after a grace-old entry was deleted: the cleanup's re-check
    after its delete finds the checkpoint and puts the entry back."""
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0))
        await cp.delete_thread("t")
        old = datetime.now(UTC) - timedelta(hours=1)
        await store.raw.update_one({"tt": "t"}, {"$set": {"empty_since": old}})
        [row] = await cp._entries(None, 10)
        assert row["latest"] == []
        await store.raw.insert_one(
            {"_id": _key("t", 3), "n": "", "t": "t", "s": 3, "rev": 1} | {"late": True}
        )
        await cp._clean(row)
        entry = await store.raw.find_one({"_id": {"n": "", "t": "t"}})
        assert entry is not None and "empty_since" not in entry


async def test_history_streams_in_bounded_batches(store: Store) -> None:
    async with store.open() as cp:
        for step in range(600):
            await cp.put(make_checkpoint("long", step))
        db = store.client[store.database]
        await db.command("profile", 2)
        try:
            steps = [c.step async for c in cp.history("long")]
        finally:
            await db.command("profile", 0)
    assert steps == list(range(600))
    profile = db["system.profile"]
    ops = await profile.find({"ns": f"{store.database}.checkpoints"}).to_list()
    assert [op["op"] for op in ops] == ["query", "getmore", "getmore"]
    assert [op["nreturned"] for op in ops] == [256, 256, 88]
    assert ops[0]["planSummary"] == "IXSCAN { _id: 1 }"


# -- races -----------------------------------------------------------------


async def test_sixteen_clients_race_to_create_one_step(store: Store) -> None:
    clients = [AsyncMongoClient[Doc](store.uri) for _ in range(16)]
    try:
        racers = [MongoCheckpointer(client=c, database=store.database) for c in clients]
        await racers[0].setup()
        for step in range(3):
            results = await asyncio.gather(
                *(
                    cp.put(make_checkpoint("race", step, state={"w": i}), if_revision=0)
                    for i, cp in enumerate(racers)
                ),
                return_exceptions=True,
            )
            winners = [i for i, r in enumerate(results) if isinstance(r, str)]
            losers = [r for r in results if isinstance(r, CheckpointConflict)]
            assert len(winners) == 1 and len(losers) == 15, results
            assert all((e.expected, e.actual) == (0, 1) for e in losers)
            got = await racers[0].get("race", step)
            assert got is not None and got.state == {"w": winners[0]} and got.revision == 1
    finally:
        for client in clients:
            await client.close()


async def test_a_thousand_concurrent_unconditional_puts_keep_every_revision(store: Store) -> None:
    async with store.open() as cp:
        await asyncio.gather(
            *(cp.put(make_checkpoint("hot", 0, state={"i": i})) for i in range(1_000))
        )
        got = await cp.get("hot")
        assert got is not None and got.revision == 1_000
        [info] = await cp.list_threads()
        assert (info.thread, info.latest_step) == ("hot", 0)


async def test_listing_follows_the_real_latest_step(store: Store) -> None:
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0, next=("n",)))
        await cp.put(make_checkpoint("t", 1, interrupted=True, next=("n",)))
        # A compare-and-set on an absent step writes nothing, not even to the listing.
        with pytest.raises(CheckpointConflict) as info:
            await cp.put(make_checkpoint("t", 7), if_revision=3)
        assert info.value.actual == 0
        [t] = await cp.list_threads()
        assert (t.thread, t.latest_step, t.interrupted) == ("t", 1, True)
        assert await cp.get("t", 7) is None
        # Deleting the latest step lists the one before; deleting the rest, nothing.
        assert await cp.prune("t", older_than="2999-01-01T00:00:00Z", before_step=2) == 2
        assert await cp.list_threads() == []
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("t", 1))
        await store.raw.delete_one({"_id": _key("t", 1)})
        assert [(i.thread, i.latest_step) for i in await cp.list_threads()] == [("t", 0)]
    assert await store.raw.count_documents({"s": {"$exists": True}}) == 1


async def test_prune_and_delete_racing_puts_leave_a_true_listing(store: Store) -> None:
    async with store.open() as writer, store.open() as pruner:

        async def write() -> None:
            for step in range(60):
                await writer.put(make_checkpoint("busy", step, state={"s": step}))

        async def prune() -> None:
            for bound in range(0, 60, 3):
                await pruner.prune("busy", before_step=bound)
                await asyncio.sleep(0)
            await pruner.delete_thread("gone")

        await writer.put(make_checkpoint("gone", 0))
        await asyncio.gather(write(), prune(), writer.put(make_checkpoint("gone", 1)))
        steps = [c.step async for c in writer.history("busy")]
        infos = await writer.list_threads()
        assert steps and [(i.thread, i.latest_step) for i in infos] == [("busy", 59)]
        assert steps[-1] == 59


async def test_an_unconditional_put_of_a_stored_step_counts_one_revision(store: Store) -> None:
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0, state={"v": 1}))
        await cp.put(make_checkpoint("t", 0, state={"v": 2}, interrupted=True, next=("n",)))
        got = await cp.get("t", 0)
        assert got is not None and got.state == {"v": 2} and got.revision == 2
        [info] = await cp.list_threads()
        assert info.interrupted
    raw = await store.raw.find_one({"_id": _key("t", 0)})
    assert raw is not None and (raw["n"], raw["t"], raw["s"], raw["rev"]) == ("", "t", 0, 2)


# -- expiry ----------------------------------------------------------------


async def test_ttl_index_and_every_document_of_the_thread_expires_together(store: Store) -> None:
    async with store.open(ttl=3_600) as cp:
        for step in range(3):
            await cp.put(make_checkpoint("t", step))
        await cp.put(make_checkpoint("other", 0))
        indexes = await store.raw.index_information()
        assert indexes["agentflow_expiry"]["expireAfterSeconds"] == 0
        assert indexes["agentflow_expiry"]["key"] == [("expires_at", 1)]
        docs = await store.raw.find({"_id.t": "t"}).to_list()
        assert len(docs) == 4  # three checkpoints and the registry entry
        expiries = {d["expires_at"].replace(tzinfo=UTC) for d in docs}
        assert len(expiries) == 1
        [expires] = expiries
        now = datetime.now(UTC)
        assert now + timedelta(seconds=3_600) <= expires <= now + timedelta(seconds=3_661)

    # Documents written long ago (or before ttl was enabled) are pushed back by the
    # next write of a checkpointer that has not refreshed this thread in this bucket.
    now = now.replace(microsecond=0)
    await store.raw.update_many({}, {"$set": {"expires_at": now}})
    await store.raw.update_one({"_id": _key("t", 0)}, {"$unset": {"expires_at": 1}})
    async with store.open(ttl=3_600) as cp:
        await cp.put(make_checkpoint("t", 3))
        docs = await store.raw.find({"_id.t": "t"}).to_list()
        assert len(docs) == 5
        refreshed = {d["expires_at"].replace(tzinfo=UTC) for d in docs}
        assert len(refreshed) == 1 and min(refreshed) >= expires
        other = await store.raw.find_one({"_id": _key("other", 0)})
        assert other is not None and other["expires_at"].replace(tzinfo=UTC) == now


# -- corruption, size and cancellation ---------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        {"$set": {"payload": "not binary"}},
        {"$unset": {"rev": 1}},
        {"$set": {"rev": "1"}},
        {"$set": {"payload": b'{"v": 1}'}},
    ],
    ids=["payload-string", "no-revision", "revision-string", "truncated-payload"],
)
async def test_damaged_documents_raise_corrupted(store: Store, damage: Doc) -> None:
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("t", 1))
        await store.raw.update_one({"_id": _key("t", 1)}, damage)
        for read in (cp.get("t"), cp.get("t", 1)):
            with pytest.raises(CheckpointCorrupted):
                await read
        assert await cp.get("t", 0) is not None


async def test_a_payload_moved_to_another_key_is_corrupted(store: Store) -> None:
    async with store.open() as cp:
        await cp.put(make_checkpoint("victim", 0, state={"secret": 1}))
        await cp.put(make_checkpoint("attacker", 0))
        stolen = await store.raw.find_one({"_id": _key("victim", 0)})
        assert stolen is not None
        await store.raw.update_one(
            {"_id": _key("attacker", 0)}, {"$set": {"payload": stolen["payload"]}}
        )
        with pytest.raises(CheckpointCorrupted):
            await cp.get("attacker")
        await store.raw.update_one({"_id": _key("victim", 0)}, {"$unset": {"done": 1}})
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads()


async def test_a_checkpoint_over_the_document_limit_is_refused_and_nothing_stored(
    store: Store,
) -> None:
    async with store.open() as cp:
        with pytest.raises(InvalidArgument):
            await cp.put(make_checkpoint("big", 0, state={"blob": "x" * (16 * 1024 * 1024)}))
        assert await cp.get("big") is None and await cp.list_threads() == []
    assert await store.raw.count_documents({}) == 0


async def test_cancellation_propagates(store: Store) -> None:
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0))
        task = asyncio.create_task(cp.put(make_checkpoint("t", 1, state={"x": "y" * 100_000})))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await cp.get("t")) is not None


# -- faults ----------------------------------------------------------------


def _crash_and_restart(server: MongodProcess) -> None:
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait()
    server.proc = None
    server.start()
    assert_owns_port(server)


async def test_a_mongod_crash_raises_store_unavailable_and_loses_no_journaled_put() -> None:
    """kill -9 under four busy writers, on a private mongod so no shared server suffers.

    With ``journal=True`` every acknowledged put survives the crash; a put that
    raised is either absent or whole.
    """
    server = private_mongod()
    uri = server.uri + "&serverSelectionTimeoutMS=1000&connectTimeoutMS=1000"
    try:
        async with MongoCheckpointer(uri, database="faults", journal=True) as cp:
            outcomes: dict[tuple[int, int], BaseException | None] = {}
            busy, crashed = asyncio.Event(), asyncio.Event()

            async def writer(lane: int) -> None:
                step = 0
                while not crashed.is_set() or step < 3:
                    try:
                        await cp.put(make_checkpoint(f"lane-{lane}", step, state={"n": step}))
                        outcomes[lane, step] = None
                    except StoreUnavailable as exc:
                        outcomes[lane, step] = exc
                    step += 1
                    if len(outcomes) >= 8:
                        busy.set()

            async def crash() -> None:
                await busy.wait()
                await asyncio.to_thread(_crash_and_restart, server)
                crashed.set()

            await asyncio.gather(crash(), *(writer(lane) for lane in range(4)))
            in_flight = [e for e in outcomes.values() if e is not None]
            assert in_flight, "no call was in flight while mongod crashed"

            server.stop()
            with pytest.raises(StoreUnavailable) as down:
                await cp.put(make_checkpoint("lane-0", 10_000))
            with pytest.raises(StoreUnavailable):
                await cp.list_threads()
            server.start()
            assert_owns_port(server)
            await cp.put(make_checkpoint("lane-0", 10_001))

            for exc in [*in_flight, down.value]:
                assert isinstance(exc.__cause__, ConnectionFailure), repr(exc.__cause__)
                assert exc.retryable and exc.code == "store_unavailable"
            for lane in range(4):
                stored = {c.step: c for c in [x async for x in cp.history(f"lane-{lane}")]}
                for (at, step), outcome in outcomes.items():
                    if at == lane and (outcome is None or step in stored):
                        assert stored[step].state == {"n": step} and stored[step].revision == 1
            infos = {i.thread: i.latest_step for i in await cp.list_threads()}
            assert infos["lane-0"] == 10_001 and 10_000 not in infos.values()
    finally:
        server.cleanup()


@pytest.fixture
def replica_set() -> Iterator[MongodProcess]:
    """A private one-member replica set with test commands (for fail points)."""
    server = private_mongod("--replSet", "rs0", "--setParameter", "enableTestCommands=1")
    try:
        yield server
    finally:
        server.cleanup()


async def _initiate(uri: str, port: int) -> None:
    async with AsyncMongoClient[Doc](uri) as client:
        member = {"_id": 0, "host": f"127.0.0.1:{port}"}
        await client.admin.command("replSetInitiate", {"_id": "rs0", "members": [member]})
        for _ in range(600):  # an election takes well under the 30 s this allows
            if (await client.admin.command("hello")).get("isWritablePrimary"):
                return
            await asyncio.sleep(0.05)
    pytest.fail("the one-member replica set elected no primary")


async def _fail_next_write_after_writing(client: AsyncMongoClient[Doc], command: str) -> None:
    """The next ``command`` (insert or update) is applied, then answered with a retryable error."""
    await client.admin.command(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {
                "failCommands": [command],
                "writeConcernError": {"code": 91, "errmsg": "ShutdownInProgress"},
            },
        }
    )


async def test_replica_set_retries_a_landed_put_exactly_once(replica_set: MongodProcess) -> None:
    """A put whose answer is lost after it landed is retried by PyMongo, and the
    server recognizes the retry: the revision counts one write, not two. Without
    retryable writes (as on a standalone) the same fault surfaces as
    StoreUnavailable although the write landed."""
    await _initiate(replica_set.uri, replica_set.port)
    async with (
        AsyncMongoClient[Doc](replica_set.uri) as client,
        MongoCheckpointer(client=client, database="retry") as cp,
    ):
        # A new step is an insert, a stored one an update (unconditional or compare-and-set).
        # Registered first: a put of a thread this checkpointer registered within the
        # last minute is one insert, or one update of a stored step.
        await cp.put(make_checkpoint("t", 9))
        for step, if_revision, command in (
            (0, None, "insert"),
            (0, None, "update"),
            (1, 0, "insert"),
            (1, 1, "update"),
        ):
            await _fail_next_write_after_writing(client, command)
            await cp.put(make_checkpoint("t", step), if_revision=if_revision)
        first, second = await cp.get("t", 0), await cp.get("t", 1)
        assert first is not None and first.revision == 2
        assert second is not None and second.revision == 2

    async with (
        AsyncMongoClient[Doc](replica_set.uri + "&retryWrites=false") as client,
        MongoCheckpointer(client=client, database="retry") as cp,
    ):
        await cp.put(make_checkpoint("t", 8))
        await _fail_next_write_after_writing(client, "insert")
        with pytest.raises(StoreUnavailable) as info:
            await cp.put(make_checkpoint("t", 2))
        assert isinstance(info.value.__cause__, WriteConcernError)
        landed = await cp.get("t", 2)
        assert landed is not None and landed.revision == 1
