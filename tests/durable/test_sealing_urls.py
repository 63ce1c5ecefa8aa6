"""Records sealed by a store opened from a URL, and by the command line with its keys."""

from __future__ import annotations

import argparse
import json
import os
import uuid
from pathlib import Path

import pytest

from agentflow.checkpoint.sealing import KeyRing, new_key
from agentflow.checkpoint.stores import open_store
from agentflow.cli.keys import keyring_from_args
from agentflow.cli.session import StoreTarget, open_cli_store
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.testing.harness import make_record

SECRET = "s3cr3t-ledger-note"


def _urls(tmp_path: Path) -> list[str]:
    return [
        f"memory://sealed-{uuid.uuid4().hex}",
        f"sqlite:///{tmp_path}/durable.db",
        f"file://{tmp_path}/files",
    ]


async def _sealed_only(url: str, ring: KeyRing) -> None:
    """A record written through ``url`` with ``ring`` opens only with it."""
    record = make_record("run-1", shared_state={"note": SECRET})
    plain = open_store(url, namespace="acme", create=False)
    try:
        with pytest.raises(DurableCorrupted, match="no key ring") as caught:
            await plain.load("run-1")
        assert caught.value.code == "checkpoint_sealing_invalid"
    finally:
        await plain.close()
    sealed = open_store(url, namespace="acme", create=False, sealing=ring)
    try:
        assert await sealed.load("run-1") == record
    finally:
        await sealed.close()


async def test_open_store_seals_records_with_the_ring_it_is_given(tmp_path: Path) -> None:
    ring = KeyRing({"k1": os.urandom(32)}, current="k1")
    for url in _urls(tmp_path):
        store = open_store(url, namespace="acme", sealing=ring)
        try:
            await store.create(make_record("run-1", shared_state={"note": SECRET}))
        finally:
            await store.close()
        await _sealed_only(url, ring)


async def test_the_command_lines_records_are_sealed_with_its_keys(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"current": "k1", "keys": {"k1": new_key()}, "retired": []}))
    keys.chmod(0o600)
    url = f"sqlite:///{tmp_path}/cli.db"
    args = argparse.Namespace(keys_file=str(keys))
    store = open_cli_store(StoreTarget(url, "acme"), create=True, sealing=keyring_from_args(args))
    try:
        await store.create(make_record("run-1", shared_state={"note": SECRET}))
    finally:
        await store.close()
    ring = KeyRing.from_source(keys.read_text)
    await _sealed_only(url, ring)
