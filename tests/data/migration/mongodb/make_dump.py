"""Writes dump.json: a MongoDB store in the layout of agentflow before the one-store refactor.

RUN ONLY AGAINST THE OLD WORKTREE (commit aeb9750, the last commit before
the refactor): its modules (``agentflow.durable.stores.mongodb*``, the
checkpointer paired with a durable store by hand) exist nowhere else::

    git worktree add /tmp/hmongo/old aeb9750
    cd /tmp/hmongo/old && MONGODB_URI=mongodb://127.0.0.1:PORT \\
        PYTHONPATH=/tmp/hmongo/old/src:/tmp/hmongo/old \\
        /work/main/.venv/bin/python /work/main/tests/data/migration/mongodb/make_dump.py

It runs the old runtime on a scratch database of the test server: in
namespace ``acme``, sealed with :data:`SPEC`, a run paused on a human
interrupt (``paused``, tests/runtime/graphs.py's approval graph), a run
waiting for reconciliation after a lost reply (``ambiguous``, its lost-reply
graph) and three events (one of a child run, accepted between its parent's
two); in the default namespace, unsealed, a finished run (``plain``, its
counter graph). That is checkpoint layout 2 in ``checkpoints`` beside
durable layout 1 (``checkpoints_durable_runs``, ``checkpoints_durable_events``).
Then it writes every document of every collection (MongoDB canonical
extended JSON, so every BSON type stays what it was) and every index, and
drops the database. tests/checkpoint/test_mongodb_migration.py loads it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bson import json_util
from pymongo import AsyncMongoClient

#: The test key ring (a fixed key: this data is public test data).
SPEC = {
    "current": "mig-1",
    "keys": {
        "mig-1": base64.b64encode(hashlib.sha256(b"agentflow mongodb migration").digest()).decode()
    },
}
URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017")
OUT = Path(__file__).with_name("dump.json")
EVENTS = [
    ("evt-paused-1", {"type": "note", "run_id": "paused", "n": 1}),
    ("evt-child-1", {"type": "note", "run_id": "child", "parent_run_id": "paused", "n": 2}),
    ("evt-paused-2", {"type": "note", "run_id": "paused", "n": 3}),
]


def _old(name: str) -> Any:
    """A module of the old tree (imported by name: mypy checks this file against the new one)."""
    return importlib.import_module(name)


async def _write(database: str, ledger: str) -> None:
    keyring = _old("agentflow.checkpoint.sealing").KeyRing.from_source(lambda: SPEC)
    mongo_cp = _old("agentflow.checkpoint.mongodb").MongoCheckpointer
    sealed_codec = _old("agentflow.checkpoint.sealing").SealedCodec
    durable = _old("agentflow.durable.stores.mongodb").MongoDurableStore
    events = _old("agentflow.durable.stores.mongodb_events").MongoRunEventStore
    digest = _old("agentflow.durable").event_payload_digest
    graphs = _old("tests.runtime.graphs")
    where = {"database": database}
    async with (
        mongo_cp(URI, namespace="acme", codec=sealed_codec(keyring), **where) as cp,
        durable(URI, namespace="acme", sealing=keyring, **where) as records,
        events(URI, namespace="acme", sealing=keyring, **where) as log,
    ):
        approval = graphs.approval_graph().compile(cp, durable=records)
        paused = await approval.run({"log": []}, thread="paused")
        assert paused.status == "interrupted", paused.status
        lost = graphs.lost_reply_graph().compile(cp, durable=records)
        ambiguous = await lost.run({"ledger": ledger}, thread="ambiguous")
        assert ambiguous.status == "reconciliation_required", ambiguous.status
        for event_id, event in EVENTS:
            await log.append_once(event_id, digest(event), event)
    async with mongo_cp(URI, **where) as cp, durable(URI, **where) as records:
        counter = graphs.counter_graph().compile(cp, durable=records)
        done = await counter.run(graphs.counter_input(1), thread="plain")
        assert done.status == "done", done.status


async def _dump(client: AsyncMongoClient[dict[str, Any]], database: str) -> dict[str, Any]:
    db = client[database]
    dumped: dict[str, Any] = {}
    for name in sorted(await db.list_collection_names()):
        docs = await db[name].find({}).sort("_id", 1).to_list()
        indexes = [
            {key: value for key, value in index.items() if key != "v"}
            for index in await (await db[name].list_indexes()).to_list()
            if index["name"] != "_id_"
        ]
        dumped[name] = {
            "documents": json.loads(
                json_util.dumps(docs, json_options=json_util.CANONICAL_JSON_OPTIONS)
            ),
            "indexes": json.loads(
                json_util.dumps(indexes, json_options=json_util.CANONICAL_JSON_OPTIONS)
            ),
        }
    return dumped


async def main() -> None:
    database = f"afmig_{uuid.uuid4().hex[:16]}"
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(URI)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            await _write(database, str(Path(scratch) / "ledger"))
        dumped = await _dump(client, database)
    finally:
        await client.drop_database(database)
        await client.close()
    made = {
        "made_by": "tests/data/migration/mongodb/make_dump.py at aeb9750",
        "keyring": SPEC,
        "collections": dumped,
    }
    # never sort keys: BSON compares embedded documents (an _id) field by field, in order
    OUT.write_text(json.dumps(made, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
