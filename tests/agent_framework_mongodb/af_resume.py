"""Resume a paused ``af_workflows`` run in a fresh process.

    python -m tests.agent_framework_mongodb.af_resume \
        URI DATABASE COLLECTION TENANT SESSION ANSWER [CHECKPOINT_ID]

prints ``{"outputs": [...], "resumed_from": ID}`` as JSON. Without
CHECKPOINT_ID it resumes from ``get_latest``. The workflow lives in another
module so its classes keep the same ``module:qualname`` (and the graph the
same signature) here as in the process that paused it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agent_framework_mongodb import MongoDBCheckpointStorage
from tests.agent_framework_mongodb.af_workflows import WORKFLOW_NAME, build_workflow, options


async def resume(argv: list[str]) -> dict[str, Any]:
    uri, database, collection, tenant, session, answer, *rest = argv
    opts = options(tenant, session, database, collection)
    async with MongoDBCheckpointStorage(opts, connection_string=uri) as storage:
        if rest:
            checkpoint = await storage.load(rest[0])
        else:
            latest = await storage.get_latest(workflow_name=WORKFLOW_NAME)
            assert latest is not None, "nothing to resume"
            checkpoint = latest
        pending = list(checkpoint.pending_request_info_events)
        workflow = build_workflow(storage)
        result = await workflow.run(
            responses={request_id: answer for request_id in pending},
            checkpoint_id=checkpoint.checkpoint_id,
        )
        return {"outputs": result.get_outputs(), "resumed_from": checkpoint.checkpoint_id}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(resume(sys.argv[1:]))))
