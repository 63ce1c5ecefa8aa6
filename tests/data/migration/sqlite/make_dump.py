"""Writes ``v2.sql``: a SQLite store in the layout agentflow had before one store per database.

That layout is checkpoint schema version 2 plus the durable tables of durable
schema version 1 (``agentflow_durable_runs`` with both journals as JSON array
columns, ``agentflow_durable_events``), as commit aeb9750 writes them. This
script runs ONLY against that commit's code, from a scratch worktree::

    git worktree add /tmp/hsqlite/old aeb9750
    cd /tmp/hsqlite/old && PYTHONPATH=src:. /work/main/.venv/bin/python \
        /work/main/tests/data/migration/sqlite/make_dump.py

It stores, in the default namespace and, sealed with the key ring of
``keys.json``, in namespace ``sealed``: a run paused on a human interrupt
(``approval`` graph), a run waiting for reconciliation after a lost payment
reply (``lost-reply`` graph), and two accepted events per namespace. The file
is dumped as SQL text (``iterdump``), which tests/checkpoint/test_sqlite_migration.py
loads into a fresh file and opens with today's store.
"""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path

from tests.runtime.graphs import approval_graph, lost_reply_graph

from agentflow.checkpoint.sealing import KeyRing, SealedCodec
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.durable import event_payload_digest

HERE = Path(__file__).parent
# The durable stores of that commit (gone since: today's SqliteCheckpointer is the whole store).
SqliteDurableStore = importlib.import_module("agentflow.durable.stores.sqlite").SqliteDurableStore
SqliteRunEventStore = importlib.import_module(
    "agentflow.durable.stores.sqlite_events"
).SqliteRunEventStore


async def _runs(path: Path, namespace: str | None, ring: KeyRing | None, suffix: str) -> None:
    codec = None if ring is None else SealedCodec(ring)
    async with (
        SqliteCheckpointer(path, namespace=namespace, codec=codec) as checkpointer,
        SqliteDurableStore(path, namespace=namespace, sealing=ring) as durable,
        SqliteRunEventStore(path, namespace=namespace, sealing=ring) as events,
    ):
        paused = (
            await approval_graph()
            .compile(checkpointer, durable=durable)
            .run({"log": []}, thread=f"approve{suffix}")
        )
        assert paused.status == "interrupted", paused.status
        ledger = str(path.parent / f"ledger{suffix}.txt")
        lost = (
            await lost_reply_graph()
            .compile(checkpointer, durable=durable)
            .run({"ledger": ledger}, thread=f"pay{suffix}")
        )
        assert lost.status == "reconciliation_required", lost.status
        for index, thread in enumerate((f"approve{suffix}", f"pay{suffix}")):
            event = {"type": "note", "run_id": thread, "n": index}
            await events.append_once(f"evt{suffix}-{index}", event_payload_digest(event), event)


async def main() -> None:
    ring = KeyRing.from_source((HERE / "keys.json").read_bytes)  # git keeps no mode 0600
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "v2.db"
        await _runs(path, None, None, "-1")
        await _runs(path, "sealed", ring, "-s")
        with closing(sqlite3.connect(path)) as conn:
            meta = dict(conn.execute("SELECT key, value FROM agentflow_meta").fetchall())
            assert (meta["schema_version"], meta["durable_schema_version"]) == (2, 1), meta
            text = "\n".join(conn.iterdump()) + "\n"
    (HERE / "v2.sql").write_text(text)
    print(f"wrote {HERE / 'v2.sql'} ({len(text):,} bytes)", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
