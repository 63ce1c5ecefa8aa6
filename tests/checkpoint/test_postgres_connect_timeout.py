"""``?connect_timeout=S`` in a PostgreSQL URL bounds how long a connection may
take, as libpq's option does, instead of asyncpg's own 60 s."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from agentflow.checkpoint import open_store
from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.postgres.connections import split_connect_timeout
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import InvalidStoreUrl, StoreUnavailable
from tests.backends.postgres import DSN, admin_session, scratch_table

admin = pytest.fixture(admin_session)
table = pytest.fixture(scratch_table)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


async def test_a_silent_server_is_given_up_after_connect_timeout(silent_port: int) -> None:
    url = f"postgresql://postgres@127.0.0.1:{silent_port}/test?connect_timeout=0.5"
    async with open_store(url) as store:
        with pytest.raises(StoreUnavailable) as info:
            # Without the option asyncpg waits 60 s, and this bound fails the test first.
            await asyncio.wait_for(store.get("t"), 30)
    assert f"127.0.0.1:{silent_port}" in str(info.value)


async def test_the_option_is_not_sent_to_the_server(table: str) -> None:
    url = f"{DSN}?connect_timeout=5&application_name=af-timeout"
    async with PostgresCheckpointer(url, table=table) as store:
        await store.put(make_checkpoint("t", 0))
        latest = await store.get("t")
        assert latest is not None and latest.step == 0


def test_the_option_is_taken_out_and_the_others_kept() -> None:
    dsn, seconds = split_connect_timeout("postgresql://u@h/db?sslmode=disable&connect_timeout=7")
    assert (dsn, seconds) == ("postgresql://u@h/db?sslmode=disable", 7.0)
    assert split_connect_timeout("postgresql://u@h/db") == ("postgresql://u@h/db", None)


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf", ""])
def test_a_bad_connect_timeout_is_refused_before_connecting(value: str) -> None:
    with pytest.raises(InvalidStoreUrl, match="connect_timeout must be a positive number"):
        PostgresCheckpointer(f"postgresql://u@127.0.0.1:1/db?connect_timeout={value}")
