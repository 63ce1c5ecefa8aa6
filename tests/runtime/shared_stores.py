"""Stores that several processes open by URL: one recipe per backend.

A multi-process test names a store by its URL and a fresh namespace; every
child opens the one store (checkpoints, records and events) from those two
strings (:func:`opened`), exactly as ``agentflow --store URL`` would. The server
backends share one database with the other suites, so a test's namespace is
its own and is emptied afterwards (:func:`shared_store`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentflow.checkpoint import open_store
from agentflow.checkpoint.store import Store
from tests.conftest import BACKENDS

__all__ = [
    "ALL_PROCESS_BACKENDS",
    "PROCESS_BACKENDS",
    "SharedStore",
    "on_process_backends",
    "opened",
    "shared_store",
]

#: The backends whose stores outlive a process (memory does not).
ALL_PROCESS_BACKENDS = ("sqlite", "postgres", "redis", "mongodb", "file")
#: Those ``AGENTFLOW_TEST_BACKENDS`` keeps.
PROCESS_BACKENDS = tuple(name for name in ALL_PROCESS_BACKENDS if name in BACKENDS)
#: Marks a test over :data:`PROCESS_BACKENDS` (deselected when it is empty).
on_process_backends = pytest.mark.backends(*ALL_PROCESS_BACKENDS)


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
async def opened(url: str, namespace: str) -> AsyncIterator[Store]:
    """The store at ``url`` in ``namespace`` (one object: checkpoints, records, events),
    closed after."""
    async with open_store(url, namespace=namespace) as store:
        assert isinstance(store, Store), f"open_store({url!r}) is not a Store: {store!r}"
        yield store


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
    """Delete every thread of ``namespace`` whole, and any record left without one."""
    async with opened(url, namespace) as store:
        while threads := (await store.list_threads_page(limit=500)).threads:
            for info in threads:
                await store.delete_thread(info.thread, force=True)
        while runs := (await store.list_runs(limit=500)).runs:
            for run in runs:
                await store.delete(run.key, force=True)


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
