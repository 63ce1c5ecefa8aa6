"""Read or resume a paused ``af_request_workflows`` run on MongoDB in a fresh process.

    python -m tests.agent_framework_mongodb.af_request_resume \
        resume|latest URI DATABASE COLLECTION SESSION

prints JSON: ``resume`` answers the dict workflow's pending request from
``get_latest`` (``{"outputs": [...], "resumed_from": ID}``); ``latest`` says
what ``get_latest`` gives for the refused workflow. The workflows live in
another module so their classes keep the same ``module:qualname`` here as in
the process that paused them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from tests.agent_framework_mongodb import af_request_workflows as requests


def mongodb_options(
    workflow_name: str, session: str, database: str, collection: str
) -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(
        tenant_id="tenant-1",
        workflow_name=workflow_name,
        session_id=session,
        database_name=database,
        collection_name=collection,
    )


async def command(argv: list[str]) -> dict[str, Any]:
    """``MODE URI DATABASE COLLECTION SESSION``: resume (dict) or latest (refused), on MongoDB."""
    mode, uri, database, collection, session = argv
    name = requests.DICT_WORKFLOW if mode == "resume" else requests.REFUSED_WORKFLOW
    options = mongodb_options(name, session, database, collection)
    async with MongoDBCheckpointStorage(options, connection_string=uri) as storage:
        if mode == "resume":
            return await requests.resume_dict_workflow(storage)
        return await requests.latest_of_refused_workflow(storage)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(command(sys.argv[1:]))))
