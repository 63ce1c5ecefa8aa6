"""Separate processes racing claims and appends on one SQLite file: exactly one wins.

The workers share only the file and SQLite's write lock (see tests/durable/racing.py).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from agentflow.durable.stores.sqlite import SqliteDurableStore
from agentflow.durable.stores.sqlite_events import SqliteRunEventStore
from tests.durable.racing import race_processes


async def test_racing_processes_claim_and_append_exactly_once(tmp_path: Path) -> None:
    path = str(tmp_path / "durable.db")
    async with SqliteDurableStore(path) as store:
        openers = (partial(SqliteDurableStore, path), partial(SqliteRunEventStore, path))
        await race_processes(store, openers)
