"""A pytest plugin that runs LangGraph's graph tests on ``AgentflowSaver``.

LangGraph's suite gets its savers from two fixtures, ``sync_checkpointer``
and ``async_checkpointer``, parametrized by saver name; both build the saver
with a context manager of ``tests/conftest_checkpointer.py`` that
``tests/conftest.py`` imported by name. This plugin keeps only the tests of
one parameter (``sqlite`` and ``sqlite_aio``, or ``memory`` for the stock
in-memory run) and, for ``--agentflow-saver=sqlite|postgres``, replaces those
two context managers in ``tests.conftest`` with ones that yield an
``AgentflowSaver`` over a fresh agentflow store: a new SQLite file, or a new
namespace on the PostgreSQL server at ``AGENTFLOW_POSTGRES_DSN``.

    pytest -p benchmarks.framework_suites.langgraph_plugin \
        --agentflow-saver=postgres --agentflow-outcomes=out.json tests/test_pregel.py

``--agentflow-saver=stock-sqlite`` selects the same tests and swaps nothing:
the stock saver's outcomes under the same test ids. ``stock-memory`` runs the
in-memory saver's parameter instead (``test_x[memory]``).
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.stores import open_store
from agentflow.integrations.langgraph import AgentflowSaver
from benchmarks.framework_suites.outcomes import OutcomeRecorder
from benchmarks.framework_suites.servers import POSTGRES_DSN

T = TypeVar("T")

#: The saver fixtures and, per mode, the parameter whose tests run.
_FIXTURES = ("sync_checkpointer", "async_checkpointer")
_SLOTS = {
    "stock-memory": ("memory", "memory"),
    "stock-sqlite": ("sqlite", "sqlite_aio"),
    "sqlite": ("sqlite", "sqlite_aio"),
    "postgres": ("sqlite", "sqlite_aio"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentflow")
    group.addoption("--agentflow-saver", choices=sorted(_SLOTS), default="sqlite")
    group.addoption("--agentflow-outcomes", type=Path, default=None)


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--agentflow-outcomes")
    if path is not None:
        config.pluginmanager.register(OutcomeRecorder(path), "agentflow-outcomes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the tests of this mode's saver parameter; swap in ours if asked."""
    mode = config.getoption("--agentflow-saver")
    recorder = config.pluginmanager.get_plugin("agentflow-outcomes")
    sync_slot, async_slot = _SLOTS[mode]
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("sync_checkpointer") == sync_slot or (
            params.get("async_checkpointer") == async_slot
        ):
            kept.append(item)
            if isinstance(recorder, OutcomeRecorder):
                recorder.nodeids.add(item.nodeid)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
    if mode in ("sqlite", "postgres"):
        conftest = sys.modules["tests.conftest"]
        conftest._checkpointer_sqlite = lambda: _sync_saver(mode)  # type: ignore[attr-defined]
        conftest._checkpointer_sqlite_aio = lambda: _async_saver(mode)  # type: ignore[attr-defined]


def _store(mode: str, folder: Path) -> Checkpointer:
    # Not uuid4: some tests patch it to hand out a fixed sequence of ids.
    namespace = f"lg-{secrets.token_hex(6)}"
    if mode == "sqlite":
        return open_store(f"sqlite:///{folder / 'checkpoints.db'}", namespace=namespace)
    return open_store(POSTGRES_DSN, namespace=namespace)


async def _saver(checkpointer: Checkpointer) -> AgentflowSaver:
    """A saver over a store that is already connected, as the stock savers' fixtures
    are: a few tests time their stream in 0.1 s windows from the first call."""
    await checkpointer.get("agentflow-suite-warm-up")
    return AgentflowSaver(checkpointer)


@asynccontextmanager
async def _async_saver(mode: str) -> AsyncIterator[AgentflowSaver]:
    with tempfile.TemporaryDirectory(prefix="agentflow-lg-") as folder:
        checkpointer = _store(mode, Path(folder))
        try:
            yield await _saver(checkpointer)
        finally:
            await checkpointer.close()


class _LoopThread:
    """An event loop on its own thread: where a synchronous test's saver lives."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


@contextmanager
def _sync_saver(mode: str) -> Iterator[AgentflowSaver]:
    """A saver built on a loop thread, so its synchronous methods run there."""
    loop = _LoopThread()
    with tempfile.TemporaryDirectory(prefix="agentflow-lg-") as folder:
        checkpointer = _store(mode, Path(folder))
        try:
            yield loop.run(_saver(checkpointer))
        finally:
            loop.run(checkpointer.close())
            loop.stop()
