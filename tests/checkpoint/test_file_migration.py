"""A file store of the layout before one store per database opens, migrated, with every part.

``tests/data/migration/file/v2.tar`` is what commit aeb9750 wrote (its
``make_dump.py`` says how): checkpoint layout 2 and durable layout 1 side by
side, in the default namespace and, sealed, in namespace ``sealed``: a run
paused on a human interrupt, a run waiting for reconciliation after a lost
reply, and two events each. Extracted into a fresh directory and opened with
today's store, every part reads back, the thread waiting for reconciliation
is listed as such (its status marker moved), and both runs resume.
"""

from __future__ import annotations

import asyncio
import tarfile
from pathlib import Path

import pytest

from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.file.layout import LAYOUT_VERSION
from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable import OperationState, ReconciliationDecision
from agentflow.durable.enums import CheckpointStatus
from agentflow.errors import CheckpointCorrupted, IncompatibleSchema
from tests.backends.file import base_path
from tests.runtime.graphs import approval_graph, lost_reply_graph

DATA = Path(__file__).parents[1] / "data" / "migration" / "file"
#: (namespace, thread suffix, sealed)
NAMESPACES = [(None, "-1", False), ("sealed", "-s", True)]


def _extract(root: Path) -> None:
    root.mkdir(mode=0o700)
    with tarfile.open(DATA / "v2.tar") as archive:
        archive.extractall(root, filter="data")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    _extract(tmp_path / "store")
    return tmp_path / "store"


@pytest.fixture
def ring() -> KeyRing:
    return KeyRing.from_source((DATA / "keys.json").read_bytes)  # git keeps no mode 0600


def _open(root: Path, namespace: str | None, ring: KeyRing | None) -> FileCheckpointer:
    return FileCheckpointer(root, namespace=namespace, sealing=ring)


def _layouts(base: Path) -> list[str]:
    return [(base / name).read_text() for name in (".layout", ".durable/layout")]


@pytest.mark.parametrize(("namespace", "suffix", "sealed"), NAMESPACES)
async def test_every_part_reads_back_after_the_migration(
    root: Path, ring: KeyRing, namespace: str | None, suffix: str, sealed: bool
) -> None:
    base = base_path(root, namespace)
    assert _layouts(base) == ["2\n", "1\n"]
    paused, ambiguous = f"approve{suffix}", f"pay{suffix}"
    async with _open(root, namespace, ring if sealed else None) as store:
        latest = await store.get(paused)
        history = [cp.step async for cp in store.history(paused)]
        waiting = await store.get(ambiguous)
        held = await store.load(paused)
        stuck = await store.load(ambiguous)
        events = {run: await store.replay(run) for run in (paused, ambiguous)}
        listed = {
            status: [info.thread for info in (await store.list_threads_page(status=status)).threads]
            for status in ("running", "interrupted", "reconciliation_required")
        }
        runs = await store.list_runs(status=CheckpointStatus.RECONCILIATION_REQUIRED)
    assert latest is not None and latest.interrupted and latest.next == ("ask",)
    assert latest.state["log"] == ["prepare"] and history == [0, 1, 2]
    assert waiting is not None and waiting.step == 0
    assert held is not None and held.status is CheckpointStatus.RUNNING and held.tool_journal == []
    assert stuck is not None and stuck.status is CheckpointStatus.RECONCILIATION_REQUIRED
    [call] = stuck.tool_journal
    assert call.state is OperationState.AMBIGUOUS and call.tool_name == "charge"
    assert [[e.event_id for e in page.events] for page in events.values()] == [
        [f"evt{suffix}-0"],
        [f"evt{suffix}-1"],
    ]
    assert events[paused].events[0].event == {"type": "note", "run_id": paused, "n": 0}
    # The record's status moved the thread's marker: reconciliation, no longer "running".
    assert listed == {
        "running": [],
        "interrupted": [paused],
        "reconciliation_required": [ambiguous],
    }
    assert not (base / ".status" / "running" / ambiguous).exists()
    assert [run.key for run in runs.runs] == [ambiguous]
    assert _layouts(base) == [f"{LAYOUT_VERSION}\n"] * 2
    assert (base / ".durable" / "layout").samefile(base / ".layout")


async def test_sealed_parts_need_the_key_ring_they_were_sealed_with(root: Path) -> None:
    async with _open(root, "sealed", None) as plain:
        with pytest.raises(CheckpointCorrupted):
            await plain.get("approve-s")
        with pytest.raises(CheckpointCorrupted, match="sealed"):
            await plain.load("pay-s")
    other = KeyRing({"other": bytes(range(32))}, current="other")
    async with _open(root, "sealed", other) as wrong:
        with pytest.raises(CheckpointCorrupted):
            await wrong.load("pay-s")


@pytest.mark.parametrize(("namespace", "suffix", "sealed"), NAMESPACES)
async def test_the_runs_resume_after_the_migration(
    root: Path, ring: KeyRing, namespace: str | None, suffix: str, sealed: bool
) -> None:
    async with _open(root, namespace, ring if sealed else None) as store:
        answered = await approval_graph().compile(store).resume(f"approve{suffix}", "yes")
        compiled = lost_reply_graph().compile(store)
        record = await store.load(f"pay{suffix}")
        assert record is not None
        receipt = {"charged": 700}  # seen in the provider's ledger: no second charge
        decision = ReconciliationDecision.replay_result(receipt)
        await compiled.reconcile(
            f"pay{suffix}", record.tool_journal[0].operation_id, decision, attempt=1
        )
        settled = await compiled.resume(f"pay{suffix}")
        done = [info.thread for info in (await store.list_threads_page(status="done")).threads]
    assert answered.status == "done" and answered.state["answer"] == "yes"
    assert answered.state["log"] == ["prepare", "answer yes", "finish"]
    assert settled.status == "done" and settled.state["receipt"] == receipt
    assert done == [f"approve{suffix}", f"pay{suffix}"]


async def test_processes_migrating_at_once_agree(root: Path) -> None:
    stores = [_open(root, None, None) for _ in range(4)]
    try:
        pages = await asyncio.gather(
            *(s.list_threads_page(status="reconciliation_required") for s in stores)
        )
    finally:
        for store in stores:
            await store.close()
    assert [[info.thread for info in page.threads] for page in pages] == [["pay-1"]] * 4
    assert sorted(p.name for p in (root / ".status").rglob("*") if p.is_file()) == [
        "approve-1",
        "pay-1",
    ]


async def test_a_durable_layout_an_older_release_wrote_since_migrates_again(root: Path) -> None:
    """Someone removed the fence and ran an older durable store: its layout file is
    back at 1 and its writes moved no marker. The next open puts them right."""
    async with _open(root, None, None) as store:
        assert await store.get("pay-1") is not None
    fence = root / ".durable" / "layout"
    fence.unlink()
    fence.write_text("1\n")
    (root / ".status" / "reconciliation_required" / "pay-1").rename(
        root / ".status" / "running" / "pay-1"
    )
    async with _open(root, None, None) as store:
        page = await store.list_threads_page(status="reconciliation_required")
    assert [info.thread for info in page.threads] == ["pay-1"]
    assert fence.samefile(root / ".layout") and fence.read_text() == f"{LAYOUT_VERSION}\n"
    assert not (root / ".status" / "running" / "pay-1").exists()


@pytest.mark.parametrize("name", [".layout", ".durable/layout"])
async def test_a_newer_layout_in_either_file_is_refused_before_anything_is_written(
    root: Path, name: str
) -> None:
    (root / name).write_text(f"{LAYOUT_VERSION + 1}\n")
    async with _open(root, None, None) as store:
        with pytest.raises(IncompatibleSchema):
            await store.list_threads_page(status="reconciliation_required")
        with pytest.raises(IncompatibleSchema):
            await store.load("pay-1")
    assert (root / ".status" / "running" / "pay-1").exists()  # not migrated
