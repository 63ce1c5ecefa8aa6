"""The file store's system calls: relative to directory descriptors, never through a link.

Every name below the store's root is opened one component at a time from the
directory above it, with ``O_NOFOLLOW`` (and ``O_DIRECTORY`` for directories).
So a symbolic link planted anywhere under the root, in place of a namespace,
a thread, a step, a lock stripe or an index directory, makes the call raise
:class:`~agentflow.errors.CheckpointCorrupted` instead of reading, writing or
deleting anything elsewhere; ``unlink``, ``rename`` and ``rmdir`` act on the
name itself and never follow a link either. Messages say what the name is
for (a thread, the lock directory), never where a link points.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from typing import Final

from agentflow.errors import CheckpointCorrupted

__all__ = [
    "DIR_FLAGS",
    "create_file",
    "link_refused",
    "link_replace",
    "make_dir",
    "listdir",
    "open_dir",
    "open_file",
    "opened",
    "publish",
    "read_file",
    "refused",
    "rmdir",
    "unlink",
    "write_new",
]

DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_NOFOLLOW | os.O_CLOEXEC
_READ_CHUNK: Final = 1 << 20


def link_refused(what: str) -> CheckpointCorrupted:
    """The error for a symbolic link found where ``what`` should be."""
    return CheckpointCorrupted(f"{what} is a symbolic link, which the file store never follows")


def refused(what: str, exc: OSError) -> CheckpointCorrupted | None:
    """The error for a link found where the file ``what`` should be, else None."""
    return link_refused(what) if exc.errno == errno.ELOOP else None


def _not_a_directory(parent: int, name: str, what: str) -> CheckpointCorrupted:
    # With O_DIRECTORY | O_NOFOLLOW, Linux reports a link as ENOTDIR, not ELOOP.
    if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
        return link_refused(what)
    return CheckpointCorrupted(f"{what} is not a directory")


def open_dir(parent: int, name: str, what: str) -> int | None:
    """The directory ``name`` in ``parent``, never through a link; None when missing."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except NotADirectoryError as exc:
        raise _not_a_directory(parent, name, what) from exc
    except OSError as exc:
        raise (refused(what, exc) or exc) from exc


def make_dir(parent: int, name: str, what: str, mode: int) -> int:
    """:func:`open_dir`, creating the directory (its entry made durable) when missing."""
    while True:
        fd = open_dir(parent, name, what)
        if fd is not None:
            return fd
        try:
            os.mkdir(name, mode, dir_fd=parent)
        except FileExistsError:
            continue  # a concurrent creator won; open what it made
        os.fsync(parent)


def create_file(directory: int, name: str, flags: int, what: str, mode: int) -> int:
    """``os.open`` of ``name`` in ``directory`` with ``O_CREAT``, never through a link."""
    try:
        return os.open(name, flags | os.O_CREAT | _FILE_FLAGS, mode, dir_fd=directory)
    except OSError as exc:
        raise (refused(what, exc) or exc) from exc


def open_file(directory: int, name: str, what: str) -> int | None:
    """``name`` in ``directory`` opened for reading, never through a link; None when missing."""
    try:
        return os.open(name, os.O_RDONLY | _FILE_FLAGS, dir_fd=directory)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise (refused(what, exc) or exc) from exc


def read_file(
    directory: int, name: str, what: str, limit: int | None = None
) -> tuple[bytes, os.stat_result] | None:
    """The bytes of ``name`` (at most ``limit``) and its status; None when missing."""
    fd = open_file(directory, name, what)
    if fd is None:
        return None
    try:
        status = os.fstat(fd)
        want = status.st_size + 1 if limit is None else limit
        data = os.read(fd, want)
        if limit is not None or len(data) < want:  # a short read of a file is its end
            return data, status
        chunks = [data]  # it grew since fstat
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks), status
    finally:
        os.close(fd)


@contextlib.contextmanager
def opened(
    parent: int, parts: tuple[str, ...], what: str, mode: int | None = None
) -> Iterator[list[int] | None]:
    """The descriptors of ``parent/parts[0]``, then of ``parts[1]`` in it, and so on
    (each created with ``mode`` when given), closed on exit; None when one is missing."""
    fds: list[int] = []
    try:
        current = parent
        for part in parts:
            fd = (
                open_dir(current, part, what)
                if mode is None
                else make_dir(current, part, what, mode)
            )
            if fd is None:
                yield None
                return
            fds.append(fd)
            current = fd
        yield fds
    finally:
        for fd in reversed(fds):
            os.close(fd)


def listdir(parent: int, parts: tuple[str, ...], what: str) -> list[str]:
    """Every name in ``parent/parts...`` (dot names too: callers check the ones
    they use), in code point order; [] when a directory on the way is missing."""
    with opened(parent, parts, what) as fds:
        if fds is None:
            return []
        names = os.listdir(fds[-1] if fds else parent)
    names.sort()
    return names


def rmdir(parent: int, name: str) -> bool:
    """Remove the directory ``name`` if it is empty; False when it is not (or gone)."""
    try:
        os.rmdir(name, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            return False
        raise
    return True


def _write_all(fd: int, parts: Sequence[bytes]) -> None:
    """Write ``parts`` one after the other: one system call unless the kernel writes short."""
    written = os.writev(fd, parts)
    rest = memoryview(b"".join(parts))[written:] if written < sum(map(len, parts)) else b""
    while rest:
        rest = rest[os.write(fd, rest) :]


def write_new(directory: int, name: str, parts: Sequence[bytes], what: str, mode: int) -> None:
    """Create ``name`` holding ``parts`` and fsync it; what a killed writer left under
    that name (the caller holds the lock that makes it a leftover) is replaced."""
    flags = os.O_WRONLY | os.O_EXCL
    try:
        fd = create_file(directory, name, flags, what, mode)
    except FileExistsError:
        unlink(directory, name)
        fd = create_file(directory, name, flags, what, mode)
    try:
        _write_all(fd, parts)
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink(directory: int, name: str) -> bool:
    """Remove ``name`` (never what a link points to); False when it was gone."""
    try:
        os.unlink(name, dir_fd=directory)
    except FileNotFoundError:
        return False
    return True


def link_replace(directory: int, source: str, target: str, into: int | None = None) -> None:
    """Atomically make ``target`` (in ``into``, else in ``directory``) another name
    of the file ``source`` of ``directory``."""
    into = directory if into is None else into
    temp = f".{target.lstrip('.')}.{secrets.token_hex(6)}.tmp"
    os.link(source, temp, src_dir_fd=directory, dst_dir_fd=into, follow_symlinks=False)
    try:
        os.replace(temp, target, src_dir_fd=into, dst_dir_fd=into)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=into)
        raise


def publish(directory: int, name: str, data: bytes, mode: int) -> None:
    """Create ``name`` holding ``data`` unless it exists; never a partial file.

    The bytes go to a temp file of a fresh name, which is then linked to
    ``name``: ``link`` fails when ``name`` exists, so of processes racing to
    create it exactly one wins and everyone reads the winner's bytes.
    """
    temp = f".{name.lstrip('.')}.{secrets.token_hex(6)}.tmp"
    try:
        write_new(directory, temp, (data,), f"a temp file for {name}", mode)
        with contextlib.suppress(FileExistsError):
            os.link(temp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
    finally:
        unlink(directory, temp)
    os.fsync(directory)
