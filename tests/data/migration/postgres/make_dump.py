"""Makes ``dump.sql``: a PostgreSQL store in the layout agentflow had before one
store per database (commit aeb9750): checkpoint tables at schema version 2 and
the durable tables beside them at their own version 1.

It runs ONLY against that old code, from a scratch worktree (the current code
has neither ``agentflow.durable.stores.postgres`` nor this layout)::

    git worktree add /tmp/old aeb9750
    cd /tmp/old && PYTHONPATH=/tmp/old/src:/tmp/old \\
        /work/main/.venv/bin/python /work/main/tests/data/migration/postgres/make_dump.py

Two namespaces in the schema ``af_dump_v2``, table ``legacy``: the default (plain) and
"sealed" (checkpoints, records and events sealed with ``keys.json``). In each:
thread ``paused`` (tests/runtime/graphs.py approval_graph, waiting for a human),
thread ``ambiguous`` (lost_reply_graph: its charge went out and the reply was
lost, so it waits for reconciliation) and two accepted events of ``paused``
(one of a child run). The dump is ``pg_dump --inserts`` of that schema, without
psql meta-commands; tests/checkpoint/test_postgres_migration.py loads it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import asyncpg
from tests.runtime.graphs import approval_graph, lost_reply_graph

from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.sealing import KeyRing, SealedCodec
from agentflow.durable import event_payload_digest

#: The old release's durable stores, gone from the current code (so looked up by name).
PostgresDurableStore = importlib.import_module(
    "agentflow.durable.stores.postgres"
).PostgresDurableStore
PostgresRunEventStore = importlib.import_module(
    "agentflow.durable.stores.postgres_events"
).PostgresRunEventStore
HERE = Path(__file__).resolve().parent
DSN = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA, TABLE = "af_dump_v2", "legacy"


def _ring() -> KeyRing:
    spec = json.loads((HERE / "keys.json").read_text())
    return KeyRing.from_source(lambda: spec)


async def _namespace(namespace: str | None, ring: KeyRing | None) -> None:
    options: dict[str, Any] = {"table": TABLE, "schema": SCHEMA, "namespace": namespace}
    codec = None if ring is None else SealedCodec(ring)
    async with (
        PostgresCheckpointer(DSN, codec=codec, **options) as checkpointer,
        PostgresDurableStore(DSN, sealing=ring, **options) as durable,
        PostgresRunEventStore(DSN, sealing=ring, **options) as events,
    ):
        paused = (
            await approval_graph()
            .compile(checkpointer, durable=durable)
            .run({"log": []}, thread="paused")
        )
        assert paused.status == "interrupted", paused.status
        ambiguous = (
            await lost_reply_graph()
            .compile(checkpointer, durable=durable)
            .run({"ledger": f"ledger-{namespace or 'default'}.txt"}, thread="ambiguous")
        )
        assert ambiguous.status == "reconciliation_required", ambiguous.status
        for event_id, event in (
            ("evt-paused", {"type": "asked", "run_id": "paused", "n": 1}),
            ("evt-child", {"type": "step", "run_id": "child", "parent_run_id": "paused"}),
        ):
            result = await events.append_once(event_id, event_payload_digest(event), event)
            assert result.inserted


async def main() -> None:
    admin = await asyncpg.connect(DSN)
    try:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        with tempfile.TemporaryDirectory() as scratch:
            os.chdir(scratch)  # the ledger the lost reply charged lives here
            await _namespace(None, None)
            await _namespace("sealed", _ring())
        command = ["pg_dump", "--inserts", "--no-owner", "--no-privileges", "--schema", SCHEMA, DSN]
        done = await asyncio.to_thread(
            subprocess.run, command, check=True, capture_output=True, text=True
        )
        dump = done.stdout
        lines = [line for line in dump.splitlines() if not line.startswith("\\")]
        (HERE / "dump.sql").write_text("\n".join(lines) + "\n")
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
