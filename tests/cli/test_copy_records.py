"""``agentflow copy`` carries a thread whole: checkpoints, durable record and events.

On every backend (the harness): the copy is another namespace of the same
database, as ``--to-namespace`` makes it. The regression of issue 16: a run
waiting for reconciliation after a lost payment reply is still waiting on
the copy, so ``resume`` there charges nothing again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agentflow.checkpoint.sealing import KeyRing, new_key
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import BackendHarness
from agentflow.cli import copy_records
from agentflow.cli.copy import StoreCopy
from agentflow.cli.demo import build_demo_graph
from agentflow.durable import ReconciliationDecision
from agentflow.durable.enums import ClaimMode
from agentflow.durable.testing.harness import make_record
from tests.cli.whole_threads import fill, whole
from tests.runtime.graphs import ledger_lines, lost_reply_graph


async def test_a_thread_is_copied_whole_and_a_copy_run_again_writes_nothing(
    harness: BackendHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copy_records, "_PAGE", 2)  # events over several replay pages
    ledger = tmp_path / "ledger"
    async with harness.open(namespace="src") as src, harness.open(namespace="dst") as dst:
        await fill(src, ledger)
        report = await StoreCopy(src, dst).run()
        assert (report.threads, report.count("copied"), report.mismatched) == (4, 4, [])
        assert (report.records, report.records_written) == (4, 4)
        # fill's four events and the runs' four lifecycle events (see whole_threads.fill)
        assert (report.events, report.events_written) == (8, 8)
        assert await whole(dst) == await whole(src)
        page = await dst.list_threads_page(status="reconciliation_required")
        assert [info.thread for info in page.threads] == ["order-7"]
        held = await dst.load("held")
        assert held is not None and held.claim_token == "owner-a"

        again = await StoreCopy(src, dst).run()
        assert again.count("unchanged") == 4 and again.mismatched == []
        assert (again.writes, again.records_written, again.events_written) == (0, 0, 0)

        resumed = await lost_reply_graph().compile(dst).resume("order-7")
    assert resumed.status == "reconciliation_required"
    assert len(ledger_lines(ledger)) == 1  # the copy did not charge the card again


async def test_an_older_copy_is_brought_up_to_date(harness: BackendHarness, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    async with harness.open(namespace="src") as src, harness.open(namespace="dst") as dst:
        await fill(src, ledger)
        await StoreCopy(src, dst).run()
        lost = lost_reply_graph().compile(src)
        record = await src.load("order-7")
        assert record is not None
        operation = record.tool_journal[0].operation_id
        await lost.reconcile(
            "order-7", operation, ReconciliationDecision.replay_result({"ok": 1}), attempt=1
        )
        assert (await lost.resume("order-7")).status == "done"
        await build_demo_graph().compile(src).resume("paused", "approve")
        report = await StoreCopy(src, dst).run()
        assert report.count("copied") == 2 and report.count("unchanged") == 2
        assert report.records_written == 2 and report.mismatched == []
        assert await whole(dst) == await whole(src)
        done = await dst.load("order-7")
    assert done is not None and done.terminal_result is not None
    assert len(ledger_lines(ledger)) == 1


async def test_a_record_of_another_run_is_refused_unless_overwritten_and_a_newer_one_kept(
    harness: BackendHarness,
) -> None:
    async with harness.open(namespace="src") as src, harness.open(namespace="dst") as dst:
        await src.create(make_record("other-run", trace_id="source"))
        await src.create(make_record("moved-on"))
        await dst.create(make_record("other-run", trace_id="destination"))
        await dst.create(make_record("moved-on"))
        await dst.claim(  # the destination moved on by itself: a newer revision
            "moved-on", cycle_index=1, claim_token="d", lease_ms=1, mode=ClaimMode.CONTINUE
        )
        before = await whole(dst)
        report = await StoreCopy(src, dst).run()
        assert sorted(report.refused) == ["moved-on", "other-run"]
        assert report.newer == ["moved-on"]  # its record is ahead: a replace would lose it
        assert report.records_written == 0 and await whole(dst) == before
        replaced = await StoreCopy(src, dst, overwrite=True).run()
        assert replaced.count("replaced") == 1 and replaced.refused == ["moved-on"]
        kept = await dst.load("moved-on")
        assert kept is not None and kept.claim_token == "d"
        forced = await StoreCopy(src, dst, overwrite_newer=True).run()
        assert forced.count("replaced") == 1 and forced.mismatched == []
        assert await whole(dst) == await whole(src)


async def test_the_destination_checks_or_seals_every_part_for_its_namespace(
    harness: BackendHarness, tmp_path: Path
) -> None:
    spec = {"current": "k1", "keys": {"k1": new_key()}}
    ring = KeyRing.from_source(lambda: spec)
    async with (
        harness.open(namespace="src") as src,
        harness.open(namespace="dst", sealing=ring) as dst,
    ):
        await fill(src, tmp_path / "ledger")
        report = await StoreCopy(src, dst).run()
        assert report.mismatched == [] and await whole(dst) == await whole(src)
    assert harness.read_part is not None
    plain = await harness.read_part("src", "order-7", "tool.0")
    sealed = await harness.read_part("dst", "order-7", "tool.0")
    assert plain.startswith(b'[1,"') and b"charge" in plain
    assert sealed.startswith(b'[2,"') and b"charge" not in sealed
    assert (await harness.read_part("dst", "e0", "event")).startswith(b'[2,"')


async def test_verification_names_a_record_the_destination_lost(harness: BackendHarness) -> None:
    class Forgetful(StoreCopy):
        async def verify(self) -> None:
            await self.destination.delete("record-only", force=True)
            await super().verify()

    async with harness.open(namespace="src") as src, harness.open(namespace="dst") as dst:
        await src.create(make_record("record-only"))
        report = await Forgetful(src, dst).run()
    assert report.mismatched == [
        ("record-only", "expected the source's record revision 0 (running), found no record")
    ]


# -- the command line ----------------------------------------------------------------------


def _operation(run: Callable[..., tuple[int, str]], *flags: str) -> str:
    status, out = run(*flags, "journal", "order-7", "--json")
    assert status == 0, out
    [pending] = json.loads(out)["pending"]
    return str(pending["operation_id"])


def test_resume_on_a_copy_in_another_namespace_charges_nothing_again(
    here: Callable[..., tuple[int, str]], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"

    async def source() -> None:
        async with SqliteCheckpointer(tmp_path / "src.db") as store:
            await fill(store, ledger)

    asyncio.run(source())
    copy = ["copy", "sqlite:///src.db", "sqlite:///dst.db", "--to-namespace", "acme"]
    status, out = here(*copy)
    assert status == 0, out
    assert "durable records: 4 read, 4 written" in out and "events: 8 read, 8 written" in out
    assert "its record and its events" in out
    status, out = here(*copy, "--json")
    summary = json.loads(out)
    assert (summary["records"], summary["records_written"]) == (4, 0)
    assert (summary["events"], summary["events_written"]) == (8, 0)
    flags = ["--store", "sqlite:///dst.db", "--namespace", "acme"]
    status, out = here(*flags, "threads", "--status", "reconciliation_required")
    assert status == 0 and "order-7" in out
    spec = ["--graph", "tests.runtime.graphs:lost_reply_graph"]
    status, out = here(*flags, *spec, "resume", "order-7")
    assert status == 0 and "reconciliation required in order-7" in out
    assert len(ledger_lines(ledger)) == 1
    operation = _operation(here, *flags)
    receipt = '{"charged": 700}'
    decided = ["--attempt", "1", "--decision", "replay_success", "--receipt", receipt]
    assert here(*flags, "reconcile", "order-7", operation, *decided)[0] == 0
    status, out = here(*flags, *spec, "resume", "order-7", "--json")
    assert status == 0 and json.loads(out)["state"]["receipt"] == {"charged": 700}
    assert len(ledger_lines(ledger)) == 1
    assert _operation(here, "--store", "sqlite:///src.db")  # the source still waits


def test_a_run_copied_without_its_record_would_charge_again(
    here: Callable[..., tuple[int, str]], tmp_path: Path
) -> None:
    """The check above can fail: the same copy, its record dropped, charges twice."""
    ledger = tmp_path / "ledger"

    async def source() -> None:
        async with SqliteCheckpointer(tmp_path / "src.db") as store:
            await fill(store, ledger)
        async with (
            SqliteCheckpointer(tmp_path / "dst.db") as copy,
            SqliteCheckpointer(tmp_path / "src.db") as store,
        ):
            async for cp in store.history("order-7"):
                for revision in range(cp.revision):
                    await copy.put(cp, if_revision=revision)

    asyncio.run(source())
    spec = ["--graph", "tests.runtime.graphs:lost_reply_graph"]
    out = here("--store", "sqlite:///dst.db", *spec, "resume", "order-7")[1]
    assert len(ledger_lines(ledger)) == 2, out
