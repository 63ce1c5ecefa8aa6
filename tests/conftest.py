from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentflow.checkpoint.testing import BackendHarness

BACKENDS = sorted(
    p.stem for p in (Path(__file__).parent / "backends").glob("*.py") if not p.stem.startswith("_")
)
#: ``AGENTFLOW_TEST_BACKENDS=sqlite,memory`` runs the harness suites on those only
#: (for local work; CI leaves it unset and runs every backend).
_ONLY = os.environ.get("AGENTFLOW_TEST_BACKENDS")
if _ONLY:
    BACKENDS = [name for name in BACKENDS if name in _ONLY.split(",")]


@pytest.fixture(params=BACKENDS)
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BackendHarness]:
    """A fresh, empty store of each backend in turn."""
    module = importlib.import_module(f"tests.backends.{request.param}")
    async with module.harness(tmp_path) as h:
        yield h
