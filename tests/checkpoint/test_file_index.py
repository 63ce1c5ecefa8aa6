"""The file store's status and due indexes, its head links, and stores of the previous layout."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentflow.checkpoint.base import Checkpoint, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.file.fs import publish
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointCorrupted, IncompatibleSchema

NOW = "2026-06-01T12:00:00+00:00"
STATUSES: tuple[ThreadStatus, ...] = ("running", "interrupted", "waiting", "done")


def _waiting(thread: str, step: int, wake_at: str) -> Checkpoint:
    return make_checkpoint(thread, step, next=("n",), interrupted=True, wake_at=wake_at)


def _with_status(thread: str, step: int, status: ThreadStatus, wake_at: str = NOW) -> Checkpoint:
    if status == "waiting":
        return _waiting(thread, step, wake_at)
    if status == "interrupted":
        return make_checkpoint(thread, step, next=("n",), interrupted=True)
    return make_checkpoint(thread, step, next=("n",) if status == "running" else ())


def _entries(base: Path) -> set[tuple[str, ...]]:
    """Every index entry as (status, thread) or ("due", wake_us, thread)."""
    found: set[tuple[str, ...]] = set()
    for path in (base / ".status").glob("*/*"):
        found.add((path.parent.name, path.name))
    for path in (base / ".due").glob("*/*/*"):
        found.add(("due", str(int(path.parent.name, 16)), path.name))
    return found


def _expected(infos: list[ThreadInfo]) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for info in infos:
        found.add((info.status, info.thread))
        if info.status == "waiting" and info.wake_at is not None:
            found.add(("due", str(parse_instant(info.wake_at)), info.thread))
    return found


async def _pages(cp: FileCheckpointer, status: ThreadStatus) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await cp.list_threads_page(limit=3, cursor=cursor, status=status)
        seen += [info.thread for info in page.threads]
        if (cursor := page.next_cursor) is None:
            return seen


async def _due(cp: FileCheckpointer, now: str) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await cp.list_due(now, limit=2, cursor=cursor)
        seen += [info.thread for info in page.threads]
        if (cursor := page.next_cursor) is None:
            return seen


async def _assert_indexes_match(cp: FileCheckpointer, base: Path) -> None:
    """The listings agree with every thread's latest step, and leave no extra entry."""
    infos = await cp.list_threads(limit=10_000)
    for status in STATUSES:
        assert await _pages(cp, status) == [i.thread for i in infos if i.status == status]
    waiting = sorted(
        (parse_instant(i.wake_at), i.thread) for i in infos if i.status == "waiting" and i.wake_at
    )
    assert await _due(cp, "9999-01-01T00:00:00Z") == [thread for _, thread in waiting]
    assert _entries(base) == _expected(infos)


async def test_racing_writers_leave_the_indexes_exact(tmp_path: Path) -> None:
    root = tmp_path / "store"
    rng = random.Random(11)
    wakes = [f"2026-06-01T{hour:02d}:00:00+00:00" for hour in range(8, 16)]
    async with FileCheckpointer(root) as a, FileCheckpointer(root) as b:
        calls: list[Coroutine[Any, Any, object]] = []
        for _ in range(300):
            cp = rng.choice([a, b])
            thread, step = f"t{rng.randrange(8)}", rng.randrange(5)
            roll = rng.random()
            if roll < 0.05:
                calls.append(cp.delete_thread(thread))
            elif roll < 0.1:
                calls.append(cp.prune(thread, before_step=rng.randrange(6)))
            else:
                status = rng.choice(STATUSES)
                calls.append(cp.put(_with_status(thread, step, status, rng.choice(wakes))))
        await asyncio.gather(*calls)
        infos = await a.list_threads()
        # which racing put lands last depends on scheduling: the threads end in some mix
        assert len({i.status for i in infos}) > 1
        assert _entries(root) == _expected(infos)  # exact before any listing repairs
        await _assert_indexes_match(b, root)


async def test_entries_a_killed_writer_left_are_skipped_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with FileCheckpointer(root) as cp:
        await cp.put(make_checkpoint("r", 0, next=("n",)))
        await cp.put(_waiting("w", 0, "2026-06-01T11:00:00+00:00"))
        # What a writer killed between adding the new entries and removing the old leaves.
        (root / ".status" / "waiting" / "r").write_bytes(b"")
        stale_wake = parse_instant("2026-06-01T10:00:00+00:00")
        stale = root / ".due" / f"{stale_wake >> 32:08x}" / f"{stale_wake:016x}"
        stale.mkdir(parents=True)
        (stale / "w").write_bytes(b"")
        (stale / "gone").write_bytes(b"")
        assert await _pages(cp, "waiting") == ["w"]
        assert await _due(cp, NOW) == ["w"]
        assert not stale.parent.exists()
        await _assert_indexes_match(cp, root)


async def test_a_head_that_names_a_step_never_stored_is_not_believed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with FileCheckpointer(root) as cp:
        for step in range(3):
            await cp.put(make_checkpoint("t", step, next=("n",)))
        # A writer killed after moving the head to step 2 and before renaming step 2 in.
        os.replace(root / "t" / "000002.json", root / "t" / ".2.0123456789ab.tmp")
        assert (root / "t" / ".head").samefile(root / "t" / ".2.0123456789ab.tmp")
        latest = await cp.get("t")
        assert latest is not None and latest.step == 1
        assert [(i.thread, i.latest_step) for i in await cp.list_threads()] == [("t", 1)]
        await cp.put(make_checkpoint("t", 1))
        assert (root / "t" / ".head").samefile(root / "t" / "000001.json")
        assert [i.thread for i in (await cp.list_threads_page(status="done")).threads] == ["t"]
        await _assert_indexes_match(cp, root)


def _counting_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real_open = os.open

    def counting(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        opened.append(os.fspath(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", counting)
    return opened


async def test_list_due_reads_the_due_threads_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    due = {f"due-{i:02d}" for i in range(30)}
    async with FileCheckpointer(root) as cp:
        for i, thread in enumerate(sorted(due)):
            await cp.put(_waiting(thread, 0, f"2026-06-01T11:{i:02d}:00+00:00"))
        for i in range(150):  # later: today, tomorrow, next month
            day = ("01T13", "02T09", "30T09")[i % 3]
            await cp.put(_waiting(f"later-{i:03d}", 0, f"2026-06-{day}:{i % 60:02d}:00+00:00"))
        for i in range(50):
            await cp.put(make_checkpoint(f"human-{i:02d}", 0, next=("n",), interrupted=True))
        opened = _counting_opens(monkeypatch)
        page = await cp.list_due(NOW, limit=100)
    assert [info.thread for info in page.threads] == sorted(due) and page.next_cursor is None
    threads_read = {name for name in opened if not name.startswith(".") and "-" in name}
    assert threads_read == due
    assert opened.count(".head") == len(due)
    now_bucket = f"{parse_instant(NOW) >> 32:08x}"
    buckets = {name for name in opened if len(name) == 8 and name.isalnum()}
    assert buckets and max(buckets) <= now_bucket, buckets


async def test_a_status_page_reads_the_threads_it_returns_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    async with FileCheckpointer(root) as cp:
        for i in range(120):
            await cp.put(_with_status(f"t{i:03d}", 0, "running" if i % 6 == 0 else "done"))
        opened = _counting_opens(monkeypatch)
        page = await cp.list_threads_page(limit=5, status="running")
    assert [i.thread for i in page.threads] == [f"t{i:03d}" for i in range(0, 30, 6)]
    assert opened.count(".head") == 6  # the page and its peek
    assert {name for name in opened if name.startswith("t0")} == {
        f"t{i:03d}" for i in range(0, 36, 6)
    }


# -- stores written before the indexes and head links existed -------------------


def _old_file(directory: Path, cp: Checkpoint, revision: int, namespace: str = "") -> None:
    """A step file exactly as the previous layout wrote it (format 1, no step field)."""
    info = ThreadInfo(cp.thread, cp.step, cp.interrupted, cp.done, cp.ts, cp.wake_at)
    header = {
        "format": 1,
        "revision": revision,
        "ts": cp.ts,
        "ts_us": parse_instant(cp.ts),
        "interrupted": info.interrupted,
        "done": info.done,
        "wake_at": cp.wake_at,
    }
    payload = JsonCodec().encode(cp, RecordKey(namespace, cp.thread, cp.step))
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = orjson.dumps(header)[:-1] + b',"payload":' + payload + b"}"
    (directory / f"{cp.step:06d}.json").write_bytes(data)


def _old_store(base: Path, namespace: str = "") -> None:
    """Threads of every status, as the previous layout left them: no head, no index."""
    latest = [
        make_checkpoint("r", 2, next=("n",)),
        make_checkpoint("h", 0, next=("n",), interrupted=True),
        _waiting("w-soon", 1, "2026-06-01T11:00:00Z"),
        _waiting("w-late", 0, "2026-07-01T00:00:00Z"),
        make_checkpoint("d", 4),
        make_checkpoint("a\\b", 0),  # a legal id then
    ]
    for cp in latest:
        for step in range(cp.step):
            older = make_checkpoint(cp.thread, step, next=("n",), ts="2026-04-01T00:00:00Z")
            _old_file(base / cp.thread, older, 1, namespace)
        _old_file(base / cp.thread, replace(cp, ts="2026-05-01T00:00:00+00:00"), 3, namespace)
    (base / ".locks").mkdir(mode=0o700)


@pytest.mark.parametrize("namespace", [None, "acme"])
async def test_a_store_of_the_previous_layout_is_indexed_on_first_use(
    tmp_path: Path, namespace: str | None
) -> None:
    root = tmp_path / "store"
    base = root / ".ns" / namespace.encode().hex() if namespace else root
    _old_store(base, namespace or "")
    async with FileCheckpointer(root, namespace=namespace) as cp:
        assert await _pages(cp, "running") == ["r"]
        assert (base / ".layout").read_bytes() == b"3\n"
        assert await _pages(cp, "interrupted") == ["h"]
        assert await _pages(cp, "waiting") == ["w-late", "w-soon"]
        assert await _pages(cp, "done") == ["d"]
        assert await _due(cp, NOW) == ["w-soon"]
        assert [i.thread for i in await cp.list_threads()] == ["d", "h", "r", "w-late", "w-soon"]
        latest = await cp.get("r")
        assert latest is not None and (latest.step, latest.revision) == (2, 3)
        assert [c.step for c in [c async for c in cp.history("d")]] == [0, 1, 2, 3, 4]
        await cp.put(make_checkpoint("r", 3))  # the first new write gives the thread a head
        assert (base / "r" / ".head").samefile(base / "r" / "000003.json")
        assert await _pages(cp, "done") == ["d", "r"]
        assert await cp.prune("d", before_step=4) == 4
        await cp.put(make_checkpoint("d", 2, next=("n",)), if_revision=0)  # below the latest
        assert await _pages(cp, "done") == ["d", "r"]
        await _assert_indexes_match(cp, base)
    assert (base / "a\\b" / "000000.json").is_file()  # kept on disk, no longer addressable


async def test_deleting_the_layout_file_rebuilds_indexes_and_heads(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with FileCheckpointer(root) as cp:
        await cp.put(make_checkpoint("t", 0, next=("n",)))
        await cp.put(make_checkpoint("t", 1, next=("n",)))
    # A writer of the previous version adds a later step and moves neither head nor index.
    _old_file(root / "t", replace(make_checkpoint("t", 2), ts="2026-05-01T00:00:00Z"), 1)
    async with FileCheckpointer(root) as cp:
        stale = await cp.get("t")
        assert stale is not None and stale.step == 1
    (root / ".layout").unlink()
    async with FileCheckpointer(root) as cp:
        latest = await cp.get("t")
        assert latest is not None and latest.step == 2
        assert await _pages(cp, "done") == ["t"]
        await _assert_indexes_match(cp, root)
        assert not (root / "t" / ".head").exists()  # until the next write of a latest step


async def test_a_newer_or_damaged_layout_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with FileCheckpointer(root) as cp:
        await cp.put(make_checkpoint("t", 0))
    (root / ".layout").write_bytes(b"4\n")
    async with FileCheckpointer(root) as newer:
        with pytest.raises(IncompatibleSchema):
            await newer.get("t")
    (root / ".layout").write_bytes(b"two")
    async with FileCheckpointer(root) as damaged:
        with pytest.raises(CheckpointCorrupted):
            await damaged.get("t")


# -- the cursor secret -----------------------------------------------------------


def test_racing_creators_of_a_published_file_all_read_one(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with ThreadPoolExecutor(16) as pool:
            for round_ in range(20):
                name = f".secret-{round_}"

                def create(worker: int, name: str = name) -> bytes:
                    publish(fd, name, worker.to_bytes(32, "big"), 0o600)
                    return (tmp_path / name).read_bytes()

                read = set(pool.map(create, range(16)))
                assert len(read) == 1 and len(read.pop()) == 32
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f".secret-{r}" for r in range(20))


def _cursor_in_child(root: str) -> str:
    async def run() -> str:
        async with FileCheckpointer(root) as cp:
            cursor = (await cp.list_threads_page(limit=1)).next_cursor
            assert cursor is not None
            return cursor

    return asyncio.run(run())


async def test_processes_creating_the_cursor_secret_at_once_share_it(tmp_path: Path) -> None:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    root = tmp_path / "store"
    async with FileCheckpointer(root) as cp:
        for name in "abc":
            await cp.put(make_checkpoint(name, 0))
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(4, mp_context=get_context("forkserver")) as pool:
        cursors = await asyncio.gather(
            *(loop.run_in_executor(pool, _cursor_in_child, str(root)) for _ in range(4))
        )
    assert len(set(cursors)) == 1
    async with FileCheckpointer(root) as cp:
        page = await cp.list_threads_page(limit=5, cursor=cursors[0])
        assert [i.thread for i in page.threads] == ["b", "c"]
    assert oct((root / ".cursor-secret").stat().st_mode & 0o777) == "0o600"


# -- a writer killed at any instant -------------------------------------------------

KILLS = 25
CRASH_THREADS = [f"crash-{i}" for i in range(4)]


def status_writer(root: str, seed: int, ready: Any) -> None:
    """Change statuses, wake instants, steps, prune and delete until SIGKILLed."""

    async def run() -> None:
        rng = random.Random(seed)
        async with FileCheckpointer(root) as cp:
            ready.set()
            while True:
                thread, step = rng.choice(CRASH_THREADS), rng.randrange(6)
                roll = rng.random()
                if roll < 0.05:
                    await cp.delete_thread(thread)
                elif roll < 0.15:
                    await cp.prune(thread, before_step=rng.randrange(7))
                else:
                    wake = f"2026-06-01T{rng.randrange(8, 16):02d}:00:00+00:00"
                    await cp.put(_with_status(thread, step, rng.choice(STATUSES), wake))

    asyncio.run(run())


@pytest.mark.slow
async def test_a_killed_writer_never_leaves_an_index_entry_missing(tmp_path: Path) -> None:
    import multiprocessing

    root = tmp_path / "store"
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    statuses_seen: set[str] = set()
    extra_left = 0
    for seed in range(KILLS):
        ready = ctx.Event()
        child = ctx.Process(target=status_writer, args=(str(root), seed, ready), daemon=True)
        child.start()
        try:
            assert await asyncio.to_thread(ready.wait, 60), "the writer never opened the store"
            await asyncio.sleep(random.Random(seed).uniform(0.01, 0.08))
        finally:
            child.kill()
            await asyncio.to_thread(child.join, 60)
        async with FileCheckpointer(root) as cp:
            infos = await cp.list_threads()
            missing = _expected(infos) - _entries(root)
            assert not missing, f"kill {seed} left index entries missing: {missing}"
            extra_left += bool(_entries(root) - _expected(infos))
            await _assert_indexes_match(cp, root)  # the listings also removed any extra
        statuses_seen |= {info.status for info in infos}
    assert len(statuses_seen) >= 3, statuses_seen
    # About one kill in four lands between a new entry and the old one's removal.
    assert extra_left, "no kill landed mid-write: the claim was never tested"
