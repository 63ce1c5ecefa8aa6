"""Operating the checkpoint collection: provision indexes, check them, clear finished runs.

    MONGODB_URI=mongodb://localhost:27017 python samples/af_cleanup.py

``ensure_indexes`` is the only call that creates indexes (run it from a
deploy step with createIndex rights); ``validate_indexes`` only reads, so a
runtime health check can call it. ``clear_run`` deletes one completed run,
checkpoints first and then its sequence counter; it is safe to repeat after
a partial failure. Runs you never clear can expire through ``ttl``.
"""

from __future__ import annotations

import asyncio
import datetime
import os

from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions


def options(session_id: str) -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(
        tenant_id="acme",
        workflow_name="nightly-report",
        session_id=session_id,
        database_name="agentflow_samples",
        collection_name="workflow_checkpoints",
        ttl=datetime.timedelta(days=7),  # checkpoints of forgotten runs expire eventually
    )


async def main() -> None:
    uri = os.environ.get("MONGODB_URI")
    if not uri:
        raise SystemExit("set MONGODB_URI, e.g. mongodb://localhost:27017")
    async with MongoDBCheckpointStorage(options("2026-11-29"), connection_string=uri) as storage:
        print("index problems before:", await storage.validate_indexes() or "none")
        await storage.ensure_indexes()
        print("index problems after: ", await storage.validate_indexes() or "none")

        previous = None
        for step in range(3):  # stand-ins for the checkpoints a finished run left behind
            checkpoint = WorkflowCheckpoint(
                workflow_name="nightly-report",
                graph_signature_hash="report-graph",
                previous_checkpoint_id=previous,
                state={"step": step},
                iteration_count=step,
            )
            previous = await storage.save(checkpoint)
        ids = await storage.list_checkpoint_ids(workflow_name="nightly-report")
        print(f"run holds {len(ids)} checkpoints")

        # Quiesce writers first: clear_run is cleanup, not a transaction.
        result = await storage.clear_run()
        checkpoints, counters = result.checkpoints_deleted, result.counters_deleted
        print(f"cleared {checkpoints} checkpoints, {counters} counter")
        again = await storage.clear_run()
        print(f"retry cleared {again.checkpoints_deleted} checkpoints (already clean)")


if __name__ == "__main__":
    asyncio.run(main())
