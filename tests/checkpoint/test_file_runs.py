"""What is specific to the file store's records and events: the files each operation
writes, the head file a renewal rewrites, the local clock, the layout beside the
steps, long keys, readers racing writers, its URL."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentflow.checkpoint import open_store
from agentflow.checkpoint.file import FileCheckpointer, from_url
from agentflow.checkpoint.file.layout import LAYOUT_VERSION
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.durable import EventCursor, EventOutboxEntry, event_payload_digest
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import ClaimActive, LeaseLost, RecoveryRequired, RevisionConflict
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, claimed, take
from agentflow.durable.wire.validators import CapabilityRef
from agentflow.errors import (
    CheckpointCorrupted,
    IncompatibleSchema,
    InvalidArgument,
    InvalidStoreUrl,
    StoreClosed,
)
from tests.backends.file import run_dir

T = TypeVar("T")
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT
_recording: list[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Every name a system call creates, writes, links, renames or removes."""
    if not _recording:
        return
    if event == "open" and isinstance(args[0], str) and (args[2] or 0) & _WRITING:
        name = args[0]
        if not (len(name) == 3 and name.isalnum()):  # a lock stripe, opened to lock
            _recording[-1].append(f"write {name}")
    elif event in ("os.rename", "os.link"):
        _recording[-1].append(f"{event[3:]} {args[0]} {args[1]}")
    elif event in ("os.remove", "os.mkdir", "os.rmdir"):
        _recording[-1].append(f"{event[3:]} {args[0]}")


sys.addaudithook(_audit)


@contextmanager
def recording() -> Iterator[list[str]]:
    """What the store writes inside the block (from the interpreter's audit events)."""
    seen: list[str] = []
    _recording.append(seen)
    try:
        yield seen
    finally:
        _recording.remove(seen)


@asynccontextmanager
async def stores(root: Path, namespace: str | None = None) -> AsyncIterator[Any]:
    """One store, as its record part and its event part."""
    async with FileCheckpointer(root, namespace=namespace) as store:
        yield store, store


async def test_each_write_is_its_new_files_and_one_head_rename(tmp_path: Path) -> None:
    ran: dict[str, list[str]] = {}

    async def op(name: str, call: Awaitable[T]) -> T:
        with recording() as seen:
            try:
                return await call
            finally:
                ran[name] = list(seen)

    async with stores(tmp_path / "store") as (store, events):
        await store.create(make_record("warm-up"))  # directories and layout made
        event = {"type": "step", "run_id": "run-1"}
        await events.append_once("e0", event_payload_digest(event), event)
        pending = EventOutboxEntry.pending("evt-1", {"type": "run_completed"})
        await op("create", store.create(make_record(event_outbox=[pending])))
        record = await op("claim", take(store, "owner-a"))
        await op("renew", store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS))
        entry = make_tool_entry("run-1", 1)
        record = await op("plan", store.record_operation(record, entry, claim_token="owner-a"))
        record = await op(
            "start", store.record_operation(record, entry.start(), claim_token="owner-a")
        )
        with pytest.raises(RevisionConflict):
            await op("refused", store.progress(replace(record, revision=1), claim_token="owner-a"))
        record = await op("same body", store.progress(record, claim_token="owner-a"))
        record = await op(
            "progress",
            store.progress(replace(record, shared_state={"n": 1}), claim_token="owner-a"),
        )
        settled = entry.start().succeed({"ok": True})  # a finalize refuses a call in flight
        record = await op("settle", store.record_operation(record, settled, claim_token="owner-a"))
        record = await op(
            "finalize",
            store.finalize_claimed(
                replace(
                    record,
                    status=CheckpointStatus.COMPLETED,
                    terminal_result={"status": "completed"},
                ),
                claim_token="owner-a",
            ),
        )
        cursor = EventCursor(CapabilityRef("events.file", "1"), {"sequence": 2}, "evt-1")
        record = await op(
            "deliver",
            store.record_event_delivery(
                record,
                claim_token=None,
                event_id="evt-1",
                payload_digest=pending.payload_digest,
                cursor=cursor,
            ),
        )
        await op("acknowledge", store.acknowledge_terminal(record))
        await op("load", store.load("run-1"))
        await op("list", store.list_runs(status=CheckpointStatus.COMPLETED))
        await op("append", events.append_once("e1", event_payload_digest(event), event))
        await op("append again", events.append_once("e1", event_payload_digest(event), event))
        await op("replay", events.replay("run-1", include_children=True))
    head = ["write .head.tmp", "rename .head.tmp head"]
    leaf = "72756e2d31-"  # the hex of "run-1"
    assert ran == {
        "create": [f"mkdir {leaf}", f"write {leaf}", "write body.0", *head],
        "claim": head,
        "renew": head,
        "plan": ["write t.0.2", *head],
        "start": ["write t.0.3", *head, "remove t.0.2"],
        "refused": [],
        "same body": head,  # a body already stored is not written again
        "progress": ["write body.5", *head, "remove body.0"],
        "settle": ["write t.0.6", *head, "remove t.0.3"],  # the entry's new version
        "finalize": [  # the status index moves: the new entry first, the old one last
            "mkdir completed",
            f"write {leaf}",
            "write body.7",
            *head,
            "remove body.5",
            "remove t.0.6",
            f"remove {leaf}",
        ],
        "deliver": ["write body.8", *head, "remove body.7"],
        "acknowledge": head,
        "load": [],
        "list": [],
        "append": [
            "write .append.tmp",
            "link .append.tmp 0000000000000002",  # seq/
            "link .append.tmp 0000000000000002",  # runs/<h(run-1)>/
            f"link .append.tmp {hashlib.blake2b(b'e1', digest_size=16).hexdigest()}",  # ids/
            "remove .append.tmp",
        ],
        "append again": [],
        "replay": [],
    }


async def test_a_renewal_rewrites_the_head_and_leaves_the_body_file_alone(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with FileCheckpointer(root) as store:
        record = await claimed(store, shared_state={"notes": "x" * 300_000})
        record = await store.record_operation(
            record, make_tool_entry("run-1", 1), claim_token="owner-a"
        )
        run = run_dir(root, None, "run-1")
        before = {path.name: path.stat() for path in run.iterdir()}
        with recording() as seen:
            for _ in range(3):
                await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
        after = {path.name: path.stat() for path in run.iterdir()}
    assert sorted(before) == sorted(after) == ["body.0", "head", "t.0.2"]
    for name in ("body.0", "t.0.2"):  # never unlinked, so their inodes cannot be reused
        assert (after[name].st_ino, after[name].st_mtime_ns) == (
            before[name].st_ino,
            before[name].st_mtime_ns,
        )
    # Each renewal is a new head renamed in (an inode number may come back: not compared).
    assert seen == ["write .head.tmp", "rename .head.tmp head"] * 3
    assert after["head"].st_size < 2_000 < before["body.0"].st_size


async def test_leases_are_judged_on_the_clock_read_under_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_700_000_000_000]
    monkeypatch.setattr("agentflow.checkpoint.file.runs.wall_clock_ms", lambda: now[0])
    async with FileCheckpointer(tmp_path / "store") as store:
        await store.create(make_record())
        held = await take(store, "owner-a", lease_ms=1_000)
        assert held.lease_expires_at_ms == now[0] + 1_000
        now[0] += 999  # live until the expiry itself
        with pytest.raises(ClaimActive):
            await take(store, "owner-b", mode=ClaimMode.RECOVERY)
        assert await store.renew_claim("run-1", claim_token="owner-a", lease_ms=1) == now[0] + 1
        now[0] += 1  # expiry == now: lapsed
        with pytest.raises(LeaseLost):
            await store.renew_claim("run-1", claim_token="owner-a", lease_ms=1_000)
        with pytest.raises(RecoveryRequired):
            await take(store, "owner-b")
        taken = await take(store, "owner-b", mode=ClaimMode.RECOVERY, lease_ms=5)
    assert (taken.claim_token, taken.lease_expires_at_ms) == ("owner-b", now[0] + 5)


#: Keys of 1 to 5 name components (127 key bytes each), sharing long prefixes.
LONG_KEYS = [
    "a" * 127,
    "a" * 128,
    "a" * 127 + "\x01",
    "a" * 126 + "b",
    "a" * 254,
    "a" * 254 + "z" * 200,
    "a" * 512,
    "a" * 300 + "研究",
    "a",
    "b" * 127 + "a" * 10,
    "\U0001f600" * 128,
    "z",
]


@pytest.mark.parametrize("limit", [1, 2, 5, 100])
async def test_long_keys_list_in_byte_order_across_their_directories(
    tmp_path: Path, limit: int
) -> None:
    expected = sorted(LONG_KEYS, key=lambda key: key.encode())
    async with FileCheckpointer(tmp_path / "store") as store:
        for key in LONG_KEYS:
            await store.create(make_record(key))
        await take(store, "t", key="a" * 512, mode=ClaimMode.RECOVERY)
        pages: dict[CheckpointStatus | None, list[str]] = {}
        for status in (None, CheckpointStatus.RUNNING):
            seen: list[str] = pages.setdefault(status, [])
            cursor = None
            while True:
                page = await store.list_runs(status=status, limit=limit, cursor=cursor)
                seen += [run.key for run in page.runs]
                if (cursor := page.next_cursor) is None:
                    break
        loaded = await store.load("a" * 512)
        assert await store.delete("a" * 254 + "z" * 200)
        rest = await store.list_runs()
    assert pages[None] == pages[CheckpointStatus.RUNNING] == expected
    assert loaded is not None and loaded.claim_token == "t"
    assert [run.key for run in rest.runs] == [k for k in expected if k != "a" * 254 + "z" * 200]


async def test_readers_racing_writers_read_whole_records(tmp_path: Path) -> None:
    """Lock-free loads meet parts being replaced; they read again, never fail."""
    async with FileCheckpointer(tmp_path / "store") as store:
        record = await claimed(store)
        stop = asyncio.Event()

        async def write() -> int:
            nonlocal record
            for n in range(20):
                record = replace(record, shared_state={"n": n, "pad": "x" * (n * 100)})
                record = await store.progress(record, claim_token="owner-a")
                entry = make_tool_entry("run-1", 1, n + 1).start()
                record = await store.record_operation(record, entry, claim_token="owner-a")
            stop.set()
            return record.revision

        async def read() -> list[int]:
            seen = []
            while not stop.is_set():
                loaded = await store.load("run-1")
                assert loaded is not None
                assert len(loaded.tool_journal) == loaded.shared_state.get("n", -1) + (
                    loaded.revision % 2 == 1
                )
                seen.append(loaded.revision)
            return seen

        last, *seen = await asyncio.gather(write(), read(), read(), read())
    for revisions in seen:
        assert revisions == sorted(revisions) and revisions[-1] <= last
    assert sum(map(len, seen)) > 10


async def test_beside_the_steps_and_apart_per_namespace(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with (
        stores(root, namespace="acme") as (store, events),
        FileCheckpointer(root) as default,
    ):
        await store.put(make_checkpoint("run-1", 0))
        await store.create(make_record())
        await default.create(make_record("other"))
        event = {"type": "step", "run_id": "run-1"}
        await events.append_once("e", event_payload_digest(event), event)
        threads = [t.thread for t in await store.list_threads()]
        got = await store.get("run-1")
        listed = [run.key for run in (await store.list_runs()).runs]
        assert await default.load("run-1") is None and await default.get("run-1") is None
    base = root / ".ns" / b"acme".hex()
    assert threads == ["run-1"] and got is not None and listed == ["run-1"]
    assert sorted(p.name for p in (base / ".durable").iterdir()) == [
        "events",
        "layout",
        "runs",
        "status",
    ]
    assert (base / ".layout").read_text() == f"{LAYOUT_VERSION}\n"
    assert (base / ".durable" / "layout").samefile(base / ".layout")  # one file, two names
    assert run_dir(root, None, "other").is_dir()
    for path in [base, *base.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path


async def test_reads_create_nothing_and_a_writable_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with stores(root) as (store, events):
        assert await store.load("run-1") is None
        assert (await store.list_runs()).runs == []
        assert (await events.replay("run-1")).events == []
    assert not root.exists()
    root.mkdir(mode=0o777)
    root.chmod(0o777)
    async with FileCheckpointer(root) as store:
        with pytest.raises(InvalidArgument):
            await store.create(make_record())
    async with FileCheckpointer(root, secure_permissions=False) as store:
        await store.create(make_record())
        assert await store.load("run-1") is not None


@pytest.mark.parametrize(
    ("text", "error"), [(f"{LAYOUT_VERSION + 1}\n", IncompatibleSchema), ("one\n", None)]
)
async def test_a_newer_or_damaged_layout_is_refused(
    tmp_path: Path, text: str, error: type[Exception] | None
) -> None:
    root = tmp_path / "store"
    async with FileCheckpointer(root) as store:
        await store.create(make_record())
    (root / ".durable" / "layout").write_text(text)
    async with stores(root) as (store, events):
        for call in (
            store.load("run-1"),
            store.create(make_record("run-2")),
            events.replay("run-1"),
        ):
            with pytest.raises(error or CheckpointCorrupted) as caught:
                await call
            if error is None:
                assert not isinstance(caught.value, IncompatibleSchema)
    assert not run_dir(root, None, "run-2").exists()


async def test_first_uses_racing_write_one_layout(tmp_path: Path) -> None:
    root = tmp_path / "store"
    opened = [FileCheckpointer(root, namespace="n" if i % 2 else None) for i in range(6)]
    try:
        await asyncio.gather(*(s.create(make_record(f"run-{i}")) for i, s in enumerate(opened)))
        assert all([await s.load(f"run-{i}") is not None for i, s in enumerate(opened)])
    finally:
        for store in opened:
            await store.close()
    assert sorted(p.name for p in (root / ".durable").iterdir()) == ["layout", "runs", "status"]
    assert (root / ".layout").read_text() == f"{LAYOUT_VERSION}\n"


async def test_from_url_and_closing(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/u"
    store = from_url(url, namespace="t")
    assert store.root == f"{tmp_path}/u" and store.namespace == "t"
    assert store.database == f"file://{tmp_path}/u"
    await store.create(make_record())
    await store.close()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.load("run-1")
    again = open_store(url, namespace="t")
    try:
        assert isinstance(again, FileCheckpointer) and await again.load("run-1") is not None
        assert again.database == store.database
    finally:
        await again.close()
    with pytest.raises(InvalidStoreUrl):
        from_url("file://")
