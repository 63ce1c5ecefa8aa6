"""The runtime for code without an event loop: scripts, notebooks, Flask views.

:class:`SyncGraph` owns one event loop (an :class:`asyncio.Runner`) for its
whole life, and the checkpointer is used and closed on that loop only: a
store's connections and worker threads are bound to the loop that opened
them, so running each call under its own ``asyncio.run`` would break them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from datetime import timedelta
from typing import Any, Self, TypeVar

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.runtime.engine import CompiledGraph
from agentflow.runtime.events import RunEvent
from agentflow.runtime.graph import Graph
from agentflow.runtime.result import RunResult

__all__ = ["SyncGraph"]

T = TypeVar("T")


class SyncGraph:
    """``graph`` compiled on ``checkpointer``, with blocking methods.

    Use it as a context manager; leaving the block closes the checkpointer
    (if it has ``close()``), the durable store if one was given
    (``durable=``), and the loop. ``compile_options`` go to
    :meth:`Graph.compile`. Not for use inside a running event loop (call the
    async :class:`CompiledGraph` there), nor from several threads at once.
    """

    def __init__(self, graph: Graph, checkpointer: Checkpointer, **compile_options: Any) -> None:
        self.compiled: CompiledGraph = graph.compile(checkpointer, **compile_options)
        self._owned = [checkpointer, compile_options.get("durable")]
        self._runner = asyncio.Runner()
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the checkpointer and the loop; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            for store in self._owned:
                close = getattr(store, "close", None)
                if close is not None:
                    self._call(close)
        finally:
            self._runner.close()

    def run(self, input: Mapping[str, Any], *, thread: str) -> RunResult:
        """:meth:`CompiledGraph.run`, blocking."""
        return self._call(lambda: self.compiled.run(input, thread=thread))

    def resume(self, thread: str, value: Any = None, *, step: int | None = None) -> RunResult:
        """:meth:`CompiledGraph.resume`, blocking."""
        return self._call(lambda: self.compiled.resume(thread, value, step=step))

    def run_until_settled(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        thread: str,
        max_wait: timedelta | None = None,
    ) -> RunResult:
        """:meth:`CompiledGraph.run_until_settled`, blocking (timers are slept out)."""
        return self._call(
            lambda: self.compiled.run_until_settled(input, thread=thread, max_wait=max_wait)
        )

    def stream(self, input: Mapping[str, Any], *, thread: str) -> Iterator[RunEvent]:
        """:meth:`CompiledGraph.stream`, as a plain iterator."""
        return self._iterate(self.compiled.stream(input, thread=thread))

    def resume_stream(
        self, thread: str, value: Any = None, *, step: int | None = None
    ) -> Iterator[RunEvent]:
        """:meth:`CompiledGraph.resume_stream`, as a plain iterator."""
        return self._iterate(self.compiled.resume_stream(thread, value, step=step))

    def get_state(self, thread: str, step: int | None = None) -> Checkpoint:
        """:meth:`CompiledGraph.get_state`, blocking."""
        return self._call(lambda: self.compiled.get_state(thread, step))

    def history(self, thread: str) -> list[Checkpoint]:
        """Every checkpoint of ``thread``, oldest first."""

        async def collect() -> list[Checkpoint]:
            return [cp async for cp in self.compiled.history(thread)]

        return self._call(collect)

    def fork(
        self,
        thread: str,
        step: int,
        *,
        new_thread: str,
        update: Mapping[str, Any] | None = None,
        reroute: bool = True,
    ) -> Checkpoint:
        """:meth:`CompiledGraph.fork`, blocking."""
        return self._call(
            lambda: self.compiled.fork(
                thread, step, new_thread=new_thread, update=update, reroute=reroute
            )
        )

    def _iterate(self, events: AsyncIterator[RunEvent]) -> Iterator[RunEvent]:
        """Drive an async iterator one item per loop run. The run advances only
        while the caller asks for the next event."""

        async def next_event() -> RunEvent | None:
            try:
                event: RunEvent = await events.__anext__()
            except StopAsyncIteration:
                return None
            return event

        try:
            while (event := self._call(next_event)) is not None:
                yield event
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None and not self._closed:
                self._call(aclose)

    def _call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run the coroutine ``make()`` on this object's loop (made only once
        it can run, so a refusal leaves no coroutine unawaited)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._runner.run(make())
        raise RuntimeError(
            "SyncGraph cannot be used inside a running event loop; await the "
            "CompiledGraph (SyncGraph.compiled) there instead"
        )
