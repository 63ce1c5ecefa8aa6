"""Processes on one file durable store: racing claims and appends have one winner each,
and a writer killed at any instant leaves every run readable and every index whole.

Racing workers are spawned processes with their own stores, meeting at a
barrier before every race; they share only the directory and its flocks.
The kill test runs a churning writer (claims, journal writes, progress,
commits, finalizes, deletes, appends) and SIGKILLs it at random moments:
``AGENTFLOW_FILE_KILLS`` of them (8 by default; the full soak is 100).
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import random
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from threading import Barrier
from typing import Any

from agentflow.durable import event_payload_digest
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import DurableConflict, DurableError
from agentflow.durable.store import DurableStore
from agentflow.durable.stores.file import FileDurableStore
from agentflow.durable.stores.file_events import FileRunEventStore
from agentflow.durable.stores.file_names import key_of
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LAPSED_MS, lapse, take

WORKERS = 4
ROUNDS = 6
KILLS = int(os.environ.get("AGENTFLOW_FILE_KILLS", "8"))
RUNS = [f"run-{n}" for n in range(4)]
#: How long a worker waits for its peers (a hung peer fails the test).
_BARRIER_TIMEOUT = 120.0
_shared: dict[str, Barrier] = {}


def _init(barrier: Barrier) -> None:
    _shared["barrier"] = barrier


async def _meet() -> None:
    await asyncio.to_thread(_shared["barrier"].wait, _BARRIER_TIMEOUT)


#: How a worker opens its stores: the durable and the event store class (``module:Class``)
#: and the arguments both take. Any backend's stores can race here.
Recipe = tuple[str, str, tuple[Any, ...], dict[str, Any]]


def _class(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


async def _race(recipe: Recipe, worker: int, keys: list[str]) -> list[str]:
    durable, event_store, args, kwargs = recipe
    outcomes: list[str] = []
    async with (
        _class(durable)(*args, **kwargs) as store,
        _class(event_store)(*args, **kwargs) as events,
    ):
        await store.load(keys[0])  # opened and checked before any race
        for key in keys:
            await _meet()
            try:
                await take(store, f"worker-{worker}", key=key, mode=ClaimMode.RECOVERY)
                outcomes.append("claimed")
            except DurableError as exc:
                outcomes.append(exc.code)
        for event_id, n in (("same", 0), ("different", worker)):
            event = {"type": "step", "run_id": "run-a", "n": n}
            await _meet()
            try:
                result = await events.append_once(event_id, event_payload_digest(event), event)
                kind = "inserted" if result.inserted else "duplicate"
                outcomes.append(f"{kind} {result.cursor['sequence']}")
            except DurableError as exc:
                outcomes.append(exc.code)
    return outcomes


def race(recipe: Recipe, worker: int, keys: list[str]) -> list[str]:
    """Child entry point: one worker's outcome of every race, in order."""
    return asyncio.run(_race(recipe, worker, keys))


async def race_processes(store: DurableStore, recipe: Recipe) -> None:
    """Spawned workers race recovery claims of runs whose holder died, then appends
    of one event id and of one id with different payloads: one winner each."""
    keys = [f"run-{n}" for n in range(ROUNDS)]
    for key in keys:
        await store.create(make_record(key))
        await take(store, "dead-holder", key=key, lease_ms=LAPSED_MS)
    await lapse()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        WORKERS, mp_context=ctx, initializer=_init, initargs=(ctx.Barrier(WORKERS),)
    ) as pool:
        loop = asyncio.get_running_loop()
        per_worker = await asyncio.gather(
            *(loop.run_in_executor(pool, race, recipe, w, keys) for w in range(WORKERS))
        )
    for round_, key in enumerate(keys):
        outcomes = [worker[round_] for worker in per_worker]
        assert sorted(outcomes) == ["checkpoint_claim_active"] * (WORKERS - 1) + ["claimed"]
        record = await store.load(key)
        assert record is not None and (record.revision, record.resume_attempt) == (2, 2)
        assert record.claim_token == f"worker-{outcomes.index('claimed')}", key
    same = sorted(worker[ROUNDS] for worker in per_worker)
    sequence = same[-1].split()[1]
    assert same == [f"duplicate {sequence}"] * (WORKERS - 1) + [f"inserted {sequence}"]
    different = sorted(worker[ROUNDS + 1].split()[0] for worker in per_worker)
    assert different == ["event_identity_conflict"] * (WORKERS - 1) + ["inserted"]


async def test_racing_processes_claim_and_append_exactly_once(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    recipe: Recipe = (
        "agentflow.durable.stores.file:FileDurableStore",
        "agentflow.durable.stores.file_events:FileRunEventStore",
        (root,),
        {},
    )
    async with FileDurableStore(root) as store:
        await race_processes(store, recipe)


async def _cycle(store: FileDurableStore, events: FileRunEventStore, rng: random.Random) -> None:
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
    async with FileDurableStore(root) as store, FileRunEventStore(root) as events:
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
    async with FileDurableStore(root) as store, FileRunEventStore(root) as events:
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
        sequences = []
        for key in RUNS:
            page = await events.replay(key, limit=10_000)
            assert len({e.event_id for e in page.events}) == len(page.events)
            sequences += [e.cursor["sequence"] for e in page.events]
        event = {"type": "check", "run_id": "checker"}
        appended = await events.append_once(
            f"check-{time.time_ns()}", event_payload_digest(event), event
        )
    assert len(set(sequences)) == len(sequences)
    assert appended.cursor["sequence"] > max(sequences, default=0)
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
