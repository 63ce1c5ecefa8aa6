"""Processes on one file store's records and events: racing claims and appends have one winner each,
and a writer killed at any instant leaves every run readable and every index whole.

Racing workers share only the directory and its flocks (tests/durable/racing.py).
The kill test runs a churning writer (claims, journal writes, progress,
commits, finalizes, deletes, appends) and SIGKILLs it at random moments:
``AGENTFLOW_FILE_KILLS`` of them (8 by default; the full soak is 100).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import multiprocessing
import os
import random
import signal
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.file.names import key_of
from agentflow.durable import event_payload_digest
from agentflow.durable.enums import CheckpointStatus, ClaimMode, OperationState
from agentflow.durable.errors import DurableConflict
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import take
from tests.durable.racing import race_processes

KILLS = int(os.environ.get("AGENTFLOW_FILE_KILLS", "8"))
RUNS = [f"run-{n}" for n in range(4)]


async def test_racing_processes_claim_and_append_exactly_once(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    async with FileCheckpointer(root) as store:
        await race_processes(store, (partial(FileCheckpointer, root),) * 2)


async def _cycle(store: FileCheckpointer, events: FileCheckpointer, rng: random.Random) -> None:
    """One step of a run's life, whatever state a killed predecessor left it in."""
    key = rng.choice(RUNS)
    record = await store.load(key)
    if record is None:
        await store.create(make_record(key))
        return
    if record.terminal_result is not None:
        if record.terminal_acknowledged or rng.random() < 0.5:
            await store.delete(key)
        else:
            await store.acknowledge_terminal(record)
        return
    token = f"churn-{rng.getrandbits(32)}"
    cycle = record.cycle_index + 1
    record = await take(store, token, key=key, cycle=cycle, lease_ms=40, mode=ClaimMode.RECOVERY)
    for entry in record.tool_journal:  # a call the killed writer left going out: settle it
        if entry.state in (OperationState.STARTED, OperationState.AMBIGUOUS):
            settled = entry.succeed({"reconciled": True})
            record = await store.record_operation(record, settled, claim_token=token)
    if not record.tool_journal:
        entry = make_tool_entry(key, cycle).start()
        record = await store.record_operation(record, entry, claim_token=token)
        receipt = {"row": rng.getrandbits(16)}
        record = await store.record_operation(
            record, record.tool_journal[0].succeed(receipt), claim_token=token
        )
        record = replace(record, shared_state={"cycle": cycle, "pad": "x" * rng.randrange(9000)})
        record = await store.progress(record, claim_token=token)
        event = {"type": "step", "run_id": key, "cycle": cycle}
        await events.append_once(f"{key}-{cycle}", event_payload_digest(event), event)
    record = replace(record, cycle_index=cycle)
    if rng.random() < 0.3:
        result = {"status": "completed", "cycles": cycle}
        done = replace(record, status=CheckpointStatus.COMPLETED, terminal_result=result)
        await store.finalize_claimed(done, claim_token=token)
    else:
        await store.commit(record, claim_token=token)


async def _churn(root: str, seed: int) -> None:
    rng = random.Random(seed)
    async with FileCheckpointer(root) as store:
        events = store
        while True:
            try:
                await _cycle(store, events, rng)
            except DurableConflict:
                await asyncio.sleep(0.05)  # a dead holder's lease: let it lapse


def churn(root: str, seed: int) -> None:
    """Child entry point: change runs until killed."""
    asyncio.run(_churn(root, seed))


def _index_keys(root: Path, status: CheckpointStatus) -> set[str]:
    """The keys the status index holds (the leaves under its directory)."""
    top = root / ".durable" / "status" / status.value
    found = set()
    for path in top.rglob("*-"):
        encoded = "".join(part[:-1] for part in path.relative_to(top).parts)
        key = key_of(encoded)
        assert key is not None, path
        found.add(key)
    return found


async def _check(root: Path) -> int:
    """Every run reads whole and sits in its status's index; extra entries get removed."""
    async with FileCheckpointer(root) as store:
        events = store
        listed = [run.key for run in (await store.list_runs()).runs]
        records = {key: await store.load(key) for key in listed}
        by_status = {
            status: [run.key for run in (await store.list_runs(status=status)).runs]
            for status in CheckpointStatus
        }
        for key, record in records.items():
            assert record is not None, key
            assert key in by_status[record.status], (key, record.status)
        for status in CheckpointStatus:
            assert _index_keys(root, status) == set(by_status[status]), status
        cursors = []
        for key in RUNS:
            page = await events.replay(key, limit=10_000)
            assert len({e.event_id for e in page.events}) == len(page.events)
            cursors += [str(e.cursor) for e in page.events]
        event = {"type": "check", "run_id": "checker"}
        check_id = f"check-{time.time_ns()}"
        await events.append_once(check_id, event_payload_digest(event), event)
    assert len(set(cursors)) == len(cursors)
    # Every sequence ever drawn is still drawn (deleted events leave an empty file),
    # and the new event took the next one.
    log = root / ".durable" / "events"
    # (a writer killed mid-delete leaves its temporary file, replaced by the next delete)
    names = [path.name for path in (log / "seq").iterdir() if not path.name.startswith(".")]
    drawn = sorted(int(name, 16) for name in names)
    assert drawn == list(range(1, len(drawn) + 1))
    name = hashlib.blake2b(check_id.encode(), digest_size=16).hexdigest()
    header = json.loads((log / "ids" / name).read_bytes().partition(b"\n")[0])
    assert header["sequence"] == drawn[-1]
    return len(listed)


async def test_a_writer_killed_at_any_instant_leaves_the_store_whole(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ctx = multiprocessing.get_context("spawn")
    rng = random.Random(20260601)
    seen = 0
    for kill in range(KILLS):
        child = ctx.Process(target=churn, args=(str(root), kill))
        child.start()
        await asyncio.sleep(1.0 + rng.random())  # the spawn takes most of a second
        assert child.pid is not None and child.is_alive(), "the writer stopped by itself"
        os.kill(child.pid, signal.SIGKILL)
        await asyncio.to_thread(child.join)
        seen += await _check(root)
    assert seen > 0
