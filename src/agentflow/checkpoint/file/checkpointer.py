"""A durable checkpointer on the local file system: one JSON file per step.

The default namespace keeps the seed's layout, ``root/<thread>/<step:06d>.json``;
a named one lives under ``root/.ns/<hex(namespace)>/``. Every name the store
invents (namespaces, ``.locks``, temp files, deleted threads) starts with
``.`` and thread ids may not, so no thread id can ever name one of them.

A file is one JSON document, a small header and then the codec payload (see
:mod:`~agentflow.checkpoint.file_format`), so a revision, a listing summary or
a prune timestamp costs one small read however large the state is. Writers of
a thread hold its ``flock`` around read-revision-then-``os.replace``, which
makes compare-and-set hold across processes on one host; readers take no lock.
docs/file.md has the design.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from typing import ParamSpec, TypeVar

from agentflow.checkpoint import codec
from agentflow.checkpoint.base import AsyncClosing, Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.checkpoint.file_format import (
    header_bytes,
    listdir,
    load,
    read_header,
    read_latest,
    step_name,
    stored_steps,
)
from agentflow.checkpoint.paging import check_page_args, check_prune_bounds
from agentflow.checkpoint.redaction import redact_none
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    InvalidArgument,
    InvalidThreadId,
    StoreUnavailable,
)

__all__ = ["FileCheckpointer"]

_BACKEND = "file"
#: First character of every name the store invents; thread ids may not start with it.
_MARKER = "."
_NAMESPACES = ".ns"
_LOCKS = ".locks"
_TEMP_SUFFIX = ".tmp"
#: The longest file name (bytes) on ext4, xfs, btrfs, tmpfs and APFS.
_NAME_MAX = 255
_LOCK_STRIPES = 1024
#: ``history`` decodes at most this many files, or about this many bytes, per worker call:
#: enough to amortise the thread hop, few enough that the cyclic GC does not keep
#: rescanning a batch of live states (64 files decode at half the speed of 8).
_BATCH_FILES = 8
_BATCH_BYTES = 1 << 20
_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep) if sep)
_P = ParamSpec("_P")
_T = TypeVar("_T")


def _check_thread(thread: object) -> str:
    """Refuse any id that is not one plain directory name under the store."""
    name = codec.validate_thread(thread)
    if (
        len(name.encode()) > _NAME_MAX
        or name.startswith(_MARKER)
        or any(sep in name for sep in _SEPARATORS)
    ):
        raise InvalidThreadId(
            f"thread id {name!r} must be one file name: not starting with {_MARKER!r}, "
            f"without a path separator, at most {_NAME_MAX} bytes of UTF-8"
        )
    return name


def _fsync_dir(path: str) -> None:
    """Make renames and unlinks in ``path`` survive a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileCheckpointer(AsyncClosing):
    """Checkpoints as files under ``root``; safe for many processes on one host.

    Compare-and-set and revision counting hold across processes because each
    writer holds the thread's ``flock``; ``flock`` is local to one kernel, so
    do not share a store over NFS. Files are ``0o600`` and directories
    ``0o700`` (a run's state is not for other users) unless
    ``secure_permissions=False`` leaves modes to the umask; an existing
    ``root`` keeps its mode. A thread id must be one file name: no leading
    ``.``, no path separator, at most 255 bytes of UTF-8. A namespace may be
    at most 127 bytes of UTF-8 (its directory name is its hex). ``redact``
    masks values before writing; see :mod:`agentflow.checkpoint.redaction`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] = ".runs",
        *,
        redact: Redactor | None = None,
        secure_permissions: bool = True,
        namespace: str | None = None,
    ) -> None:
        self._redact = redact or redact_none
        self._namespace = codec.validate_namespace(namespace)
        self._root = os.path.abspath(os.fspath(root))
        self._dir_mode = 0o700 if secure_permissions else 0o777
        self._file_mode = 0o600 if secure_permissions else 0o666
        self._base = self._root
        if self._namespace:
            encoded = self._namespace.encode().hex()
            if len(encoded) > _NAME_MAX:
                raise InvalidArgument(f"namespace over {_NAME_MAX // 2} bytes of UTF-8")
            self._base = os.path.join(self._root, _NAMESPACES, encoded)

    @property
    def root(self) -> str:
        """The absolute directory holding the store (all namespaces)."""
        return self._root

    async def close(self) -> None:
        """Nothing is held between calls; present so every backend closes alike."""

    async def _io(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except OSError as exc:
            raise StoreUnavailable(f"file store {self._root}: {exc}") from exc

    # -- locking and directories -------------------------------------------

    @contextlib.contextmanager
    def _locked(self, thread: str) -> Iterator[None]:
        """Hold the thread's exclusive lock; the kernel drops it if the process dies."""
        digest = hashlib.blake2b(thread.encode(), digest_size=8).digest()
        stripe = int.from_bytes(digest, "big") % _LOCK_STRIPES
        path = os.path.join(self._base, _LOCKS, f"{stripe:03x}")
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, self._file_mode)
        except FileNotFoundError:
            self._ensure_dir(os.path.dirname(path))
            fd = os.open(path, flags, self._file_mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _ensure_dir(self, path: str) -> None:
        """Create ``path`` and missing parents, each durably linked into its parent."""
        try:
            os.mkdir(path, self._dir_mode)
        except FileExistsError:
            return
        except FileNotFoundError:
            self._ensure_dir(os.path.dirname(path))
            try:
                os.mkdir(path, self._dir_mode)
            except FileExistsError:
                return
        _fsync_dir(os.path.dirname(path))

    # -- writes --------------------------------------------------------------

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        if if_revision is not None and (
            isinstance(if_revision, bool) or not isinstance(if_revision, int) or if_revision < 0
        ):
            raise InvalidArgument(f"if_revision must be None or an int >= 0, got {if_revision!r}")
        _check_thread(cp.thread)
        return await self._io(self._put, cp, if_revision)

    def _put(self, cp: Checkpoint, if_revision: int | None) -> str:
        enc = codec.encode(cp, self._redact)
        directory = os.path.join(self._base, enc.thread)
        with self._locked(enc.thread):
            self._ensure_dir(directory)
            header = read_header(os.path.join(directory, step_name(enc.step)))
            current = header["revision"] if header else 0
            if if_revision is not None and if_revision != current:
                raise CheckpointConflict(enc.thread, enc.step, if_revision, current)
            self._replace(directory, enc, current + 1)
        return f"{enc.thread}:{enc.step}"

    def _replace(self, directory: str, enc: codec.EncodedCheckpoint, revision: int) -> None:
        """Readers see the old file or the new one, never a mix; on return both the
        bytes and the rename survive a power loss."""
        name = f"{_MARKER}{enc.step}.{secrets.token_hex(6)}{_TEMP_SUFFIX}"
        temp = os.path.join(directory, name)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, self._file_mode)
        try:
            with open(fd, "wb") as f:
                f.writelines((header_bytes(enc, revision), enc.payload, b"}"))
                f.flush()
                os.fsync(fd)
            os.replace(temp, os.path.join(directory, step_name(enc.step)))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        _fsync_dir(directory)

    async def delete_thread(self, thread: str) -> None:
        await self._io(self._delete, _check_thread(thread))

    def _delete(self, thread: str) -> None:
        # Renaming first makes the deletion atomic: readers see all or nothing.
        directory = os.path.join(self._base, thread)
        if not os.path.isdir(directory):
            return
        trash = os.path.join(self._base, f"{_MARKER}trash-{secrets.token_hex(8)}")
        with self._locked(thread):
            try:
                os.rename(directory, trash)
            except FileNotFoundError:
                return
            _fsync_dir(self._base)
        shutil.rmtree(trash)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        cutoff = (
            codec.parse_instant(older_than, what="older_than") if older_than is not None else None
        )
        return await self._io(self._prune, _check_thread(thread), before_step, cutoff)

    def _prune(self, thread: str, before_step: int | None, cutoff: int | None) -> int:
        directory = os.path.join(self._base, thread)
        if not os.path.isdir(directory):
            return 0
        removed = 0
        with self._locked(thread):
            for name in listdir(directory):
                if name.startswith(_MARKER) and name.endswith(_TEMP_SUFFIX):
                    os.unlink(os.path.join(directory, name))  # dead: no write runs under our lock
            for step in stored_steps(directory):
                path = os.path.join(directory, step_name(step))
                if before_step is not None and step >= before_step:
                    continue
                if cutoff is not None:
                    header = read_header(path)
                    if header is None or header["ts_us"] >= cutoff:
                        continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                    removed += 1
            try:
                os.rmdir(directory)  # succeeds only when nothing is left
                _fsync_dir(self._base)
            except OSError as exc:  # steps remain, or a delete won the lock first
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                    raise
                if removed:
                    _fsync_dir(directory)
        return removed

    # -- reads ---------------------------------------------------------------

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        thread = _check_thread(thread)
        if step is not None:
            codec.validate_step(step)
        return await self._io(self._get, thread, step)

    def _get(self, thread: str, step: int | None) -> Checkpoint | None:
        directory = os.path.join(self._base, thread)
        if step is None:
            loaded = read_latest(directory, lambda path, latest: load(path, thread, latest))
        else:
            loaded = load(os.path.join(directory, step_name(step)), thread, step)
        return loaded[0] if loaded else None

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        thread = _check_thread(thread)
        directory = os.path.join(self._base, thread)
        steps = sorted(await self._io(stored_steps, directory))
        start = 0
        while start < len(steps):
            batch, start = await self._io(self._read_batch, directory, thread, steps, start)
            for cp in batch:
                yield cp

    @staticmethod
    def _read_batch(
        directory: str, thread: str, steps: list[int], start: int
    ) -> tuple[list[Checkpoint], int]:
        """One worker call's worth of history: the budget keeps memory bounded."""
        batch: list[Checkpoint] = []
        size = 0
        index = start
        while index < len(steps) and len(batch) < _BATCH_FILES and size < _BATCH_BYTES:
            step = steps[index]
            try:
                loaded = load(os.path.join(directory, step_name(step)), thread, step)
            except CheckpointCorrupted:
                if not batch:
                    raise
                break  # yield the whole steps before it; the next call raises
            index += 1
            if loaded is not None:  # else pruned since the listing
                batch.append(loaded[0])
                size += loaded[1]
        return batch, index

    # -- listing -------------------------------------------------------------

    def _summary(self, thread: str) -> ThreadInfo | None:
        """The thread's latest step, from its listing and one header read."""

        def summarise(path: str, step: int) -> ThreadInfo | None:
            header = read_header(path)
            if header is None:
                return None
            return ThreadInfo(
                thread=thread,
                latest_step=step,
                interrupted=header["interrupted"],
                done=header["done"],
                ts=header["ts"],
                wake_at=header["wake_at"],
            )

        return read_latest(os.path.join(self._base, thread), summarise)

    def _page(self, after: str | None, limit: int, offset: int) -> tuple[list[ThreadInfo], bool]:
        """Up to ``limit`` summaries after ``after``, and whether more threads follow.

        Costs one listing of the namespace directory (names only) and, per
        thread returned, one listing of its directory and one header read;
        threads skipped by ``offset`` and the one-thread lookahead are only
        listed. A directory left empty by a crash is skipped, not reported.
        """
        names = sorted(n for n in listdir(self._base) if not n.startswith(_MARKER))
        infos: list[ThreadInfo] = []
        start = 0 if after is None else bisect.bisect_right(names, after)
        for name in names[start:]:
            if offset or len(infos) == limit:  # only whether it has a step matters
                if not stored_steps(os.path.join(self._base, name)):
                    continue
                if not offset:
                    return infos, True
                offset -= 1
            elif info := self._summary(name):
                infos.append(info)
        return infos, False

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        check_page_args(limit, offset)
        return (await self._io(self._page, None, limit, offset))[0]

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        check_page_args(limit)
        after = None if cursor is None else decode_cursor(_BACKEND, self._namespace, cursor)
        infos, more = await self._io(self._page, after, limit, 0)
        next_cursor = encode_cursor(_BACKEND, self._namespace, infos[-1].thread) if more else None
        return ThreadPage(infos, next_cursor)
