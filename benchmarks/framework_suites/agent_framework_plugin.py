"""A pytest plugin that runs Agent Framework's workflow tests on our checkpoint storages.

Agent Framework's tests build their storages themselves, with
``InMemoryCheckpointStorage()`` or ``FileCheckpointStorage(path)``. For each
test this plugin replaces those two names (in the test's module and in
``agent_framework``, where a test may import them late) with a stand-in
whose construction returns one of ours instead, per ``--agentflow-storage``:

- ``memory``, ``sqlite``, ``postgres``: ``AgentflowCheckpointStorage`` over a
  fresh agentflow store of the test (one namespace per in-memory storage, one
  per file storage path, so two file storages on one folder share it);
- ``mongodb``: ``MongoDBCheckpointStorage`` on a fresh collection at
  ``MONGODB_URI``, bound (seed 000 binds a storage to one workflow name) to
  the first workflow name it is used with;
- ``stock``: the framework's own class, so the stock outcomes are recorded
  under the same test ids.

Either way the test is marked as one that creates a storage, and
``--agentflow-outcomes`` records ``{"outcomes": ..., "storage_tests": ...}``.
Application types are permitted as their author would list them: every
class the test package defines, by ``module:qualname``, plus any
``allowed_checkpoint_types`` the test passes itself.
"""

from __future__ import annotations

import secrets
import sys
import tempfile
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agent_framework
import pytest
from agent_framework import CheckpointStorage
from agent_framework._workflows import _checkpoint
from pymongo import AsyncMongoClient

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.stores import open_store
from agentflow.integrations.agent_framework import AgentflowCheckpointStorage
from benchmarks.framework_suites.outcomes import OutcomeRecorder
from benchmarks.framework_suites.servers import POSTGRES_DSN, mongodb_uri

_MODES = ("stock", "memory", "sqlite", "postgres", "mongodb")
_NAMES = ("InMemoryCheckpointStorage", "FileCheckpointStorage")
_STOCK = {name: getattr(_checkpoint, name) for name in _NAMES}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentflow")
    group.addoption("--agentflow-storage", choices=_MODES, default="sqlite")
    group.addoption("--agentflow-outcomes", type=Path, default=None)


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--agentflow-outcomes")
    if path is not None:
        recorder = OutcomeRecorder(path)
        recorder.extra["storage_tests"] = []
        config.pluginmanager.register(recorder, "agentflow-outcomes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    recorder = config.pluginmanager.get_plugin("agentflow-outcomes")
    if isinstance(recorder, OutcomeRecorder):
        recorder.nodeids.update(item.nodeid for item in items)


def application_types(package: str) -> list[str]:
    """``module:qualname`` of every class defined in the imported modules of ``package``."""
    found: list[str] = []
    for name, module in list(sys.modules.items()):
        if isinstance(module, types.ModuleType) and (
            name == package or name.startswith(package + ".")
        ):
            _classes_of(vars(module), name, found)
    return found


def _classes_of(namespace: dict[str, Any], module: str, found: list[str]) -> None:
    for value in list(namespace.values()):
        if isinstance(value, type) and value.__module__ == module and "<" not in value.__qualname__:
            key = f"{module}:{value.__qualname__}"
            if key not in found:
                found.append(key)
                _classes_of(dict(vars(value)), module, found)


class _Swap:
    """Builds the storages of one test in one mode, and closes their stores after it."""

    def __init__(self, mode: str, package: str, folder: Path) -> None:
        self.mode = mode
        self.package = package
        self.folder = folder
        self.created = False
        self.explicit = False  # has a storage of this test named its own allowed types?
        self._by_path: dict[str, str] = {}  # a file storage's folder -> its namespace
        self._stores: list[Checkpointer] = []
        self._client: AsyncMongoClient[dict[str, Any]] | None = None
        self.names: dict[str, str] = {}  # a MongoDB session -> the workflow it serves
        self._collection = f"test-checkpoint-af-{secrets.token_hex(6)}"

    def stand_in(self, name: str) -> type:
        swap = self

        class _StandIn(type):
            def __instancecheck__(cls, instance: object) -> bool:
                return isinstance(instance, _STOCK[name] | AgentflowCheckpointStorage | _FirstName)

        class StandIn(metaclass=_StandIn):
            def __new__(cls, *args: Any, **kwargs: Any) -> Any:
                return swap.build(name, args, kwargs)

        StandIn.__name__ = StandIn.__qualname__ = name
        return StandIn

    def build(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CheckpointStorage:
        self.created = True
        if self.mode == "stock":
            built: CheckpointStorage = _STOCK[name](*args, **kwargs)
            return built
        listed = kwargs.get("allowed_checkpoint_types")
        self.explicit = self.explicit or listed is not None
        # A test about allowlists names them; elsewhere, list what the test package defines.
        allowed = list(listed or ()) if self.explicit else application_types(self.package)
        namespace = f"af-{secrets.token_hex(6)}"
        if name == "FileCheckpointStorage":  # two storages on one folder share its checkpoints
            path = str(Path(args[0] if args else kwargs["storage_path"]).resolve())
            namespace = self._by_path.setdefault(path, namespace)
        return self._ours(namespace, allowed)

    def _ours(self, namespace: str, allowed: list[str]) -> CheckpointStorage:
        if self.mode == "mongodb":
            return _FirstName(self, namespace, allowed)
        if self.mode == "memory":
            store = open_store(f"memory://{namespace}", namespace=namespace)
        elif self.mode == "sqlite":
            store = open_store(f"sqlite:///{self.folder / 'checkpoints.db'}", namespace=namespace)
        else:
            store = open_store(POSTGRES_DSN, namespace=namespace)
        self._stores.append(store)
        return AgentflowCheckpointStorage(store, allowed_checkpoint_types=allowed)

    def mongodb(self, session: str, workflow_name: str, allowed: list[str]) -> CheckpointStorage:
        options = MongoDBCheckpointStorageOptions(
            tenant_id="agent-framework-suite",
            workflow_name=workflow_name,
            session_id=session,
            database_name="agentflow_tests",
            collection_name=self._collection,
            allowed_checkpoint_types=tuple(allowed),
        )
        if self._client is None:
            self._client = AsyncMongoClient(mongodb_uri())
        return MongoDBCheckpointStorage(options, client=self._client)

    async def close(self) -> None:
        for store in self._stores:
            await store.close()
        if self._client is not None:
            await self._client["agentflow_tests"][self._collection].drop()
            await self._client.close()


class _FirstName(CheckpointStorage):
    """A MongoDB storage bound to the first workflow name it is used with, as an
    application binds one to its workflow (a storage serves one name)."""

    def __init__(self, swap: _Swap, session: str, allowed: list[str]) -> None:
        self._swap, self._session, self._allowed = swap, session, allowed
        self._bound: CheckpointStorage | None = None

    def _for(self, workflow_name: str | None) -> CheckpointStorage:
        """The bound storage; the first name used (by any storage of this session) binds it."""
        if self._bound is None:
            names = self._swap.names
            name = names.setdefault(self._session, workflow_name or "no-workflow-yet")
            self._bound = self._swap.mongodb(self._session, name, self._allowed)
        return self._bound

    async def save(self, checkpoint: Any) -> Any:
        return await self._for(checkpoint.workflow_name).save(checkpoint)

    async def load(self, checkpoint_id: Any) -> Any:
        return await self._for(None).load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> Any:
        return await self._for(workflow_name).list_checkpoints(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: Any) -> bool:
        return await self._for(None).delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> Any:
        return await self._for(workflow_name).get_latest(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> Any:
        return await self._for(workflow_name).list_checkpoint_ids(workflow_name=workflow_name)


@pytest.fixture(autouse=True)
async def agentflow_storages(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    """Our storages in place of the framework's for this test (see the module docstring)."""
    mode = request.config.getoption("--agentflow-storage")
    package = request.module.__name__.split(".")[0]
    with tempfile.TemporaryDirectory(prefix="agentflow-af-") as folder:
        swap = _Swap(mode, package, Path(folder))
        for name in _NAMES:
            stand_in = swap.stand_in(name)
            for module in (agent_framework, _checkpoint):  # where a test may import it late
                monkeypatch.setattr(module, name, stand_in, raising=False)
            if name in vars(request.module):
                monkeypatch.setattr(request.module, name, stand_in)
        try:
            yield
        finally:
            await swap.close()
            recorder = request.config.pluginmanager.get_plugin("agentflow-outcomes")
            if swap.created and isinstance(recorder, OutcomeRecorder):
                recorder.extra["storage_tests"].append(request.node.nodeid)
