"""The sealing codec: what it binds a record to, and what it refuses."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from pathlib import Path

import orjson
import pytest

from agentflow.checkpoint import Checkpoint, JsonCodec, MemoryCheckpointer, MemoryStore, RecordKey
from agentflow.checkpoint.envelope import unwrap, wrap
from agentflow.checkpoint.sealing import (
    SEALED_VERSION,
    KeyRing,
    SealedCodec,
    Sealer,
    checkpoint_context,
    is_sealed,
    new_key,
    record_context,
)
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import CheckpointCorrupted, InvalidArgument

KEYS = {"k1": new_key(), "k2": new_key()}


def ring(current: str = "k2", retired: list[str] | None = None, **keys: str) -> KeyRing:
    spec = {"current": current, "keys": keys or KEYS, "retired": retired or []}
    return KeyRing.from_source(lambda: spec)


def _state() -> dict[str, object]:
    return {"amount": 100, "approved": False, "card": "4111-1111-1111-1111"}


def _stored(store: MemoryStore, namespace: str, thread: str, step: int) -> bytes:
    return store.namespace(namespace).threads[thread][step].encoded.payload


def _replace(store: MemoryStore, namespace: str, thread: str, step: int, data: bytes) -> None:
    stored = store.namespace(namespace).threads[thread][step]
    stored.encoded = dataclasses.replace(stored.encoded, payload=data)


async def test_a_sealed_record_round_trips_and_stores_no_plaintext() -> None:
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, codec=SealedCodec(ring())) as cp:
        original = make_checkpoint("pay", 0, state=_state(), next=("charge",))
        await cp.put(original)
        got = await cp.get("pay")
        assert got is not None and got.state == _state() and got.next == ("charge",)
    raw = _stored(store, "", "pay", 0)
    assert raw.startswith(b'[1,"')  # the integrity envelope around the sealed record
    for visible in (b"4111", b"amount", b"charge", b"pay"):
        assert visible not in raw
    sealed = unwrap(RecordKey("", "pay", 0), raw)
    assert is_sealed(sealed) and sealed[1] == SEALED_VERSION and sealed[3:5] == b"k2"


async def test_every_write_uses_a_fresh_nonce() -> None:
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, codec=SealedCodec(ring())) as cp:
        await cp.put(make_checkpoint("t", 0))
        first = _stored(store, "", "t", 0)
        await cp.put(make_checkpoint("t", 0))
        assert _stored(store, "", "t", 0) != first


async def test_a_record_moved_to_another_thread_step_or_tenant_does_not_open() -> None:
    store = MemoryStore()
    keys = ring()
    async with (
        MemoryCheckpointer(store=store, namespace="acme", codec=SealedCodec(keys)) as acme,
        MemoryCheckpointer(store=store, namespace="globex", codec=SealedCodec(keys)) as globex,
    ):
        for cp in (acme, globex):
            for thread, step in (("a", 0), ("a", 1), ("b", 0)):
                await cp.put(make_checkpoint(thread, step, state=_state()))
        targets = [
            (("acme", "a", 1), ("acme", "a", 0), acme),  # another step
            (("acme", "a", 0), ("acme", "b", 0), acme),  # another thread
            (("acme", "b", 0), ("globex", "b", 0), globex),  # another tenant
        ]
        for (src_ns, src_t, src_s), (ns, thread, step), cp in targets:
            # Re-wrapped with a valid checksum for the new key, as a forger who knows
            # the envelope would: only the sealing stands in the way.
            sealed = unwrap(RecordKey(src_ns, src_t, src_s), _stored(store, src_ns, src_t, src_s))
            _replace(store, ns, thread, step, wrap(RecordKey(ns, thread, step), sealed))
            with pytest.raises(CheckpointCorrupted, match="does not open") as caught:
                await cp.get(thread, step)
            assert f"thread {thread!r} step {step}" in str(caught.value)
            assert "4111" not in str(caught.value)


async def test_a_record_replayed_into_another_store_does_not_open(tmp_path: Path) -> None:
    keys = ring()
    async with (
        SqliteCheckpointer(tmp_path / "a.db", codec=SealedCodec(keys)) as first,
        SqliteCheckpointer(tmp_path / "b.db", codec=SealedCodec(keys)) as second,
    ):
        await first.put(make_checkpoint("t", 0, state=_state()))
        await second.put(make_checkpoint("t", 0, state={"amount": 1}))
    with sqlite3.connect(tmp_path / "a.db") as a, sqlite3.connect(tmp_path / "b.db") as b:
        (payload,) = a.execute("SELECT payload FROM agentflow_checkpoints").fetchone()
        b.execute("UPDATE agentflow_checkpoints SET payload = ?", (payload,))
    a.close()
    b.close()
    async with SqliteCheckpointer(tmp_path / "b.db", codec=SealedCodec(keys)) as second:
        with pytest.raises(CheckpointCorrupted, match="does not open"):
            await second.get("t")
    async with SqliteCheckpointer(tmp_path / "a.db", codec=SealedCodec(keys)) as first:
        intact = await first.get("t")
        assert intact is not None and intact.state == _state()


def _edited(sealed: bytes, at: int, value: int) -> bytes:
    damaged = bytearray(sealed)
    damaged[at] = value
    return bytes(damaged)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: _edited(s, 4, ord("1")), "does not open"),  # key id k2 -> k1, a held key
        (lambda s: _edited(s, 4, ord("9")), "which the key ring does not hold"),
        (lambda s: _edited(s, 1, 2), "newer format"),
        (lambda s: _edited(s, 2, 200), "key id is damaged"),
        (lambda s: _edited(s, 2, 0), "key id is damaged"),
        (lambda s: s[:20], "cut short"),
        (lambda s: s[:4], "cut short"),
        (lambda s: s[:40], "does not open"),
        (lambda s: _edited(s, len(s) - 1, s[-1] ^ 1), "does not open"),
        (lambda s: _edited(s, 10, s[10] ^ 1), "does not open"),
    ],
    ids=[
        "key-id-swapped",
        "key-id-unknown",
        "version",
        "key-id-length",
        "key-id-empty",
        "cut",
        "header-only",
        "cut-in-body",
        "tag",
        "nonce",
    ],
)
async def test_a_changed_header_key_id_or_body_does_not_open(edit: object, match: str) -> None:
    assert callable(edit)
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, codec=SealedCodec(ring())) as cp:
        await cp.put(make_checkpoint("t", 0, state=_state()))
        key = RecordKey("", "t", 0)
        _replace(store, "", "t", 0, wrap(key, edit(unwrap(key, _stored(store, "", "t", 0)))))
        with pytest.raises(CheckpointCorrupted, match=match):
            await cp.get("t")


async def test_plaintext_is_refused_when_sealing_is_configured() -> None:
    store = MemoryStore()
    async with MemoryCheckpointer(store=store) as plain:
        await plain.put(make_checkpoint("t", 0, state=_state()))  # enveloped plaintext
        await plain.put(make_checkpoint("t", 1, state=_state()))
    legacy = JsonCodec().encode(
        make_checkpoint("t", 1, state=_state(), ts="2026-01-01T00:00:00Z"), RecordKey("", "t", 1)
    )
    _replace(store, "", "t", 1, legacy)  # and a record from before the envelope
    async with MemoryCheckpointer(store=store, codec=SealedCodec(ring())) as sealed:
        for step in (0, 1):
            with pytest.raises(CheckpointCorrupted, match="refuses plaintext") as caught:
                await sealed.get("t", step)
            assert "4111" not in str(caught.value)
        with pytest.raises(CheckpointCorrupted, match="refuses plaintext"):
            [c async for c in sealed.history("t")]
    migrating = SealedCodec(ring(), accept_plaintext=True)
    async with MemoryCheckpointer(store=store, codec=migrating) as cp:
        assert [c.state for c in [c async for c in cp.history("t")]] == [_state(), _state()]


async def test_older_keys_read_new_writes_use_the_current_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, codec=SealedCodec(ring("k1"))) as old:
        await old.put(make_checkpoint("t", 0, state=_state()))
        await old.put(make_checkpoint("t", 1, state=_state()))
    opened: list[tuple[int, str | None]] = []
    codec = SealedCodec(
        ring("k2", retired=["k1"]), on_open=lambda key, key_id: opened.append((key.step, key_id))
    )
    with caplog.at_level(logging.WARNING, logger="agentflow.sealing"):
        async with MemoryCheckpointer(store=store, codec=codec) as cp:
            await cp.put(make_checkpoint("t", 2, state=_state()))
            assert [c.step async for c in cp.history("t")] == [0, 1, 2]
    assert opened == [(0, "k1"), (1, "k1"), (2, "k2")]
    warnings = [r for r in caplog.records if "retired sealing key 'k1'" in r.getMessage()]
    assert len(warnings) == 1  # once per key per ring, not per record
    assert unwrap(RecordKey("", "t", 2), _stored(store, "", "t", 2))[3:5] == b"k2"


async def test_a_key_removed_from_the_ring_no_longer_opens() -> None:
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, codec=SealedCodec(ring("k1"))) as old:
        await old.put(make_checkpoint("t", 0))
    only_k2 = ring("k2", k2=KEYS["k2"])
    async with MemoryCheckpointer(store=store, codec=SealedCodec(only_k2)) as cp:
        with pytest.raises(CheckpointCorrupted, match="key id 'k1', which the key ring"):
            await cp.get("t")


async def test_the_same_key_under_another_id_does_not_open() -> None:
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, codec=SealedCodec(ring("k1"))) as old:
        await old.put(make_checkpoint("t", 0))
    renamed = ring("k9", k9=KEYS["k1"])
    key = RecordKey("", "t", 0)
    sealed = unwrap(key, _stored(store, "", "t", 0))
    _replace(store, "", "t", 0, wrap(key, sealed[:3] + b"k9" + sealed[5:]))
    async with MemoryCheckpointer(store=store, codec=SealedCodec(renamed)) as cp:
        with pytest.raises(CheckpointCorrupted, match="does not open"):
            await cp.get("t")


def test_the_codec_checks_what_it_is_given() -> None:
    with pytest.raises(InvalidArgument, match="needs a KeyRing"):
        SealedCodec({"k": new_key()})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="inner must be a codec"):
        SealedCodec(ring(), inner="json")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="must not be a sealing codec"):
        SealedCodec(ring(), inner=SealedCodec(ring()))


class _Upper:
    """Another inner codec: sealing works over any codec's bytes."""

    def encode(self, cp: Checkpoint, key: RecordKey) -> bytes:
        return orjson.dumps({"n": cp.state["n"]}).upper()

    def decode(self, payload: bytes, key: RecordKey, revision: int) -> Checkpoint:
        n = orjson.loads(payload.lower())["n"]
        return Checkpoint(thread=key.thread, step=key.step, state={"n": n}, revision=revision)


async def test_any_inner_codec_can_be_sealed() -> None:
    async with MemoryCheckpointer(codec=SealedCodec(ring(), inner=_Upper())) as cp:
        await cp.put(make_checkpoint("t", 0, state={"n": 5}))
        got = await cp.get("t")
        assert got is not None and got.state == {"n": 5} and got.revision == 1


def test_a_sealer_seals_any_record_bound_to_its_context() -> None:
    sealer = Sealer(ring())
    context = record_context("durable-run", b"\x01" * 16, "acme", "run-7", 3)
    sealed = sealer.seal(b"body", context)
    opened = sealer.open(sealed, context, "run 'run-7'")
    assert (opened.plaintext, opened.key_id) == (b"body", "k2")
    for other in (
        record_context("durable-run", b"\x01" * 16, "acme", "run-7", 4),
        record_context("durable-event", b"\x01" * 16, "acme", "run-7", 3),
        record_context("durable-run", b"\x02" * 16, "acme", "run-7", 3),
        record_context("durable-run", b"\x01" * 16, "acme", "run-", "73"),
    ):
        with pytest.raises(CheckpointCorrupted, match="run 'run-7': the sealed record"):
            sealer.open(sealed, other, "run 'run-7'")


def test_the_checkpoint_context_is_the_general_one() -> None:
    for key in (RecordKey("", "t", 0), RecordKey("acme", "é/thread", 2**63 - 1, b"\x00" * 16)):
        general = record_context("checkpoint", key.store, key.namespace, key.thread, key.step)
        assert checkpoint_context(key) == general
