from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentflow.durable.testing import DurableHarness
from tests.conftest import BACKENDS


@pytest.fixture(params=BACKENDS)
async def durable_harness(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[DurableHarness]:
    """The records and events of a fresh, empty store of each backend in turn."""
    module = importlib.import_module(f"tests.backends.{request.param}")
    async with module.harness(tmp_path) as h:
        yield h.durable()
