"""What only the file backend promises: its layout, modes, id rules and reads of odd files."""

from __future__ import annotations

import asyncio
import os
import random
import stat
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentflow.checkpoint import open_store
from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.errors import (
    CheckpointCorrupted,
    InvalidArgument,
    InvalidStoreUrl,
    InvalidThreadId,
    StoreClosed,
    StoreUnavailable,
)

UNSAFE_IDS = [
    ".",
    "..",
    ".hidden",
    "a/b",
    "/abs",
    "../escape",
    "a\\b",
    "\\",
    "..\\escape",
    "x" * 256,
    "é" * 128,
    "\ud800",
]
WAKE = "2030-01-01T00:00:00+00:00"
#: What the store keeps beside thread directories in a namespace.
STORE_NAMES = {".layout", ".locks", ".status", ".durable", ".trash"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _tree(root: Path) -> Iterator[Path]:
    yield root
    yield from root.rglob("*")


async def test_files_and_directories_are_owner_only(root: Path) -> None:
    async with FileCheckpointer(root) as cp, FileCheckpointer(root, namespace="acme") as ns:
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("u", 0, next=("n",), interrupted=True, wake_at=WAKE))
        await ns.put(make_checkpoint("t", 0))
        assert (await cp.list_threads_page(limit=1)).next_cursor is not None
    paths = list(_tree(root))
    assert {".cursor-secret", ".head", ".due", ".status", ".locks"} <= {p.name for p in paths}
    for path in paths:
        assert _mode(path) == (0o700 if path.is_dir() else 0o600), path
    assert len((root / ".cursor-secret").read_bytes()) == 32


async def test_insecure_mode_leaves_the_umask_and_an_existing_root_keeps_its_mode(
    root: Path,
) -> None:
    os.mkdir(root, 0o700)
    os.chmod(root, 0o751)
    previous = os.umask(0o022)
    try:
        async with FileCheckpointer(root, secure_permissions=False) as cp:
            await cp.put(make_checkpoint("t", 0))
    finally:
        os.umask(previous)
    assert _mode(root) == 0o751
    for path in _tree(root / "t"):
        assert _mode(path) == (0o755 if path.is_dir() else 0o644), path
    async with FileCheckpointer(root) as secure:
        await secure.put(make_checkpoint("u", 0))
    assert _mode(root) == 0o751 and _mode(root / "u" / "000000.json") == 0o600


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o722, 0o1777], ids=oct)
async def test_a_root_others_may_write_is_refused_when_secure(root: Path, mode: int) -> None:
    os.mkdir(root)
    os.chmod(root, mode)
    async with FileCheckpointer(root) as cp:
        for call in (cp.put(make_checkpoint("t", 0)), cp.get("t"), cp.list_threads()):
            with pytest.raises(InvalidArgument, match="writable by its group or others"):
                await call
    assert _names(root) == [] and _mode(root) == mode
    async with FileCheckpointer(root, secure_permissions=False) as relaxed:
        await relaxed.put(make_checkpoint("t", 0))
        assert await relaxed.get("t") is not None


@pytest.mark.parametrize("thread", UNSAFE_IDS)
async def test_unsafe_thread_ids_are_refused_by_every_method(root: Path, thread: str) -> None:
    async with FileCheckpointer(root) as cp:
        calls = [
            cp.put(make_checkpoint(thread, 0)),
            cp.get(thread),
            cp.get(thread, 0),
            cp.delete_thread(thread),
            cp.prune(thread, before_step=1),
        ]
        for call in calls:
            with pytest.raises(InvalidThreadId):
                await call
        with pytest.raises(InvalidThreadId):
            await anext(cp.history(thread))
    assert _names(root.parent) == []


async def test_longest_names_and_dots_inside_are_plain_names(root: Path) -> None:
    ids = ["x" * 255, "é" * 127 + "x", "dot.in.middle", "ends.", "tab\there"]
    async with FileCheckpointer(root) as cp:
        for thread in ids:
            await cp.put(make_checkpoint(thread, 0))
        assert [i.thread for i in await cp.list_threads()] == sorted(ids)
    assert [name for name in _names(root) if not name.startswith(".")] == sorted(ids)


async def test_the_layout_with_a_codec_payload_in_the_envelope(root: Path) -> None:
    original = make_checkpoint("run-1", 3, state={"messages": ["hi"]}, next=("a",))
    async with FileCheckpointer(root) as cp:
        await cp.put(original)
        await cp.put(original)
        await cp.put(make_checkpoint("run-1", 1_234_567))
        await cp.put(make_checkpoint("run-1", 12))
        assert [c.step async for c in cp.history("run-1")] == [3, 12, 1_234_567]
        latest = await cp.get("run-1")
        stored = await cp.get("run-1", 3)
    assert latest is not None and latest.step == 1_234_567
    thread_dir = root / "run-1"
    assert _names(thread_dir) == [".head", "000003.json", "000012.json", "1234567.json"]
    assert (thread_dir / ".head").samefile(thread_dir / "1234567.json")
    data = (thread_dir / "000003.json").read_bytes()
    document = orjson.loads(data)  # one JSON document, the payload inside
    assert (document["format"], document["revision"], document["step"]) == (3, 2, 3)
    assert len(document["sum"]) == 16  # the header's own checksum
    assert b'"state":{"messages":["hi"]}' in data
    assert stored is not None and stored.state == {"messages": ["hi"]} and stored.next == ("a",)


async def test_namespaces_live_apart_from_every_thread_name(root: Path) -> None:
    odd = "../acme/Tenant"
    async with FileCheckpointer(root, namespace=odd) as ns, FileCheckpointer(root) as default:
        await ns.put(make_checkpoint("t", 0, state={"who": "ns"}))
        await default.put(make_checkpoint("t", 0, state={"who": "default"}))
        await default.put(make_checkpoint("ns", 0))
        assert [i.thread for i in await default.list_threads()] == ["ns", "t"]
        assert [i.thread for i in await ns.list_threads()] == ["t"]
        got = await ns.get("t")
    assert got is not None and got.state == {"who": "ns"}
    assert (root / ".ns" / odd.encode().hex() / "t" / "000000.json").is_file()
    assert FileCheckpointer(root, namespace="n" * 127).root == str(root)
    with pytest.raises(InvalidArgument):
        FileCheckpointer(root, namespace="n" * 128)


async def test_readers_ignore_temp_files_strays_and_empty_thread_dirs(root: Path) -> None:
    async with FileCheckpointer(root) as cp:
        await cp.put(make_checkpoint("t", 1))
        thread_dir = root / "t"
        (thread_dir / ".7.deadbeef.tmp").write_bytes(b'{"format":2,"revision":9,"payl')
        (thread_dir / ".head.deadbeef.tmp").write_bytes(b"a head link left by a killed writer")
        (thread_dir / "1.json").write_bytes(b"not canonical, not ours")
        (thread_dir / "notes.txt").write_text("hello")
        (thread_dir / "\u00b2\u00b2.json").write_text("superscript digits are not decimal")
        (thread_dir / "\u0663.json").write_text("an Arabic-Indic three is not a step either")
        (thread_dir / "1e3.json").write_text("not a step either")
        (root / "crashed-before-first-write").mkdir()
        (root / "a-stray-file").write_text("x")
        assert [c.step async for c in cp.history("t")] == [1]
        latest = await cp.get("t")
        assert latest is not None and latest.step == 1
        assert await cp.get("crashed-before-first-write") is None
        with pytest.raises(CheckpointCorrupted, match=r"'a-stray-file'.* not a directory"):
            await cp.get("a-stray-file")
        assert [i.thread for i in await cp.list_threads()] == ["t"]
        first = await cp.list_threads_page(limit=1)
        assert [i.thread for i in first.threads] == ["t"] and first.next_cursor is None
        assert await cp.prune("t", before_step=1) == 0
        assert not list(thread_dir.glob(".*.tmp"))
        assert (thread_dir / "notes.txt").exists()


async def test_delete_is_one_rename_and_leaves_no_trash(root: Path) -> None:
    async with FileCheckpointer(root) as cp:
        for step in range(5):
            await cp.put(make_checkpoint("t", step, next=("n",), interrupted=True, wake_at=WAKE))
        await cp.delete_thread("t")
        assert await cp.get("t") is None
        assert set(_names(root)) == STORE_NAMES | {".due"}
        assert _names(root / ".trash") == []
        assert not [p for p in (root / ".status").rglob("*") if p.is_file()]
        assert not list((root / ".due").iterdir())
        assert await cp.prune("t", before_step=9) == 0


async def test_deletes_and_prunes_racing_puts_never_fail_or_tear(root: Path) -> None:
    async with FileCheckpointer(root) as cp, FileCheckpointer(root) as other:
        calls: list[Coroutine[Any, Any, object]] = [
            cp.put(make_checkpoint("t", i % 5, state={"i": i})) for i in range(60)
        ]
        calls += [other.delete_thread("t") for _ in range(10)]
        calls += [other.prune("t", before_step=3) for _ in range(10)]
        random.Random(7).shuffle(calls)
        await asyncio.gather(*calls)
        survivors = [c async for c in cp.history("t")]
        assert len({c.step for c in survivors}) == len(survivors) <= 5
        assert all(c.revision >= 1 and set(c.state) == {"i"} for c in survivors)
        assert _names(root / ".trash") == []
        leftovers = _names(root / "t") if survivors else []
        assert not [n for n in leftovers if n.startswith(".") and n != ".head"]
        done = [i.thread for i in (await cp.list_threads_page(status="done")).threads]
        assert done == (["t"] if survivors else [])


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"\x00" * len(data),
        lambda data: data[:-1],
        lambda data: data[: len(data) // 2],
        lambda data: data.replace(b'"revision":1', b'"revision":0'),
        lambda data: data.replace(b'"format":3', b'"format":4'),
        lambda data: data.replace(b'"format":3', b'"format":1'),
        lambda data: data.replace(b'"step":0', b'"step":"0"'),
        lambda data: data.replace(b'"step":0', b'"step":4'),
        lambda data: data.replace(b'"state":{', b'"state":[{'),
        lambda data: b"",
    ],
    ids=[
        "zeros",
        "last-byte",
        "half",
        "revision-0",
        "format",
        "format-1-with-step",
        "step-type",
        "other-step",
        "payload",
        "empty",
    ],
)
async def test_damaged_files_raise_corrupted_on_every_read(
    root: Path, damage: Callable[[bytes], bytes]
) -> None:
    async with FileCheckpointer(root) as cp:
        await cp.put(make_checkpoint("t", 0))
        path = root / "t" / "000000.json"
        # In place (the same inode): the head, a link to this file, is damaged too.
        path.write_bytes(damage(path.read_bytes()))
        assert (root / "t" / ".head").samefile(path)
        with pytest.raises(CheckpointCorrupted, match="'t'"):
            await cp.get("t", 0)
        with pytest.raises(CheckpointCorrupted):
            await cp.get("t")
        with pytest.raises(CheckpointCorrupted):
            await anext(cp.history("t"))


async def test_a_file_moved_to_another_thread_or_step_is_corrupted(root: Path) -> None:
    async with FileCheckpointer(root) as cp:
        await cp.put(make_checkpoint("a", 0))
        await cp.put(make_checkpoint("b", 1))
        os.replace(root / "a" / "000000.json", root / "b" / "000000.json")
        os.replace(root / "b" / "000001.json", root / "b" / "000002.json")
        for step in (0, 2):
            with pytest.raises(CheckpointCorrupted, match="'b' step"):
                await cp.get("b", step)


async def test_a_corrupted_header_blocks_writes_and_listing_instead_of_resetting(
    root: Path,
) -> None:
    async with FileCheckpointer(root) as cp:
        await cp.put(make_checkpoint("t", 0))
        os.unlink(root / "t" / ".head")
        (root / "t" / "000000.json").write_bytes(b"garbage")
        with pytest.raises(CheckpointCorrupted):
            await cp.put(make_checkpoint("t", 0), if_revision=0)
        with pytest.raises(CheckpointCorrupted):
            await cp.put(make_checkpoint("t", 0))
        with pytest.raises(CheckpointCorrupted):
            await cp.put(make_checkpoint("t", 1))
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads()
        with pytest.raises(CheckpointCorrupted):
            await cp.prune("t", older_than="2100-01-01T00:00:00Z")
        assert (root / "t" / "000000.json").read_bytes() == b"garbage"
        assert _names(root / "t") == ["000000.json"]
        await cp.delete_thread("t")  # the way out: delete needs no readable step
        assert await cp.get("t") is None


async def test_listing_reads_headers_only_of_the_threads_it_returns(root: Path) -> None:
    async with FileCheckpointer(root) as cp:
        for name in "abcde":
            await cp.put(make_checkpoint(name, 0, state={"big": "x" * 100_000}))
        first = await cp.list_threads_page(limit=1)
        for name in "ae":
            (root / name / "000000.json").write_bytes(b"garbage")
        assert first.next_cursor is not None
        middle = await cp.list_threads_page(limit=2, cursor=first.next_cursor)
        assert [i.thread for i in middle.threads] == ["b", "c"]  # and d, the peek
        assert middle.next_cursor is not None
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads_page(limit=2, cursor=middle.next_cursor)
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads_page(limit=2)


async def test_history_reads_lazily_in_bounded_batches(root: Path) -> None:
    async with FileCheckpointer(root) as cp:
        for step in range(200):
            await cp.put(make_checkpoint("t", step))
        seen: list[int] = []
        with pytest.raises(CheckpointCorrupted):
            async for stored in cp.history("t"):
                seen.append(stored.step)
                if stored.step == 0:
                    (root / "t" / "000150.json").write_bytes(b"{}")
        assert seen == list(range(150))


async def test_the_event_loop_runs_during_a_large_write(root: Path) -> None:
    state = {"blob": "x" * (32 * 1024 * 1024)}
    ticks = 0
    writing = True

    async def ticker() -> None:
        nonlocal ticks
        while writing:
            ticks += 1
            await asyncio.sleep(0)

    async with FileCheckpointer(root) as cp:
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        start = ticks
        await cp.put(make_checkpoint("big", 0, state=state))
        during = ticks - start
        writing = False
        await task
    assert during >= 3, f"the loop ran only {during} times during the write"


async def test_io_errors_are_store_unavailable_naming_the_operation(root: Path) -> None:
    (root.parent / "not-a-directory").write_bytes(b"")
    async with FileCheckpointer(root.parent / "not-a-directory") as cp:
        with pytest.raises(StoreUnavailable, match=r"^put on file store ") as info:
            await cp.put(make_checkpoint("t", 0))
        assert isinstance(info.value.__cause__, OSError) and info.value.retryable
        with pytest.raises(StoreUnavailable, match=r"^get on file store "):
            await cp.get("t")


async def test_close_waits_for_calls_in_flight_then_refuses(root: Path) -> None:
    cp = FileCheckpointer(root)
    await cp.put(make_checkpoint("t", 0))
    puts = [asyncio.create_task(cp.put(make_checkpoint("t", i))) for i in range(1, 20)]
    await asyncio.sleep(0)
    await cp.close()
    outcomes = await asyncio.gather(*puts, return_exceptions=True)
    assert all(o == f"t:{i}" or isinstance(o, StoreClosed) for i, o in enumerate(outcomes, 1))
    async with FileCheckpointer(root) as again:
        steps = [c.step async for c in again.history("t")]
    assert steps == [0] + [i for i, o in enumerate(outcomes, 1) if not isinstance(o, Exception)]


async def test_file_urls_open_a_directory(root: Path) -> None:
    async with open_store(f"file://{root}", namespace="acme") as cp:
        assert isinstance(cp, FileCheckpointer) and cp.root == str(root)
        assert cp.namespace == "acme"
        await cp.put(make_checkpoint("t", 0))
    assert (root / ".ns" / b"acme".hex() / "t" / "000000.json").is_file()
    with pytest.raises(InvalidStoreUrl):
        open_store("file://")


@pytest.mark.parametrize(
    ("field", "damaged"),
    [
        (b'"revision":2', b'"revision":6'),
        (b'"done":false', b'"done":true '),
        (b'"format":3', b'"format":2'),
        (b'"interrupted":false', b'"interrupted":true '),
    ],
    ids=["revision", "done", "format", "interrupted"],
)
async def test_a_damaged_header_field_is_corruption(
    root: Path, field: bytes, damaged: bytes
) -> None:
    async with FileCheckpointer(root) as cp:
        await cp.put(make_checkpoint("t", 0, next=("n",)))
        await cp.put(make_checkpoint("t", 0, next=("n",)))
        step_file = root / "t" / "000000.json"
        data = step_file.read_bytes()
        assert field in data
        step_file.write_bytes(data.replace(field, damaged, 1))
        with pytest.raises(CheckpointCorrupted):
            await cp.get("t", 0)
