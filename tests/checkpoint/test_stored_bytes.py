"""The bytes a put stores, pinned: the encode path (codec, envelope, the chain records of
deltas) may get faster, never different, for the same checkpoint, in the same store
layout on every backend (here the memory store and a SQLite file, which share it)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from agentflow.checkpoint import Checkpoint, MemoryCheckpointer
from agentflow.checkpoint.model import StateChanges
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.stored import _stored_as
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointNotSerializable
from tests.backends.sqlite import execute

_TS = "2026-01-02T03:04:05.678901+00:00"
_TOKEN = 0x5EED
_GREETING = {"role": "user", "content": "hi"}
_BASE_STATE = {"messages": [_GREETING], "n": 0}
_NEXT_STATE = {"messages": [_GREETING, {"role": "assistant", "content": "héllo ✓"}], "n": 1}


def _checkpoints() -> list[Checkpoint]:
    """A plain step, a timer wait with every optional field, and a chain's two records."""
    return [
        Checkpoint(
            thread="plain",
            step=3,
            state={"x": 1.5, "none": None, "text": "null", "nested": {"list": [1, -2, 3e300]}},
            next=("a", "b"),
            parent="plain:2",
            ts=_TS,
        ),
        Checkpoint(
            thread="timer",
            step=7,
            state={},
            next=("wake",),
            ts=_TS,
            interrupted=True,
            interrupt_node="wait",
            interrupt_payload={"ask": ["x", None]},
            wake_at="2026-01-03T00:00:00+00:00",
            extra={"k": [1, 2.5]},
        ),
        Checkpoint(
            thread="chain",
            step=0,
            state=_BASE_STATE,
            next=("n",),
            ts=_TS,
            changes=StateChanges(_BASE_STATE, base=None, token=_TOKEN),
        ),
        Checkpoint(
            thread="chain",
            step=1,
            state=_NEXT_STATE,
            next=("n",),
            ts=_TS,
            changes=StateChanges(
                _NEXT_STATE, base=0, written=("n",), appended={"messages": 1}, token=_TOKEN
            ),
        ),
    ]


#: SHA-256 of each stored payload of :func:`_checkpoints`, by namespace.
_DIGESTS = {
    None: [
        "a768ff4f8abb17ea60382884fac69cf411399f4af20d71789160f22ad1f9511f",
        "0fbfd384320c079a3e56374cd6964cb370c41310c3c2666e3e193202a53c3844",
        "c765bce81f2d52af054bb85ccad4bbefb457cd8c019319e4712b5dbe477e0c22",
        "144c8ed2e47f46b98e4c5f32172d091e42eff650c43889f7c532fa5c3db453c5",
    ],
    "tenant": [
        "42e97a762c2c4bc66c4ff8cacfc4c792b859c460a38a8f273ad653d4d57ffebc",
        "06cb275af1f3843739d9e3b2520eb1b3a4ffd5decb48ec5e793c5757ad1b8ec6",
        "c1676af5b73d6297a8fd2e34afcdbdc173890522358fda16f2b1ca3a829c87c0",
        "7dc8b2a5c85421f92825154333a21c076be657ca03dca1aee6b5da8ae522af95",
    ],
}


async def _stored(store: MemoryCheckpointer | SqliteCheckpointer, path: Path | None) -> list[str]:
    for cp in _checkpoints():
        await store.put(cp)
    digests = []
    for cp in _checkpoints():
        if path is None:
            assert isinstance(store, MemoryCheckpointer)
            payload = store._data.threads[cp.thread][cp.step].encoded.payload
        else:
            (payload,) = execute(
                path,
                "SELECT payload FROM agentflow_checkpoints WHERE namespace = ? "
                "AND thread = ? AND step = ?",
                store._namespace,
                cp.thread,
                cp.step,
            )[0]
        digests.append(hashlib.sha256(payload).hexdigest())
    return digests


@pytest.mark.parametrize("namespace", [None, "tenant"])
async def test_a_put_stores_the_pinned_bytes(tmp_path: Path, namespace: str | None) -> None:
    memory = MemoryCheckpointer(namespace=namespace)
    in_memory = await _stored(memory, None)
    async with SqliteCheckpointer(tmp_path / "a.db", namespace=namespace) as sqlite:
        in_sqlite = await _stored(sqlite, tmp_path / "a.db")
    assert in_memory == in_sqlite == _DIGESTS[namespace]


async def test_a_put_without_ts_stores_what_a_put_at_its_stamped_ts_stores() -> None:
    """The store stamps ``ts`` without copying the checkpoint through ``dataclasses.replace``:
    every other field must still be stored as given."""
    stamped, explicit = MemoryCheckpointer(), MemoryCheckpointer()
    for cp in _checkpoints():
        unstamped = Checkpoint(
            thread=cp.thread,
            step=cp.step,
            state=cp.state,
            next=cp.next,
            parent=cp.parent,
            interrupted=cp.interrupted,
            interrupt_node=cp.interrupt_node,
            interrupt_payload=cp.interrupt_payload,
            wake_at=cp.wake_at,
            extra=cp.extra,
            changes=cp.changes,
        )
        await stamped.put(unstamped)
        got = await stamped.get(cp.thread, cp.step)
        assert got is not None and got.ts and got.ts != _TS
        await explicit.put(dataclasses.replace(cp, ts=got.ts))
        stored = stamped._data.threads[cp.thread][cp.step].encoded
        assert stored == explicit._data.threads[cp.thread][cp.step].encoded
        assert stored.ts == got.ts and stored.ts_us == parse_instant(got.ts)


def _refused() -> list[Checkpoint]:
    """Checkpoints holding a NaN or an infinity where a JSON null would stand, beside
    values that do encode as null (None, the text "null")."""
    base = Checkpoint(thread="nan", step=0, state={"ok": None, "s": "null"}, ts=_TS)
    grown = {**base.state, "items": [None, float("nan")]}
    return [
        dataclasses.replace(base, state={"deep": [{"x": (1, float("inf"))}]}),
        dataclasses.replace(base, interrupt_payload={"ask": float("-inf")}),
        dataclasses.replace(base, extra={"score": float("nan"), "none": None}),
        dataclasses.replace(
            base,
            step=1,
            state=grown,
            changes=StateChanges(grown, base=0, written=("items",), token=_TOKEN),
        ),
    ]


@pytest.mark.parametrize("case", range(len(_refused())))
async def test_nan_and_infinity_are_refused_and_nothing_is_stored(
    tmp_path: Path, case: int
) -> None:
    memory = MemoryCheckpointer()
    async with SqliteCheckpointer(tmp_path / "a.db") as sqlite:
        for store in (memory, sqlite):
            state = {"ok": None, "s": "null"}
            changes = StateChanges(state, base=None, token=_TOKEN)
            await store.put(Checkpoint(thread="nan", step=0, state=state, ts=_TS, changes=changes))
            bad = _refused()[case]
            with pytest.raises(CheckpointNotSerializable, match="NaN or infinity") as info:
                await store.put(bad)
            assert info.value.code == "checkpoint_not_serializable"
            kept = [cp async for cp in store.history("nan")]
            assert [cp.step for cp in kept] == [0] and kept[0].revision == 1


def test_the_checkpoint_a_codec_encodes_keeps_every_field() -> None:
    """The store builds the checkpoint it encodes field by field: one field left out
    would be stored as its default. A field added to Checkpoint fails this test until
    ``_stored_as`` copies it."""
    changes = StateChanges(_BASE_STATE, base=None, token=_TOKEN)
    given = {
        "thread": "t",
        "step": 4,
        "state": _BASE_STATE,
        "next": ("a",),
        "parent": "t:3",
        "ts": _TS,
        "interrupted": True,
        "interrupt_node": "ask",
        "interrupt_payload": {"q": 1},
        "wake_at": "2026-01-03T00:00:00+00:00",
        "extra": {"k": 1},
        "revision": 9,
        "changes": changes,
    }
    assert {field.name for field in dataclasses.fields(Checkpoint)} == set(given)
    cp = Checkpoint(**given)  # type: ignore[arg-type]
    doc = {"t": _TOKEN, "full": _BASE_STATE}
    built = _stored_as(cp, doc, None, "2026-02-01T00:00:00+00:00")
    assert {name: getattr(built, name) for name in given} == {
        **given,
        "state": doc,
        "changes": None,
        "ts": "2026-02-01T00:00:00+00:00",
    }
    kept = _stored_as(cp, cp.state, cp.changes)
    assert all(getattr(kept, name) is getattr(cp, name) for name in given)
