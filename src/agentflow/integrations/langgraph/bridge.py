"""Running the async saver's coroutines for LangGraph's synchronous methods.

An agentflow checkpointer is async and may hold connections bound to one
event loop, so synchronous calls are sent to that loop: the one running when
the saver was built, or, when none was (a purely synchronous program), a
private loop on a daemon thread that every synchronous call shares.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopBridge"]

T = TypeVar("T")


class LoopBridge:
    """Runs a coroutine to completion on the saver's loop from any other thread."""

    def __init__(self) -> None:
        try:
            self._borrowed: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._borrowed = None
        self._own: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _target(self) -> asyncio.AbstractEventLoop:
        borrowed = self._borrowed
        if borrowed is not None and borrowed.is_running():
            return borrowed
        with self._lock:
            if self._own is None:
                self._own = asyncio.new_event_loop()
                threading.Thread(
                    target=self._own.run_forever, name="agentflow-langgraph", daemon=True
                ).start()
            return self._own

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._target()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError(
                "a synchronous AgentflowSaver method was called on the event loop that runs "
                "the saver; call the a* method (await saver.aget_tuple(...)) instead, "
                "or call it from another thread"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()
