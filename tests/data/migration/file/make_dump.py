# mypy: ignore-errors
# (this script imports the modules of commit aeb9750, which today's tree no longer has)
"""Writes ``v2.tar``: a file store in the layout agentflow had before one store per database.

That layout is checkpoint layout 2 (``<base>/.layout`` = ``2``: the status and
due indexes of the steps) plus durable layout 1 (``<base>/.durable/layout`` =
``1``: runs, their status index and the event log), as commit aeb9750 writes
them. This script runs ONLY against that commit's code, from a scratch worktree::

    git worktree add /tmp/hfile/old aeb9750
    cd /tmp/hfile/old && PYTHONPATH=src:. /work/main/.venv/bin/python \
        /work/main/tests/data/migration/file/make_dump.py

It stores, in the default namespace and, sealed with the key ring of
``keys.json``, in namespace ``sealed``: a run paused on a human interrupt
(``approval`` graph), a run waiting for reconciliation after a lost payment
reply (``lost-reply`` graph), and two accepted events per namespace. The store
directory is archived as it is on disk (hard links, modes, the cursor secret
the sealed checkpoints are bound to), with owners and times zeroed; the
migration test (tests/checkpoint/test_file_migration.py) extracts it and opens
it with today's store.
"""

from __future__ import annotations

import asyncio
import sys
import tarfile
import tempfile
from pathlib import Path

from agentflow.durable.stores.file import FileDurableStore
from agentflow.durable.stores.file_events import FileRunEventStore
from tests.runtime.graphs import approval_graph, lost_reply_graph

from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.sealing import KeyRing, SealedCodec
from agentflow.durable import event_payload_digest

HERE = Path(__file__).parent


async def _runs(root: Path, namespace: str | None, ring: KeyRing | None, suffix: str) -> None:
    codec = None if ring is None else SealedCodec(ring)
    async with (
        FileCheckpointer(root, namespace=namespace, codec=codec) as checkpointer,
        FileDurableStore(root, namespace=namespace, sealing=ring) as durable,
        FileRunEventStore(root, namespace=namespace, sealing=ring) as events,
    ):
        paused = (
            await approval_graph()
            .compile(checkpointer, durable=durable)
            .run({"log": []}, thread=f"approve{suffix}")
        )
        assert paused.status == "interrupted", paused.status
        ledger = str(root.parent / f"ledger{suffix}.txt")
        lost = (
            await lost_reply_graph()
            .compile(checkpointer, durable=durable)
            .run({"ledger": ledger}, thread=f"pay{suffix}")
        )
        assert lost.status == "reconciliation_required", lost.status
        for index, thread in enumerate((f"approve{suffix}", f"pay{suffix}")):
            event = {"type": "note", "run_id": thread, "n": index}
            await events.append_once(f"evt{suffix}-{index}", event_payload_digest(event), event)


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


async def main() -> None:
    ring = KeyRing.from_source((HERE / "keys.json").read_bytes)  # git keeps no mode 0600
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "store"
        await _runs(root, None, None, "-1")
        await _runs(root, "sealed", ring, "-s")
        sealed = root / ".ns" / b"sealed".hex()
        for base in (root, sealed):
            layouts = [(base / name).read_text() for name in (".layout", ".durable/layout")]
            assert layouts == ["2\n", "1\n"], layouts
        with tarfile.open(HERE / "v2.tar", "w", format=tarfile.PAX_FORMAT) as archive:
            for path in sorted(root.rglob("*")):
                archive.add(path, str(path.relative_to(root)), recursive=False, filter=_plain)
    print(f"wrote {HERE / 'v2.tar'}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
