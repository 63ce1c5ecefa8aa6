"""OpenTelemetry traces and metrics of a graph's runs, on ``opentelemetry-api`` alone.

The runtime calls a few hooks (a run, a step, a journaled call, a lease event,
a store write) on :func:`current`, a context variable set for the length of
each ``run``/``resume`` call. What the hooks cost is decided there, once per
call, not in every hook:

- without ``opentelemetry-api`` installed, or with no SDK configured (the API's
  proxy providers stand in), :func:`current` is :data:`OFF`, whose hooks do
  nothing: no span objects, no context switches, no attribute dictionaries;
- with a tracer or meter provider configured, the hooks record spans and
  instruments from the global providers, which the application owns.

Spans run as the current span, so a tool's or model client's own spans join the
run's trace without help, and :attr:`~agentflow.runtime.ToolCall.trace_context`
carries the W3C headers to a call that leaves the process.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.trace import Span, Tracer

    from agentflow.durable.run.journal import OperationJournalEntry

__all__ = [
    "OFF",
    "CallSpan",
    "Recorder",
    "Telemetry",
    "current",
    "recording",
    "refused_save",
]

#: The instrumentation scope every span and instrument is reported under.
SCOPE: Final = "agentflow"

_THREAD: Final = "agentflow.thread"
_STEP: Final = "agentflow.step"
_OPERATION: Final = "agentflow.operation_id"
_ATTEMPT: Final = "agentflow.attempt"
_OUTCOME: Final = "agentflow.outcome"


class CallSpan:
    """One journaled call's span: the hooks set its outcome when it is known."""

    __slots__ = ("_span",)

    def __init__(self, span: Span | None) -> None:
        self._span = span

    @property
    def trace_context(self) -> Mapping[str, str]:
        """The W3C trace context headers (``traceparent``, ``tracestate``) of this
        call's span, for a call that leaves the process; empty when not recording."""
        if self._span is None:
            return {}
        from opentelemetry import propagate

        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier


class Recorder:
    """The hooks, doing nothing: what runs when no OpenTelemetry SDK is configured.

    Its context managers are made once and reused, so a hook costs a method call."""

    __slots__ = ()

    def step(self, thread: str, step: int) -> contextlib.AbstractContextManager[None]:
        return _NOTHING

    def call(
        self, thread: str, step: int, entry: OperationJournalEntry, name: str
    ) -> contextlib.AbstractContextManager[CallSpan]:
        """Around one journaled call of ``entry`` (``name``: the tool or model)."""
        return _NO_CALL

    def call_outcome(self, span: CallSpan, outcome: str) -> None:
        """``outcome``: ``succeeded``, ``failed``, ``ambiguous`` or ``replayed``."""

    def lease_renewed(self, thread: str) -> None:
        pass

    def lease_lost(self, thread: str, why: str) -> None:
        pass

    def reconciled(self, thread: str, operation_id: str, decision: str, by: str) -> None:
        pass

    def store_write(self, operation: str) -> contextlib.AbstractContextManager[None]:
        """Around one write of the run to its store (its commit latency)."""
        return _NOTHING


_NOTHING: Final = contextlib.nullcontext()
_NO_CALL: Final = contextlib.nullcontext(CallSpan(None))

#: The recorder that records nothing.
OFF: Final = Recorder()


class Telemetry(Recorder):
    """The hooks over the global OpenTelemetry providers."""

    __slots__ = (
        "_ambiguous",
        "_calls",
        "_losses",
        "_refusals",
        "_renewals",
        "_steps",
        "_tracer",
        "_writes",
    )

    def __init__(self) -> None:
        from opentelemetry import metrics, trace

        from agentflow import __version__

        self._tracer: Tracer = trace.get_tracer(SCOPE, __version__)
        meter = metrics.get_meter(SCOPE, __version__)
        self._steps: Counter = meter.create_counter(
            "agentflow.steps", unit="{step}", description="Graph steps stored."
        )
        self._calls: Counter = meter.create_counter(
            "agentflow.calls", unit="{call}", description="Journaled calls, by outcome."
        )
        self._ambiguous: Counter = meter.create_counter(
            "agentflow.calls.ambiguous",
            unit="{call}",
            description="Journaled calls whose outcome is unknown (they may have acted).",
        )
        self._renewals: Counter = meter.create_counter(
            "agentflow.lease.renewals", unit="{renewal}", description="Lease renewals granted."
        )
        self._losses: Counter = meter.create_counter(
            "agentflow.lease.losses", unit="{loss}", description="Leases lost or refused."
        )
        self._refusals: Counter = meter.create_counter(
            "agentflow.checkpoint.refused_saves",
            unit="{save}",
            description="Checkpoint saves a framework adapter refused, by stable code.",
        )
        self._writes: Histogram = meter.create_histogram(
            "agentflow.store.commit.duration",
            unit="s",
            description="How long a run's write to its store took, by operation.",
        )

    @contextlib.contextmanager
    def run(self, span_name: str, graph: str | None, thread: str) -> Iterator[dict[str, str]]:
        """Around one call of the graph (see :func:`recording`)."""
        attributes = {_THREAD: thread}
        if graph is not None:
            attributes["agentflow.graph"] = graph
        with self._tracer.start_as_current_span(span_name, attributes=attributes) as span:
            result: dict[str, str] = {}
            try:
                yield result
            finally:
                if "outcome" in result:
                    span.set_attribute(_OUTCOME, result["outcome"])

    @contextlib.contextmanager
    def step(self, thread: str, step: int) -> Iterator[None]:
        attributes: dict[str, str | int] = {_THREAD: thread, _STEP: step}
        with self._tracer.start_as_current_span("agentflow.step", attributes=attributes):
            yield
        self._steps.add(1)

    @contextlib.contextmanager
    def call(
        self, thread: str, step: int, entry: OperationJournalEntry, name: str
    ) -> Iterator[CallSpan]:
        attributes: dict[str, str | int] = {
            _THREAD: thread,
            _STEP: step,
            _OPERATION: entry.operation_id,
            _ATTEMPT: entry.attempt,
            "agentflow.call.kind": entry.kind.value,
            "agentflow.call.name": name,
        }
        with self._tracer.start_as_current_span("agentflow.call", attributes=attributes) as span:
            yield CallSpan(span)

    def call_outcome(self, span: CallSpan, outcome: str) -> None:
        self._calls.add(1, {_OUTCOME: outcome})
        if span._span is not None:
            span._span.set_attribute(_OUTCOME, outcome)
            if outcome == "ambiguous":
                span._span.add_event("agentflow.ambiguous_call")
        if outcome == "ambiguous":
            self._ambiguous.add(1)

    def lease_renewed(self, thread: str) -> None:
        self._renewals.add(1)

    def lease_lost(self, thread: str, why: str) -> None:
        self._losses.add(1)
        _current_span_event("agentflow.lease_lost", {_THREAD: thread, "agentflow.reason": why})

    def reconciled(self, thread: str, operation_id: str, decision: str, by: str) -> None:
        attributes = {
            _THREAD: thread,
            _OPERATION: operation_id,
            "agentflow.decision": decision,
            "agentflow.decided_by": by,
        }
        _current_span_event("agentflow.reconciliation", attributes)

    @contextlib.contextmanager
    def store_write(self, operation: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._writes.record(time.perf_counter() - start, {"agentflow.operation": operation})


def _current_span_event(name: str, attributes: Mapping[str, str]) -> None:
    from opentelemetry import trace

    trace.get_current_span().add_event(name, attributes)


def refused_save(code: str) -> None:
    """Count a checkpoint save a framework adapter refused (Agent Framework runs on
    without it), whether or not a run of ours is current."""
    if _configured():
        _telemetry()._refusals.add(1, {"agentflow.code": code})


_current: ContextVar[Recorder] = ContextVar("agentflow_telemetry", default=OFF)


def current() -> Recorder:
    """The recorder of the run this task belongs to (:data:`OFF` outside a run)."""
    return _current.get()


def _configured() -> bool:
    """Whether an application configured an OpenTelemetry SDK (a tracer or meter
    provider of its own) and has the API installed; decided per run call."""
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        return False
    tracer = trace.get_tracer_provider()
    if not isinstance(tracer, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return True
    meter = metrics.get_meter_provider()
    return not (
        isinstance(meter, metrics.NoOpMeterProvider)
        or type(meter).__name__ == "_ProxyMeterProvider"
    )


@contextlib.contextmanager
def recording(
    graph: str | None, thread: str, span_name: str = "agentflow.run"
) -> Iterator[dict[str, str]]:
    """Around one call of a graph on ``thread`` (``run``, ``resume``, a worker's
    take-over, or ``agentflow.reconcile`` for an operator's decision, from the API,
    the CLI or the console, where no graph is named): sets
    :func:`current` and opens the call's span when an SDK is configured. The caller
    puts the result's status in the yielded mapping under ``"outcome"``. A call made
    inside another (``run`` continuing an existing thread) stays in the outer span.
    """
    if _current.get() is not OFF or not _configured():
        yield {}
        return
    live = _telemetry()
    token = _current.set(live)
    try:
        with live.run(span_name, graph, thread) as outcome:
            yield outcome
    finally:
        _current.reset(token)


@functools.cache
def _telemetry() -> Telemetry:
    """The one live recorder: its instruments are made once per process."""
    return Telemetry()
