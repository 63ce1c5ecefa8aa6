"""OpenTelemetry: spans of runs, steps and calls, their events, and the metrics.

Recorded with the SDK's in-memory exporter and reader, as an application that
configures OpenTelemetry would see them. The SDK's providers are installed as
the global ones for each test and removed after it (as opentelemetry-test-utils
does), so no other test runs with telemetry on.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util._once import Once

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.durable import ReconciliationDecision
from agentflow.runtime import START, Graph, NodeContext, StepClaimed, ToolCall, telemetry


def _reset_globals() -> None:
    """Forget the global providers (the API lets a process set them once)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    metrics_internal._PROXY_METER_PROVIDER = metrics_internal._ProxyMeterProvider()
    telemetry._telemetry.cache_clear()


@dataclass
class Captured:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans.get_finished_spans() if span.name == name]

    def points(self, metric: str) -> dict[tuple[tuple[str, Any], ...], float]:
        """The metric's data points: attributes -> value (sum or count)."""
        found: dict[tuple[tuple[str, Any], ...], float] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for recorded in scope.metrics:
                    if recorded.name != metric:
                        continue
                    for point in recorded.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = point.count  # type: ignore[union-attr]
                        found[tuple(sorted((point.attributes or {}).items()))] = value
        return found


@pytest.fixture
def otel() -> Iterator[Captured]:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    metering = MeterProvider(metric_readers=[reader])
    _reset_globals()
    trace.set_tracer_provider(tracing)
    metrics.set_meter_provider(metering)
    try:
        yield Captured(exporter, reader)
    finally:
        _reset_globals()
        tracing.shutdown()
        metering.shutdown()


def _charging(tool: Any) -> Graph:
    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"receipt": await ctx.tool("charge", {"cents": 500}, tool)}

    async def notify(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"sent": True}

    graph = Graph("telemetry").add_node("charge", charge).add_node("notify", notify)
    return graph.add_edge(START, "charge").add_edge("charge", "notify")


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_run_is_a_span_over_its_steps_over_their_calls(otel: Captured) -> None:
    seen: list[ToolCall] = []

    def tool(call: ToolCall) -> dict[str, str]:
        seen.append(call)
        with trace.get_tracer("the-tool").start_as_current_span("the-tool.request"):
            return {"charge": "ch_1"}

    result = await _charging(tool).compile(MemoryCheckpointer()).run({}, thread="t-1")
    assert result.status == "done"
    [run] = otel.finished("agentflow.run")
    steps = otel.finished("agentflow.step")
    [call] = otel.finished("agentflow.call")
    [inner] = otel.finished("the-tool.request")
    assert _attributes(run) == {
        "agentflow.thread": "t-1",
        "agentflow.graph": "telemetry",
        "agentflow.outcome": "done",
    }
    assert [_attributes(s)["agentflow.step"] for s in steps] == [1, 2]
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in steps)
    assert call.parent is not None and call.parent.span_id == steps[0].context.span_id
    assert _attributes(call) == {
        "agentflow.thread": "t-1",
        "agentflow.step": 1,
        "agentflow.operation_id": seen[0].operation_id,
        "agentflow.attempt": 1,
        "agentflow.call.kind": "tool",
        "agentflow.call.name": "charge",
        "agentflow.outcome": "succeeded",
    }
    # the tool's own span joins the run's trace, under the call
    assert inner.parent is not None and inner.parent.span_id == call.context.span_id
    assert inner.context.trace_id == run.context.trace_id
    # the W3C context handed to the tool names the call's span
    traceparent = seen[0].trace_context["traceparent"]
    assert traceparent.split("-")[1:3] == [
        f"{call.context.trace_id:032x}",
        f"{call.context.span_id:016x}",
    ]
    assert otel.points("agentflow.steps") == {(): 2}
    assert otel.points("agentflow.calls") == {(("agentflow.outcome", "succeeded"),): 1}
    writes = otel.points("agentflow.store.commit.duration")
    assert writes and all(count >= 1 for count in writes.values())


async def test_an_ambiguous_call_and_its_reconciliation_are_span_events(otel: Captured) -> None:
    def lost_reply(call: ToolCall) -> dict[str, str]:
        raise TimeoutError("the reply was lost")  # it may have charged

    store = MemoryCheckpointer()
    compiled = _charging(lost_reply).compile(store)
    result = await compiled.run({}, thread="t-2")
    assert result.status == "reconciliation_required"
    [call] = otel.finished("agentflow.call")
    [run] = otel.finished("agentflow.run")
    assert _attributes(call)["agentflow.outcome"] == "ambiguous"
    assert [event.name for event in call.events] == ["agentflow.ambiguous_call"]
    assert _attributes(run)["agentflow.outcome"] == "reconciliation_required"
    assert otel.points("agentflow.calls.ambiguous") == {(): 1}
    assert otel.points("agentflow.calls") == {(("agentflow.outcome", "ambiguous"),): 1}
    assert otel.points("agentflow.steps") == {}  # the step was abandoned, not stored

    [waiting] = result.observations
    decision = ReconciliationDecision.replay_result({"charge": "ch_9"})
    await compiled.reconcile("t-2", waiting.operation_id, decision, attempt=1)
    [decided] = otel.finished("agentflow.reconcile")
    [event] = decided.events
    assert event.name == "agentflow.reconciliation"
    assert dict(event.attributes or {}) == {
        "agentflow.thread": "t-2",
        "agentflow.operation_id": waiting.operation_id,
        "agentflow.decision": "replay_success",
        "agentflow.decided_by": "operator",
    }
    resumed = await compiled.resume("t-2")
    assert resumed.status == "done"
    replayed = otel.finished("agentflow.call")[-1]
    assert _attributes(replayed)["agentflow.outcome"] == "replayed"


async def test_without_an_sdk_nothing_is_recorded_and_no_context_is_handed_out() -> None:
    _reset_globals()  # the API's proxy providers: no SDK configured
    seen: list[ToolCall] = []
    recorders: list[telemetry.Recorder] = []

    def tool(call: ToolCall) -> dict[str, str]:
        seen.append(call)
        recorders.append(telemetry.current())
        return {"charge": "ch_1"}

    result = await _charging(tool).compile(MemoryCheckpointer()).run({}, thread="t-3")
    assert result.status == "done"
    assert recorders == [telemetry.OFF] and seen[0].trace_context == {}


def test_without_the_api_installed_a_run_records_nothing() -> None:
    script = textwrap.dedent(
        """
        import asyncio, json, sys
        sys.modules["opentelemetry"] = None  # not installed
        from agentflow.checkpoint.memory import MemoryCheckpointer
        from agentflow.runtime import START, Graph, telemetry

        seen = []

        async def node(state, ctx):
            seen.append(telemetry.current() is telemetry.OFF)
            receipt = await ctx.tool("t", {}, lambda call: dict(call.trace_context))
            return {"receipt": receipt}

        graph = Graph("g").add_node("n", node).add_edge(START, "n")
        result = asyncio.run(graph.compile(MemoryCheckpointer()).run({}, thread="t"))
        print(json.dumps([result.status, seen, result.state["receipt"]]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["done", [True], {}]


def test_a_save_agent_framework_refused_is_counted(otel: Captured) -> None:
    from agentflow.integrations.agent_framework.refusals import log_refusal

    log_refusal("checkpoint_type_not_permitted", "wf", "cp-1", "a type outside the allow-list")
    log_refusal("checkpoint_type_not_permitted", "wf", "cp-2", "a type outside the allow-list")
    counted = otel.points("agentflow.checkpoint.refused_saves")
    assert counted == {(("agentflow.code", "checkpoint_type_not_permitted"),): 2}


async def test_lease_renewals_are_counted_and_a_lost_lease_is_an_event(otel: Captured) -> None:
    lease = timedelta(seconds=0.3)

    async def slow(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await asyncio.sleep(lease.total_seconds() * 1.5)  # the heartbeat renews meanwhile
        return {"slow": True}

    async def stall(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        time.sleep(lease.total_seconds() * 1.5)  # noqa: ASYNC251 - the loop stalls: no heartbeat
        return {"receipt": await ctx.tool("charge", {}, lambda call: {"ok": True})}

    graph = Graph("leases").add_node("slow", slow).add_node("stall", stall)
    graph = graph.add_edge(START, "slow").add_edge("slow", "stall")
    with pytest.raises(StepClaimed):  # the renewal before the call is refused: fenced
        await graph.compile(MemoryCheckpointer(), claim_ttl=lease).run({}, thread="t-4")
    [renewals] = otel.points("agentflow.lease.renewals").values()
    assert renewals >= 2
    assert otel.points("agentflow.lease.losses") == {(): 1}
    [run] = otel.finished("agentflow.run")
    events = [e for span in otel.spans.get_finished_spans() for e in span.events]
    [lost] = [e for e in events if e.name == "agentflow.lease_lost"]
    assert dict(lost.attributes or {})["agentflow.thread"] == "t-4"
    assert otel.finished("agentflow.call") == []  # the call never went out
    assert run.status.status_code is StatusCode.ERROR
