"""Separate processes recovering the same dead runs on one mongod: for each run exactly one
claims it and makes its effect, and an event id is accepted once.

Each spawned worker opens its own store (its own client) and resumes every run as a
worker would (tests/durable/racing.py); its effect is an insert into a ledger collection.
"""

from __future__ import annotations

import asyncio

import pytest
from pymongo import AsyncMongoClient

from agentflow.checkpoint.mongodb import MongoCheckpointer
from tests.backends.mongodb import Doc, MongoStore
from tests.backends.mongodb import scratch as scratch_body
from tests.durable.racing import resume_each, resume_processes

scratch = pytest.fixture(scratch_body)


async def _resume(uri: str, database: str, worker: int) -> list[str]:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri)

    async def effect(key: str, token: str) -> None:
        await client[database]["ledger"].insert_one({"run": key, "by": token})

    try:
        async with MongoCheckpointer(client=client, database=database) as store:
            return await resume_each(store, store, worker, effect)
    finally:
        await client.close()


def resume(uri: str, database: str, worker: int) -> list[str]:
    """Child entry point: this worker's outcome of every run, in order."""
    return asyncio.run(_resume(uri, database, worker))


async def test_racing_processes_resume_each_run_exactly_once(scratch: MongoStore) -> None:
    async def effects() -> list[tuple[str, str]]:
        made = await scratch.client[scratch.database]["ledger"].find({}, {"_id": 0}).to_list()
        return [(entry["run"], entry["by"]) for entry in made]

    async with scratch.store() as store:
        await resume_processes(store, resume, scratch.uri, scratch.database, effects=effects)
