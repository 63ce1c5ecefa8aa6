"""Stores that several processes open by URL: one recipe per backend.

A multi-process test names a store by its URL and a fresh namespace; every
child opens the checkpointer and the durable store from those two strings
(:func:`opened`), exactly as ``agentflow --store URL`` would. The server
backends share one database with the other suites, so a test's namespace is
its own and is emptied afterwards (:func:`shared_store`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agentflow.checkpoint import Checkpointer, open_store
from agentflow.durable import DurableStore
from agentflow.durable.stores import open_durable_store

__all__ = ["PROCESS_BACKENDS", "SharedStore", "opened", "shared_store"]

#: The backends whose stores outlive a process (memory does not).
PROCESS_BACKENDS = ("sqlite", "postgres", "redis", "mongodb", "file")


@dataclass(frozen=True)
class SharedStore:
    """Where the processes of one test keep their runs."""

    backend: str
    url: str
    namespace: str

    @property
    def args(self) -> tuple[str, str]:
        """The two command-line arguments a child opens the store from."""
        return self.url, self.namespace


@asynccontextmanager
async def opened(url: str, namespace: str) -> AsyncIterator[tuple[Checkpointer, DurableStore]]:
    """The checkpointer and the durable store at ``url`` in ``namespace``, closed after."""
    async with AsyncExitStack() as stack:
        checkpointer = await stack.enter_async_context(open_store(url, namespace=namespace))
        durable = await stack.enter_async_context(open_durable_store(url, namespace=namespace))
        yield checkpointer, durable


def _server_url(backend: str) -> str:
    if backend == "postgres":
        from tests.backends.postgres import DSN

        return DSN
    if backend == "redis":
        from tests.backends.redis import REDIS_URL

        return REDIS_URL
    from tests.support.mongod import mongodb_uri

    return mongodb_uri()


async def _reachable(backend: str, url: str) -> None:
    """Skip (fail under CI=true) when the server is down, as the harnesses do."""
    if backend == "postgres":
        from tests.backends.postgres import admin_connection

        await (await admin_connection()).close()
    elif backend == "redis":
        from tests.backends.redis import admin_client

        await (await admin_client()).aclose()


async def _empty(url: str, namespace: str) -> None:
    """Delete every thread and durable record of ``namespace``."""
    async with opened(url, namespace) as (checkpointer, durable):
        cursor: str | None = None
        while True:
            page = await checkpointer.list_threads_page(limit=500, cursor=cursor)
            for info in page.threads:
                await checkpointer.delete_thread(info.thread)
            if (cursor := page.next_cursor) is None:
                break
        while runs := (await durable.list_runs(limit=500)).runs:
            for run in runs:
                await durable.delete(run.key)


@asynccontextmanager
async def shared_store(backend: str, tmp_path: Path) -> AsyncIterator[SharedStore]:
    """A store on ``backend`` for several processes, in a namespace of its own."""
    namespace = f"proc-{uuid.uuid4().hex[:12]}"
    if backend == "sqlite":
        yield SharedStore(backend, f"sqlite:///{tmp_path / 'runs.db'}", namespace)
        return
    if backend == "file":
        yield SharedStore(backend, f"file://{tmp_path / 'runs'}", namespace)
        return
    url = _server_url(backend)
    await _reachable(backend, url)
    try:
        yield SharedStore(backend, url, namespace)
    finally:
        await _empty(url, namespace)
