"""Credential-gated coverage against the deployment named by MONGODB_URI.

Seed: "Credential-gated real-deployment coverage ... uses a unique
test-checkpoint- collection with cleanup in finally" and "The integration
command skips cleanly without MONGODB_URI". Everything a production
rollout relies on runs here once end to end: provisioning and validation of
indexes, a workflow paused and resumed through a storage built from a
connection string, TTL documents, and run cleanup.
"""

from __future__ import annotations

import datetime
import os
import uuid
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.indexes import CHECKPOINT_KIND, COUNTER_KIND
from tests.agent_framework_mongodb.af_workflows import ALLOWED_TYPES, WORKFLOW_NAME, build_workflow

pytestmark = [
    pytest.mark.integration_persistence,
    pytest.mark.skipif(not os.environ.get("MONGODB_URI"), reason="MONGODB_URI is not set"),
]
DATABASE = "agentflow_integration"


def options(collection: str, **overrides: Any) -> MongoDBCheckpointStorageOptions:
    values: dict[str, Any] = {
        "tenant_id": "tenant-1", "application_id": "application-1",
        "workflow_name": WORKFLOW_NAME, "session_id": f"run-{uuid.uuid4().hex}",
        "database_name": DATABASE, "collection_name": collection,
        "allowed_checkpoint_types": ALLOWED_TYPES, **overrides,
    }  # fmt: skip
    return MongoDBCheckpointStorageOptions(**values)


async def test_deployment_round_trip() -> None:
    uri = os.environ["MONGODB_URI"]
    name = f"test-checkpoint-{uuid.uuid4().hex}"
    admin: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    try:
        opts = options(name, ttl=datetime.timedelta(days=1))
        async with MongoDBCheckpointStorage(opts, connection_string=uri) as storage:
            assert len(await storage.validate_indexes()) == 5
            await storage.ensure_indexes()
            assert await storage.validate_indexes() == []

            paused = await build_workflow(storage).run("budget")
            (request,) = paused.get_request_info_events()
            latest = await storage.get_latest(workflow_name=WORKFLOW_NAME)
            assert latest is not None and request.request_id in latest.pending_request_info_events

            resumed = await build_workflow(storage).run(
                responses={request.request_id: "approve"}, checkpoint_id=latest.checkpoint_id
            )
            assert resumed.get_outputs() == ["budget:600:approve|drafted budget|drafts=1"]

            collection = admin[DATABASE][name]
            stored = [d async for d in collection.find({"_kind": CHECKPOINT_KIND})]
            assert len(stored) >= 3 and all("expires_at" in d for d in stored)
            counter = await collection.find_one({"_kind": COUNTER_KIND})
            assert counter is not None and counter["expires_at"] >= stored[-1]["expires_at"]

            other = MongoDBCheckpointStorage(options(name), client=admin)
            assert await other.get_latest(workflow_name=WORKFLOW_NAME) is None

            cleared = await storage.clear_run()
            assert (cleared.checkpoints_deleted, cleared.counters_deleted) == (len(stored), 1)
            assert await collection.count_documents({}) == 0
    finally:
        await admin[DATABASE].drop_collection(name)
        await admin.close()
