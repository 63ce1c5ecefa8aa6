"""Damage made directly in each durable backend is detected on read, never returned as data.

Random single-bit flips of a stored body, journal entry and event payload
(checked, and sealed), and targeted edits inside string values (which
canonical JSON alone would decode as other data), written with the harness's
raw part hooks. A flip either raises :class:`DurableCorrupted` or, where it
lands in framing a store keeps around the part (a SQLite journal column is a
JSON array), reads back as exactly the same record or events, compared whole.

``AGENTFLOW_DURABLE_FLIPS`` sets the flips per part (24 by default; 1,000
for the full run); ``AGENTFLOW_DURABLE_FLIP_SEED`` picks other positions.
"""

from __future__ import annotations

import os
import random

import pytest

from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable import DurableStore
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.testing import DurableHarness
from tests.durable.stored_runs import PARTS, SECRET, replayed, ring, stored_event, stored_run

FLIPS = int(os.environ.get("AGENTFLOW_DURABLE_FLIPS", "24"))
SEED = int(os.environ.get("AGENTFLOW_DURABLE_FLIP_SEED", "20261201"))


async def refused(store: DurableStore, key: str) -> None:
    with pytest.raises(DurableCorrupted) as caught:
        await store.load(key)
    message = str(caught.value)
    assert repr(key) in message, message
    assert SECRET not in message and "amount" not in message, message


@pytest.mark.parametrize("sealed", [False, True], ids=["checked", "sealed"])
@pytest.mark.parametrize("part", PARTS)
async def test_random_bit_flips_are_detected(
    durable_harness: DurableHarness, part: str, sealed: bool
) -> None:
    read, write = durable_harness.parts()
    sealing: KeyRing | None = ring("k1") if sealed else None
    key = "ev-1" if part == "event" else "flips"
    async with (
        durable_harness.store("acme", sealing=sealing) as store,
        durable_harness.events("acme", sealing=sealing) as events,
    ):
        await stored_run(store, "flips")
        await stored_event(events, "ev-1", "flips")

        async def current() -> object:
            return await replayed(events, "flips") if part == "event" else await store.load(key)

        expected = await current()
        raw = await read("acme", key, part)
        rng = random.Random(f"{SEED}/{part}/{sealed}")
        identical = 0
        for _ in range(FLIPS):
            bit = rng.randrange(len(raw) * 8)
            damaged = bytearray(raw)
            damaged[bit // 8] ^= 1 << (bit % 8)
            await write("acme", key, part, bytes(damaged))
            try:
                got = await current()
            except DurableCorrupted as exc:
                assert SECRET not in str(exc)
                continue
            assert got == expected, f"seed {SEED}: flip of bit {bit} of {part} read as other data"
            identical += 1
        assert identical < FLIPS, "no flip was detected: the hooks reach no stored part"
        await write("acme", key, part, raw)
        assert await current() == expected


@pytest.mark.parametrize(
    ("part", "old", "new"),
    [
        ("body", b"s3cr3t", b"s3cr4t"),
        ("body", b'"amount":100', b'"amount":900'),
        ("body", b'"approved":false', b'"approved":true'),
        ("tool.0", b'"memo":"s3cr3t', b'"memo":"s3cr4t'),
    ],
    ids=["string", "amount", "approved", "entry-string"],
)
async def test_targeted_edits_are_detected(
    durable_harness: DurableHarness, part: str, old: bytes, new: bytes
) -> None:
    read, write = durable_harness.parts()
    async with durable_harness.store() as store:
        await stored_run(store, "edits")
        raw = await read(None, "edits", part)
        assert raw.count(old) == 1, raw
        await write(None, "edits", part, raw.replace(old, new))
        await refused(store, "edits")


async def test_an_edited_event_payload_is_detected(durable_harness: DurableHarness) -> None:
    read, write = durable_harness.parts()
    async with durable_harness.events() as events:
        await stored_event(events, "ev-1", "run-1")
        raw = await read(None, "ev-1", "event")
        await write(None, "ev-1", "event", raw.replace(b'"amount":100', b'"amount":900'))
        with pytest.raises(DurableCorrupted, match="ev-1"):
            await replayed(events, "run-1")


async def test_parts_copied_to_another_run_or_namespace_are_detected(
    durable_harness: DurableHarness,
) -> None:
    read, write = durable_harness.parts()
    async with durable_harness.store("acme") as acme, durable_harness.store("globex") as globex:
        for store in (acme, globex):
            for key in ("a", "b"):
                await stored_run(store, key)
        intact = await globex.load("b")
        await write("acme", "b", "body", await read("acme", "a", "body"))
        await write("globex", "a", "tool.0", await read("acme", "a", "tool.0"))
        await refused(acme, "b")
        await refused(globex, "a")
        assert await globex.load("b") == intact
