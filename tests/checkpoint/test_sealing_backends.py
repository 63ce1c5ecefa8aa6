"""Sealing on every backend: records open only as themselves, in their own store."""

from __future__ import annotations

import importlib
import random
from pathlib import Path

import pytest

from agentflow.checkpoint.sealing import KeyRing, SealedCodec, new_key
from agentflow.checkpoint.testing import BackendHarness, make_checkpoint
from agentflow.errors import CheckpointCorrupted

_RING = KeyRing.from_source(lambda: {"current": "k1", "keys": {"k1": new_key()}})
_STATE = {"amount": 100, "approved": False, "card": "4111-1111-1111-1111"}


def _codec() -> SealedCodec:
    return SealedCodec(_RING)


async def test_sealed_records_round_trip_and_store_no_plaintext(harness: BackendHarness) -> None:
    assert harness.read_payload is not None
    async with harness.open(namespace="acme", codec=_codec()) as cp:
        for step in range(3):
            await cp.put(make_checkpoint("pay", step, state=_STATE, next=("charge",)))
        latest = await cp.get("pay")
        assert latest is not None and latest.state == _STATE and latest.step == 2
        assert [c.step async for c in cp.history("pay")] == [0, 1, 2]
        assert [i.thread for i in await cp.list_threads()] == ["pay"]
        raw = await harness.read_payload("acme", "pay", 1)
        assert b"4111" not in raw and b"amount" not in raw and b"charge" not in raw
    async with harness.open(namespace="acme") as plain:
        with pytest.raises(CheckpointCorrupted):
            await plain.get("pay")  # the JSON codec cannot read a sealed record


async def test_a_sealed_record_moved_within_the_store_does_not_open(
    harness: BackendHarness,
) -> None:
    read, write = harness.read_payload, harness.write_payload
    assert read is not None and write is not None
    async with (
        harness.open(namespace="acme", codec=_codec()) as acme,
        harness.open(namespace="globex", codec=_codec()) as globex,
    ):
        for cp in (acme, globex):
            for thread, step in (("a", 0), ("a", 1), ("b", 0)):
                await cp.put(make_checkpoint(thread, step, state=_STATE))
        await write("acme", "a", 0, await read("acme", "a", 1))
        await write("acme", "b", 0, await read("acme", "a", 0))
        await write("globex", "a", 1, await read("acme", "a", 1))
        for cp, thread, step in ((acme, "a", 0), (acme, "b", 0), (globex, "a", 1)):
            with pytest.raises(CheckpointCorrupted) as caught:
                await cp.get(thread, step)
            assert "4111" not in str(caught.value)


async def test_a_sealed_record_replayed_into_another_store_does_not_open(
    harness: BackendHarness, tmp_path: Path
) -> None:
    """Same backend, namespace, thread and step, so the integrity check holds:
    only the store's identity in the sealing tells the two stores apart."""
    module = importlib.import_module(f"tests.backends.{harness.name}")
    (tmp_path / "replica").mkdir()
    async with module.harness(tmp_path / "replica") as replica:
        assert isinstance(replica, BackendHarness)
        read, write = harness.read_payload, replica.write_payload
        assert read is not None and write is not None
        async with harness.open(codec=_codec()) as first, replica.open(codec=_codec()) as second:
            await first.put(make_checkpoint("t", 0, state=_STATE))
            await second.put(make_checkpoint("t", 0, state={"amount": 1}))
            await write(None, "t", 0, await read(None, "t", 0))
            with pytest.raises(CheckpointCorrupted, match="does not open"):
                await second.get("t", 0)
            original = await first.get("t", 0)
            assert original is not None and original.state == _STATE


async def test_bit_flips_in_sealed_records_are_detected(harness: BackendHarness) -> None:
    read, write = harness.read_payload, harness.write_payload
    assert read is not None and write is not None
    async with harness.open(codec=_codec()) as cp:
        await cp.put(make_checkpoint("t", 0, state=_STATE))
        expected = await cp.get("t", 0)
        raw = await read(None, "t", 0)
        rng = random.Random(11)
        for _ in range(200):
            bit = rng.randrange(len(raw) * 8)
            damaged = bytearray(raw)
            damaged[bit // 8] ^= 1 << (bit % 8)
            await write(None, "t", 0, bytes(damaged))
            try:
                got = await cp.get("t", 0)
            except CheckpointCorrupted:
                continue
            # Only framing a store keeps around the record may change without a
            # refusal, and then it must read back exactly the same.
            assert got == expected, f"flip of bit {bit} read back as other data"
        await write(None, "t", 0, raw)
        assert await cp.get("t", 0) == expected
