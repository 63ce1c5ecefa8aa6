"""Fixtures: a real mongod, a throwaway collection per test, storages bound to scopes.

Every fixture of this suite lives here: ``test_checkpoint_storage.py``
collects the tests of the ``checks_*`` modules into one module namespace,
where two same-named module fixtures would silently shadow each other.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from pymongo import AsyncMongoClient

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from tests.agent_framework_mongodb.af_workflows import ALLOWED_TYPES, WORKFLOW_NAME
from tests.agent_framework_mongodb.faults import CollectionProxy
from tests.agent_framework_mongodb.hostile_types import SENTINEL_ENV
from tests.support.mongod import mongodb_uri

DATABASE = "agentflow_tests"
StorageFactory = Callable[..., MongoDBCheckpointStorage]


@pytest.fixture(scope="session")
def mongo_uri() -> str:
    return mongodb_uri()


@pytest.fixture
async def mongo_client(mongo_uri: str) -> AsyncIterator[AsyncMongoClient[dict[str, Any]]]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def collection(mongo_client: AsyncMongoClient[dict[str, Any]]) -> AsyncIterator[Any]:
    """A unique ``test-checkpoint-`` collection, dropped afterwards."""
    coll = mongo_client[DATABASE][f"test-checkpoint-{uuid.uuid4().hex}"]
    try:
        yield coll
    finally:
        await coll.drop()


@pytest.fixture
def recording(collection: Any) -> CollectionProxy:
    """The test collection behind a proxy that records every call (to prove "no I/O")."""
    return CollectionProxy(collection)


@pytest.fixture
def sentinel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file every hostile hook touches; it must still be absent after each refusal."""
    path = tmp_path / "pwned"
    monkeypatch.setenv(SENTINEL_ENV, str(path))
    return path


def scope_options(**overrides: Any) -> MongoDBCheckpointStorageOptions:
    values: dict[str, Any] = {
        "tenant_id": "tenant-1",
        "application_id": "application-1",
        "workflow_name": WORKFLOW_NAME,
        "session_id": "run-1",
        "allowed_checkpoint_types": ALLOWED_TYPES,
    }
    values.update(overrides)
    return MongoDBCheckpointStorageOptions(**values)


@pytest.fixture
def make_storage(collection: Any) -> StorageFactory:
    """Storages on the test collection; keyword arguments override the scope options."""

    def make(*, target: Any = None, **overrides: Any) -> MongoDBCheckpointStorage:
        return MongoDBCheckpointStorage(
            scope_options(**overrides), collection=collection if target is None else target
        )

    return make


def make_checkpoint(
    *,
    workflow_name: str = WORKFLOW_NAME,
    checkpoint_id: str | None = None,
    previous: str | None = None,
    state: dict[str, Any] | None = None,
    iteration: int = 0,
) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash="graph-1",
        checkpoint_id=checkpoint_id or str(uuid.uuid4()),
        previous_checkpoint_id=previous,
        state=state if state is not None else {"step": iteration},
        iteration_count=iteration,
    )
