"""The one layout version of a file store namespace: checkpoints, records and events.

```
<base>/.layout           "3": every part of the namespace is in layout 3
<base>/.durable/layout   the same file (a hard link): the fence of older releases
```

Layout 3 is the step files, heads and indexes of checkpoint layout 2, in
which a thread's status marker (``.status/``) is its record's status where
the record imposes one (``reconciliation_required``, ``failed``); the runs
and events of durable layout 1, unchanged; and one lock per thread, which
its record shares. Before it, ``.layout`` said ``2`` for the checkpoints and
``.durable/layout`` said ``1`` for the rest, each written by its own store.

Moving a namespace to layout 3 (the store's ``_migrate``) puts each thread's
status marker where its record says, under the thread's lock, and then
writes ``.layout``; a namespace without ``.layout`` (written before the
indexes existed, or whose operator deleted the file to rebuild them) has its
heads dropped and its indexes rebuilt first. Processes migrating at once do
the same idempotent work. Releases before layout 3 read a version above
theirs in either file as ``IncompatibleSchema``, so ``.durable/layout`` is
made a second name of ``.layout``: no older process writes a record here
under locks this one does not take. Stop older writers before upgrading, as
for any migration: one writing during it may leave a marker stale, which
listings then find and remove.
"""

from __future__ import annotations

import os
import secrets
from typing import Final

from agentflow.checkpoint.file.fs import link_replace, read_file, unlink, write_new
from agentflow.checkpoint.file.index import Modes
from agentflow.errors import CheckpointCorrupted, IncompatibleSchema

__all__ = ["DURABLE", "LAYOUT_VERSION", "mark", "pending"]

LAYOUT_VERSION: Final = 3
#: The directory of the records and events inside a namespace's directory.
DURABLE: Final = ".durable"
_LAYOUT: Final = ".layout"
_FENCE: Final = "layout"
#: The versions each file held before layout 3 (and after: the fence is layout 3).
_BEFORE: Final = {_LAYOUT: (2, LAYOUT_VERSION), _FENCE: (1, LAYOUT_VERSION)}


def _version(directory: int, name: str, root: str) -> int | None:
    what = "the store's layout file"
    found = read_file(directory, name, what, 64)
    if found is None:
        return None
    text = found[0].strip()
    if not text.isascii() or not text.isdigit():
        raise CheckpointCorrupted(f"{what} is damaged")
    version = int(text)
    if version > LAYOUT_VERSION:
        raise IncompatibleSchema(
            f"file store {root} has layout {version}; this agentflow reads up to "
            f"{LAYOUT_VERSION}: upgrade agentflow"
        )
    if version not in _BEFORE[name]:
        raise CheckpointCorrupted(f"{what} is damaged")
    return version


def pending(base: int, durable: int | None, root: str) -> bool | None:
    """None when the namespace ``base`` (``durable``: its ``.durable``) is in layout 3;
    else whether moving it there rebuilds its step indexes (it has no ``.layout``).
    A newer layout raises :class:`~agentflow.errors.IncompatibleSchema`, a
    damaged file :class:`~agentflow.errors.CheckpointCorrupted`."""
    steps = _version(base, _LAYOUT, root)
    records = None if durable is None else _version(durable, _FENCE, root)
    if steps == LAYOUT_VERSION and records != 1:  # 1: an older durable store wrote since
        return None
    return steps is None


def mark(base: int, durable: int, modes: Modes) -> None:
    """Record that the namespace is in layout 3, durably, and fence older releases:
    the new file becomes ``.durable/layout`` first, then ``.layout`` (a crash
    between leaves a layout that migrates again)."""
    temp = f".layout.{secrets.token_hex(6)}.tmp"
    try:
        write_new(base, temp, (f"{LAYOUT_VERSION}\n".encode(),), "a temp file", modes.file)
        link_replace(base, temp, _FENCE, into=durable)
        os.fsync(durable)
        os.replace(temp, _LAYOUT, src_dir_fd=base, dst_dir_fd=base)
    except BaseException:
        unlink(base, temp)
        raise
    os.fsync(base)
