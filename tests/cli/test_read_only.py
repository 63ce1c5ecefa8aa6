"""A command that only reads never creates a store: pointed at an empty server,
it says there is no store and the server holds nothing new afterwards."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.backends.mongodb import private_mongod
from tests.backends.postgres import DSN, admin_connection
from tests.backends.redis import REDIS_URL
from tests.cli.support import af

#: Commands that only read (or need a thread that exists), as a user would type them.
READ_ONLY = [
    ["show", "x"],
    ["threads"],
    ["threads", "--status", "waiting"],
    ["history", "x"],
    ["diff", "x", "0", "1"],
    ["journal", "x"],
    ["threads", "--status", "reconciliation_required"],
    ["prune", "x", "--before-step", "3"],
    ["delete", "x"],
    ["resume", "x"],
    ["fork", "x", "0"],
]


def _refused(cwd: Path, store: str) -> None:
    for command in READ_ONLY:
        done = af(cwd, "--store", store, *command, "--json", check=False)
        assert done.returncode == 1, (command, done.stderr)
        error = json.loads(done.stderr)
        assert error["error"] == "store_not_found", (command, error)
        assert "a run creates it (agentflow demo)" in error["message"]


async def _tables(dsn: str) -> list[str]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT schemaname || '.' || tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        )
        return [row[0] for row in rows]
    finally:
        await conn.close()


@pytest.fixture
def fresh_database() -> Iterator[str]:
    """The DSN of a new, empty PostgreSQL database, dropped afterwards."""
    name = f"af_fresh_{uuid.uuid4().hex[:10]}"

    async def run(statement: str) -> None:
        admin = await admin_connection()
        try:
            await admin.execute(statement)
        finally:
            await admin.close()

    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    try:
        yield DSN.rsplit("/", 1)[0] + "/" + name
    finally:
        asyncio.run(run(f'DROP DATABASE "{name}" WITH (FORCE)'))


def test_postgres_read_only_commands_create_no_table(tmp_path: Path, fresh_database: str) -> None:
    _refused(tmp_path, fresh_database)
    assert asyncio.run(_tables(fresh_database)) == []
    af(tmp_path, "--store", fresh_database, "demo", "--thread", "x", "--hold", "0")
    assert asyncio.run(_tables(fresh_database))  # demo creates the store
    shown = af(tmp_path, "--store", fresh_database, "show", "x", "--json")
    assert json.loads(shown.stdout)["thread"] == "x"


def test_redis_read_only_commands_write_no_key(tmp_path: Path) -> None:
    url = REDIS_URL.rsplit("/", 1)[0] + "/11"  # a database the other tests leave alone
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"redis is not reachable at {url}: {exc}")
    keys = set(client.keys("agentflow*"))
    try:
        assert not keys, f"database 11 of {url} holds agentflow keys: {sorted(keys)[:3]}"
        _refused(tmp_path, url)
        assert client.keys("agentflow*") == []
    finally:
        for key in client.scan_iter("agentflow*"):
            client.delete(key)
        client.close()


def test_mongodb_read_only_commands_create_no_collection(tmp_path: Path) -> None:
    server = private_mongod()
    try:
        _refused(tmp_path, server.uri)
        import pymongo

        client: pymongo.MongoClient[dict[str, object]]
        with pymongo.MongoClient(server.uri) as client:
            assert set(client.list_database_names()) <= {"admin", "config", "local"}
    finally:
        server.cleanup()
