"""Spawned processes racing on one durable backend: what every backend's process tests share.

Each worker is a spawned process that opens its own stores from picklable
openers (``functools.partial`` of the store classes), so the processes share
only the backend; they meet at a barrier before every race. The parent does
the asserting.

* :func:`race_processes`: recovery claims of runs whose holder died, then
  appends of one event id and of one id with different payloads: one winner each.
* :func:`resume_processes`: every worker resumes every dead run as a worker
  would (claim, journal the call, make the effect, journal the receipt,
  commit, append the completion event): each run's effect is made once.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import partial
from threading import Barrier
from typing import Any

from agentflow.durable import event_payload_digest
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import DurableError
from agentflow.durable.store import DurableEventStore, DurableStore
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LAPSED_MS, lapse, take

WORKERS = 4
ROUNDS = 6
KEYS = [f"run-{n}" for n in range(ROUNDS)]
#: How long a worker waits for its peers (a hung peer fails the test).
_BARRIER_TIMEOUT = 120.0
_shared: dict[str, Barrier] = {}
#: What a losing resume claim names: a live claim, or (when its claim came after the
#: winner had already committed the cycle) the cycle.
_LOST = frozenset({"checkpoint_claim_active", "checkpoint_cycle_conflict"})

#: How a worker opens its stores: picklable callables, called in the child.
Openers = tuple[Callable[[], DurableStore], Callable[[], DurableEventStore]]
#: A resuming worker's side effect, ``effect(key, token)``, made once the call is journaled.
Effect = Callable[[str, str], Awaitable[None]]


def _init(barrier: Barrier) -> None:
    _shared["barrier"] = barrier


async def _meet() -> None:
    await asyncio.to_thread(_shared["barrier"].wait, _BARRIER_TIMEOUT)


async def _spawn(child: Callable[..., list[str]], *args: Any) -> list[list[str]]:
    """``child(*args, worker)`` in each of WORKERS spawned processes; their results in order."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        WORKERS, mp_context=ctx, initializer=_init, initargs=(ctx.Barrier(WORKERS),)
    ) as pool:
        loop = asyncio.get_running_loop()
        runs = [loop.run_in_executor(pool, partial(child, *args, w)) for w in range(WORKERS)]
        return list(await asyncio.gather(*runs))


async def dead_runs(store: DurableStore) -> None:
    """Create the runs of :data:`KEYS` with a lapsed claim: only a recovery claim takes them."""
    for key in KEYS:
        await store.create(make_record(key))
        await take(store, "dead-holder", key=key, lease_ms=LAPSED_MS)
    await lapse()


async def _race(openers: Openers, worker: int) -> list[str]:
    outcomes: list[str] = []
    async with openers[0]() as store, openers[1]() as events:
        await store.load(KEYS[0])  # connected and set up before any race
        await events.replay("run-a")
        for key in KEYS:
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
                outcomes.append(f"{kind} {result.cursor['cursor']}")  # one token per acceptance
            except DurableError as exc:
                outcomes.append(exc.code)
    return outcomes


def race(openers: Openers, worker: int) -> list[str]:
    """Child entry point: one worker's outcome of every race, in order."""
    return asyncio.run(_race(openers, worker))


async def race_processes(store: DurableStore, openers: Openers) -> None:
    """Spawned workers race for :data:`KEYS` and two event ids; one winner each."""
    await dead_runs(store)
    per_worker = await _spawn(race, openers)
    for round_, key in enumerate(KEYS):
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


async def resume_each(
    store: DurableStore, events: DurableEventStore, worker: int, effect: Effect
) -> list[str]:
    """In a child: resume every run of :data:`KEYS` against the other workers."""
    outcomes: list[str] = []
    await store.load("warm-up")  # connected, layout checked: the race is the claim
    await events.replay("warm-up")
    token = f"worker-{worker}"
    for key in KEYS:
        await _meet()
        try:
            record = await take(store, token, key=key, mode=ClaimMode.RECOVERY)
        except DurableError as exc:
            outcomes.append(exc.code)
        else:
            entry = make_tool_entry(key, 1).start()
            record = await store.record_operation(record, entry, claim_token=token)
            await effect(key, token)
            receipt = entry.succeed({"charged": True})
            record = await store.record_operation(record, receipt, claim_token=token)
            await store.commit(replace(record, cycle_index=1), claim_token=token)
            outcomes.append("ran")
        event = {"type": "run_resumed", "run_id": key}
        appended = await events.append_once(f"done-{key}", event_payload_digest(event), event)
        outcomes.append("inserted" if appended.inserted else "duplicate")
    return outcomes


async def resume_processes(
    store: DurableStore,
    child: Callable[..., list[str]],
    *args: Any,
    effects: Callable[[], Awaitable[Sequence[tuple[str, str]]]],
) -> None:
    """Spawned ``child(*args, worker)`` processes (each calling :func:`resume_each`)
    resume the dead runs of :data:`KEYS`; ``effects()`` reads back the ``(key,
    token)`` of every effect made. Each run ran once, its effect made once by its
    winner, and its completion event accepted once."""
    await dead_runs(store)
    per_worker = await _spawn(child, *args)
    made = list(await effects())
    for n, key in enumerate(KEYS):
        claims = sorted(per_worker[w][2 * n] for w in range(WORKERS))
        appends = sorted(per_worker[w][2 * n + 1] for w in range(WORKERS))
        assert claims[-1] == "ran" and set(claims[:-1]) <= _LOST, (key, claims)
        assert appends == ["duplicate"] * (WORKERS - 1) + ["inserted"], key
        winner = next(w for w in range(WORKERS) if per_worker[w][2 * n] == "ran")
        record = await store.load(key)
        assert record is not None and (record.cycle_index, record.resume_attempt) == (1, 2)
        assert record.claim_token is None and record.tool_journal == []
        assert made.count((key, f"worker-{winner}")) == 1
    assert len(made) == ROUNDS
