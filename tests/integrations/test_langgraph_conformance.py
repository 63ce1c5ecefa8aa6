"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) on every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from agentflow.checkpoint.testing import BackendHarness
from agentflow.integrations.langgraph import AgentflowSaver


async def test_every_capability_passes(harness: BackendHarness) -> None:
    async def saver() -> AsyncIterator[AgentflowSaver]:
        async with harness.open(namespace="conformance") as checkpointer:
            yield AgentflowSaver(checkpointer)

    registered = checkpointer_test(name=f"AgentflowSaver[{harness.name}]")(saver)
    report = await validate(registered)
    summary = {name: (r.passed, r.tests_passed, r.failures) for name, r in report.results.items()}
    print(f"{registered.name}: {report.conformance_level()} {summary}")
    assert set(report.results) == {cap.value for cap in ALL_CAPABILITIES}
    for name, result in report.results.items():
        assert result.detected, f"{name} is not implemented"
        assert result.passed, f"{name}: {result.failures}"
        assert result.tests_failed == 0 and result.tests_passed > 0
    assert report.passed_all()
