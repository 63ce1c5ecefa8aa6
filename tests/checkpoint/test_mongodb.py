"""What only the MongoDB backend promises: configuration, layout, races, expiry, damage."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson.errors import InvalidBSON
from pymongo import AsyncMongoClient
from pymongo.errors import DocumentTooLarge, NotPrimaryError, OperationFailure

from agentflow.checkpoint import open_store
from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.mongodb.errors import driver_error
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    InvalidCursor,
    StoreClosed,
    StoreUnavailable,
)
from tests.backends.mongodb import MongoStore, mongo_store

Doc = dict[str, Any]


@pytest.fixture
async def store() -> AsyncIterator[MongoStore]:
    async with mongo_store() as opened:
        yield opened


def _key(thread: str, step: int, namespace: str = "") -> Doc:
    return {"n": namespace, "t": thread, "s": step}


# -- ownership and configuration -------------------------------------------


async def test_owned_client_is_closed_once_and_injected_client_stays_open(
    store: MongoStore,
) -> None:
    owned = MongoCheckpointer(store.uri, database=store.database)
    await owned.put(make_checkpoint("t", 0))
    await owned.close()
    await owned.close()
    with pytest.raises(StoreClosed):
        await owned.get("t")
    async with store.open() as injected:
        assert await injected.get("t") is not None
    # The injected client is still usable after its checkpointer closed.
    assert await store.raw.count_documents({"s": {"$exists": True}}) == 1
    assert await store.raw.count_documents({"tn": {"$exists": True}}) == 1


async def test_open_store_opens_a_mongodb_url(store: MongoStore) -> None:
    cp = open_store(store.uri, namespace="acme")
    assert isinstance(cp, MongoCheckpointer) and cp.namespace == "acme"
    await cp.close()


async def test_bad_configuration_is_refused(store: MongoStore) -> None:
    for ttl in (0, -5, float("nan"), True, "60"):
        with pytest.raises(InvalidArgument):
            store.open(ttl=ttl)
    with pytest.raises(InvalidArgument):
        store.open(journal="yes")
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
    assert await store.raw.count_documents({}) == 0


async def test_writes_wait_for_the_journal_unless_told_otherwise(store: MongoStore) -> None:
    async with store.open() as journaled, store.open(journal=False) as fast:
        assert journaled._coll.write_concern.document.get("j") is True
        assert "j" not in fast._coll.write_concern.document
        await journaled.put(make_checkpoint("t", 0))
        await fast.put(make_checkpoint("t", 1))
        assert [c.step async for c in fast.history("t")] == [0, 1]
    majority: AsyncMongoClient[Doc] = AsyncMongoClient(store.uri, w="majority")
    try:
        cp = MongoCheckpointer(client=majority, database=store.database)
        assert cp._coll.write_concern.document == {"w": "majority", "j": True}
    finally:
        await majority.close()


async def test_errors_name_the_operation_and_host_never_the_password() -> None:
    uri = "mongodb://user:s3cret@127.0.0.1:1/?serverSelectionTimeoutMS=100"
    async with MongoCheckpointer(uri) as cp:
        for call in (cp.put(make_checkpoint("t", 0)), cp.list_threads_page()):
            with pytest.raises(StoreUnavailable) as info:
                await call
            message = str(info.value)
            assert "127.0.0.1:1" in message and "s3cret" not in message
            assert info.value.retryable and info.value.__cause__ is not None
        with pytest.raises(StoreUnavailable, match="during list_threads_page"):
            await cp.list_threads_page()
        with pytest.raises(StoreUnavailable, match="during setup"):
            await cp.setup()


async def test_a_collection_with_a_collation_is_refused(store: MongoStore) -> None:
    await store.client[store.database].create_collection(
        "checkpoints", collation={"locale": "en", "strength": 2}
    )
    async with store.open() as cp:
        with pytest.raises(InvalidArgument):
            await cp.put(make_checkpoint("t", 0))
    assert await store.raw.count_documents({}) == 0


# -- layout and indexes ----------------------------------------------------


async def test_setup_is_idempotent_and_creates_no_ttl_index_without_ttl(
    store: MongoStore,
) -> None:
    async with store.open() as cp:
        await cp.setup()
        await cp.setup()
        await cp.put(make_checkpoint("t", 0))
    indexes = await store.raw.index_information()
    assert set(indexes) == {
        *("_id_", "agentflow_threads", "agentflow_thread_registry"),
        *("agentflow_thread_steps_status", "agentflow_thread_run_status", "agentflow_due"),
        *("agentflow_runs", "agentflow_run_status", "agentflow_run_holders"),  # the records'
    }
    assert indexes["agentflow_threads"]["key"] == [("n", 1), ("t", 1), ("s", -1)]
    exists = {"$exists": True}
    partial = {
        "agentflow_thread_registry": ([("tn", 1), ("tt", 1)], {"tn": exists}),
        "agentflow_thread_steps_status": (
            [("tn", 1), ("st", 1), ("rs", 1), ("tt", 1)],
            {"tn": exists},
        ),
        "agentflow_thread_run_status": (
            [("tn", 1), ("rs", 1), ("tt", 1)],
            {"tn": exists, "rs": exists},
        ),
        "agentflow_due": ([("tn", 1), ("wk", 1), ("tt", 1)], {"wk": exists}),
    }
    for name, (keys, expression) in partial.items():
        assert indexes[name]["key"] == keys
        assert indexes[name]["partialFilterExpression"] == expression


async def test_a_summary_per_thread_names_its_latest_step(store: MongoStore) -> None:
    wake = "2030-01-01T00:00:00+01:00"
    async with store.open(namespace="acme") as cp:
        await cp.put(make_checkpoint("t", 0, next=("n",)))
        await cp.put(make_checkpoint("t", 2, next=("n",), interrupted=True, wake_at=wake))
        await cp.put(make_checkpoint("t", 1, next=("n",)))  # an older step changes nothing
        latest = await cp.get("t")
    assert latest is not None
    summary = await store.raw.find_one({"_id": {"n": "acme", "t": "t"}})
    assert summary == {
        "_id": {"n": "acme", "t": "t"},
        "tn": "acme",
        "tt": "t",
        "ls": 2,
        "lr": 1,
        "st": "waiting",
        "ts": latest.ts,
        "wa": wake,
        "wk": parse_instant(wake),
    }


async def test_payload_is_binary_and_hostile_ids_and_state_round_trip(store: MongoStore) -> None:
    state = {
        "a.b": 1,
        "$set": {"rev": 999},
        "$where": "sleep(10000)",
        "q": {"$gt": ""},
        "$": [{"..": None}],
    }
    threads = ["$where", '{"$gt": ""}', "a.b", "$set", "$$ROOT", "$literal", "plain"]
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
    summary = await store.raw.find_one({"_id": {"n": "", "t": "$$ROOT"}})
    assert summary is not None and summary["tt"] == "$$ROOT"


async def test_listing_is_code_point_order_including_astral_characters(store: MongoStore) -> None:
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


async def test_steps_beyond_32_bits_read_back_as_ints(store: MongoStore) -> None:
    big = 2**40
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", big))
        await cp.put(make_checkpoint("t", 2**63 - 1))
        got = await cp.get("t", big)
        assert got is not None and got.step == big and type(got.step) is int
        assert [c.step async for c in cp.history("t")] == [big, 2**63 - 1]
        [info] = await cp.list_threads()
        assert info.latest_step == 2**63 - 1 and type(info.latest_step) is int


async def test_history_streams_in_bounded_batches(store: MongoStore) -> None:
    async with store.open() as cp:
        for step in range(600):
            await cp.put(make_checkpoint("long", step))
        async with store.profiling() as ops:
            steps = [c.step async for c in cp.history("long")]
    assert steps == list(range(600))
    assert [op["op"] for op in ops] == ["query", "getmore", "getmore"]
    assert [op["nreturned"] for op in ops] == [256, 256, 88]
    assert ops[0]["planSummary"] == "IXSCAN { _id: 1 }"


# -- the cursor secret -------------------------------------------------------

_SECRET_OF = """
import asyncio, sys
from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.mongodb.errors import driver_error

async def main() -> None:
    async with MongoCheckpointer(sys.argv[1], database=sys.argv[2]) as cp:
        print((await cp._cursor_secret()).hex())

asyncio.run(main())
"""


async def test_processes_creating_the_cursor_secret_at_once_end_with_one(
    store: MongoStore,
) -> None:
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _SECRET_OF,
            store.uri,
            store.database,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(4)
    ]
    secrets = {(await child.communicate())[0].strip() for child in children}
    assert all(child.returncode == 0 for child in children)
    [secret] = secrets
    assert len(bytes.fromhex(secret.decode())) == 32
    [doc] = await store.raw.find({"_id": {"m": "cursor"}}).to_list()
    assert doc["secret"].hex() == secret.decode()


async def test_a_damaged_cursor_secret_is_corrupted_not_replaced(store: MongoStore) -> None:
    async with store.open() as cp:
        for thread in "abc":
            await cp.put(make_checkpoint(thread, 0))
        cursor = (await cp.list_threads_page(limit=1)).next_cursor
    await store.raw.update_one({"_id": {"m": "cursor"}}, {"$set": {"secret": b"short"}})
    async with store.open() as cp:
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads_page(limit=1, cursor=cursor)
    await store.raw.delete_one({"_id": {"m": "cursor"}})
    async with store.open() as cp:
        with pytest.raises(InvalidCursor):
            await cp.list_threads_page(limit=1, cursor=cursor)


# -- races -----------------------------------------------------------------


async def test_sixteen_clients_race_to_create_one_step(store: MongoStore) -> None:
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


async def test_a_thousand_concurrent_unconditional_puts_keep_every_revision(
    store: MongoStore,
) -> None:
    async with store.open(journal=False) as cp:
        await asyncio.gather(
            *(
                cp.put(make_checkpoint("hot", 0, state={"i": i}, interrupted=i % 2 == 1))
                for i in range(1_000)
            )
        )
        got = await cp.get("hot")
        assert got is not None and got.revision == 1_000
        [info] = await cp.list_threads()
        # The summary follows the write that landed last, whatever order they finished in.
        assert (info.thread, info.latest_step, info.interrupted) == ("hot", 0, got.interrupted)
    summary = await store.raw.find_one({"tt": "hot"})
    assert summary is not None and summary["lr"] == 1_000


async def test_listing_follows_the_real_latest_step(store: MongoStore) -> None:
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0, next=("n",)))
        await cp.put(make_checkpoint("t", 1, interrupted=True, next=("n",)))
        # A compare-and-set on an absent or stale step writes nothing, not even the summary.
        with pytest.raises(CheckpointConflict) as info:
            await cp.put(make_checkpoint("t", 7), if_revision=3)
        assert info.value.actual == 0
        with pytest.raises(CheckpointConflict):
            await cp.put(make_checkpoint("t", 1), if_revision=5)
        [t] = await cp.list_threads()
        assert (t.thread, t.latest_step, t.status) == ("t", 1, "interrupted")
        assert await cp.get("t", 7) is None
        await cp.put(make_checkpoint("t", 1, next=("n",)), if_revision=1)
        [t] = await cp.list_threads()
        assert (t.latest_step, t.status) == (1, "running")
        # Pruning the latest step lists the one before; pruning the rest, nothing.
        assert await cp.prune("t", before_step=2, older_than="2999-01-01T00:00:00Z") == 2
        assert await cp.list_threads() == []
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("t", 1, next=("n",), interrupted=True))
        assert await cp.prune("t", before_step=1) == 1
        [t] = await cp.list_threads()
        assert (t.latest_step, t.status) == (1, "interrupted")
    assert await store.raw.count_documents({"s": {"$exists": True}}) == 1


async def test_prune_and_delete_racing_puts_leave_a_true_listing(store: MongoStore) -> None:
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


async def test_an_unconditional_put_of_a_stored_step_counts_one_revision(
    store: MongoStore,
) -> None:
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


async def test_ttl_index_and_every_document_of_the_thread_expires_together(
    store: MongoStore,
) -> None:
    async with store.open(ttl=3_600) as cp:
        for step in range(3):
            await cp.put(make_checkpoint("t", step))
        await cp.put(make_checkpoint("other", 0))
        indexes = await store.raw.index_information()
        assert indexes["agentflow_expiry"]["expireAfterSeconds"] == 0
        assert indexes["agentflow_expiry"]["key"] == [("expires_at", 1)]
        docs = await store.raw.find({"_id.t": "t"}).to_list()
        assert len(docs) == 4  # three checkpoints and the summary
        expiries = {d["expires_at"].replace(tzinfo=UTC) for d in docs}
        assert len(expiries) == 1
        [expires] = expiries
        now = datetime.now(UTC)
        assert now + timedelta(seconds=3_600) <= expires <= now + timedelta(seconds=3_661)
    assert await store.raw.count_documents({"_id.m": {"$exists": True}, "expires_at": {}}) == 0

    # Documents written long ago (or before ttl was enabled) are pushed back by the
    # next write of a checkpointer that has not refreshed this thread in this bucket.
    now = now.replace(microsecond=0)
    await store.raw.update_many({"_id.t": {"$exists": True}}, {"$set": {"expires_at": now}})
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
async def test_damaged_documents_raise_corrupted(store: MongoStore, damage: Doc) -> None:
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("t", 1))
        await store.raw.update_one({"_id": _key("t", 1)}, damage)
        for read in (cp.get("t"), cp.get("t", 1)):
            with pytest.raises(CheckpointCorrupted):
                await read
        assert await cp.get("t", 0) is not None


async def test_a_put_over_a_damaged_revision_is_corrupted_and_changes_nothing(
    store: MongoStore,
) -> None:
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0, state={"v": 1}))
        await store.raw.update_one({"_id": _key("t", 0)}, {"$set": {"rev": "abc"}})
        with pytest.raises(CheckpointCorrupted, match="during put"):
            await cp.put(make_checkpoint("t", 0, state={"v": 2}))
    raw = await store.raw.find_one({"_id": _key("t", 0)})
    assert raw is not None and raw["rev"] == "abc"


async def test_a_payload_moved_to_another_key_or_a_damaged_summary_is_corrupted(
    store: MongoStore,
) -> None:
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
        [intact] = await store.raw.find({"tt": "victim"}).to_list()
        for damage in ({"st": "finished"}, {"ls": -1}, {"st": "waiting"}, {"ts": 5}):
            await store.raw.update_one({"tt": "victim"}, {"$set": damage})
            with pytest.raises(CheckpointCorrupted):
                await cp.list_threads()
            await store.raw.replace_one({"_id": intact["_id"]}, intact)
        assert [i.thread for i in await cp.list_threads()] == ["attacker", "victim"]


async def test_a_checkpoint_over_the_document_limit_is_refused_and_nothing_stored(
    store: MongoStore,
) -> None:
    async with store.open() as cp:
        with pytest.raises(InvalidArgument):
            await cp.put(make_checkpoint("big", 0, state={"blob": "x" * (16 * 1024 * 1024)}))
        assert await cp.get("big") is None and await cp.list_threads() == []
    assert await store.raw.count_documents({"_id.t": {"$exists": True}}) == 0


async def test_cancellation_propagates(store: MongoStore) -> None:
    async with store.open() as cp:
        await cp.put(make_checkpoint("t", 0))
        task = asyncio.create_task(cp.put(make_checkpoint("t", 1, state={"x": "y" * 100_000})))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await cp.get("t")) is not None


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (OperationFailure("too big", code=10334), InvalidArgument),
        (OperationFailure("after update too big", code=17419), InvalidArgument),
        (DocumentTooLarge("BSON document too large"), InvalidArgument),
        (OperationFailure("cannot $inc a string", code=14), CheckpointCorrupted),
        (InvalidBSON("bad utf-8"), CheckpointCorrupted),
        (NotPrimaryError("not primary"), StoreUnavailable),
        (OperationFailure("not authorized", code=13), CheckpointError),
    ],
    ids=repr,
)
def test_driver_errors_map_to_typed_errors(exc: Exception, kind: type[Exception]) -> None:
    error = driver_error(exc, "put", "db1:27017")
    assert type(error) is kind
    assert "during put" in str(error) and "db1:27017" in str(error)
    assert driver_error(ValueError("not ours"), "put", "db1:27017") is None
