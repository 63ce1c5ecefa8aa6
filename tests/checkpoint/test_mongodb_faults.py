"""MongoDB faults on mongods of the tests' own: a crash loses no acknowledged put, and a
replica set retries a put whose answer was lost exactly once.

Each server listens only on a unix-domain socket in its private directory, so
while one is down no other process can take its address.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import BulkWriteError, ConnectionFailure

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.errors import StoreUnavailable
from tests.backends.mongodb import private_mongod
from tests.support.mongod import MongodProcess

Doc = dict[str, Any]
#: Busy writers while the server is killed.
_LANES = 4


def _crash_and_restart(server: MongodProcess) -> None:
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait()
    server.proc = None
    server.start()


async def test_a_mongod_crash_loses_no_acknowledged_put() -> None:
    """kill -9 under four busy writers with the default write concern (journaled):
    every acknowledged put is there after the restart, whole; a put that raised
    StoreUnavailable is either absent or whole."""
    server = private_mongod()
    uri = server.uri + "&serverSelectionTimeoutMS=1000&connectTimeoutMS=1000"
    try:
        async with MongoCheckpointer(uri, database="faults") as cp:
            outcomes: dict[tuple[int, int], StoreUnavailable | None] = {}
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
                    if len(outcomes) >= 40:
                        busy.set()

            async def crash() -> None:
                await busy.wait()
                await asyncio.to_thread(_crash_and_restart, server)
                crashed.set()

            await asyncio.gather(crash(), *(writer(lane) for lane in range(_LANES)))
            in_flight = [e for e in outcomes.values() if e is not None]
            assert in_flight, "no call was in flight while mongod crashed"

            server.stop()
            with pytest.raises(StoreUnavailable) as down:
                await cp.put(make_checkpoint("lane-0", 10_000))
            assert server.socket is not None and server.socket in str(down.value)
            assert "during put" in str(down.value)
            with pytest.raises(StoreUnavailable):
                await cp.list_threads()
            server.start()
            await cp.put(make_checkpoint("lane-0", 10_001))

            for exc in [*in_flight, down.value]:
                assert isinstance(exc.__cause__, ConnectionFailure), repr(exc.__cause__)
                assert exc.retryable and exc.code == "store_unavailable"
            acknowledged = 0
            for lane in range(_LANES):
                stored = {c.step: c for c in [x async for x in cp.history(f"lane-{lane}")]}
                for (at, step), outcome in outcomes.items():
                    if at != lane:
                        continue
                    if outcome is None:
                        acknowledged += 1
                        assert step in stored, f"acknowledged put lane-{lane}:{step} was lost"
                    if step in stored:
                        assert stored[step].state == {"n": step} and stored[step].revision == 1
            assert acknowledged >= 40
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


async def _initiate(server: MongodProcess) -> None:
    async with AsyncMongoClient[Doc](server.uri) as client:
        member = {"_id": 0, "host": server.host}
        await client.admin.command("replSetInitiate", {"_id": "rs0", "members": [member]})
        for _ in range(600):  # an election takes well under the 30 s this allows
            if (await client.admin.command("hello")).get("isWritablePrimary"):
                return
            await asyncio.sleep(0.05)
    pytest.fail("the one-member replica set elected no primary")


async def _fail_next_write_after_writing(client: AsyncMongoClient[Doc], command: str) -> None:
    """The next ``command`` is applied, then answered with a retryable error."""
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
    server recognizes the retry: the revision counts one write, not two, and the
    summary is the step's. Without retryable writes (as on a standalone) the same
    fault surfaces as StoreUnavailable although the write landed."""
    await _initiate(replica_set)
    async with (
        AsyncMongoClient[Doc](replica_set.uri) as client,
        MongoCheckpointer(client=client, database="retry") as cp,
    ):
        await cp.setup()
        # A new step is one update command (checkpoint and summary); a stored step
        # adds a findAndModify and a summary update; a compare-and-set two updates.
        for step, if_revision, command in (
            (0, None, "update"),
            (0, None, "findAndModify"),
            (1, 0, "update"),
            (1, 1, "update"),
            (2, None, "update"),
        ):
            await _fail_next_write_after_writing(client, command)
            await cp.put(make_checkpoint("t", step, next=("n",)), if_revision=if_revision)
        revisions = [(c.step, c.revision) async for c in cp.history("t")]
        assert revisions == [(0, 2), (1, 2), (2, 1)]
        [summary] = await cp.list_threads()
        assert (summary.latest_step, summary.status) == (2, "running")

    async with (
        AsyncMongoClient[Doc](replica_set.uri + "&retryWrites=false") as client,
        MongoCheckpointer(client=client, database="retry") as cp,
    ):
        await _fail_next_write_after_writing(client, "update")
        with pytest.raises(StoreUnavailable) as info:
            await cp.put(make_checkpoint("t", 3))
        cause = info.value.__cause__
        assert isinstance(cause, BulkWriteError) and cause.details["writeConcernErrors"]
        landed = await cp.get("t", 3)
        assert landed is not None and landed.revision == 1
