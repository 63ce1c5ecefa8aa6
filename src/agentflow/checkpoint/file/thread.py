"""One thread's directory: its step files and its head, given the directory's descriptor.

``.head`` is a hard link to the thread's latest step file, so the latest step
costs one read instead of a listing of every step. A reader believes it only
when it is that step's file (the same inode as the name its header gives). A
writer moves it before the step it names is renamed in, so a kill between
the two renames leaves a head naming a step it is not, which readers detect
and the next writer repairs, never a stale head that looks right.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import Final, NamedTuple

from agentflow.checkpoint.backend import EncodedCheckpoint
from agentflow.checkpoint.base import ThreadStatus
from agentflow.checkpoint.file import index
from agentflow.checkpoint.file.format import (
    HEADER_MAX,
    Header,
    header_bytes,
    parse,
    step_name,
    step_of,
)
from agentflow.checkpoint.file.fs import (
    link_refused,
    link_replace,
    make_dir,
    open_dir,
    read_file,
    unlink,
    write_new,
)
from agentflow.checkpoint.file.index import Modes, ThreadState
from agentflow.checkpoint.validation import is_unicode
from agentflow.errors import CheckpointCorrupted, InvalidThreadId

__all__ = [
    "MARKER",
    "NAME_MAX",
    "StepFile",
    "check_thread",
    "drop_head",
    "header_of",
    "latest",
    "make_thread",
    "open_thread",
    "prune",
    "read",
    "steps",
    "usable",
    "write",
]

#: First character of every name the store invents; thread ids may not start with it.
MARKER: Final = "."
#: The longest file name (bytes) on ext4, xfs, btrfs, tmpfs and APFS.
NAME_MAX: Final = 255
_HEAD: Final = ".head"
_TEMP_SUFFIX: Final = ".tmp"


def _path_safe(thread: str) -> bool:
    """One plain file name, never one the store invents: no separator of any OS."""
    return (
        not thread.startswith(MARKER)
        and "/" not in thread
        and "\\" not in thread
        and len(thread.encode()) <= NAME_MAX
    )


def check_thread(thread: str) -> str:
    """Refuse a (valid) thread id that is not one plain directory name."""
    if not _path_safe(thread):
        raise InvalidThreadId(
            f"thread id {thread!r} must be one file name: not starting with {MARKER!r}, "
            f"without '/' or '\\\\', at most {NAME_MAX} bytes of UTF-8"
        )
    return thread


def usable(name: str) -> bool:
    """Whether a name found on disk is a thread id the API accepts."""
    return is_unicode(name) and _path_safe(name)


def open_thread(base: int, thread: str) -> int | None:
    return open_dir(base, thread, f"the directory of thread {thread!r}")


def make_thread(base: int, thread: str, mode: int) -> int:
    return make_dir(base, thread, f"the directory of thread {thread!r}", mode)


class StepFile(NamedTuple):
    """A step file as read: its step, header, bytes and where its payload starts."""

    step: int
    header: Header
    data: bytes
    start: int

    def state(self, run_status: ThreadStatus | None = None) -> ThreadState:
        """The thread's state when this is its latest step (``run_status``: its record's)."""
        header = self.header
        return ThreadState.of(header.interrupted, header.done, header.wake_at, run_status)


def steps(tfd: int) -> set[int]:
    return {step for name in os.listdir(tfd) if (step := step_of(name)) is not None}


def read(tfd: int, thread: str, step: int, whole: bool = True) -> StepFile | None:
    """The file of ``step`` (its header only unless ``whole``), or None when missing."""
    what = f"thread {thread!r} step {step}"
    found = read_file(tfd, step_name(step), what, None if whole else HEADER_MAX)
    if found is None:
        return None
    header, start = parse(found[0], thread, step)
    return StepFile(step, header, found[0], start)


def header_of(tfd: int, thread: str, step: int) -> Header | None:
    found = read(tfd, thread, step, whole=False)
    return None if found is None else found.header


def _head(tfd: int, thread: str, whole: bool) -> StepFile | None:
    """The head, if it is the file of the step its header names."""
    what = f"the head of thread {thread!r}"
    found = read_file(tfd, _HEAD, what, None if whole else HEADER_MAX)
    if found is None:
        return None
    data, opened = found
    with contextlib.suppress(CheckpointCorrupted, FileNotFoundError):
        header, start = parse(data, thread, None)
        if header.step is not None:
            named = os.stat(step_name(header.step), dir_fd=tfd, follow_symlinks=False)
            if (named.st_ino, named.st_dev) == (opened.st_ino, opened.st_dev):
                return StepFile(header.step, header, data, start)
    return None


def latest(tfd: int, thread: str, whole: bool) -> StepFile | None:
    """The latest step: the head if it is that step's file, else the highest step
    listed that still exists (one pruned since the listing is skipped)."""
    if (found := _head(tfd, thread, whole)) is not None:
        return found
    for step in sorted(steps(tfd), reverse=True):
        if (found := read(tfd, thread, step, whole)) is not None:
            return found
    return None


def drop_head(tfd: int) -> None:
    """Remove the head (under the thread's lock): readers list the steps until the
    next write of a latest step makes a new one."""
    unlink(tfd, _HEAD)


def write(tfd: int, enc: EncodedCheckpoint, revision: int, latest: bool, mode: int) -> None:
    """Replace the step's file (and the head when ``latest``). Readers see the old
    file or the new one, never a mix; on return the bytes and both renames
    survive a power loss."""
    temp = f"{MARKER}{enc.step}.{secrets.token_hex(6)}{_TEMP_SUFFIX}"
    parts = (header_bytes(enc, revision), enc.payload, b"}")
    try:
        write_new(tfd, temp, parts, f"a temp file of {enc.thread!r}", mode)
        if latest:
            link_replace(tfd, temp, _HEAD)
        os.replace(temp, step_name(enc.step), src_dir_fd=tfd, dst_dir_fd=tfd)
    except BaseException:
        unlink(tfd, temp)
        raise
    os.fsync(tfd)


def _listing(tfd: int, thread: str) -> list[int]:
    """The steps, sorted, once dead temp files are removed (safe only under the lock:
    no write is in flight then). A link in place of a step is refused."""
    found: list[int] = []
    temps: list[str] = []
    with os.scandir(tfd) as entries:
        for entry in entries:
            if entry.name.startswith(MARKER) and entry.name.endswith(_TEMP_SUFFIX):
                temps.append(entry.name)
            elif (step := step_of(entry.name)) is not None:
                if entry.is_symlink():
                    raise link_refused(f"thread {thread!r} step {step}")
                found.append(step)
    for temp in temps:
        unlink(tfd, temp)
    return sorted(found)


def prune(
    base: int,
    tfd: int,
    thread: str,
    *,
    before_step: int | None,
    cutoff_us: int | None,
    modes: Modes,
    run_status: ThreadStatus | None,
) -> tuple[int, int]:
    """Remove the steps below ``before_step`` and older than ``cutoff_us``, under the
    thread's lock (its record imposes ``run_status``); return how many went and how
    many are left."""
    listed = _listing(tfd, thread)
    doomed = set()
    for step in listed:
        if before_step is not None and step >= before_step:
            continue
        header = header_of(tfd, thread, step) if cutoff_us is not None else None
        if cutoff_us is None or (header is not None and header.ts_us < cutoff_us):
            doomed.add(step)
    kept = [step for step in listed if step not in doomed]
    if not doomed:
        return 0, len(kept)
    old = new = None
    if listed[-1] in doomed:  # the head moves to the highest kept step before the latest goes
        old = _state(tfd, thread, listed[-1], run_status)
        new = _state(tfd, thread, kept[-1], run_status) if kept else None
        if new is not None and new != old:
            index.add(base, new, thread, modes)
        if kept:
            link_replace(tfd, step_name(kept[-1]), _HEAD)
        else:
            unlink(tfd, _HEAD)
    removed = sum(unlink(tfd, step_name(step)) for step in sorted(doomed))
    os.fsync(tfd)
    if old is not None:
        index.retire(base, old, new, thread)
    return removed, len(kept)


def _state(tfd: int, thread: str, step: int, run_status: ThreadStatus | None) -> ThreadState | None:
    found = read(tfd, thread, step, whole=False)
    return None if found is None else found.state(run_status)
