"""The directories a file checkpointer holds open: its root, its namespace, its locks.

Opening them once saves three ``open`` calls per operation. Holding them
is safe only while no call uses them after they are closed, since a
closed descriptor number is soon reused by some other ``open``: so every
call runs through :meth:`StoreDirectories.run`, and :meth:`release` waits
for the calls in flight before it closes anything.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from typing import Final, Literal, TypeVar, overload

from agentflow.checkpoint.file.fs import make_dir, open_dir
from agentflow.checkpoint.file.index import Modes
from agentflow.errors import InvalidArgument, StoreClosed

__all__ = ["StoreDirectories"]

_ROOT_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_LOCKS: Final = ".locks"
_T = TypeVar("_T")


class StoreDirectories:
    """Descriptors of ``root``, of ``root/parts...`` (the namespace) and of its
    lock directory, each opened (or created) on first use."""

    def __init__(self, root: str, parts: tuple[str, ...], modes: Modes, secure: bool) -> None:
        self._path = root
        self._parts = parts
        self._modes = modes
        self._secure = secure
        self._opening = threading.Lock()
        self._idle = threading.Condition()
        self._busy = 0
        self._released = False
        self._root: int | None = None
        self._base: int | None = None
        self._locks: int | None = None

    def run(self, fn: Callable[[], _T]) -> _T:
        """``fn()``, counted as in flight so that :meth:`release` waits for it."""
        with self._idle:
            if self._released:
                raise StoreClosed("this FileCheckpointer is closed")
            self._busy += 1
        try:
            return fn()
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def release(self) -> None:
        """Close every descriptor once the calls in flight are done."""
        with self._idle:
            self._released = True
            self._idle.wait_for(lambda: self._busy == 0)
        for fd in {fd for fd in (self._root, self._base, self._locks) if fd is not None}:
            os.close(fd)

    @overload
    def root(self, create: Literal[True]) -> int: ...

    @overload
    def root(self, create: bool) -> int | None: ...

    def root(self, create: bool) -> int | None:
        """The root (created when missing and ``create``), else None.

        With secure permissions a root that its group or others may write is
        refused: they could plant files (or links) in it.
        """
        if self._root is None:
            with self._opening:
                if self._root is None:
                    self._root = self._open_root(create)
        return self._root

    def _open_root(self, create: bool) -> int | None:
        try:
            fd = os.open(self._path, _ROOT_FLAGS)
        except FileNotFoundError:
            if not create:
                return None
            parent, name = os.path.split(self._path)
            os.makedirs(parent, exist_ok=True)
            parent_fd = os.open(parent, _ROOT_FLAGS)
            try:
                fd = make_dir(parent_fd, name, "the store's root", self._modes.directory)
            finally:
                os.close(parent_fd)
        if self._secure and stat.S_IMODE(os.fstat(fd).st_mode) & 0o022:
            os.close(fd)
            raise InvalidArgument(
                f"file store root {self._path} is writable by its group or others, so they could "
                "plant files in it: remove that (chmod go-w) or pass secure_permissions=False"
            )
        return fd

    @overload
    def base(self, create: Literal[True]) -> int: ...

    @overload
    def base(self, create: bool) -> int | None: ...

    def base(self, create: bool) -> int | None:
        """The namespace's directory (created when missing and ``create``), else None."""
        if self._base is None:
            root = self.root(create)
            if root is None:
                return None
            with self._opening:
                if self._base is None:
                    self._base = self._open_base(root, create)
        return self._base

    def _open_base(self, root: int, create: bool) -> int | None:
        what = "the namespace directory"
        fd = root
        for part in self._parts:
            if create:
                inner: int | None = make_dir(fd, part, what, self._modes.directory)
            else:
                inner = open_dir(fd, part, what)
            if fd != root:
                os.close(fd)
            if inner is None:
                return None
            fd = inner
        return fd

    def locks(self, base: int) -> int:
        """The lock directory of the namespace in ``base``, created when missing."""
        if self._locks is None:
            with self._opening:
                if self._locks is None:
                    self._locks = make_dir(
                        base, _LOCKS, "the lock directory", self._modes.directory
                    )
        return self._locks
