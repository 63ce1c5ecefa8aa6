"""Agent Framework's storage contract, as its own conformance suite states it, on every backend.

Each test here is one case of ``test_checkpoint_storage_conformance.py`` in
microsoft/agent-framework (ownership of loaded and saved copies, filtering by
workflow name, the missing-id error), run on AgentflowCheckpointStorage over
each agentflow backend. The suite's case for a value that ``copy.deepcopy``
refuses but pickle takes uses a class with its own ``__reduce__``: the
restricted codec refuses such hooks by design, so that case is checked as a
refusal, and the property it protects (a pickle round trip, never a deepcopy)
is checked with a class without hooks.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException, WorkflowEvent
from agent_framework import WorkflowMessage as Message

from agent_framework_mongodb import MongoDBSerializationError
from agentflow.checkpoint.testing import BackendHarness
from agentflow.errors import CheckpointNotSerializable
from agentflow.integrations.agent_framework import AgentflowCheckpointStorage, CheckpointStale

ALLOWED = (f"{__name__}:RefusesDeepcopy", f"{__name__}:ReducesItself")


@dataclass
class RefusesDeepcopy:
    value: str

    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError("no deepcopy of this one")


@dataclass
class ReducesItself(RefusesDeepcopy):
    def __reduce__(self) -> Any:
        return (ReducesItself, (self.value,))


@pytest.fixture
async def storage(harness: BackendHarness) -> AsyncIterator[AgentflowCheckpointStorage]:
    async with harness.open(namespace="af-conformance") as checkpointer:
        yield AgentflowCheckpointStorage(checkpointer, allowed_checkpoint_types=ALLOWED)


def _checkpoint(workflow: str = "wf", **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name=workflow, graph_signature_hash="sig", **fields)


async def test_a_loaded_checkpoint_is_the_callers_own(storage: AgentflowCheckpointStorage) -> None:
    saved = await storage.save(_checkpoint(state={"key": "kept"}))
    (await storage.load(saved)).state["key"] = "changed"
    assert (await storage.load(saved)).state["key"] == "kept"


async def test_two_loads_give_independent_objects(storage: AgentflowCheckpointStorage) -> None:
    saved = await storage.save(_checkpoint(state={"key": "kept"}))
    first, second = await storage.load(saved), await storage.load(saved)
    first.state["key"] = "changed"
    assert second.state["key"] == "kept"


async def test_the_latest_checkpoint_is_the_callers_own(
    storage: AgentflowCheckpointStorage,
) -> None:
    await storage.save(_checkpoint(state={"key": "kept"}))
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None
    latest.state["key"] = "changed"
    again = await storage.get_latest(workflow_name="wf")
    assert again is not None and again.state["key"] == "kept"


async def test_listed_checkpoints_are_the_callers_own(storage: AgentflowCheckpointStorage) -> None:
    for value in ("one", "two"):
        await storage.save(_checkpoint(state={"key": value}))
    listed = await storage.list_checkpoints(workflow_name="wf")
    listed[0].state["key"] = "changed"
    assert [cp.state["key"] for cp in await storage.list_checkpoints(workflow_name="wf")] == [
        "one",
        "two",
    ]


async def test_save_stores_the_checkpoint_as_it_was_at_the_call(
    storage: AgentflowCheckpointStorage,
) -> None:
    checkpoint = _checkpoint(state={"key": "kept", "nested": {"deep": {"value": "kept"}}})
    saved = await storage.save(checkpoint)
    checkpoint.state["key"] = "changed"
    checkpoint.state["nested"]["deep"]["value"] = "changed"
    loaded = await storage.load(saved)
    assert loaded.state == {"key": "kept", "nested": {"deep": {"value": "kept"}}}


async def test_listing_filters_by_workflow_name(storage: AgentflowCheckpointStorage) -> None:
    for workflow, signature in (("wf-1", "a"), ("wf-2", "b"), ("wf-1", "c")):
        await storage.save(
            WorkflowCheckpoint(workflow_name=workflow, graph_signature_hash=signature)
        )
    first = await storage.list_checkpoints(workflow_name="wf-1")
    assert [cp.graph_signature_hash for cp in first] == ["a", "c"]
    second = await storage.list_checkpoints(workflow_name="wf-2")
    assert [(cp.workflow_name, cp.graph_signature_hash) for cp in second] == [("wf-2", "b")]
    assert await storage.list_checkpoint_ids(workflow_name="wf-1") == [
        cp.checkpoint_id for cp in first
    ]


async def test_an_unknown_workflow_has_no_latest(storage: AgentflowCheckpointStorage) -> None:
    assert await storage.get_latest(workflow_name="never-saved") is None
    await storage.save(_checkpoint("other"))
    assert await storage.get_latest(workflow_name="never-saved") is None


async def test_a_missing_id_raises_the_frameworks_checkpoint_error(
    storage: AgentflowCheckpointStorage,
) -> None:
    with pytest.raises(WorkflowCheckpointException):
        await storage.load("no-such-id")


async def test_save_returns_the_checkpoint_id(storage: AgentflowCheckpointStorage) -> None:
    checkpoint = _checkpoint()
    assert await storage.save(checkpoint) == checkpoint.checkpoint_id


async def test_changing_a_loaded_nested_state_leaves_the_store_alone(
    storage: AgentflowCheckpointStorage,
) -> None:
    saved = await storage.save(_checkpoint(state={"nested": {"deep": {"value": "kept"}}}))
    (await storage.load(saved)).state["nested"]["deep"]["value"] = "changed"
    assert (await storage.load(saved)).state["nested"]["deep"]["value"] == "kept"


async def test_changing_a_loaded_message_leaves_the_store_alone(
    storage: AgentflowCheckpointStorage,
) -> None:
    message = Message(source_id="a", target_id="b", data="kept")
    saved = await storage.save(_checkpoint(messages={"a": [message]}))
    (await storage.load(saved)).messages["a"][0].data = "changed"
    assert (await storage.load(saved)).messages["a"][0].data == "kept"


async def test_changing_a_loaded_pending_event_leaves_the_store_alone(
    storage: AgentflowCheckpointStorage,
) -> None:
    saved = await storage.save(
        _checkpoint(pending_request_info_events={"r1": WorkflowEvent(type="data", data="kept")})
    )
    (await storage.load(saved)).pending_request_info_events["r1"].data = "changed"
    assert (await storage.load(saved)).pending_request_info_events["r1"].data == "kept"


async def test_changing_loaded_metadata_leaves_the_store_alone(
    storage: AgentflowCheckpointStorage,
) -> None:
    saved = await storage.save(_checkpoint(metadata={"nested": {"value": "kept"}}))
    (await storage.load(saved)).metadata["nested"]["value"] = "changed"
    assert (await storage.load(saved)).metadata["nested"]["value"] == "kept"


async def test_a_value_deepcopy_refuses_round_trips_through_the_codec(
    storage: AgentflowCheckpointStorage,
) -> None:
    value = RefusesDeepcopy("kept")
    with pytest.raises(TypeError, match="no deepcopy"):
        copy.deepcopy(value)
    saved = await storage.save(_checkpoint(state={"custom": value}))
    loaded = await storage.load(saved)
    assert type(loaded.state["custom"]) is RefusesDeepcopy and loaded.state["custom"] == value
    loaded.state["custom"].value = "changed"
    assert (await storage.load(saved)).state["custom"].value == "kept"


async def test_a_class_with_its_own_reduce_is_refused_by_design(
    storage: AgentflowCheckpointStorage,
) -> None:
    """The suite's own case: loading would call ``ReducesItself`` with stored
    arguments, code an attacker who can write the store could choose."""
    with pytest.raises(CheckpointNotSerializable, match="wf") as refused:
        await storage.save(_checkpoint(state={"custom": ReducesItself("x")}))
    assert isinstance(refused.value.__cause__, MongoDBSerializationError)
    # Nothing of it is stored; the refusal is, so the latest read says so.
    assert await storage.list_checkpoint_ids(workflow_name="wf") == []
    with pytest.raises(CheckpointStale) as stale:
        await storage.get_latest(workflow_name="wf")
    assert stale.value.latest is None
