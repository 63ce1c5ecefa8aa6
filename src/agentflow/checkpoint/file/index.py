"""The file store's indexes: each thread's status, and when waiting threads wake.

```
<base>/.status/<status>/<thread>                        one empty file per thread
<base>/.due/<wake_us >> 32 :08x>/<wake_us:016x>/<thread>  one per thread waiting on a timer
```

A thread's status is its record's where the record imposes one
(``reconciliation_required``, ``failed``), else its latest step's; its wake
instant is always its latest step's, so ``list_due`` sees it either way.

Fixed-width hex sorts as the number does, so listing the directories in name
order walks the waiting threads in (wake instant, thread) order; a due bucket
spans about 72 minutes, so a pass lists the buckets that are due and not the
far future. An entry is a hint that readers check against the thread's
latest step and record: a writer adds the entry of the state a step brings before that
step becomes the latest and removes the old entry after, so a kill at any
instant leaves at most an extra entry, never a missing one, and a reader
that meets an extra one has it removed under the thread's lock.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Final, NamedTuple

from agentflow.checkpoint.base import ThreadInfo, ThreadStatus
from agentflow.checkpoint.file.fs import create_file, listdir, opened, rmdir, unlink
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointError

__all__ = [
    "Modes",
    "ThreadState",
    "add",
    "drop_due",
    "drop_status",
    "due",
    "retire",
    "with_status",
]

_STATUS: Final = ".status"
_DUE: Final = ".due"
_WHAT: Final = "a directory of the store's index"
_BUCKET_BITS: Final = 32
#: A writer retries when a due directory on its way was removed (emptied) meanwhile.
_ATTEMPTS: Final = 100


class Modes(NamedTuple):
    """The modes the store creates directories and files with."""

    directory: int
    file: int


class ThreadState(NamedTuple):
    """What the indexes record of a thread: its status, and its wake instant if its
    latest step waits on a timer."""

    status: ThreadStatus
    wake_us: int | None

    @classmethod
    def of(
        cls,
        interrupted: bool,
        done: bool,
        wake_at: str | None,
        run_status: ThreadStatus | None = None,
    ) -> ThreadState:
        """The state of a thread whose latest step has these flags and whose record
        imposes ``run_status`` (as :attr:`ThreadInfo.status`)."""
        if done or not interrupted:
            return cls(run_status or ("done" if done else "running"), None)
        if wake_at is None:
            return cls(run_status or "interrupted", None)
        return cls(run_status or "waiting", parse_instant(wake_at))

    @classmethod
    def of_info(cls, info: ThreadInfo) -> ThreadState:
        return cls.of(info.interrupted, info.done, info.wake_at, info.run_status)


def _due_dirs(wake_us: int) -> tuple[str, str, str]:
    return _DUE, f"{wake_us >> _BUCKET_BITS:08x}", f"{wake_us:016x}"


def _hex(name: str, width: int) -> int | None:
    if len(name) != width or name.strip("0123456789abcdef"):
        return None
    return int(name, 16)


def _touch(base: int, parts: tuple[str, ...], thread: str, modes: Modes) -> None:
    what = f"the index entry of thread {thread!r}"
    for _ in range(_ATTEMPTS):
        try:
            with opened(base, parts, _WHAT, modes.directory) as fds:
                if fds:  # always: missing directories are created
                    os.close(create_file(fds[-1], thread, os.O_WRONLY, what, modes.file))
                    return
        except FileNotFoundError:
            continue  # a directory on the way was removed as we went: make it again
    raise CheckpointError(f"{what} could not be created")


def add(base: int, state: ThreadState, thread: str, modes: Modes) -> None:
    """Record that ``thread``'s latest step has ``state``."""
    _touch(base, (_STATUS, state.status), thread, modes)
    if state.wake_us is not None:
        _touch(base, _due_dirs(state.wake_us), thread, modes)


def drop_status(base: int, status: ThreadStatus, thread: str) -> None:
    with opened(base, (_STATUS, status), _WHAT) as fds:
        if fds is not None:
            unlink(fds[-1], thread)


def drop_due(base: int, wake_us: int, thread: str) -> None:
    """Remove the due entry, then each directory above it that this left empty."""
    with opened(base, _due_dirs(wake_us), _WHAT) as fds:
        if fds is None:
            return
        due, bucket, instant = fds
        unlink(instant, thread)
        _, bucket_name, instant_name = _due_dirs(wake_us)
        if rmdir(bucket, instant_name):
            rmdir(due, bucket_name)


def retire(base: int, old: ThreadState, new: ThreadState | None, thread: str) -> None:
    """Remove the entries of ``old`` that ``new`` (None: no step left) does not share."""
    if new is None or new.status != old.status:
        drop_status(base, old.status, thread)
    if old.wake_us is not None and (new is None or new.wake_us != old.wake_us):
        drop_due(base, old.wake_us, thread)


def with_status(base: int, status: ThreadStatus) -> list[str]:
    """The threads indexed under ``status``, in code point order."""
    return listdir(base, (_STATUS, status), _WHAT)


def due(base: int, now_us: int, after: tuple[int, str] | None) -> Iterator[tuple[int, str]]:
    """(wake instant, thread) of the indexed timer waits due at ``now_us``, in that
    order, after ``after``; lists only the buckets up to ``now_us``."""
    first = "" if after is None else _due_dirs(after[0])[1]
    last = _due_dirs(now_us)[1]
    for bucket in listdir(base, (_DUE,), _WHAT):
        if bucket < first or _hex(bucket, 8) is None:
            continue
        if bucket > last:
            return
        for instant in listdir(base, (_DUE, bucket), _WHAT):
            wake_us = _hex(instant, 16)
            if wake_us is None or (after is not None and wake_us < after[0]):
                continue
            if wake_us > now_us:
                return
            for thread in listdir(base, (_DUE, bucket, instant), _WHAT):
                if after is None or (wake_us, thread) > after:
                    yield wake_us, thread
