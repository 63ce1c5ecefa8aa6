"""The integrity envelope: every stored record is checked before its codec sees it."""

from __future__ import annotations

import dataclasses
import random

import orjson
import pytest

from agentflow.checkpoint import Checkpoint, JsonCodec, MemoryCheckpointer, MemoryStore, RecordKey
from agentflow.checkpoint.envelope import ENVELOPE_VERSION, unwrap, wrap
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import CheckpointCorrupted

_KEY = RecordKey("acme", "run-1", 3)
_SECRET = "s3cr3t-value"


def _record(key: RecordKey = _KEY) -> bytes:
    state = {"amount": 100, "approved": False, "note": _SECRET, "log": ["x" * 40] * 80}
    cp = Checkpoint(thread=key.thread, step=key.step, state=state, ts="2026-01-01T00:00:00Z")
    return wrap(key, JsonCodec().encode(cp, key))


def _assert_names_key_but_no_data(exc: CheckpointCorrupted, key: RecordKey) -> None:
    message = str(exc)
    assert f"thread {key.thread!r} step {key.step}" in message
    assert _SECRET not in message and "amount" not in message


def test_the_stored_form_of_a_json_record_is_json() -> None:
    stored = _record()
    version, checksum, record = orjson.loads(stored)
    assert version == ENVELOPE_VERSION and len(checksum) == 16
    assert record["state"]["amount"] == 100
    assert unwrap(_KEY, stored) == orjson.dumps(record)


def test_every_single_bit_flip_of_a_record_is_detected() -> None:
    stored = _record()
    assert len(stored) > 3_000
    for bit in range(len(stored) * 8):
        damaged = bytearray(stored)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CheckpointCorrupted) as caught:
            unwrap(_KEY, bytes(damaged))
        if bit % 997 == 0:
            _assert_names_key_but_no_data(caught.value, _KEY)


@pytest.mark.parametrize(
    "other",
    [
        RecordKey("globex", "run-1", 3),
        RecordKey("", "run-1", 3),
        RecordKey("acme", "run-2", 3),
        RecordKey("acme", "run-1", 4),
        # The separators are part of the identity: no shift of text between fields collides.
        RecordKey("acm", "erun-1", 3),
        RecordKey("acme", "run-13", 3),
    ],
)
def test_a_record_read_as_another_key_is_refused(other: RecordKey) -> None:
    with pytest.raises(CheckpointCorrupted, match="integrity check") as caught:
        unwrap(other, _record())
    _assert_names_key_but_no_data(caught.value, other)


@pytest.mark.parametrize(
    "stored",
    [
        b"",
        b"[",
        b'[1,"',
        b'[2,"0000000000000000",{}]',
        b'{"v":2,"thread":"run-1"}',
        b"\xff{",
        "not bytes",
        None,
    ],
)
def test_what_is_no_record_is_refused(stored: object) -> None:
    with pytest.raises(CheckpointCorrupted, match=r"no format|not bytes") as caught:
        unwrap(_KEY, stored)
    _assert_names_key_but_no_data(caught.value, _KEY)


def test_targeted_edits_are_detected() -> None:
    stored = _record()
    for old, new in [
        (b'"amount":100', b'"amount":900'),
        (b'"approved":false', b'"approved":true'),
        (_SECRET.encode(), b"other-value!"),
    ]:
        assert old in stored
        with pytest.raises(CheckpointCorrupted, match="integrity check"):
            unwrap(_KEY, stored.replace(old, new))
    checksum = stored[4:20]
    forged = stored.replace(checksum, f"{(int(checksum, 16) + 1) % 2**64:016x}".encode())
    with pytest.raises(CheckpointCorrupted, match="integrity check"):
        unwrap(_KEY, forged)
    for cut in (stored[:-1], stored[:100], stored + b" ", stored[:-1] + b" ]"):
        with pytest.raises(CheckpointCorrupted):
            unwrap(_KEY, cut)


def test_bytes_like_payloads_are_read() -> None:
    stored = _record()
    assert unwrap(_KEY, bytearray(stored)) == unwrap(_KEY, memoryview(stored)) == stored[22:-1]


async def test_records_written_before_the_envelope_still_read() -> None:
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, namespace="acme") as cp:
        original = make_checkpoint("run-1", 3, state={"amount": 100}, ts="2026-01-01T00:00:00Z")
        await cp.put(original)
        stored = store.namespace("acme").threads["run-1"][3]
        legacy = JsonCodec().encode(original, _KEY)
        assert legacy.startswith(b'{"v":1,')
        stored.encoded = dataclasses.replace(stored.encoded, payload=legacy)
        assert await cp.get("run-1", 3) == dataclasses.replace(original, revision=1)
        # Put again: the record is now in the envelope.
        await cp.put(original)
        assert store.namespace("acme").threads["run-1"][3].encoded.payload.startswith(b'[1,"')


class _AnyBytes:
    """A codec that would accept any bytes at all: the envelope still guards it."""

    def encode(self, cp: Checkpoint, key: RecordKey) -> bytes:
        return b"record"

    def decode(self, payload: bytes, key: RecordKey, revision: int) -> Checkpoint:
        return Checkpoint(thread=key.thread, step=key.step, state={"got": payload.decode()})


async def test_no_codec_can_leave_the_check_out() -> None:
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, codec=_AnyBytes()) as cp:
        await cp.put(make_checkpoint("t", 0))
        stored = store.namespace("").threads["t"][0]
        assert stored.encoded.payload.startswith(b'[1,"') and b"record" in stored.encoded.payload
        assert (await cp.get("t")) is not None
        rng = random.Random(5)
        for _ in range(50):
            damaged = bytearray(stored.encoded.payload)
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
            original, stored.encoded = (
                stored.encoded,
                dataclasses.replace(stored.encoded, payload=bytes(damaged)),
            )
            with pytest.raises(CheckpointCorrupted):
                await cp.get("t")
            stored.encoded = original
