"""One run's directory in the file store, given its descriptor.

Writers hold the run's lock. A write creates its new part files (names no
head has named yet, so no reader can be reading them), fsyncs them, writes
the new head to ``.head.tmp``, fsyncs it and renames it over ``head``: the
one atomic step that commits. Then the directory is fsynced and the parts
the new head no longer names are removed. Readers take no lock: they read
the head, then the parts it names; a part removed under them means a
writer committed meanwhile, and they read again (see :class:`PartMissing`).

The directory's operations are made durable by one fsync after the rename,
which relies on the file system persisting one directory's operations in
order (ext4, xfs and btrfs journal them so), as the file checkpointer does
for its step and head.
"""

from __future__ import annotations

import os
import re
from typing import Final

from agentflow.checkpoint.file.fs import read_file, unlink, write_new
from agentflow.checkpoint.file.heads import StoredHead, decode_head, digest, encode_head
from agentflow.checkpoint.file.index import Modes
from agentflow.checkpoint.rows import RunRow
from agentflow.durable.enums import OperationKind
from agentflow.durable.errors import DurableCorrupted

__all__ = ["HEAD", "PartMissing", "check_body", "commit", "read_head", "read_row", "sweep"]

HEAD: Final = "head"
_HEAD_TEMP: Final = ".head.tmp"
#: The names a run directory may hold besides ``head``: parts, and a head in the making.
_OURS: Final = re.compile(r"body\.[0-9]+|[mt]\.[0-9]+\.[0-9]+|\.head\.tmp")


class PartMissing(Exception):
    """A part the head names is gone: a writer replaced it, unless the head did not move."""


def read_head(run: int, key: str) -> StoredHead | None:
    """The run's head, or None when it has none (it is being created, or never was)."""
    found = read_file(run, HEAD, f"the head of run {key!r}")
    return None if found is None else decode_head(key, found[0])


def _damaged(key: str, what: str) -> DurableCorrupted:
    return DurableCorrupted("checkpoint_row_invalid", f"stored record {key!r} {what}")


def _part(run: int, key: str, name: str, expected: str, locked: bool) -> bytes:
    found = read_file(run, name, f"a stored part of run {key!r}")
    if found is None:
        if locked:  # no writer can have replaced it
            raise _damaged(key, f"has lost {name}")
        raise PartMissing(name)
    if digest(found[0]) != expected:
        raise _damaged(key, f"is damaged: {name} fails its digest")
    return found[0]


def read_row(run: int, stored: StoredHead, *, locked: bool) -> RunRow:
    """The row ``stored`` names, each part checked against its digest. A part
    gone is :class:`PartMissing`, or corruption when read under the run's lock."""
    key = stored.key
    journals = {
        kind: tuple(
            _part(run, key, name, part.digest, locked)
            for name, part in zip(stored.entry_names(kind), stored.journal(kind), strict=True)
        )
        for kind in OperationKind
    }
    body = _part(run, key, stored.body_name(), stored.body.digest, locked)
    return RunRow(
        key, stored.head, body, journals[OperationKind.MODEL], journals[OperationKind.TOOL]
    )


def check_body(run: int, stored: StoredHead) -> None:
    """Refuse to write over a head whose body is gone (the write would keep it)."""
    try:
        os.stat(stored.body_name(), dir_fd=run, follow_symlinks=False)
    except FileNotFoundError:
        raise _damaged(stored.key, "has lost its body") from None


def commit(
    run: int, old: StoredHead | None, new: StoredHead, files: dict[str, bytes], modes: Modes
) -> None:
    """Commit ``new`` with its new part ``files``; then drop the parts it no longer names."""
    what = f"a stored part of run {new.key!r}"
    for name, data in files.items():
        write_new(run, name, (data,), what, modes.file)
    write_new(run, _HEAD_TEMP, (encode_head(new),), f"the head of run {new.key!r}", modes.file)
    os.replace(_HEAD_TEMP, HEAD, src_dir_fd=run, dst_dir_fd=run)
    os.fsync(run)
    if old is not None:
        kept = new.files()
        for name in old.files():
            if name not in kept:
                unlink(run, name)


def sweep(run: int, stored: StoredHead) -> None:
    """Remove the parts a killed writer left that no head names (under the run's lock)."""
    named = stored.files()
    for name in os.listdir(run):
        if name not in named and _OURS.fullmatch(name):
            unlink(run, name)
