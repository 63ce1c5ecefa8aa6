"""A store that cannot be reached: said at once, with where, and no password."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.cli.support import af

SECRET = "hunter2-secret"


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("mongodb://admin:" + SECRET + "@127.0.0.1:1/", "the mongodb store at 127.0.0.1:1"),
        (
            "mongodb://u:" + SECRET + "@127.0.0.1:1,127.0.0.1:2/?replicaSet=rs0",
            "the mongodb store at 127.0.0.1:1,127.0.0.1:2",
        ),
        (
            "postgresql://postgres:" + SECRET + "@127.0.0.1:1/test",
            "the postgresql store at 127.0.0.1:1",
        ),
        ("redis://:" + SECRET + "@127.0.0.1:1/0", "the redis store at 127.0.0.1:1"),
    ],
    ids=["mongodb", "mongodb-seed-list", "postgresql", "redis"],
)
def test_an_unreachable_store_is_named_quickly_and_safely(
    tmp_path: Path, url: str, where: str
) -> None:
    started = time.monotonic()
    done = af(tmp_path, "--store", url, "threads", check=False)
    elapsed = time.monotonic() - started
    assert done.returncode == 1
    assert f"agentflow: error: cannot reach {where} (agentflow threads): " in done.stderr
    assert SECRET not in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert elapsed < 20, f"took {elapsed:.1f}s: the CLI's server-selection timeout is 5s"


def test_a_postgres_error_names_the_public_operation_not_an_internal_method(
    tmp_path: Path,
) -> None:
    done = af(tmp_path, "--store", "postgresql://postgres@127.0.0.1:1/test", "threads", check=False)
    assert done.returncode == 1 and "list_after" not in done.stderr


def test_a_postgres_server_that_never_answers_is_given_up_within_seconds(tmp_path: Path) -> None:
    with socket.socket() as listener:  # accepts TCP (the kernel's backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        url = f"postgresql://postgres@127.0.0.1:{port}/test"
        # The CLI gives PostgreSQL a 5 s connect_timeout; asyncpg's own is 60 s.
        done = af(tmp_path, "--store", url, "threads", check=False, timeout=40)
    assert done.returncode == 1
    assert f"cannot reach the postgresql store at 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
