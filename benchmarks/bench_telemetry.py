"""What OpenTelemetry costs a step: the API absent, present without an SDK, and exporting.

Each contestant is a fresh process (a process can configure OpenTelemetry's
global providers once, and "absent" means the package cannot be imported), and
the contestants take turns, round after round, so that the machine's load falls
on all three alike. A run is a 20-step graph, each step one journaled call, on
the memory store (only CPU: what telemetry adds) and on SQLite (with its fsyncs:
what a user sees). The figure is the median time per step over the rounds.

"exporting" is the SDK with a batch span processor and a periodic metric reader,
both handing their data to exporters that drop it: everything but the network.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from benchmarks.common import Table

MODES = ("absent", "present", "exporting")
STEPS = 20

_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    mode, backend, runs, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if mode == "absent":
        sys.modules["opentelemetry"] = None
    elif mode == "exporting":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            MetricExporter, MetricExportResult, PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor, SpanExporter, SpanExportResult,
        )

        class Spans(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        class Points(MetricExporter):
            def export(self, metrics_data, timeout_millis=10_000, **kwargs):
                return MetricExportResult.SUCCESS
            def force_flush(self, timeout_millis=10_000):
                return True
            def shutdown(self, timeout_millis=30_000, **kwargs):
                pass

        tracing = TracerProvider()
        tracing.add_span_processor(BatchSpanProcessor(Spans()))
        trace.set_tracer_provider(tracing)
        reader = PeriodicExportingMetricReader(Points(), export_interval_millis=1_000)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    else:
        import opentelemetry.trace  # installed, nothing configured

    from agentflow.checkpoint.memory import MemoryCheckpointer
    from agentflow.checkpoint.sqlite import SqliteCheckpointer
    from agentflow.runtime import START, Graph

    async def step(state, ctx):
        receipt = await ctx.tool("t", {"n": state.get("n", 0)}, lambda call: {"ok": True},
                                 idempotent=True)
        return {"n": state.get("n", 0) + 1, "last": receipt}

    def route(state):
        return "step" if state["n"] < STEPS else "__end__"

    STEPS = %(steps)d
    graph = Graph("bench").add_node("step", step).add_edge(START, "step")
    graph = graph.add_conditional_edges("step", route)

    async def main():
        store = (
            MemoryCheckpointer() if backend == "memory"
            else SqliteCheckpointer(f"{folder}/{mode}.db")
        )
        async with store:
            compiled = graph.compile(store)
            await compiled.run({}, thread="warm-up")
            start = time.perf_counter()
            for i in range(runs):
                await compiled.run({}, thread=f"t-{i}")
            elapsed = time.perf_counter() - start
        print(json.dumps(elapsed / (runs * STEPS)))

    asyncio.run(main())
    """
) % {"steps": STEPS}


def _per_step(mode: str, backend: str, runs: int, folder: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, backend, str(runs), folder],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} contestant failed:\n{done.stderr}")
    seconds: float = json.loads(done.stdout)
    return seconds


async def run(quick: bool) -> list[Table]:
    return await asyncio.to_thread(_tables, quick)


def _tables(quick: bool) -> list[Table]:
    rounds, runs = (3, 10) if quick else (9, 40)
    table = Table(
        f"A graph step with one journaled call, with OpenTelemetry ({rounds} interleaved rounds)",
        ["store", "opentelemetry", "us per step", "vs absent"],
    )
    with tempfile.TemporaryDirectory() as folder:
        for backend in ("memory", "sqlite"):
            times: dict[str, list[float]] = {mode: [] for mode in MODES}
            for _ in range(rounds):
                for mode in MODES:
                    times[mode].append(_per_step(mode, backend, runs, folder))
                    Path(folder, f"{mode}.db").unlink(missing_ok=True)
            base = statistics.median(times["absent"])
            for mode in MODES:
                median = statistics.median(times[mode])
                table.rows.append([backend, mode, f"{median * 1e6:,.0f}", f"{median / base:.2f}x"])
    table.notes += [
        "absent: opentelemetry cannot be imported; present: opentelemetry-api installed, no SDK "
        "configured (the hooks are no-ops: decided once per run call); exporting: the SDK with "
        "a batch span processor and a periodic metric reader whose exporters drop the data.",
        f"{STEPS} steps per run, each one `ctx.tool(..., idempotent=True)`; spans per step: one "
        "step span and one call span, plus one run span per run.",
    ]
    return [table]
