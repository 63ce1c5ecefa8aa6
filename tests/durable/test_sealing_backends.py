"""Sealed durable stores on every backend, judged by the bytes each one keeps.

The stored body, journal entries and event payloads hold no plaintext; a
sealed part swapped into another run, event or namespace fails to open; a
store without keys, or with other keys, refuses sealed parts with a typed
error; a sealing store refuses plaintext; a retired key still opens.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable

import pytest

from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.testing import DurableHarness
from tests.durable.stored_runs import PARTS, SECRET, replayed, ring, stored_event, stored_run

_SEALING = "checkpoint_sealing_invalid"


async def _refused(attempt: Awaitable[object], code: str | None = _SEALING) -> None:
    """``attempt`` raises DurableCorrupted (with ``code``, when one is named) quoting no data."""
    with pytest.raises(DurableCorrupted) as caught:
        await attempt
    assert code is None or caught.value.code == code, caught.value
    assert SECRET not in str(caught.value)


async def test_stored_parts_hold_no_plaintext(durable_harness: DurableHarness) -> None:
    read, _ = durable_harness.parts()
    keys = ring("k1")
    async with (
        durable_harness.store("acme", sealing=keys) as store,
        durable_harness.events("acme", sealing=keys) as events,
    ):
        written = await stored_run(store, "run-1")
        await stored_event(events, "ev-1", "run-1")
        for part in PARTS:
            raw = await read("acme", "ev-1" if part == "event" else "run-1", part)
            assert raw.startswith((b'[2,"', b'[[2,"')), raw[:8]
            for plaintext in (SECRET, "amount", "ledger-agent", "charge"):
                assert plaintext.encode() not in raw, (part, plaintext)
        loaded = await store.load("run-1")
        assert loaded is not None and loaded.shared_state == written.shared_state
        assert [e.event["note"] for e in await replayed(events, "run-1")] == [SECRET]


async def test_sealed_parts_swapped_between_runs_events_or_namespaces_fail(
    durable_harness: DurableHarness,
) -> None:
    read, write = durable_harness.parts()
    keys = ring("k1")
    async with (
        durable_harness.store("acme", sealing=keys) as acme,
        durable_harness.store("globex", sealing=keys) as globex,
        durable_harness.events("acme", sealing=keys) as events,
    ):
        for store in (acme, globex):
            for key in ("a", "b"):
                await stored_run(store, key)
        await stored_event(events, "ev-a", "a")
        await stored_event(events, "ev-b", "b")
        intact = await acme.load("a")
        await write("acme", "b", "body", await read("acme", "a", "body"))
        await write("globex", "a", "tool.0", await read("acme", "a", "tool.0"))
        await write("acme", "ev-b", "event", await read("acme", "ev-a", "event"))
        # the file store's own part digests may see a swap first: any refusal will do
        await _refused(acme.load("b"), None)
        await _refused(globex.load("a"), None)
        await _refused(replayed(events, "b"), None)
        assert await acme.load("a") == intact
        assert len(await replayed(events, "a")) == 1


async def test_sealed_parts_need_the_keys_and_plaintext_is_refused(
    durable_harness: DurableHarness,
) -> None:
    keys = ring("k1")
    async with (
        durable_harness.store(sealing=keys) as sealed,
        durable_harness.events(sealing=keys) as sealed_events,
        durable_harness.store() as plain,
        durable_harness.events() as plain_events,
        durable_harness.store(sealing=ring("k1")) as other_keys,
    ):
        await stored_run(sealed, "sealed")
        await stored_event(sealed_events, "ev-sealed", "sealed")
        await stored_run(plain, "plain")
        await stored_event(plain_events, "ev-plain", "plain")
        await _refused(plain.load("sealed"))
        await _refused(plain_events.replay("sealed"))
        await _refused(other_keys.load("sealed"))
        await _refused(sealed.load("plain"))
        await _refused(sealed_events.replay("plain"))


async def test_a_retired_key_still_opens_and_new_writes_use_the_current_one(
    durable_harness: DurableHarness,
) -> None:
    read, _ = durable_harness.parts()
    old, new = os.urandom(32), os.urandom(32)
    first = KeyRing({"k1": old}, current="k1")
    rotated = KeyRing({"k1": old, "k2": new}, current="k2", retired=("k1",))
    async with (
        durable_harness.store(sealing=first) as before,
        durable_harness.events(sealing=first) as events_before,
    ):
        written = await stored_run(before, "run-1")
        await stored_event(events_before, "ev-1", "run-1")
    async with (
        durable_harness.store(sealing=rotated) as after,
        durable_harness.events(sealing=rotated) as events_after,
        durable_harness.store(sealing=KeyRing({"k2": new}, current="k2")) as without_old,
    ):
        assert await after.load("run-1") == await before_reopened(durable_harness, first)
        assert [e.event_id for e in await replayed(events_after, "run-1")] == ["ev-1"]
        await _refused(without_old.load("run-1"))
        loaded = await after.load("run-1")
        assert loaded is not None
        body_before = await read(None, "run-1", "body")
        await after.progress(loaded, claim_token="owner#1")
        assert await read(None, "run-1", "body") != body_before
        assert (await without_old.load("run-1")) is not None  # resealed with k2
        assert written.shared_state == loaded.shared_state


async def before_reopened(harness: DurableHarness, keys: KeyRing) -> object:
    async with harness.store(sealing=keys) as store:
        return await store.load("run-1")
