"""A worker killed mid-run and started again under its identity takes the run back at once.

The lease (:data:`~tests.runtime.restart_child.LEASE`, two minutes) outlives
the test: only a worker under the dead one's identity may take the run before
it lapses, and another identity is told who holds it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.runtime.graphs import ledger_lines
from tests.runtime.restart_child import LEASE, restart_graph
from tests.runtime.shared_stores import (
    PROCESS_BACKENDS,
    SharedStore,
    on_process_backends,
    opened,
    shared_store,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = on_process_backends
#: Seconds a child may take to start and finish (a bound for a loaded machine).
DEADLINE = 60.0


@pytest.fixture(params=PROCESS_BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SharedStore]:
    async with shared_store(request.param, tmp_path) as shared:
        yield shared


def _worker(store: SharedStore, worker_id: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.restart_child", *store.args, mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "AGENTFLOW_WORKER_ID": worker_id},
    )


async def _lines(ledger: Path, count: int) -> list[str]:
    """The ledger once it has ``count`` lines (at most :data:`DEADLINE` seconds)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        lines = ledger_lines(ledger)
        if len(lines) >= count:
            return lines
        await asyncio.sleep(0.05)
    raise AssertionError(f"the ledger did not reach {count} lines in {DEADLINE} s")


def _report(child: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = child.communicate(timeout=DEADLINE)
    assert child.returncode == 0
    report: dict[str, object] = json.loads(out)
    return report


@pytest.mark.slow
async def test_a_worker_restarted_under_its_identity_takes_back_its_run_at_once(
    store: SharedStore, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    async with opened(*store.args) as opened_store:
        graph = restart_graph().compile(opened_store, claim_ttl=LEASE)
        await graph.run({"ledger": str(ledger)}, thread="r")
    first = _worker(store, "w-restart", "drain")
    await _lines(ledger, 1)  # its step began, and hangs
    first.kill()
    assert first.wait(timeout=DEADLINE) == -9
    other = _report(_worker(store, "w-other", "once"))  # another identity must wait
    assert (other["resumed"], other["taken"], other["worker_id"]) == (0, 1, "w-other")
    restarted = time.monotonic()
    second = _report(_worker(store, "w-restart", "drain"))
    took = time.monotonic() - restarted
    assert second["resumed"] == 1 and second["failed"] == 0
    assert took < LEASE.total_seconds() / 2, f"{took:.1f} s: taken over, not taken back"
    lines = await _lines(ledger, 3)
    assert [line.split()[0] for line in lines] == ["begin", "begin", "charge"]
    async with opened(*store.args) as opened_store:
        latest = await opened_store.get("r")
        record = await opened_store.load("r")
    assert latest is not None and latest.done
    assert record is not None and record.claim_token is None
