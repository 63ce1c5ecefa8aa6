"""What a graph's ``Durability`` pins: resume policies, extensions, credential slots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.durable import CREDENTIAL_REDACTED, DurableError
from agentflow.runtime import (
    START,
    Durability,
    Graph,
    NodeContext,
    ThreadExists,
    ThreadNotFound,
)
from tests.runtime.graphs import approval_graph

SLOT = "/model/settings/extra_headers/authorization"


async def test_resume_policies() -> None:
    compiled = approval_graph().compile(MemoryCheckpointer())
    made = await compiled.run({"log": []})  # new, without a thread: a fresh key
    assert made.thread.startswith("checkpoint_") and made.status == "interrupted"
    with pytest.raises(ThreadExists):
        await compiled.run({"log": []}, thread=made.thread)
    with pytest.raises(ThreadNotFound):
        await compiled.run({"log": []}, thread="ghost", resume_policy="require_existing")
    with pytest.raises(DurableError) as info:
        await compiled.run({"log": []}, resume_policy="resume_if_present")
    assert info.value.code == "checkpoint_key_required"
    started = await compiled.run({"log": []}, thread="t", resume_policy="resume_if_present")
    assert started.status == "interrupted"
    again = await compiled.run({"log": ["x"]}, thread="t", resume_policy="resume_if_present")
    assert again.status == "interrupted" and again.step == started.step  # nothing answered
    existing = await compiled.run({}, thread="t", resume_policy="require_existing")
    assert existing.checkpoint == again.checkpoint
    with pytest.raises(DurableError) as bad:
        await compiled.run({}, thread="t", resume_policy="sometimes")
    assert bad.value.code == "checkpoint_policy_invalid"


async def test_a_thread_run_with_other_settings_is_refused_before_any_call() -> None:
    store = MemoryCheckpointer()
    await approval_graph().compile(store).run({"log": []}, thread="t")
    strict = approval_graph()
    strict.durability = Durability(ambiguous_tool_policy="retry_idempotent_only")
    with pytest.raises(DurableError) as info:
        await strict.compile(store).resume("t", "yes")
    assert info.value.code == "checkpoint_definition_mismatch"


class Audit:
    """An extension: counts what its run did; its state travels with every step."""

    namespace = "com.example.audit"
    version = "1"
    required = True

    def __init__(self) -> None:
        self.seen: list[str] = []

    def snapshot(self) -> Any:
        return {"seen": self.seen}

    def restore(self, state: Any) -> None:
        self.seen = list(state["seen"])


async def _audited(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    audit = ctx.extension("com.example.audit")
    assert isinstance(audit, Audit)
    audit.seen.append(f"step {ctx.step}")
    answer = ctx.interrupt("go on?") if ctx.step == 1 else None
    return {"answer": answer, "seen": list(audit.seen)}


def _audit_graph(durability: Durability) -> Graph:
    graph = Graph("audited", durability=durability)
    return graph.add_node("n", _audited).add_edge(START, "n")


async def test_extension_state_is_saved_with_each_step_and_restored_on_resume() -> None:
    store = MemoryCheckpointer()
    compiled = _audit_graph(Durability(extensions=[Audit])).compile(store)
    await compiled.run({}, thread="t")
    suspended = await store.get("t")
    assert suspended is not None
    assert suspended.extra["extensions"]["com.example.audit"] == {
        "version": "1",
        "required": True,
        "state": {"seen": ["step 1"]},
    }
    other = _audit_graph(Durability(extensions=[Audit])).compile(store)  # another process
    result = await other.resume("t", "yes")
    assert result.state["seen"] == ["step 1", "step 2"]


async def test_a_required_extension_missing_or_of_another_version_refuses_the_resume() -> None:
    store = MemoryCheckpointer()
    await _audit_graph(Durability(extensions=[Audit])).compile(store).run({}, thread="t")
    suspended = await store.get("t")
    assert suspended is not None
    stored = dict(suspended.extra)
    stored["extensions"] = {"com.example.audit": {"version": "2", "required": True, "state": {}}}
    await store.put(replace(suspended, extra=stored), if_revision=suspended.revision)
    with pytest.raises(DurableError) as info:
        await _audit_graph(Durability(extensions=[Audit])).compile(store).resume("t", "yes")
    assert info.value.code == "checkpoint_extension_version_mismatch"
    needs = Durability(required_extensions=["com.example.ledger"])
    with pytest.raises(DurableError) as missing:
        await _audit_graph(needs).compile(MemoryCheckpointer()).run({}, thread="u")
    assert missing.value.code == "checkpoint_extension_missing"


async def test_an_extension_too_large_is_refused() -> None:
    class Big(Audit):
        def snapshot(self) -> Any:
            return {"seen": ["x" * 70_000]}

    with pytest.raises(DurableError) as info:
        await (
            _audit_graph(Durability(extensions=[Big]))
            .compile(MemoryCheckpointer())
            .run({}, thread="t")
        )
    assert info.value.code == "checkpoint_extension_entry_too_large"


def _model(key: str) -> dict[str, Any]:
    return {"provider": "acme", "settings": {"extra_headers": {"authorization": key}}}


async def _uses_key(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    key = ctx.credential(SLOT)
    ctx.interrupt("continue?")
    return {"used": key[:6]}


def _keyed(key: str) -> Graph:
    durability = Durability(model=_model(key), credential_slots=[SLOT])
    return Graph("keyed", durability=durability).add_node("n", _uses_key).add_edge(START, "n")


async def test_credential_slots_are_redacted_supplied_live_and_keep_the_digest() -> None:
    store = MemoryCheckpointer()
    first = _keyed("Bearer one").compile(store)
    await first.run({}, thread="t")
    record = await store.load("t")
    assert record is not None
    headers = record.run_definition["model"]["settings"]["extra_headers"]
    assert headers == {"authorization": CREDENTIAL_REDACTED}
    rotated = _keyed("Bearer two").compile(store)
    assert rotated.definition.digest == first.definition.digest
    assert (await rotated.resume("t", "yes")).state["used"] == "Bearer"
    with pytest.raises(DurableError) as info:
        _keyed(CREDENTIAL_REDACTED).compile(store)
    assert info.value.code == "checkpoint_credential_not_supplied"
    undeclared = Durability(model=_model("Bearer three"))
    with pytest.raises(DurableError) as leak:
        Graph("leaky", durability=undeclared).add_node("n", _uses_key).add_edge(START, "n").compile(
            store
        )
    assert leak.value.code == "checkpoint_definition_unstable"
