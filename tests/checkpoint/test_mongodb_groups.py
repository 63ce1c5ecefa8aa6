"""Group commit on MongoDB: the new steps put in one loop turn go as one ordered command,
and each put still gets exactly the answer it would have had alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pymongo import AsyncMongoClient

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.durable.errors import RevisionConflict
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LAPSED_MS, take
from agentflow.errors import CheckpointConflict, CheckpointError
from tests.backends.mongodb import Commands, Doc, MongoStore
from tests.backends.mongodb import scratch as scratch_body

scratch = pytest.fixture(scratch_body)


@pytest.fixture
async def watched(scratch: MongoStore) -> AsyncIterator[tuple[MongoCheckpointer, Commands]]:
    """A store on a client whose commands are recorded."""
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    try:
        async with MongoCheckpointer(client=client, database=scratch.database) as store:
            await store.setup()
            commands.sent.clear()
            yield store, commands
    finally:
        await client.close()


def _updates(commands: Commands) -> list[Doc]:
    return [body for name, body in commands.sent if name == "update"]


async def _listed(store: MongoCheckpointer) -> dict[str, int]:
    return {info.thread: info.latest_step for info in await store.list_threads(limit=100)}


async def test_puts_of_one_loop_turn_are_one_command(
    watched: tuple[MongoCheckpointer, Commands],
) -> None:
    store, commands = watched
    threads = [f"t{i}" for i in range(8)]
    await asyncio.gather(*(store.put(make_checkpoint(t, 3, state={"t": t})) for t in threads))
    (update,) = _updates(commands)
    assert update["ordered"] is True and update["writeConcern"] == {"j": True}
    # each put's checkpoint, then its summary, in the order the puts came
    steps = [statement["q"]["_id"] for statement in update["updates"]]
    assert steps == [key for t in threads for key in ({"n": "", "t": t, "s": 3}, {"n": "", "t": t})]
    for t in threads:
        stored = await store.get(t)
        assert stored is not None and stored.state == {"t": t} and stored.revision == 1
    assert await _listed(store) == dict.fromkeys(threads, 3)
    commands.sent.clear()
    await store.put(make_checkpoint("t0", 4))  # alone: its own command, at once
    assert len(_updates(commands)) == 1
    assert await _listed(store) == {**dict.fromkeys(threads, 3), "t0": 4}


async def test_a_put_the_server_refuses_fails_alone_and_the_later_ones_go_again(
    scratch: MongoStore, watched: tuple[MongoCheckpointer, Commands]
) -> None:
    store, commands = watched
    # the server refuses any checkpoint of thread "refused"
    validator = {"t": {"$ne": "refused"}}
    await scratch.client[scratch.database].command(
        "collMod", "checkpoints", validator=validator, validationAction="error"
    )
    first, refused, last = await asyncio.gather(
        store.put(make_checkpoint("a", 0)),
        store.put(make_checkpoint("refused", 0)),
        store.put(make_checkpoint("b", 0)),
        return_exceptions=True,
    )
    assert first == "a:0" and last == "b:0"
    assert isinstance(refused, CheckpointError) and "121" in str(refused)
    # one command stopped at the refused statement; the put after it went again
    assert [len(update["updates"]) for update in _updates(commands)] == [6, 2]
    assert await store.get("refused") is None
    assert await _listed(store) == {"a": 0, "b": 0}


async def test_a_refused_step_commit_in_a_shared_command_writes_nothing_of_its_own(
    watched: tuple[MongoCheckpointer, Commands],
) -> None:
    store, commands = watched
    await store.put(make_checkpoint("t", 0))
    await store.create(make_record("t"))
    stale = await take(store, "owner-a", key="t", lease_ms=LAPSED_MS)
    await store.record_operations(stale, [make_tool_entry("t", 1).start()], claim_token="owner-a")
    commands.sent.clear()
    before, commit, after = await asyncio.gather(
        store.put(make_checkpoint("a", 0)),
        store.commit_step(make_checkpoint("t", 1), stale, [], claim_token="owner-a"),
        store.put(make_checkpoint("b", 0)),
        return_exceptions=True,
    )
    assert before == "a:0" and after == "b:0"
    assert isinstance(commit, RevisionConflict)  # the guard's refusal, read as when alone
    assert [len(update["updates"]) for update in _updates(commands)] == [7, 2]
    assert await store.get("t", 1) is None
    assert await _listed(store) == {"a": 0, "b": 0, "t": 0}


async def test_a_lost_create_in_a_shared_command_conflicts_and_keeps_the_winner(
    watched: tuple[MongoCheckpointer, Commands],
) -> None:
    store, commands = watched
    await store.put(make_checkpoint("t", 5, state={"won": True}))
    commands.sent.clear()
    fresh, lost = await asyncio.gather(
        store.put(make_checkpoint("u", 0)),
        store.put(make_checkpoint("t", 5, state={"won": False}), if_revision=0),
        return_exceptions=True,
    )
    assert fresh == "u:0"
    assert isinstance(lost, CheckpointConflict) and lost.actual == 1
    assert len(_updates(commands)) == 1
    stored = await store.get("t")
    assert stored is not None and stored.state == {"won": True} and stored.revision == 1
    assert await _listed(store) == {"t": 5, "u": 0}
