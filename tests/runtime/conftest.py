"""Backends for the runtime: each checkpointer harness with the durable store beside it.

A backend whose durable store exists (``tests/durable/backends/NAME.py``)
runs the runtime on both; until then its checkpointer runs with an
in-process durable store (enough for the single-process suites, which check
what the runtime needs of the checkpointer). ``durable_backend`` parametrizes
only over backends that have both, for the lease and fencing suites.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentflow.checkpoint import Checkpointer
from agentflow.checkpoint.testing import BackendHarness
from agentflow.durable import DurableMemory, DurableStore, MemoryDurableStore
from agentflow.durable.testing import DurableHarness
from tests.conftest import BACKENDS
from tests.durable.conftest import DURABLE_BACKENDS


@dataclass
class RuntimeBackend:
    """One backend's checkpointer harness and the durable store for it."""

    name: str
    checkpoints: BackendHarness
    durable_stores: Callable[[], DurableStore]
    #: True when the durable store is the backend's own (not in-process).
    native: bool

    @asynccontextmanager
    async def open(self) -> AsyncIterator[tuple[Checkpointer, DurableStore]]:
        """A checkpointer and a durable store on this backend, closed afterwards."""
        async with AsyncExitStack() as stack:
            checkpointer = await stack.enter_async_context(self.checkpoints.open())
            durable = self.durable_stores()
            stack.push_async_callback(durable.close)
            yield checkpointer, durable


@asynccontextmanager
async def _paired(name: str, tmp_path: Path) -> AsyncIterator[RuntimeBackend]:
    module = importlib.import_module(f"tests.backends.{name}")
    async with module.harness(tmp_path) as checkpoints:
        if name not in DURABLE_BACKENDS:
            memory = DurableMemory()
            yield RuntimeBackend(
                name, checkpoints, lambda: MemoryDurableStore(memory=memory), False
            )
            return
        durable_module = importlib.import_module(f"tests.durable.backends.{name}")
        async with durable_module.harness(tmp_path) as durable:
            harness: DurableHarness = durable
            yield RuntimeBackend(name, checkpoints, lambda: harness.stores(None), True)


@pytest.fixture(params=BACKENDS)
async def runtime_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[RuntimeBackend]:
    """Every checkpointer backend, with its durable store (or an in-process one)."""
    async with _paired(request.param, tmp_path) as backend:
        yield backend


@pytest.fixture(params=[name for name in BACKENDS if name in DURABLE_BACKENDS])
async def durable_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[RuntimeBackend]:
    """Every backend that has both a checkpointer and a durable store."""
    async with _paired(request.param, tmp_path) as backend:
        yield backend
