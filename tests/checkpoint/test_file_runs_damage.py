"""Damaged record and event files of the file store raise DurableCorrupted and are never written
over; what a killed writer leaves (extra index entries, orphan parts, drawn but
unaccepted events) is skipped and cleaned."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.file import FileCheckpointer, rundir
from agentflow.checkpoint.file import runs as file_module
from agentflow.checkpoint.file.heads import digest
from agentflow.checkpoint.file.names import key_path
from agentflow.checkpoint.plans import plan_progress
from agentflow.durable import event_payload_digest
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, claimed, lapse, take
from tests.backends.file import run_dir


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
async def store(root: Path) -> AsyncIterator[FileCheckpointer]:
    async with FileCheckpointer(root) as opened:
        yield opened


def _head(root: Path, key: str = "run-1") -> Path:
    return run_dir(root, None, key) / "head"


def resign(root: Path, change: Callable[[dict[str, Any]], None], key: str = "run-1") -> None:
    """Change the fields of a head and sign it again, as a buggy writer would."""
    data = _head(root, key).read_bytes()
    fields = json.loads(data[: data.rindex(b',"check":')] + b"}")
    change(fields)
    signed = json.dumps(fields, separators=(",", ":")).encode()
    _head(root, key).write_bytes(signed[:-1] + f',"check":"{digest(signed)}"}}'.encode())


def _set(name: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda fields: fields.__setitem__(name, value)


async def _every_call_refuses(store: FileCheckpointer, root: Path) -> None:
    """Reads and writes of run-1 raise DurableCorrupted, and its files stay as they are."""
    before = {path.name: path.read_bytes() for path in run_dir(root, None, "run-1").iterdir()}
    snapshot = make_record()
    calls = [
        store.load("run-1"),
        store.list_runs(),
        take(store, "owner-b", mode=ClaimMode.RECOVERY),
        store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS),
        store.finalize(
            replace(snapshot, status=CheckpointStatus.FAILED, terminal_result={"status": "failed"})
        ),
    ]
    for call in calls:
        with pytest.raises(DurableCorrupted):
            await call
    after = {path.name: path.read_bytes() for path in run_dir(root, None, "run-1").iterdir()}
    assert after == before


@pytest.mark.parametrize(
    "damage",
    ["flipped byte", "truncated", "empty", "status", "revision", "claim_token", "body part"],
)
async def test_a_damaged_head_raises_on_every_call(
    root: Path, store: FileCheckpointer, damage: str
) -> None:
    await store.create(make_record())
    head = _head(root)
    data = head.read_bytes()
    if damage == "flipped byte":
        head.write_bytes(data.replace(b'"revision":0', b'"revision":8'))
    elif damage == "truncated":
        head.write_bytes(data[:-10])
    elif damage == "empty":
        head.write_bytes(b"")
    else:
        value = {"status": "paused", "revision": -1, "claim_token": 5, "body part": [9, "x"]}
        resign(root, _set(damage.replace(" part", ""), value[damage]))
    await _every_call_refuses(store, root)
    assert await store.delete("run-1") is True  # a damaged run can still be removed
    assert await store.load("run-1") is None and (await store.list_runs()).runs == []


@pytest.mark.parametrize(
    "change",
    [
        _set("terminal", True),  # well-formed, but the body holds no terminal result
        _set("ambiguous", True),  # well-formed, but no journal entry is ambiguous
        _set("identity", "0" * 64),
        _set("key", "run-2"),  # the head of another run
    ],
)
async def test_a_head_that_disagrees_with_its_run_raises(
    root: Path, store: FileCheckpointer, change: Callable[[dict[str, Any]], None]
) -> None:
    await store.create(make_record())
    resign(root, change)
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")


async def test_damaged_or_lost_parts_raise_and_are_not_written_over(
    root: Path, store: FileCheckpointer
) -> None:
    record = await claimed(store)
    record = await store.record_operation(
        record, make_tool_entry("run-1", 1), claim_token="owner-a"
    )
    run = run_dir(root, None, "run-1")
    entry, body = run / "t.0.2", run / "body.0"
    intact = entry.read_bytes()
    entry.write_bytes(intact.replace(b"charge", b"refund"))
    with pytest.raises(DurableCorrupted) as caught:
        await store.load("run-1")
    assert "t.0.2 fails its digest" in str(caught.value)
    entry.write_bytes(intact)
    body.unlink()
    with pytest.raises(DurableCorrupted) as lost:  # read again under the lock: truly gone
        await store.load("run-1")
    assert "lost" in str(lost.value)
    head = _head(root).read_bytes()
    with pytest.raises(DurableCorrupted):  # the write would keep the body it lost
        await store.record_operation(record, make_tool_entry("run-1", 1, 2), claim_token="owner-a")
    assert _head(root).read_bytes() == head and not (run / "t.1.3").exists()


async def test_a_load_that_meets_a_replaced_part_reads_again(
    root: Path, store: FileCheckpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer in between a reader's head and its parts: the reader reads again
    (at last under the run's lock) and gets the new record, whole."""
    record = await claimed(store)
    real = rundir.read_head
    meddle = [2]  # writes slipped in after the first two lock-free head reads

    def read_head_then_write(run: int, key: str) -> Any:
        nonlocal record
        head = real(run, key)
        if meddle[0]:
            meddle[0] -= 1
            write = plan_progress(
                replace(record, shared_state={"n": meddle[0]}), claim_token="owner-a"
            )
            monkeypatch.setattr(file_module, "read_head", real)  # the writer reads as usual
            record = store._write(write)  # the lock is the reader's to wait for: not taken
            monkeypatch.setattr(file_module, "read_head", read_head_then_write)
        return head

    monkeypatch.setattr(file_module, "read_head", read_head_then_write)
    loaded = await store.load("run-1")
    assert meddle == [0]
    assert loaded is not None and loaded.to_dict() == record.to_dict()
    assert (loaded.revision, loaded.shared_state) == (3, {"n": 0})


async def test_an_extra_index_entry_is_skipped_and_removed(
    root: Path, store: FileCheckpointer
) -> None:
    """What a writer killed between adding its new status entry and its head leaves."""
    for key in ("a", "b", "c"):
        await store.create(make_record(key))
    completed = root / ".durable" / "status" / "completed"
    completed.mkdir()
    for key in ("b", "gone"):
        completed.joinpath(*key_path(key)).touch()
    page = await store.list_runs(status=CheckpointStatus.COMPLETED)
    running = await store.list_runs(status=CheckpointStatus.RUNNING)
    assert page.runs == [] and page.next_cursor is None
    assert [run.key for run in running.runs] == ["a", "b", "c"]
    assert list(completed.iterdir()) == []


async def test_a_recovery_claim_sweeps_what_a_killed_writer_left(
    root: Path, store: FileCheckpointer
) -> None:
    await store.create(make_record())
    await take(store, "dead", lease_ms=LAPSED_MS)
    run = run_dir(root, None, "run-1")
    leftovers = ["body.2", "t.0.2", "m.3.2", ".head.tmp"]
    for name in leftovers:
        (run / name).write_bytes(b"half written")
    (run / "notes.txt").write_bytes(b"not ours")
    await lapse()
    taken = await take(store, "owner-b", mode=ClaimMode.RECOVERY)
    assert sorted(p.name for p in run.iterdir()) == ["body.0", "head", "notes.txt"]
    assert taken.claim_token == "owner-b"


def _event_file(root: Path, *parts: str) -> Path:
    return root.joinpath(".durable", "events", *parts)


def _name(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


async def test_damaged_events_raise_on_replay_and_append(root: Path) -> None:
    event = {"type": "step", "run_id": "run-a"}
    async with FileCheckpointer(root) as events:
        await events.append_once("e1", event_payload_digest(event), event)
        stored = _event_file(root, "seq", f"{1:016x}")  # one file under every name
        data = stored.read_bytes()
        stored.write_bytes(data.replace(b'"step"', b'"stop"'))
        with pytest.raises(DurableCorrupted) as flipped:
            await events.replay("run-a")
        assert flipped.value.code == "event_payload_digest_mismatch"
        stored.write_bytes(b"not an event")
        with pytest.raises(DurableCorrupted):
            await events.replay("run-a")
        with pytest.raises(DurableCorrupted):
            await events.append_once("e1", event_payload_digest(event), event)


async def test_a_drawn_but_unaccepted_event_is_skipped(root: Path) -> None:
    """What an append killed before its commit leaves: a sequence, an index entry."""
    payloads = [{"type": "step", "run_id": "run-a", "n": n} for n in range(3)]
    async with FileCheckpointer(root) as events:
        first = await events.append_once("e0", event_payload_digest(payloads[0]), payloads[0])
        ids = _event_file(root, "ids")
        accepted = ids / _name("e1")
        second = await events.append_once("e1", event_payload_digest(payloads[1]), payloads[1])
        accepted.unlink()  # as if the append died before linking its id
    async with FileCheckpointer(root) as events:
        page = await events.replay("run-a")
        again = await events.append_once("e1", event_payload_digest(payloads[1]), payloads[1])
        after = await events.replay("run-a", after=first.cursor)
        resumed = await events.replay("run-a", after=second.cursor)
    assert [e.event_id for e in page.events] == ["e0"]
    assert len({str(c) for c in (first.cursor, second.cursor, again.cursor)}) == 3
    # e1 again under sequence 3: after either earlier cursor, the replay finds it.
    assert sorted(p.name for p in _event_file(root, "seq").iterdir()) == [
        f"{n:016x}" for n in (1, 2, 3)
    ]
    assert again.inserted and [e.cursor for e in after.events] == [again.cursor]
    assert [e.event_id for e in resumed.events] == ["e1"]


async def test_deletes_racing_finish_what_a_killed_delete_left(root: Path) -> None:
    opened = [FileCheckpointer(root) for _ in range(8)]
    try:
        for n, store in enumerate(opened):
            await store.create(make_record(f"run-{n}"))
        await opened[0].delete("run-0")
        for n in range(20):  # as if deletes were killed between their rename and removal
            left = root / ".trash" / f"left-{n}" / "deep"
            left.mkdir(parents=True)
            (left / "body.0").write_bytes(b"x" * 100)
        deleted = await asyncio.gather(
            *(store.delete(f"run-{n}") for n, store in enumerate(opened) if n)
        )
        listed = await opened[0].list_runs()
    finally:
        for store in opened:
            await store.close()
    assert deleted == [True] * 7 and listed.runs == []
    assert list((root / ".trash").iterdir()) == []
