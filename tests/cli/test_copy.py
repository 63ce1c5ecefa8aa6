"""``agentflow copy``: every checkpoint and revision, resumable, verified."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.store import Store
from agentflow.cli.copy import StoreCopy, source_threads
from agentflow.cli.demo import build_demo_graph, demo_input
from tests.backends.mongodb import scratch_database
from tests.backends.postgres import DSN, admin_connection
from tests.cli.support import af, af_tty, command, env

Contents = dict[str, list[Checkpoint]]


async def contents(store: Store) -> Contents:
    """Every thread's history, revisions included."""
    return {t: [cp async for cp in store.history(t)] async for t in source_threads(store)}


async def _fill(store: Store, prefix: str = "") -> None:
    """Threads in every status, a rewritten suspend (revision 2) and a fork."""
    demo = build_demo_graph().compile(store)
    await demo.run(demo_input("A-1", 0), thread=f"{prefix}paused")
    await demo.run(demo_input("A-2", 0), thread=f"{prefix}done")
    await demo.resume(f"{prefix}done", "approve")
    await demo.resume(f"{prefix}done")
    await demo.run(demo_input("A-3", 3600), thread=f"{prefix}waiting")
    await demo.resume(f"{prefix}waiting", "approve")
    await demo.fork(f"{prefix}done", 2, new_thread=f"{prefix}what-if", update={"note": 1})
    answered = await store.get(f"{prefix}done", 2)
    assert answered is not None
    await store.put(replace(answered, extra={**answered.extra, "note": 1}), if_revision=1)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    db = tmp_path / "source.db"

    async def fill() -> None:
        async with SqliteCheckpointer(db) as store:
            await _fill(store)

    asyncio.run(fill())
    return db


def _read(open_store: object) -> Contents:
    async def read() -> Contents:
        async with open_store() as store:  # type: ignore[operator]
            return await contents(store)

    return asyncio.run(read())


def test_copy_sqlite_to_postgres_keeps_every_checkpoint_and_revision(
    source: Path, tmp_path: Path
) -> None:
    asyncio.run(_postgres_is_up())
    namespace = f"copy-{uuid.uuid4().hex[:8]}"
    url = DSN
    done = af(tmp_path, "copy", f"sqlite:///{source}", url, "--to-namespace", namespace)
    assert "threads: 4 (4 copied, 0 already there, 0 replaced, 0 refused, 0 skipped)" in done.stdout
    assert "verified: every copied thread" in done.stdout
    copied = _read(lambda: PostgresCheckpointer(url, namespace=namespace))
    assert copied == _read(lambda: SqliteCheckpointer(source))
    assert {cp.revision for cps in copied.values() for cp in cps} == {1, 2}
    again = af(tmp_path, "copy", f"sqlite:///{source}", url, "--to-namespace", namespace, "--json")
    assert '"unchanged": 4' in again.stdout and '"writes": 0' in again.stdout
    asyncio.run(_delete_all(lambda: PostgresCheckpointer(url, namespace=namespace)))


async def _postgres_is_up() -> None:
    conn = await admin_connection()
    await conn.close()


async def _delete_all(open_store: object) -> None:
    async with open_store() as store:  # type: ignore[operator]
        for thread in [t async for t in source_threads(store)]:
            await store.delete_thread(thread)


async def test_copy_sqlite_to_mongodb_keeps_every_checkpoint(source: Path, tmp_path: Path) -> None:
    async with scratch_database() as (uri, _client, _database):
        namespace = f"copy-{uuid.uuid4().hex[:8]}"
        done = await asyncio.to_thread(
            af, tmp_path, "copy", f"sqlite:///{source}", uri, "--to-namespace", namespace
        )
        assert "4 copied" in done.stdout
        async with SqliteCheckpointer(source) as src:
            original = await contents(src)
        async with MongoCheckpointer(uri, namespace=namespace) as dst:
            assert await contents(dst) == original
            for thread in original:
                await dst.delete_thread(thread)


def test_copy_selects_threads_and_namespaces(tmp_path: Path) -> None:
    db = tmp_path / "ns.db"

    async def fill() -> None:
        for namespace, prefix in (("acme", ""), ("other", "other-")):
            async with SqliteCheckpointer(db, namespace=namespace) as store:
                await _fill(store, prefix)

    asyncio.run(fill())
    dst = tmp_path / "dst.db"
    af(
        tmp_path,
        "copy",
        f"sqlite:///{db}",
        f"sqlite:///{dst}",
        "--namespace",
        "acme",
        "--thread",
        "done",
        "--thread",
        "paused",
    )
    copied = _read(lambda: SqliteCheckpointer(dst, namespace="acme"))
    assert sorted(copied) == ["done", "paused"]
    assert _read(lambda: SqliteCheckpointer(dst, namespace="other")) == {}
    missing = af(
        tmp_path, "copy", f"sqlite:///{db}", f"sqlite:///{dst}", "--thread", "ghost", check=False
    )
    assert missing.returncode == 1 and "thread 'ghost' not found in the source" in missing.stderr


async def test_a_copy_cut_short_is_continued(tmp_path: Path) -> None:
    source, destination = MemoryCheckpointer(), MemoryCheckpointer()
    await _fill(source)
    done = [cp async for cp in source.history("done")]
    claimed = next(cp for cp in done if cp.revision == 2)
    for cp in done[: claimed.step + 1]:  # a prefix, its last step one revision short
        await destination.put(cp)
    report = await StoreCopy(source, destination).run()
    assert report.count("copied") == 4 and not report.mismatched and not report.refused
    assert await contents(destination) == await contents(source)


async def test_a_thread_that_differs_is_refused_unless_overwrite(tmp_path: Path) -> None:
    source, destination = MemoryCheckpointer(), MemoryCheckpointer()
    await _fill(source)
    first = await source.get("done", 0)
    assert first is not None
    mine = replace(first, state={"someone": "else"})
    await destination.put(mine)
    report = await StoreCopy(source, destination).run(source_threads(source))
    assert report.refused == ["done"] and report.count("copied") == 3
    assert [cp.state async for cp in destination.history("done")] == [{"someone": "else"}]
    report = await StoreCopy(source, destination, overwrite=True).run()
    assert report.count("replaced") == 1 and report.count("unchanged") == 3
    assert await contents(destination) == await contents(source)


def test_the_command_refuses_and_exits_1_listing_the_threads(source: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst.db"
    af(tmp_path, "copy", f"sqlite:///{source}", f"sqlite:///{dst}", "--thread", "paused")

    async def change() -> None:
        async with SqliteCheckpointer(dst) as store:
            cp = await store.get("paused", 0)
            assert cp is not None
            await store.put(replace(cp, state={"edited": True}))

    asyncio.run(change())
    done = af(tmp_path, "copy", f"sqlite:///{source}", f"sqlite:///{dst}", check=False)
    assert done.returncode == 1
    assert "1 thread(s) exist at the destination with other content" in done.stderr
    assert "'paused'" in done.stderr and "--overwrite" in done.stderr
    af(tmp_path, "copy", f"sqlite:///{source}", f"sqlite:///{dst}", "--overwrite")
    assert _read(lambda: SqliteCheckpointer(dst)) == _read(lambda: SqliteCheckpointer(source))


class _Lossy(MemoryCheckpointer):
    """A destination that silently loses step 1 of every thread."""

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        if cp.step == 1:
            return f"{cp.thread}:{cp.step}"
        return await super().put(cp, if_revision=if_revision)


async def test_verification_reads_the_destination_back() -> None:
    source = MemoryCheckpointer()
    await _fill(source)
    report = await StoreCopy(source, _Lossy()).run(source_threads(source))
    assert sorted(t for t, _ in report.mismatched) == ["done", "paused", "waiting"]
    assert (
        "expected 3 checkpoints up to step 2 (revision 1), found 2 checkpoints"
        in dict(report.mismatched)["paused"]
    )


def test_a_killed_copy_finishes_when_run_again(tmp_path: Path) -> None:
    src, dst = tmp_path / "big.db", tmp_path / "copy.db"

    async def fill() -> None:
        async with SqliteCheckpointer(src) as store:
            demo = build_demo_graph().compile(store)
            await asyncio.gather(
                *(demo.run(demo_input(f"A-{i}", 0), thread=f"t{i:04}") for i in range(300))
            )

    asyncio.run(fill())
    args = ["copy", f"sqlite:///{src}", f"sqlite:///{dst}", "--concurrency", "2"]
    copier = subprocess.Popen(command(*args), cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not dst.exists() or _count(dst) < 20:
        assert copier.poll() is None, "the copy finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    copier.send_signal(signal.SIGKILL)
    copier.wait(timeout=10)
    assert 0 < _count(dst) < 300
    done = af(tmp_path, *args)
    assert "verified: every copied thread" in done.stdout
    assert _read(lambda: SqliteCheckpointer(dst)) == _read(lambda: SqliteCheckpointer(src))


def _count(db: Path) -> int:
    async def count() -> int:
        async with SqliteCheckpointer(db) as store:
            return sum([1 async for _ in source_threads(store)])

    return asyncio.run(count())


def test_progress_on_a_terminal_and_a_summary_otherwise(source: Path, tmp_path: Path) -> None:
    status, out = af_tty(tmp_path, "copy", f"sqlite:///{source}", f"sqlite:///{tmp_path}/a.db")
    assert status == 0 and "copy" in out and "4/4" in out
    piped = af(tmp_path, "copy", f"sqlite:///{source}", f"sqlite:///{tmp_path}/b.db")
    assert "4/4" not in piped.stdout + piped.stderr
    assert piped.stdout.startswith("copied sqlite:///")


def test_copy_never_creates_its_source_and_needs_two_stores(tmp_path: Path) -> None:
    done = af(tmp_path, "copy", "sqlite:///missing.db", f"sqlite:///{tmp_path}/d.db", check=False)
    assert done.returncode == 1 and "no store at missing.db" in done.stderr
    assert not (tmp_path / "missing.db").exists() and not (tmp_path / "d.db").exists()
    same = af(tmp_path, "copy", "sqlite:///x.db", "sqlite:///x.db", check=False)
    assert same.returncode == 2 and "two different stores" in same.stderr
    store = af(
        tmp_path,
        "--store",
        "sqlite:///x.db",
        "copy",
        "sqlite:///x.db",
        "sqlite:///y.db",
        check=False,
    )
    assert store.returncode == 2 and "--store does not apply" in store.stderr


async def _long_thread(db: Path, steps: int) -> None:
    async with SqliteCheckpointer(db) as store:
        for step in range(steps):
            await store.put(Checkpoint("long", step, {"n": step, "pad": "x" * 2_000}))


def test_progress_moves_inside_a_long_thread_without_a_terminal(tmp_path: Path) -> None:
    """One thread of many steps: lines come every interval while it is copied,
    counting its checkpoints, not only once it is done."""
    asyncio.run(_long_thread(tmp_path / "long.db", 3_000))
    done = af(tmp_path, "copy", "sqlite:///long.db", "sqlite:///copy.db", "--interval", "0.02")
    lines = [line for line in done.stderr.splitlines() if line.startswith("copy: 0 of 1 threads")]
    counted = [int(line.split("; ")[1].split()[0].replace(",", "")) for line in lines]
    inside = [n for n in counted if 0 < n < 3_000]  # the thread begun, not yet done
    assert counted == sorted(counted) and len(set(inside)) >= 2, lines
    assert "checkpoints: 3,000 read, 3,000 written" in done.stdout
