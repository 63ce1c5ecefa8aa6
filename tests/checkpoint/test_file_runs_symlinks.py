"""The file store's records and events never follow a symbolic link planted under its root.

As for the file checkpointer (tests/checkpoint/test_file_symlinks.py): each
case plants links, at one level of the durable layout, to a directory
outside the store holding copies of the store's own files; then every
method runs. Each call either works without the link or raises
CheckpointCorrupted saying so (never naming the place outside), and
afterwards nothing outside the root was read into a result, written,
created or deleted.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.file.names import key_path
from agentflow.durable import event_payload_digest
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import DurableConflict
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, take
from agentflow.errors import CheckpointCorrupted
from tests.checkpoint.test_file_symlinks import _every_stripe, _link, _snapshot

NAMESPACE = "acme"
RUN = key_path("run-1")[-1]
EVENT = {"type": "step", "run_id": "run-a"}


def _h(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _at(*parts: str) -> Callable[[Path, Path, Path], None]:
    """Plant a link at ``.durable/parts...`` to the same place in the copy outside."""
    return lambda root, base, outside: _link(
        base.joinpath(".durable", *parts), outside.joinpath("copy", ".durable", *parts)
    )


PLANTS: dict[str, Callable[[Path, Path, Path], None]] = {
    "durable directory": _at(),
    "layout file": _at("layout"),
    "runs directory": _at("runs"),
    "run directory": _at("runs", RUN),
    "head": _at("runs", RUN, "head"),
    "body": _at("runs", RUN, "body.0"),
    "journal entry": _at("runs", RUN, "t.0.2"),
    "head in the making": _at("runs", RUN, ".head.tmp"),
    "status directory": _at("status"),
    "status index": _at("status", "running"),
    "index entry": _at("status", "running", RUN),
    "trash": lambda root, base, outside: _link(base / ".trash", outside / "copy" / ".trash"),
    "event directory": _at("events"),
    "event ids": _at("events", "ids"),
    "accepted event": _at("events", "ids", _h("e1")),
    "sequences": _at("events", "seq"),
    "run's events": _at("events", "runs", _h("run-a")),
    "event of a run": _at("events", "runs", _h("run-a"), f"{1:016x}"),
    "append in the making": _at("events", ".append.tmp"),
    "lock stripes": _every_stripe,
}
#: Plants every method may ignore: names that are only ever replaced or removed.
IGNORED = {"head in the making", "append in the making", "index entry"}


async def _life(store: FileCheckpointer) -> None:
    record = await store.load("run-1")
    assert record is not None
    await store.renew_claim("run-1", claim_token="owner", lease_ms=LIVE_MS)
    record = await store.record_operation(
        record, make_tool_entry("run-1", 1, 2), claim_token="owner"
    )
    await store.progress(record, claim_token="owner")


#: Every call, on a store where run-1 is claimed by "owner" with one journal entry.
CALLS: list[Callable[[FileCheckpointer, FileCheckpointer], Awaitable[Any]]] = [
    lambda store, events: store.load("run-1"),
    lambda store, events: store.list_runs(),
    lambda store, events: store.list_runs(status=CheckpointStatus.RUNNING, limit=1),
    lambda store, events: store.create(make_record("fresh")),
    lambda store, events: take(store, "thief", mode=ClaimMode.RECOVERY),
    lambda store, events: _life(store),
    lambda store, events: store.delete("run-2"),
    lambda store, events: events.replay("run-a", include_children=True),
    lambda store, events: events.append_once("e1", event_payload_digest(EVENT), EVENT),
    lambda store, events: events.append_once("e2", event_payload_digest(EVENT), EVENT),
    lambda store, events: store.delete("run-1"),
]


async def _store(root: Path) -> None:
    async with FileCheckpointer(root, namespace=NAMESPACE) as store:
        events = store
        for key in ("run-1", "run-2", "run-3"):
            await store.create(make_record(key))
        record = await take(store, "owner")
        await store.record_operation(record, make_tool_entry("run-1", 1), claim_token="owner")
        await store.delete("run-3")  # leaves the trash directory
        await events.append_once("e1", event_payload_digest(EVENT), EVENT)


@pytest.mark.parametrize("plant", sorted(PLANTS))
async def test_a_planted_link_is_refused_and_nothing_outside_changes(
    tmp_path: Path, plant: str
) -> None:
    root = tmp_path / "store"
    base = root / ".ns" / NAMESPACE.encode().hex()
    outside = tmp_path / "outside"
    await _store(root)
    # Outside: a copy of the whole namespace, so every link leads to something readable.
    shutil.copytree(base, outside / "copy", symlinks=True)
    (outside / "copy" / ".durable" / "runs" / RUN / ".head.tmp").write_bytes(b"{}")
    (outside / "copy" / ".durable" / "events" / ".append.tmp").write_bytes(b"{}")
    PLANTS[plant](root, base, outside)
    before = _snapshot(outside)

    refused: list[int] = []
    async with FileCheckpointer(root, namespace=NAMESPACE) as store:
        events = store
        for number, call in enumerate(CALLS):
            try:
                await call(store, events)
            except DurableConflict:
                pass  # a refusal on the store's own terms (the live claim), not the link
            except CheckpointCorrupted as exc:
                refused.append(number)
                message = str(exc)
                assert str(outside) not in message and "outside" not in message, message
                assert "symbolic link" in message, message

    assert _snapshot(outside) == before, "something outside the root changed"
    if plant in IGNORED:
        assert refused == []
    else:
        assert refused, "no call noticed the link"
    assert (base / ".durable").is_symlink() == (plant == "durable directory")
