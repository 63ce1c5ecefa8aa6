"""AgentflowCheckpointStorage beyond the framework's contract, on every backend:
costs in protocol calls, tenancy and sessions, ids, deletes, bad and hostile
input, saves cut short, concurrent savers, and what agentflow's tools see."""

from __future__ import annotations

import asyncio
import base64
import pickle
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowEvent, WorkflowMessage
from agent_framework.exceptions import WorkflowCheckpointException

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.testing import BackendHarness
from agentflow.errors import (
    CheckpointCorrupted,
    CheckpointNotSerializable,
    InvalidArgument,
    StoreUnavailable,
)
from agentflow.integrations.agent_framework import (
    AgentflowCheckpointStorage,
    CheckpointIdConflict,
    CheckpointLoadFailed,
    CheckpointNotFound,
    CheckpointTypeNotPermitted,
)
from agentflow.integrations.agent_framework.records import INDEX_THREAD, KEY
from tests.agent_framework_mongodb.hostile_types import SENTINEL_ENV, touch
from tests.integrations.agent_framework_stores import Recording


@pytest.fixture
async def recording(harness: BackendHarness) -> AsyncIterator[Recording]:
    async with harness.open(namespace="tenant-a") as checkpointer:
        yield Recording(checkpointer)


def _checkpoint(workflow: str = "wf", **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name=workflow, graph_signature_hash="sig", **fields)


async def _chain(storage: AgentflowCheckpointStorage, n: int) -> list[WorkflowCheckpoint]:
    saved: list[WorkflowCheckpoint] = []
    for i in range(n):
        previous = saved[-1].checkpoint_id if saved else None
        saved.append(_checkpoint(state={"i": i}, previous_checkpoint_id=previous))
        await storage.save(saved[-1])
    return saved


async def test_each_call_costs_a_fixed_number_of_protocol_calls(recording: Recording) -> None:
    storage = AgentflowCheckpointStorage(recording)
    saved = await _chain(storage, 30)
    recording.reset()
    await storage.save(_checkpoint(state={"i": 30}))
    assert recording.calls == {"put": 2}  # the id's index entry, then the checkpoint
    recording.reset()
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None and latest.state == {"i": 30}
    assert recording.calls == {"get": 1}
    cold = AgentflowCheckpointStorage(recording)
    recording.reset()
    assert (await cold.load(saved[3].checkpoint_id)).state == {"i": 3}
    assert recording.calls == {"get": 2}  # the index entry, then the checkpoint
    recording.reset()
    await cold.load(saved[3].checkpoint_id)
    assert recording.calls == {"get": 1}
    recording.reset()
    assert len(await cold.list_checkpoint_ids(workflow_name="wf")) == 31
    assert recording.calls == {"history": 1}


async def test_tenants_never_see_each_others_checkpoints(harness: BackendHarness) -> None:
    async with (
        harness.open(namespace="tenant-a") as a,
        harness.open(namespace="tenant-b") as b,
    ):
        mine, theirs = AgentflowCheckpointStorage(a), AgentflowCheckpointStorage(b)
        checkpoint = _checkpoint(state={"owner": "a"})
        await mine.save(checkpoint)
        assert await theirs.get_latest(workflow_name="wf") is None
        assert await theirs.list_checkpoints(workflow_name="wf") == []
        with pytest.raises(CheckpointNotFound):
            await theirs.load(checkpoint.checkpoint_id)
        assert await theirs.delete(checkpoint.checkpoint_id) is False
        await theirs.save(checkpoint)  # the same id is free in another namespace
        assert (await mine.load(checkpoint.checkpoint_id)).state == {"owner": "a"}


async def test_sessions_keep_runs_of_one_workflow_apart(recording: Recording) -> None:
    one = AgentflowCheckpointStorage(recording, session="run-1")
    two = AgentflowCheckpointStorage(recording, session="run-2")
    unbound = AgentflowCheckpointStorage(recording)
    checkpoint = _checkpoint()
    await one.save(checkpoint)
    assert one.thread_of("wf") == "wf\x1frun-1"
    for other in (two, unbound):
        assert await other.get_latest(workflow_name="wf") is None
        with pytest.raises(CheckpointNotFound):
            await other.load(checkpoint.checkpoint_id)
        assert await other.delete(checkpoint.checkpoint_id) is False
        with pytest.raises(CheckpointIdConflict):
            await other.save(checkpoint)  # ids are unique in the namespace
    assert [cp.checkpoint_id for cp in await one.list_checkpoints(workflow_name="wf")] == [
        checkpoint.checkpoint_id
    ]


async def test_saving_a_checkpoint_again_stores_nothing_new(recording: Recording) -> None:
    storage = AgentflowCheckpointStorage(recording)
    checkpoint = _checkpoint(state={"v": 1})
    await storage.save(checkpoint)
    assert await AgentflowCheckpointStorage(recording).save(checkpoint) == checkpoint.checkpoint_id
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [checkpoint.checkpoint_id]
    checkpoint.state["v"] = 2
    with pytest.raises(CheckpointIdConflict, match=checkpoint.checkpoint_id):
        await storage.save(checkpoint)
    other = _checkpoint("other-wf", checkpoint_id=checkpoint.checkpoint_id, state={"v": 1})
    with pytest.raises(CheckpointIdConflict):
        await storage.save(other)
    assert (await storage.load(checkpoint.checkpoint_id)).state == {"v": 1}
    assert await storage.list_checkpoint_ids(workflow_name="other-wf") == []


async def test_deleting_from_the_middle_and_the_top(recording: Recording) -> None:
    storage = AgentflowCheckpointStorage(recording)
    a, b, c, d = await _chain(storage, 4)
    assert await storage.delete(b.checkpoint_id) is True
    assert await storage.delete(b.checkpoint_id) is False
    with pytest.raises(CheckpointNotFound):
        await AgentflowCheckpointStorage(recording).load(b.checkpoint_id)
    ids = [a.checkpoint_id, c.checkpoint_id, d.checkpoint_id]
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ids
    for top, below in ((d, c), (c, a)):  # the second follows two deleted records down
        assert await storage.delete(top.checkpoint_id) is True
        latest = await AgentflowCheckpointStorage(recording).get_latest(workflow_name="wf")
        assert latest is not None and latest.checkpoint_id == below.checkpoint_id
    assert await storage.delete(a.checkpoint_id) is True
    assert await storage.get_latest(workflow_name="wf") is None
    assert await storage.list_checkpoints(workflow_name="wf") == []
    fresh = _checkpoint(state={"again": True})
    await storage.save(fresh)
    assert (await storage.get_latest(workflow_name="wf")) == fresh


async def test_bad_input_is_a_typed_error_and_stores_nothing(recording: Recording) -> None:
    storage = AgentflowCheckpointStorage(recording)
    bad: list[Any] = [
        {"workflow_name": "wf"},
        _checkpoint(""),
        _checkpoint("wf\x1fx"),
        _checkpoint(checkpoint_id=""),
        _checkpoint(checkpoint_id=7),
        _checkpoint(previous_checkpoint_id=3),
    ]
    for value in bad:
        with pytest.raises(InvalidArgument):
            await storage.save(value)
    for name in ("", "a\x1fb"):
        with pytest.raises(InvalidArgument):
            await storage.get_latest(workflow_name=name)
    with pytest.raises(InvalidArgument):
        await storage.get_latest(workflow_name=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        await storage.load(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        AgentflowCheckpointStorage(recording, session="")
    assert recording.calls["put"] == 0
    assert await recording.list_threads() == []


async def test_a_refused_checkpoint_stores_none_of_it_only_the_refusal(
    recording: Recording,
) -> None:
    storage = AgentflowCheckpointStorage(recording)
    refused = _checkpoint(state={"when": object()})
    with pytest.raises(CheckpointNotSerializable, match="not permitted"):
        await storage.save(refused)
    assert recording.calls["put"] == 1
    (record,) = [cp async for cp in recording.history("wf")]
    assert record.extra[KEY]["kind"] == "refused" and "payload" not in record.extra[KEY]
    assert record.state == {
        "refused_checkpoint_id": refused.checkpoint_id,
        "code": "checkpoint_not_serializable",
    }
    assert await storage.list_checkpoint_ids(workflow_name="wf") == []


async def test_a_thread_of_another_framework_is_refused_not_overwritten(
    recording: Recording,
) -> None:
    await recording.put(Checkpoint(thread="wf", step=0, state={"runtime": True}))
    storage = AgentflowCheckpointStorage(recording)
    with pytest.raises(CheckpointLoadFailed, match="not an Agent Framework checkpoint") as read:
        await storage.get_latest(workflow_name="wf")
    assert read.value.code == "checkpoint_corrupted"
    assert isinstance(read.value, WorkflowCheckpointException)
    assert isinstance(read.value.__cause__, CheckpointCorrupted)
    with pytest.raises(CheckpointCorrupted):
        await storage.save(_checkpoint())
    with pytest.raises(CheckpointLoadFailed):
        await storage.list_checkpoints(workflow_name="wf")
    assert [cp.state async for cp in recording.history("wf")] == [{"runtime": True}]


async def test_damaged_stored_bytes_raise(harness: BackendHarness, recording: Recording) -> None:
    assert harness.corrupt is not None
    storage = AgentflowCheckpointStorage(recording)
    checkpoint = _checkpoint()
    await storage.save(checkpoint)
    await harness.corrupt("tenant-a", "wf", 0)
    for read in (
        AgentflowCheckpointStorage(recording).load(checkpoint.checkpoint_id),
        storage.get_latest(workflow_name="wf"),
    ):
        with pytest.raises(CheckpointLoadFailed) as refused:
            await read
        assert refused.value.code == "checkpoint_corrupted" and not refused.value.retryable


class _Hostile:
    def __reduce__(self) -> Any:
        return (touch, ())


async def test_a_hostile_stored_payload_runs_nothing(
    recording: Recording, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sentinel = tmp_path / "touched"
    monkeypatch.setenv(SENTINEL_ENV, str(sentinel))
    storage = AgentflowCheckpointStorage(recording)
    checkpoint = _checkpoint()
    await storage.save(checkpoint)
    stored = await recording.get("wf", 0)
    assert stored is not None
    public = {**checkpoint.to_dict(), "state": {"boom": _Hostile()}}
    fields = {**stored.extra[KEY], "payload": base64.b64encode(pickle.dumps(public)).decode()}
    await recording.put(Checkpoint(thread="wf", step=0, state={}, extra={KEY: fields}))
    with pytest.raises(CheckpointTypeNotPermitted, match="not permitted") as refused:
        await AgentflowCheckpointStorage(recording).load(checkpoint.checkpoint_id)
    assert refused.value.__cause__ is not None and "corrupt" not in str(refused.value)
    assert refused.value.code == "checkpoint_type_not_permitted"
    assert not sentinel.exists()


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_save_cut_short_leaves_one_copy_after_a_retry(
    recording: Recording, when: str
) -> None:
    storage = AgentflowCheckpointStorage(recording)
    first = _checkpoint(state={"n": 1})
    await storage.save(first)
    checkpoint = _checkpoint(state={"n": 2}, previous_checkpoint_id=first.checkpoint_id)
    recording.lose_next_put(lambda cp: cp.thread == "wf", when)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailable):
        await storage.save(checkpoint)
    fresh = AgentflowCheckpointStorage(recording)
    if when == "before":  # the index entry names an empty step: the id reads as absent
        with pytest.raises(CheckpointNotFound):
            await fresh.load(checkpoint.checkpoint_id)
    assert await fresh.save(checkpoint) == checkpoint.checkpoint_id
    ids = await fresh.list_checkpoint_ids(workflow_name="wf")
    assert ids == [first.checkpoint_id, checkpoint.checkpoint_id]
    assert (await storage.load(checkpoint.checkpoint_id)).state == {"n": 2}


async def test_concurrent_savers_of_one_workflow_lose_nothing(harness: BackendHarness) -> None:
    async with harness.open(namespace="tenant-a") as checkpointer:
        storages = [AgentflowCheckpointStorage(checkpointer) for _ in range(4)]

        async def saves(storage: AgentflowCheckpointStorage, who: int) -> list[str]:
            return [await storage.save(_checkpoint(state={"who": who, "n": n})) for n in range(8)]

        saved = await asyncio.gather(*(saves(s, i) for i, s in enumerate(storages)))
        listed = await storages[0].list_checkpoints(workflow_name="wf")
        assert sorted(cp.checkpoint_id for cp in listed) == sorted(
            cid for ids in saved for cid in ids
        )
        for who, ids in enumerate(saved):  # each saver's own order is kept
            assert [cp.checkpoint_id for cp in listed if cp.state["who"] == who] == ids
        steps = [cp.step async for cp in checkpointer.history("wf")]
        assert steps == list(range(32))


async def test_agentflow_sees_a_waiting_workflow_as_interrupted(recording: Recording) -> None:
    storage = AgentflowCheckpointStorage(recording)
    request = WorkflowEvent.request_info(
        request_id="r-1", source_executor_id="approver", request_data="ok?", response_type=str
    )
    message = WorkflowMessage(data="draft", source_id="drafter", target_id="approver")
    broadcast = WorkflowMessage(data="fyi", source_id="intake")  # follows intake's edges
    waiting = _checkpoint(
        messages={"drafter": [message], "intake": [broadcast]},
        pending_request_info_events={"r-1": request},
        iteration_count=2,
    )
    await storage.save(waiting)
    stored = await recording.get("wf")
    assert stored is not None and stored.interrupted and stored.interrupt_node == "approver"
    assert stored.interrupt_payload == {
        "question": "1 pending request: str",
        "requests": [{"request_id": "r-1", "executor": "approver", "type": "str"}],
    }
    assert stored.next == ("(from intake)", "approver") and stored.ts == waiting.timestamp
    assert stored.state == {
        "workflow_name": "wf",
        "checkpoint_id": waiting.checkpoint_id,
        "previous_checkpoint_id": None,
        "iteration_count": 2,
        "messages": {"drafter": 1, "intake": 1},
        "pending_requests": ["r-1"],
    }
    await storage.save(_checkpoint(previous_checkpoint_id=waiting.checkpoint_id))
    threads = {info.thread: info.status for info in await recording.list_threads()}
    assert threads == {"wf": "done", INDEX_THREAD: "done"}
