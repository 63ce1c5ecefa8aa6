from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentflow.checkpoint.testing import BackendHarness

#: Set by the worker process that started its mongod.
_OWNER = "TESTS_WORKER_MONGOD_OWNER"  # not AGENTFLOW_*: tests strip those from children


def _a_mongod_per_worker() -> None:
    """Under pytest-xdist, each worker runs its MongoDB tests on a mongod of its own.

    Tests name their own databases, but some count what the whole server did
    (journal syncs in ``serverStatus``, commands of a profiler): on one shared
    server those counts would include the other workers' writes. PostgreSQL
    and Redis tests that count do so on a private database or server already.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get("MONGODB_URI"):
        return  # one process (the session starts a mongod if none is named), or none named
    if os.environ.get(_OWNER):
        return  # a process a test started (it imports this module): its worker's server serves it
    if importlib.util.find_spec("fiftyone") is None:
        return  # no mongod binary here: the named server is shared
    from tests.support.mongod import MongodProcess

    server = MongodProcess()
    atexit.register(server.cleanup)
    os.environ["MONGODB_URI"] = server.uri
    # Children inherit both variables; without this each would start (and, killed by a
    # test with SIGKILL, leave running) a mongod of its own.
    os.environ[_OWNER] = str(os.getpid())


_a_mongod_per_worker()

BACKENDS = sorted(
    p.stem for p in (Path(__file__).parent / "backends").glob("*.py") if not p.stem.startswith("_")
)
ALL_BACKENDS = tuple(BACKENDS)
#: ``AGENTFLOW_TEST_BACKENDS=sqlite,memory`` runs the harness suites on those only, and
#: leaves out the modules of the other backends' own tests (for local work; CI leaves it
#: unset and runs every backend).
_ONLY = os.environ.get("AGENTFLOW_TEST_BACKENDS")
if _ONLY:
    BACKENDS = [name for name in BACKENDS if name in _ONLY.split(",")]
#: A backend's own test modules are named for it: ``test_postgres_schema.py``.
_ALIASES = {"postgres": ("postgres",), "mongodb": ("mongodb", "mongo")}


def _backend_of(module: str) -> str | None:
    """The backend whose own tests ``module`` (a file name) holds, or None."""
    for backend in ALL_BACKENDS:
        for name in _ALIASES.get(backend, (backend,)):
            if module == f"test_{name}.py" or module.startswith(f"test_{name}_"):
                return backend
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (never skip) the modules of backends ``AGENTFLOW_TEST_BACKENDS`` leaves out."""
    if not _ONLY:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        backend = _backend_of(item.path.name)
        (dropped if backend is not None and backend not in BACKENDS else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(params=BACKENDS)
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BackendHarness]:
    """A fresh, empty store of each backend in turn."""
    module = importlib.import_module(f"tests.backends.{request.param}")
    async with module.harness(tmp_path) as h:
        yield h
