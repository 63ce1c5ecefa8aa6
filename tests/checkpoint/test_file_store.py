"""The file store as one thing: what a step commit and a delete write, the thread's
status marker following its record, a crash between parts, events deleted and
rewritten on disk."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.file import thread as thread_module
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.durable import event_payload_digest
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import ClaimActive
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import claimed
from agentflow.errors import InvalidThreadId, StoreUnavailable
from agentflow.runtime import END, START, Graph, NodeContext, ToolCall
from tests.backends.file import run_dir
from tests.checkpoint.test_file_runs import recording

EVENT = {"type": "note", "run_id": "run-1", "secret": "4111-1111"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".locks" not in path.parts
    }


def _markers(root: Path, thread: str) -> list[str]:
    return sorted(path.parent.name for path in (root / ".status").glob(f"*/{thread}"))


async def _started(store: FileCheckpointer) -> tuple[DurableCheckpoint, Any]:
    await store.put(make_checkpoint("run-1", 0, next=("n",)))
    record = await claimed(store)
    started = make_tool_entry("run-1", 1).start()
    return await store.record_operations(record, [started], claim_token="owner-a"), started


async def test_a_step_commit_is_the_record_then_the_step_in_one_lock_hold(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs: list[int] = []
    real = os.fsync
    async with FileCheckpointer(root) as store:
        record, started = await _started(store)

        def counted(fd: int) -> None:
            fsyncs.append(fd)
            real(fd)

        monkeypatch.setattr(os, "fsync", counted)
        with recording() as seen:
            stored = await store.commit_step(
                make_checkpoint("run-1", 1, next=("n",)),
                record,
                [started.succeed({"ok": 1})],
                claim_token="owner-a",
            )
        monkeypatch.setattr(os, "fsync", real)
        step = await store.get("run-1")
    step_temp = seen[4].split()[1]
    assert seen[:4] == ["write t.0.3", "write .head.tmp", "rename .head.tmp head", "remove t.0.2"]
    assert [entry.split()[0] for entry in seen[4:]] == ["write", "link", "rename", "rename"]
    assert seen[-1] == f"rename {step_temp} 000001.json"
    # The entry, the head and the run's directory; the step file and the thread's directory.
    assert len(fsyncs) == 5
    assert stored.revision == record.revision + 1 and step is not None and step.step == 1


async def test_a_refused_step_commit_writes_nothing(root: Path) -> None:
    async with FileCheckpointer(root) as store:
        record, _ = await _started(store)
        await store.put(make_checkpoint("run-1", 1))
        before = _files(root)
        with recording() as seen, pytest.raises(Exception, match="revision"):
            await store.commit_step(make_checkpoint("run-1", 1), record, [], claim_token="x")
        with recording() as conflict, pytest.raises(Exception, match="run-1"):
            await store.commit_step(make_checkpoint("run-1", 1), record, [], claim_token="owner-a")
    assert seen == conflict == [] and _files(root) == before


async def test_a_crash_between_the_record_and_the_step_leaves_the_receipts(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order the Store protocol gives a store without one transaction: never a
    step without its receipts. The holder then commits the step anew on the
    record it finds."""
    async with FileCheckpointer(root) as store:
        record, started = await _started(store)

        def killed(*args: Any) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(thread_module, "write", killed)
        settled = [started.succeed({"ok": 1})]
        with pytest.raises(StoreUnavailable):
            await store.commit_step(
                make_checkpoint("run-1", 1), record, settled, claim_token="owner-a"
            )
        monkeypatch.undo()
        loaded = await store.load("run-1")
        assert loaded is not None and loaded.revision == record.revision + 1
        assert loaded.tool_journal[0].receipt == {"ok": 1}
        assert await store.get("run-1", 1) is None
        again = await store.commit_step(
            make_checkpoint("run-1", 1), loaded, [], claim_token="owner-a"
        )
        assert again.revision == loaded.revision + 1 and await store.get("run-1", 1) is not None


async def test_the_threads_marker_follows_its_records_status(root: Path) -> None:
    async with FileCheckpointer(root) as store:
        record, started = await _started(store)
        assert _markers(root, "run-1") == ["running"]
        record = await store.record_operations(
            record, [started.mark_ambiguous()], claim_token="owner-a"
        )
        record = await store.suspend(record, claim_token="owner-a")
        assert record.status is CheckpointStatus.RECONCILIATION_REQUIRED
        assert _markers(root, "run-1") == ["reconciliation_required"]
        await store.put(make_checkpoint("run-1", 1, next=("n",), interrupted=True))
        assert _markers(root, "run-1") == ["reconciliation_required"]  # a put keeps it
        await store.prune("run-1", before_step=1)
        assert _markers(root, "run-1") == ["reconciliation_required"]
        assert await store.delete("run-1") is True
        assert _markers(root, "run-1") == []
        await store.put(make_checkpoint("run-1", 0, next=("n",)))
        await store.create(make_record())
        assert _markers(root, "run-1") == ["running"]
        run = run_dir(root, None, "run-1")
        assert await store._io("test", store._drop_run, "run-1", False)  # the record alone
        assert _markers(root, "run-1") == ["running"] and not run.exists()


async def test_an_extra_marker_is_skipped_and_removed(root: Path) -> None:
    """What a writer killed between a marker and its record's head leaves."""
    async with FileCheckpointer(root) as store:
        await _started(store)
        (root / ".status" / "failed").mkdir()
        (root / ".status" / "failed" / "run-1").touch()
        page = await store.list_threads_page(status="failed")
        assert page.threads == [] and _markers(root, "run-1") == ["running"]


async def test_a_refused_delete_changes_no_file(root: Path) -> None:
    async with FileCheckpointer(root) as store:
        await _started(store)
        await store.append_once("e1", event_payload_digest(EVENT), EVENT)
        before = _files(root)
        with recording() as seen, pytest.raises(ClaimActive):
            await store.delete_thread("run-1")
        assert seen == [] and _files(root) == before
        with pytest.raises(InvalidThreadId):
            await store.delete_thread(".run-1")
        await store.delete_thread("run-1", force=True)
        assert await store.get("run-1") is None and await store.load("run-1") is None


async def test_a_delete_killed_midway_is_finished_by_the_next(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FileCheckpointer(root) as store:
        await store.put(make_checkpoint("run-1", 0))
        await store.create(make_record())
        await store.append_once("e1", event_payload_digest(EVENT), EVENT)
        real: Callable[[str], int] = store._drop_events

        def dies(run_id: str) -> int:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(store, "_drop_events", dies)
        with pytest.raises(StoreUnavailable):
            await store.delete_thread("run-1")
        assert await store.load("run-1") is None and await store.get("run-1") is not None
        monkeypatch.setattr(store, "_drop_events", real)
        await store.delete_thread("run-1")
        assert await store.get("run-1") is None
        assert (await store.replay("run-1")).events == []
    assert list((root / ".trash").iterdir()) == []


async def test_deleted_events_leave_their_sequence_and_no_payload(root: Path) -> None:
    async with FileCheckpointer(root) as store:
        for n in range(3):
            event = {**EVENT, "n": n, "parent_run_id": "parent"}
            await store.append_once(f"e{n}", event_payload_digest(event), event)
        other = {"type": "note", "run_id": "run-2"}
        await store.append_once("o", event_payload_digest(other), other)
        assert len((await store.replay("parent", include_children=True)).events) == 3
        assert await store._delete_events("run-1") == 3
        assert (await store.replay("parent", include_children=True)).events == []
        again = await store.append_once("e0", event_payload_digest(EVENT), EVENT)
        page = await store.replay("run-1")
    log = root / ".durable" / "events"
    assert again.inserted and [e.event_id for e in page.events] == ["e0"]
    assert sorted(p.name for p in (log / "seq").iterdir()) == [f"{n:016x}" for n in range(1, 6)]
    assert [(log / "seq" / f"{n:016x}").read_bytes() for n in (1, 2, 3)] == [b""] * 3
    assert not list((log / "parents").rglob("0*"))
    files = {path.stat().st_ino: path for path in log.rglob("*") if path.is_file()}
    stored = b"".join(path.read_bytes() for path in files.values())
    assert stored.count(b"4111-1111") == 1  # e0 appended again, under sequence 5


async def test_a_rewritten_event_keeps_its_names_and_sequence(root: Path) -> None:
    async with FileCheckpointer(root) as store:
        await store.append_once("e1", event_payload_digest(EVENT), EVENT)
        first = await store.replay("run-1")
        stored = b'{"run_id":"run-1","secret":"4111-1111","type":"note"}'
        assert await store._rewrite_event("e1", stored) is True
        assert await store._rewrite_event("nope", stored) is False
        after = await store.replay("run-1")
    log = root / ".durable" / "events"
    names = [path for path in log.rglob("*") if path.is_file()]
    assert len({path.stat().st_ino for path in names}) == 1 and len(names) == 3
    assert after.events == first.events


@pytest.mark.parametrize("idempotent", [False, True])
async def test_fsyncs_per_graph_step_with_one_journaled_call(
    root: Path, monkeypatch: pytest.MonkeyPatch, idempotent: bool
) -> None:
    """The figure docs/file.md quotes (``-s`` prints it): a 20-step graph, one call a
    step. An at-most-once call journals ``started`` (3 fsyncs) before it goes out
    and its receipt rides the step's commit (5); an idempotent one writes nothing
    before it goes out."""

    async def step(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        def charge(call: ToolCall) -> dict[str, Any]:
            return {"ok": call.arguments["i"]}

        await ctx.tool("charge", {"i": state["i"]}, charge, idempotent=idempotent)
        return {"i": state["i"] + 1}

    graph = Graph("twenty").add_node("step", step).add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: "step" if s["i"] < 20 else END, ["step", END])
    fsyncs: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        fsyncs.append(fd)
        real(fd)

    async with FileCheckpointer(root) as store:
        compiled = graph.compile(store)
        await compiled.run({"i": 0}, thread="warm-up")  # the namespace's directories
        monkeypatch.setattr(os, "fsync", counted)
        result = await compiled.run({"i": 0}, thread="t")
    per_step = len(fsyncs) / 20
    print(f"idempotent={idempotent}: {len(fsyncs)} fsyncs, {per_step:.2f} a step")
    assert result.status == "done"
    assert per_step <= (6 if idempotent else 9)
