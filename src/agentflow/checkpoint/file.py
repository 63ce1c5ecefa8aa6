"""A durable checkpointer on the local file system: one JSON file per step.

Layout. The default namespace keeps the seed's layout so existing tools and
habits (``ls .runs/<thread>``) keep working; everything the store invents
starts with ``.``, and thread ids may not, so no thread id can ever name a
namespace, a lock, a temp file or a deleted thread, whatever it is::

    root/<thread>/<step:06d>.json             the default namespace
    root/.ns/<hex(namespace)>/<thread>/...     a named namespace (same shape)
    <base>/.locks/<stripe>                     cross-process write locks
    <base>/<thread>/.<step>.<token>.tmp        a write in flight, or left by a crash
    <base>/.trash-<token>/                     a thread being deleted

Namespaces are hex-encoded UTF-8: a tenant name may contain ``/`` or differ
from another only by case, and hex keeps every name distinct on every file
system (case-insensitive ones too) while staying reversible for an operator.

Each file is one JSON document, a small header then the codec payload::

    {"format":1,"revision":3,"ts":...,"ts_us":...,"interrupted":...,"done":...,
     "wake_at":...,"payload":{...codec bytes...}}

The header comes first so that reading a revision (for compare-and-set), a
listing summary or a prune timestamp costs one small read however large the
state is; only ``get`` and ``history`` read and decode the payload, which
:func:`~agentflow.checkpoint.codec.decode` receives as a slice, never re-encoded.

Concurrency. Writers (put, prune, delete) of one thread hold an exclusive
``fcntl.flock`` on the thread's lock stripe around read-revision-then-write,
so compare-and-set holds across processes on one host. Lock files live apart
from thread directories and are never deleted, so a lock can never be taken on
an unlinked file; striping bounds their number. Readers take no lock: every
file appears whole through ``os.replace``. All file I/O runs in worker threads
so the event loop never blocks on a disk.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import orjson

from agentflow.checkpoint.base import Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.codec import (
    EncodedCheckpoint,
    decode,
    encode,
    parse_instant,
    validate_namespace,
    validate_step,
    validate_thread,
)
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
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
_FORMAT = 1
#: First character of every name the store invents; thread ids may not start with it.
_MARKER = "."
_NAMESPACES = ".ns"
_LOCKS = ".locks"
_PAYLOAD_KEY = b',"payload":'
#: The header is a few hundred bytes; anything longer is not a file we wrote.
_HEADER_MAX = 4096
#: The longest file name (bytes) on ext4, xfs, btrfs, tmpfs and APFS.
_NAME_MAX = 255
_LOCK_STRIPES = 1024
#: ``history`` decodes at most this many files, or about this many bytes, per worker call.
_BATCH_FILES = 64
_BATCH_BYTES = 1 << 20
_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep) if sep)

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _check_thread(thread: object) -> str:
    """Refuse any id that is not one plain directory name under the store."""
    name = validate_thread(thread)
    if name.startswith(_MARKER) or any(sep in name for sep in _SEPARATORS):
        raise InvalidThreadId(
            f"thread id {name!r} may not start with {_MARKER!r} or contain a path separator"
        )
    try:
        size = len(name.encode())
    except UnicodeEncodeError as exc:
        raise InvalidThreadId(f"thread id {name!r} is not valid Unicode text") from exc
    if size > _NAME_MAX:
        raise InvalidThreadId(f"thread id is {size} bytes of UTF-8; a file name allows {_NAME_MAX}")
    return name


def _step_name(step: int) -> str:
    return f"{step:06d}.json"


def _parse_step(name: str) -> int | None:
    """The step a file name stores, or None for anything else (temp files included)."""
    stem, _, ext = name.partition(".")
    if ext != "json" or not stem.isascii() or not stem.isdigit():
        return None
    step = int(stem)
    return step if _step_name(step) == name else None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _steps(directory: str) -> list[int]:
    return [s for s in map(_parse_step, _listdir(directory)) if s is not None]


def _fsync_dir(path: str) -> None:
    """Make renames and unlinks in ``path`` survive a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _header_bytes(enc: EncodedCheckpoint, revision: int) -> bytes:
    header = {
        "format": _FORMAT,
        "revision": revision,
        "ts": enc.ts,
        "ts_us": enc.ts_us,
        "interrupted": enc.interrupted,
        "done": enc.done,
        "wake_at": enc.wake_at,
    }
    return orjson.dumps(header)[:-1] + _PAYLOAD_KEY


def _parse_header(data: bytes, path: str) -> tuple[dict[str, Any], int]:
    """Return the header and the offset where the payload starts.

    The first ``,"payload":`` is the structural one: inside a JSON string a
    quote is always escaped, so the sequence cannot occur in a header value.
    """
    end = data.find(_PAYLOAD_KEY, 0, _HEADER_MAX)
    try:
        if end < 0:
            raise ValueError("no envelope header")
        header = orjson.loads(data[:end] + b"}")
        revision = header["revision"]
        if (
            header["format"] != _FORMAT
            or type(revision) is not int
            or revision < 1
            or type(header["ts_us"]) is not int
            or not isinstance(header["ts"], str)
            or type(header["interrupted"]) is not bool
            or type(header["done"]) is not bool
            or not isinstance(header["wake_at"], str | None)
        ):
            raise ValueError("envelope header fields have the wrong types")
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointCorrupted(f"checkpoint file {path} is corrupted: {exc}") from exc
    return header, end + len(_PAYLOAD_KEY)


def _read_header(path: str) -> dict[str, Any] | None:
    """The header of ``path`` from one small read, or None when there is no file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, _HEADER_MAX)
    finally:
        os.close(fd)
    return _parse_header(data, path)[0]


def _load(path: str, thread: str, step: int) -> tuple[Checkpoint, int] | None:
    """The checkpoint in ``path`` and its file size, or None when there is no file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    header, start = _parse_header(data, path)
    if not data.endswith(b"}"):
        raise CheckpointCorrupted(f"checkpoint file {path} is truncated")
    cp = decode(memoryview(data)[start:-1], header["revision"])
    if cp.thread != thread or cp.step != step:
        raise CheckpointCorrupted(
            f"checkpoint file {path} holds thread {cp.thread!r} step {cp.step}, "
            f"not thread {thread!r} step {step}"
        )
    return cp, len(data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class FileCheckpointer:
    """Checkpoints as files under ``root``; safe for many processes on one host.

    ``put(..., if_revision=)`` is a true compare-and-set across processes, and
    unconditional puts from any number of processes never lose a revision,
    because every writer of a thread holds that thread's ``flock`` while it
    reads the stored revision and replaces the file. ``flock`` is local to one
    kernel: on NFS and other network file systems it may be emulated or
    ignored, so use one host per store (or a server backend).

    Files are created ``0o600`` and directories ``0o700`` so a run's state is
    not readable by other users; ``secure_permissions=False`` leaves modes to
    the umask. A ``root`` that already exists keeps its mode.

    Thread ids must be one plain file name: not starting with ``.``, without a
    path separator, at most 255 bytes of UTF-8 (:class:`InvalidThreadId`
    otherwise). A namespace may be at most 127 bytes of UTF-8 (its directory
    name is the hex of it). On a case-insensitive file system, thread ids
    that differ only by case are the same thread.

    ``redact`` masks values before they are written; see
    :mod:`agentflow.checkpoint.redaction` for why it is not for resumable runs.
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
        self._namespace = validate_namespace(namespace)
        self._root = os.path.abspath(os.fspath(root))
        self._secure = secure_permissions
        self._dir_mode = 0o700 if secure_permissions else 0o777
        self._file_mode = 0o600 if secure_permissions else 0o666
        self._base = self._root
        if self._namespace:
            encoded = self._namespace.encode("utf-8", "surrogatepass").hex()
            if len(encoded) > _NAME_MAX:
                raise InvalidArgument(
                    f"namespace is {len(encoded) // 2} bytes of UTF-8; the file store allows "
                    f"{_NAME_MAX // 2}"
                )
            self._base = os.path.join(self._root, _NAMESPACES, encoded)

    @property
    def root(self) -> str:
        """The absolute directory holding the store (all namespaces)."""
        return self._root

    async def close(self) -> None:
        """Nothing is held between calls; present so every backend closes alike."""

    async def __aenter__(self) -> FileCheckpointer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

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
        enc = encode(cp, self._redact)
        directory = os.path.join(self._base, enc.thread)
        with self._locked(enc.thread):
            self._ensure_dir(directory)
            header = _read_header(os.path.join(directory, _step_name(enc.step)))
            current = header["revision"] if header else 0
            if if_revision is not None and if_revision != current:
                raise CheckpointConflict(enc.thread, enc.step, if_revision, current)
            self._replace(directory, enc, current + 1)
        return f"{enc.thread}:{enc.step}"

    def _replace(self, directory: str, enc: EncodedCheckpoint, revision: int) -> None:
        """Write a temp file, fsync it, rename it over the step, fsync the directory."""
        temp = os.path.join(directory, f"{_MARKER}{enc.step}.{secrets.token_hex(6)}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, self._file_mode)
        try:
            try:
                for part in (_header_bytes(enc, revision), enc.payload, b"}"):
                    _write_all(fd, part)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, os.path.join(directory, _step_name(enc.step)))
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
        cutoff = parse_instant(older_than, what="older_than") if older_than is not None else None
        return await self._io(self._prune, _check_thread(thread), before_step, cutoff)

    def _prune(self, thread: str, before_step: int | None, cutoff: int | None) -> int:
        directory = os.path.join(self._base, thread)
        if not os.path.isdir(directory):
            return 0
        removed = 0
        kept = False
        with self._locked(thread):
            for name in _listdir(directory):
                path = os.path.join(directory, name)
                step = _parse_step(name)
                if step is None:
                    if name.startswith(_MARKER):  # no write is in flight while we hold the lock
                        os.unlink(path)
                    continue
                if before_step is not None and step >= before_step:
                    kept = True
                    continue
                if cutoff is not None:
                    header = _read_header(path)
                    if header is not None and header["ts_us"] >= cutoff:
                        kept = True
                        continue
                os.unlink(path)
                removed += 1
            if not kept:
                os.rmdir(directory)
                _fsync_dir(self._base)
            elif removed:
                _fsync_dir(directory)
        return removed

    # -- reads ---------------------------------------------------------------

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        thread = _check_thread(thread)
        if step is not None:
            validate_step(step)
        return await self._io(self._get, thread, step)

    def _get(self, thread: str, step: int | None) -> Checkpoint | None:
        directory = os.path.join(self._base, thread)
        while True:
            if step is None:
                steps = _steps(directory)
                if not steps:
                    return None
            target = max(steps) if step is None else step
            loaded = _load(os.path.join(directory, _step_name(target)), thread, target)
            if loaded is not None:
                return loaded[0]
            if step is not None:
                return None
            # The latest step was pruned between the listing and the read.

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        thread = _check_thread(thread)
        directory = os.path.join(self._base, thread)
        steps = sorted(await self._io(_steps, directory))
        start = 0
        while start < len(steps):
            batch, start = await self._io(self._read_batch, directory, thread, steps, start)
            for cp in batch:
                yield cp

    @staticmethod
    def _read_batch(
        directory: str, thread: str, steps: list[int], start: int
    ) -> tuple[list[Checkpoint], int]:
        """Decode files from ``steps[start]`` until a file or byte budget is spent."""
        batch: list[Checkpoint] = []
        size = 0
        index = start
        while index < len(steps) and len(batch) < _BATCH_FILES and size < _BATCH_BYTES:
            step = steps[index]
            try:
                loaded = _load(os.path.join(directory, _step_name(step)), thread, step)
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
        directory = os.path.join(self._base, thread)
        while True:
            steps = _steps(directory)
            if not steps:
                return None
            step = max(steps)
            header = _read_header(os.path.join(directory, _step_name(step)))
            if header is not None:
                return ThreadInfo(
                    thread=thread,
                    latest_step=step,
                    interrupted=header["interrupted"],
                    done=header["done"],
                    ts=header["ts"],
                    wake_at=header["wake_at"],
                )

    def _page(self, after: str | None, limit: int, offset: int) -> tuple[list[ThreadInfo], bool]:
        """Up to ``limit`` summaries after ``after``, and whether more threads follow.

        Costs one listing of the namespace directory (names only) and, per
        thread returned, one listing of its directory and one header read.
        A directory left empty by a crash is skipped, not reported.
        """
        names = sorted(n for n in _listdir(self._base) if not n.startswith(_MARKER))
        infos: list[ThreadInfo] = []
        start = 0 if after is None else bisect.bisect_right(names, after)
        for name in names[start:]:
            info = self._summary(name)
            if info is None:
                continue
            if offset:
                offset -= 1
            elif len(infos) == limit:
                return infos, True
            else:
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
