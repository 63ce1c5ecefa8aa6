"""Where the file store puts a run key: names that sort as the keys do.

A run key is any string of up to 512 UTF-8 bytes, so it cannot be a file name
(255 bytes, no ``/``). Its name is the lowercase hex of its UTF-8 bytes, which
sorts exactly as the bytes do, cut into components of 254 hex digits (127 key
bytes): every component but the last is a directory named ``<chunk>~``, the
last is named ``<chunk>-``. ``-`` sorts below every hex digit and ``~`` above,
so listing each directory in name order walks the keys in UTF-8 byte order;
a key of 127 bytes or fewer (almost every key) is one name. The same names are
the run directories under ``runs/`` and the entries of each status index, so
a page starts at its cursor with one bisection per directory walked.

Hex keeps names distinct on case-insensitive file systems too, and an
operator reads one with ``xxd -r -p``. Branch directories are never removed
(a long key's prefix stays as an empty directory after its runs are gone),
so a writer never races a cleaner for the directory it is creating.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from typing import Final

from agentflow.checkpoint.file.fs import create_file, open_dir, opened, unlink
from agentflow.checkpoint.file.index import Modes

__all__ = ["CHUNK", "add_entry", "drop_entry", "key_of", "key_path", "walk"]

#: Hex digits per name component: 127 key bytes, and one marker, fit 255 bytes.
CHUNK: Final = 254
_LEAF: Final = "-"
_BRANCH: Final = "~"
_HEX: Final = frozenset("0123456789abcdef")
_WHAT: Final = "a directory of the run index"


def key_path(key: str) -> tuple[str, ...]:
    """The names leading to ``key``: its branch directories, then its leaf."""
    encoded = key.encode().hex()
    chunks = [encoded[start : start + CHUNK] for start in range(0, len(encoded), CHUNK)]
    return (*(chunk + _BRANCH for chunk in chunks[:-1]), chunks[-1] + _LEAF)


def key_of(encoded: str) -> str | None:
    """The key a walked name spells, or None when it spells none (a foreign name)."""
    try:
        return bytes.fromhex(encoded).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def _chunk(name: str, marker: str) -> str | None:
    chunk = name[:-1]
    full = marker == _BRANCH
    if (
        not name.endswith(marker)
        or not chunk
        or len(chunk) % 2
        or (full and len(chunk) != CHUNK)
        or len(chunk) > CHUNK
        or not _HEX.issuperset(chunk)
    ):
        return None
    return chunk


def walk(directory: int, after: str | None, prefix: str = "") -> Iterator[str]:
    """The hex of every key under ``directory`` after the hex ``after``, in order.

    ``after`` is relative to ``prefix`` (the hex spelled by the directories
    above). Names that are neither a leaf nor a branch are skipped.
    """
    names = sorted(os.listdir(directory))
    start = 0
    if after is not None and len(after) <= CHUNK:
        # The cursor is a leaf here: every name past it is wholly after it.
        start = bisect.bisect_right(names, after + _LEAF)
    elif after is not None:
        # The cursor lies inside one branch: walk that one from it, then the rest.
        branch = after[:CHUNK] + _BRANCH
        start = bisect.bisect_left(names, branch)
        if start < len(names) and names[start] == branch:
            yield from _branch(directory, branch, after[CHUNK:], prefix)
            start += 1
    for name in names[start:]:
        if (chunk := _chunk(name, _LEAF)) is not None:
            yield prefix + chunk
        elif _chunk(name, _BRANCH) is not None:
            yield from _branch(directory, name, None, prefix)


def _branch(directory: int, name: str, after: str | None, prefix: str) -> Iterator[str]:
    fd = open_dir(directory, name, _WHAT)
    if fd is None:  # removed by hand since the listing
        return
    try:
        yield from walk(fd, after, prefix + name[:-1])
    finally:
        os.close(fd)


def add_entry(directory: int, key: str, modes: Modes) -> None:
    """Record ``key`` in the index ``directory`` (an empty file at its leaf)."""
    *branches, leaf = key_path(key)
    with opened(directory, tuple(branches), _WHAT, modes.directory) as fds:
        assert fds is not None  # missing directories are created
        what = f"the index entry of run {key!r}"
        os.close(create_file(fds[-1] if fds else directory, leaf, os.O_WRONLY, what, modes.file))


def drop_entry(directory: int, key: str) -> None:
    """Remove ``key`` from the index ``directory`` (nothing when it is not there)."""
    *branches, leaf = key_path(key)
    with opened(directory, tuple(branches), _WHAT) as fds:
        if fds is not None:
            unlink(fds[-1] if fds else directory, leaf)
