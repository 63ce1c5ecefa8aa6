"""The samples run to their documented outcomes."""

from __future__ import annotations

import importlib
from pathlib import Path

from tests.runtime.conftest import needs_sqlite

#: The samples keep their runs in an SQLite file.
pytestmark = needs_sqlite


async def test_approval_sample_pays_once_approved(tmp_path: Path) -> None:
    sample = importlib.import_module("samples.approval")
    paused = await sample.main(None, str(tmp_path / "s.db"))
    assert "decision" not in paused
    state = await sample.main("approve", str(tmp_path / "s.db"))
    assert state["paid"] is True and state["log"][-1] == "paid $42.50"


async def test_followup_loop_sample_resolves_on_the_third_check(tmp_path: Path) -> None:
    sample = importlib.import_module("samples.followup_loop")
    state = await sample.main(str(tmp_path / "s.db"), interval_s=0.05)
    assert state["outcome"] == "resolved" and state["attempts"] == sample.REPLIES_ON


async def test_fork_sample_rejects_on_the_fork_only(tmp_path: Path) -> None:
    sample = importlib.import_module("samples.fork_what_if")
    approved, rejected = await sample.main(str(tmp_path / "s.db"))
    assert approved["refund"]["status"] == "succeeded" and "refund" not in rejected
    assert approved["order"] == rejected["order"] and rejected["decision"] == "reject"


async def test_lost_reply_sample_stops_for_reconciliation_after_one_charge(tmp_path: Path) -> None:
    sample = importlib.import_module("samples.lost_reply")
    ledger = tmp_path / "ledger.txt"
    result = await sample.main("pay-1", str(tmp_path / "s.db"), str(ledger))
    assert result.status == "reconciliation_required"
    assert [o.risk for o in result.observations] == ["unknown_tool_side_effect"]
    assert len(ledger.read_text().splitlines()) == 1
