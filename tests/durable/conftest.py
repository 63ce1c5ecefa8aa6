from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentflow.durable.testing import DurableHarness

DURABLE_BACKENDS = sorted(
    p.stem for p in (Path(__file__).parent / "backends").glob("*.py") if not p.stem.startswith("_")
)


@pytest.fixture(params=DURABLE_BACKENDS)
async def durable_harness(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[DurableHarness]:
    """A fresh, empty durable backend of each kind in turn."""
    module = importlib.import_module(f"tests.durable.backends.{request.param}")
    async with module.harness(tmp_path) as h:
        yield h
