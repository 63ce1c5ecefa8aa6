"""Backends for the runtime: a store of each backend, holding checkpoints, records and events."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentflow.checkpoint.base import Redactor
from agentflow.checkpoint.sealing import KeyRing
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing import BackendHarness
from tests.conftest import BACKENDS
from tests.runtime.selection import pytest_collection_modifyitems, pytest_configure

__all__ = [
    "RuntimeBackend",
    "durable_backend",
    "needs_sqlite",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "runtime_backend",
]

#: Marks a test of an SQLite file by path (the crash tests, the samples): it runs
#: unless ``AGENTFLOW_TEST_BACKENDS`` leaves SQLite out (then it is deselected).
needs_sqlite = pytest.mark.backends("sqlite")


@dataclass
class RuntimeBackend:
    """One backend's harness, for the runtime suites."""

    name: str
    harness: BackendHarness

    def open(
        self,
        *,
        namespace: str | None = None,
        redact: Redactor | None = None,
        sealing: KeyRing | None = None,
    ) -> Store:
        """A new store on this backend's database (use it with ``async with``)."""
        return self.harness.open(namespace=namespace, redact=redact, sealing=sealing)


@asynccontextmanager
async def _backend(name: str, tmp_path: Path) -> AsyncIterator[RuntimeBackend]:
    module = importlib.import_module(f"tests.backends.{name}")
    async with module.harness(tmp_path) as harness:
        yield RuntimeBackend(name, harness)


@pytest.fixture(params=BACKENDS)
async def runtime_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[RuntimeBackend]:
    """A fresh store of every backend in turn."""
    async with _backend(request.param, tmp_path) as backend:
        yield backend


@pytest.fixture(params=BACKENDS)
async def durable_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[RuntimeBackend]:
    """A fresh store of every backend in turn (the lease and fencing suites)."""
    async with _backend(request.param, tmp_path) as backend:
        yield backend
