"""No credential reaches the output, in any form a driver accepts.

Every command is driven against real servers with store URLs that carry a
password in each way asyncpg and redis-py take one (user info, ``?password=``,
``passfile=``, ``sslpassword=``, a host-less PostgreSQL URL, a password with
characters that are percent-encoded), in plain and ``--json`` output, on
success and on failure, and everything printed (stdout, stderr, logs) is
searched for the secret as written, decoded and re-encoded.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import redis

from tests.backends import server_missing
from tests.backends.postgres import admin_connection
from tests.cli.support import af_here, console_interrupted
from tests.support.mongod import mongodb_uri

SECRET = "Pw-S3cr3t-7"
#: Percent-encoded in a URL; a driver may quote it decoded, or encoded another way.
SPECIAL = "S3cr3t p@ss/w:rd%"
FORMS_OF = [SECRET, SPECIAL, quote(SPECIAL, safe=""), quote_plus(SPECIAL), "S3cr3t"]
Run = Callable[..., tuple[int, str]]


async def _socket_directory() -> str:
    conn = await admin_connection()
    try:
        return str(await conn.fetchval("SHOW unix_socket_directories")).split(",")[0].strip()
    finally:
        await conn.close()


def _postgres_urls() -> dict[str, str]:
    where = "postgres@127.0.0.1:5432/test"  # trust authentication: any password is taken
    sockets = asyncio.run(_socket_directory())
    return {
        "user-info": f"postgresql://postgres:{SECRET}@127.0.0.1:5432/test",
        "encoded-user-info": f"postgresql://postgres:{quote(SPECIAL, safe='')}@127.0.0.1:5432/test",
        "password-option": f"postgresql://{where}?password={SECRET}",
        "host-less": f"postgresql:///test?host={sockets}&user=postgres&password={SECRET}",
        "passfile": f"postgres://{where}?passfile=/nowhere/{SECRET}.pgpass",
        "sslpassword": f"postgresql://{where}?sslpassword={SECRET}&sslmode=disable",
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A redis-server of our own that wants ``SECRET`` (the shared one has no password)."""
    binary = shutil.which("redis-server")
    if binary is None:
        server_missing("redis-server", "not on PATH")
    port = _free_port()
    directory = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--requirepass", SECRET,
         "--save", "", "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, password=SECRET)
    try:
        for _ in range(500):  # until it answers, not until it listens
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.01)
        yield port
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=10)


def _leaks(output: str) -> list[str]:
    return [form for form in FORMS_OF if form in output]


def _every_command(run: Run, store: list[str], keys: Path) -> list[tuple[list[str], int, str]]:
    """Run each command on ``store`` (``--store URL --namespace NS``), plain and
    ``--json``; return what each printed and its exit status."""
    ran = []

    def each(*args: str, json: bool = True) -> None:
        for extra in ([], ["--json"]) if json else ([],):
            status, out = run(*store, *args, *extra)
            ran.append(([*args, *extra], status, out))

    each("demo", "--thread", "paused", "--hold", "0", json=False)
    each("demo", "--thread", "done", "--hold", "0", "--approve", json=False)
    each("demo", "--thread", "json", "--hold", "0", "--approve", "--json", json=False)
    each("threads")
    each("threads", "--limit", "1")  # its `more:` line is a command
    each("threads", "--status", "waiting")
    each("history", "done")
    each("show", "paused")
    each("show", "done", "--step", "3")
    each("diff", "done", "2", "3")
    each("journal", "done")
    each("resume", "paused")  # no answer: the error prints the commands that answer
    each("resume", "paused", "--value", '"maybe"')  # not a choice: names the choices
    each("resume", "done")
    each("fork", "done", "3", "--to", "forked", json=False)
    each("resume", "forked", "--json", json=False)
    each("prune", "done", "--before-step", "2")
    each("reconcile", "done", "op_none", "--attempt", "1", "--decision", "defer")
    each("worker", "--once")
    each("show", "ghost")
    each("--keys-file", str(keys), "rekey", "--check")
    each("delete", "forked", json=False)
    each("delete", "json", "--json", json=False)
    return ran


def _check(ran: list[tuple[list[str], int, str]]) -> None:
    leaked = [(args, _leaks(out), out) for args, _, out in ran if _leaks(out)]
    assert not leaked, leaked[0]
    statuses = {" ".join(args): status for args, status, _ in ran}
    assert statuses["demo --thread done --hold 0 --approve"] == 0  # the store did work
    assert statuses["show ghost"] == 1 and statuses["resume paused"] == 2
    printed = "\n".join(out for _, _, out in ran)
    assert "continue with:" in printed and "more: agentflow" in printed
    more = next(out for args, _, out in ran if args == ["threads", "--limit", "1"])
    assert 'more: agentflow --store "$AGENTFLOW_STORE" --namespace ' in more
    assert "set AGENTFLOW_STORE to the URL you passed as --store" in more  # the note follows


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    monkeypatch.chdir(tmp_path)
    for name in ("AGENTFLOW_STORE", "AGENTFLOW_NAMESPACE", "AGENTFLOW_GRAPHS"):
        monkeypatch.delenv(name, raising=False)
    return lambda *args: af_here(capsys, *args)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text('{"current": "k1", "keys": {"k1": "' + "B" * 43 + '="}}')
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("form", list(_postgres_urls()))
def test_no_command_prints_a_postgresql_credential(run: Run, keys: Path, form: str) -> None:
    url = _postgres_urls()[form]
    namespace = f"cred-{uuid.uuid4().hex[:8]}"
    ran = _every_command(run, ["--store", url, "--namespace", namespace], keys)
    backup = f"sqlite:///{os.getcwd()}/backup.db"
    for args in (
        ["copy", url, backup, "--namespace", namespace],
        ["copy", backup, url, "--namespace", namespace, "--to-namespace", f"{namespace}-2"],
        ["copy", url, url, "--namespace", namespace, "--to-namespace", f"{namespace}-2"],
    ):
        for extra in ([], ["--json"]):
            status, out = run(*args, *extra)
            ran.append(([*args, *extra], status, out))
    _check(ran)
    copies = [out for args, _, out in ran if args[0] == "copy"]
    assert all("verified" in out for out in copies[:2]), copies[0]
    assert not [out for out in copies if "***" in out]  # the URL without it, not masked
    for namespace_left in (namespace, f"{namespace}-2"):
        status, out = run("--store", url, "--namespace", namespace_left, "threads", "--json")
        for thread in ("paused", "done"):
            run("--store", url, "--namespace", namespace_left, "delete", thread, "--force")


@pytest.mark.parametrize("form", ["user-info", "password-option"])
def test_no_command_prints_a_redis_credential(
    run: Run, keys: Path, redis_port: int, form: str
) -> None:
    url = {
        "user-info": f"redis://:{SECRET}@127.0.0.1:{redis_port}/0",
        "password-option": f"redis://127.0.0.1:{redis_port}/0?password={SECRET}",
    }[form]
    namespace = f"cred-{uuid.uuid4().hex[:8]}"
    _check(_every_command(run, ["--store", url, "--namespace", namespace], keys))


def test_errors_quote_no_credential_of_an_unreachable_or_refusing_server(run: Run) -> None:
    mongo = mongodb_uri().replace("mongodb://", f"mongodb://someone:{SECRET}@", 1)
    for url in (
        f"postgresql://postgres:{SECRET}@127.0.0.1:1/test?connect_timeout=1",
        f"postgresql:///test?host=/nowhere&password={SECRET}",
        f"redis://:{SECRET}@127.0.0.1:1/0",
        f"redis://127.0.0.1:6379/0?password={SECRET}",  # the shared server wants none
        f"mongodb+srv://someone:{SECRET}@",  # no host: refused for its shape
        mongo,  # a server with no such user
        f"mysql://someone:{SECRET}@db/x",
    ):
        for extra in ([], ["--json"]):
            status, out = run("--store", url, "threads", *extra)
            assert status in (1, 2) and not _leaks(out), (url, out)


def test_the_console_prints_no_credential(tmp_path: Path) -> None:
    url = _postgres_urls()["password-option"]
    namespace = f"cred-{uuid.uuid4().hex[:8]}"
    args = ("--store", url, "--namespace", namespace, "ui", "--port", "0")
    first, rest, _ = console_interrupted(tmp_path, *args)
    assert not _leaks(first + rest), first + rest
