"""Writes dump.json: a Redis store in the layout of agentflow before the one-store refactor.

RUN ONLY AGAINST THE OLD WORKTREE (commit aeb9750, the last commit before
the refactor): its modules (``agentflow.durable.stores.redis``, the
checkpointer paired with a durable store by hand) exist nowhere else::

    git worktree add /tmp/hredis/old aeb9750
    cd /tmp/hredis/old && PYTHONPATH=/tmp/hredis/old/src:/tmp/hredis/old \\
        /work/main/.venv/bin/python /work/main/tests/data/migration/redis/make_dump.py

It runs the old runtime on a scratch prefix of the test server: in namespace
``acme``, sealed with :data:`SPEC`, a run paused on a human interrupt
(``paused``, tests/runtime/graphs.py's approval graph), a run waiting for
reconciliation after a lost reply (``ambiguous``, its lost-reply graph) and
three events (one of a child run); in the default namespace, unsealed, a
finished run (``plain``, its counter graph). Then it writes every key under
the prefix (the prefix cut off) with its type and value, bytes as base64,
and removes the prefix. tests/checkpoint/test_redis_migration.py loads it.
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

import redis.asyncio as aioredis

#: The test key ring (a fixed key: this data is public test data).
SPEC = {
    "current": "mig-1",
    "keys": {
        "mig-1": base64.b64encode(hashlib.sha256(b"agentflow redis migration").digest()).decode()
    },
}
URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
OUT = Path(__file__).with_name("dump.json")
EVENTS = [
    ("evt-paused-1", {"type": "note", "run_id": "paused", "n": 1}),
    ("evt-child-1", {"type": "note", "run_id": "child", "parent_run_id": "paused", "n": 2}),
    ("evt-paused-2", {"type": "note", "run_id": "paused", "n": 3}),
]


def _old(name: str) -> Any:
    """A module of the old tree (imported by name: mypy checks this file against the new one)."""
    return importlib.import_module(name)


async def _write(prefix: str, ledger: str) -> None:
    keyring = _old("agentflow.checkpoint.sealing").KeyRing.from_source(lambda: SPEC)
    redis_cp = _old("agentflow.checkpoint.redis").RedisCheckpointer
    sealed_codec = _old("agentflow.checkpoint.sealing").SealedCodec
    durable = _old("agentflow.durable.stores.redis").RedisDurableStore
    events = _old("agentflow.durable.stores.redis_events").RedisRunEventStore
    digest = _old("agentflow.durable").event_payload_digest
    graphs = _old("tests.runtime.graphs")
    where = {"prefix": prefix}
    async with (
        redis_cp(URL, namespace="acme", codec=sealed_codec(keyring), **where) as cp,
        durable(URL, namespace="acme", sealing=keyring, **where) as records,
        events(URL, namespace="acme", sealing=keyring, **where) as log,
    ):
        approval = graphs.approval_graph().compile(cp, durable=records)
        paused = await approval.run({"log": []}, thread="paused")
        assert paused.status == "interrupted", paused.status
        lost = graphs.lost_reply_graph().compile(cp, durable=records)
        ambiguous = await lost.run({"ledger": ledger}, thread="ambiguous")
        assert ambiguous.status == "reconciliation_required", ambiguous.status
        for event_id, event in EVENTS:
            await log.append_once(event_id, digest(event), event)
    async with redis_cp(URL, **where) as cp, durable(URL, **where) as records:
        counter = graphs.counter_graph().compile(cp, durable=records)
        done = await counter.run(graphs.counter_input(1), thread="plain")
        assert done.status == "done", done.status


async def _dump(admin: Any, prefix: str) -> list[dict[str, Any]]:
    def text(raw: Any) -> str:
        return base64.b64encode(raw).decode()

    keys = sorted([key async for key in admin.scan_iter(match=f"{prefix}:*")])
    dumped = []
    for key in keys:
        kind = (await admin.type(key)).decode()
        value: Any
        if kind == "string":
            value = text(await admin.get(key))
        elif kind == "hash":
            value = {text(f): text(v) for f, v in sorted((await admin.hgetall(key)).items())}
        elif kind == "zset":
            value = [[text(m), s] for m, s in await admin.zrange(key, 0, -1, withscores=True)]
        else:
            raise AssertionError(f"{key!r} is a {kind}")
        dumped.append({"key": text(key[len(prefix) :]), "type": kind, "value": value})
    return dumped


async def main() -> None:
    prefix = f"afmig-{uuid.uuid4().hex}"
    admin = aioredis.Redis.from_url(URL)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            await _write(prefix, str(Path(scratch) / "ledger"))
        dumped = await _dump(admin, prefix)
    finally:
        async for key in admin.scan_iter(match=f"{prefix}:*"):
            await admin.unlink(key)
        await admin.aclose()
    made = {
        "made_by": "tests/data/migration/redis/make_dump.py at aeb9750",
        "keyring": SPEC,
        "keys": dumped,
    }
    OUT.write_text(json.dumps(made, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
