"""Separate processes recovering the same dead runs on one Redis: for each run
exactly one claims it and makes its effect, and an event id is accepted once.

Each spawned worker opens its own store (its own connections) and resumes
every run as a worker would (tests/durable/racing.py); its effect is a push
onto a ledger list.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import cast

import redis.asyncio as aioredis

from agentflow.checkpoint.redis import RedisCheckpointer
from tests.backends.redis import REDIS_URL, drop_prefix
from tests.durable.racing import resume_each, resume_processes


async def _resume(prefix: str, worker: int) -> list[str]:
    client = aioredis.Redis.from_url(REDIS_URL)

    async def effect(key: str, token: str) -> None:
        await client.rpush(f"{prefix}:ledger", f"{key} by {token}")

    try:
        async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
            return await resume_each(store, store, worker, effect)
    finally:
        await client.aclose()


def resume(prefix: str, worker: int) -> list[str]:
    """Child entry point: this worker's outcome of every run, in order."""
    return asyncio.run(_resume(prefix, worker))


async def test_racing_processes_resume_each_run_exactly_once() -> None:
    prefix = f"aftest-{uuid.uuid4().hex}"
    admin = aioredis.Redis.from_url(REDIS_URL)

    async def effects() -> list[tuple[str, str]]:
        made = cast(list[bytes], await admin.lrange(f"{prefix}:ledger", 0, -1))
        return [(key, token) for key, _, token in (e.decode().partition(" by ") for e in made)]

    try:
        async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
            await resume_processes(store, resume, prefix, effects=effects)
    finally:
        await drop_prefix(admin, prefix)
        await admin.aclose()
