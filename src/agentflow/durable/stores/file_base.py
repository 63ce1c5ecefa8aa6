"""What the file durable stores share: the checkpointer's directories, layout and errors.

A store takes the file checkpointer's arguments (``root``,
``secure_permissions``, ``namespace``) and holds an unopened
:class:`~agentflow.checkpoint.file.FileCheckpointer` for them: its argument
checks, its :class:`~agentflow.checkpoint.file.directories.StoreDirectories`
(the root and namespace descriptors, the refusal of a root others may
write, the per-name ``flock`` stripes) and its mapping of ``OSError``. The
durable files live in the namespace's directory under ``.durable``, a name
no thread id can take (thread ids may not start with ``.``). Its ``layout``
file holds the layout version, written once by the first store to use it;
a newer one is refused. Reads never create anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ClassVar, Final, Literal, ParamSpec, TypeVar, overload

from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.file.fs import make_dir, open_dir, opened, publish, read_file
from agentflow.checkpoint.validation import validate_namespace
from agentflow.durable.errors import DurableCorrupted, DurableError
from agentflow.durable.lifecycle import ClosingStore
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    IncompatibleSchema,
    StoreClosed,
    StoreNotFound,
)

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["DURABLE", "LAYOUT_VERSION", "FileStoreBase"]

#: The durable store's directory inside a namespace's directory.
DURABLE: Final = ".durable"
LAYOUT_VERSION: Final = 1
_LAYOUT: Final = "layout"
_WHAT: Final = "the durable store's directory"
_P = ParamSpec("_P")
_T = TypeVar("_T")


class FileStoreBase(ClosingStore):
    """Namespace, directories, layout check and lifecycle of a file durable store.

    ``root`` is the file checkpointer's store directory (one ``root`` holds
    checkpoints and durable records side by side); ``secure_permissions``
    (the default) makes files ``0o600`` and directories ``0o700`` and
    refuses a root its group or others may write. With ``create=False`` a
    root without the namespace's durable layout raises
    :class:`~agentflow.errors.StoreNotFound` on every call and nothing is made.
    """

    kind: ClassVar[str] = "file"

    def __init__(
        self,
        root: str | os.PathLike[str] = ".runs",
        *,
        namespace: str | None = None,
        secure_permissions: bool = True,
        create: bool = True,
        sealing: KeyRing | None = None,
    ) -> None:
        self._may_create = create
        self._checkpointer = FileCheckpointer(
            root, secure_permissions=secure_permissions, namespace=namespace
        )
        self._namespace = validate_namespace(namespace)
        self._sealing = sealing
        self._dirs = self._checkpointer._dirs
        self._modes = self._checkpointer._modes
        self._opening = threading.Lock()
        self._durable_fd: int | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r}, namespace={self._namespace!r})"

    @property
    def namespace(self) -> str:
        """The tenant this store reads and writes ("" for the default one)."""
        return self._namespace

    @property
    def root(self) -> str:
        """The absolute store directory (every namespace, checkpoints too)."""
        return self._checkpointer.root

    async def _io(
        self, operation: str, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """``fn`` on a worker thread; an ``OSError`` becomes agentflow's error for ``operation``."""
        if self._closed:
            raise StoreClosed(f"this {type(self).__name__} is closed")
        job = functools.partial(fn, *args, **kwargs)
        try:
            return await asyncio.to_thread(self._dirs.run, job)
        except DurableError:
            raise
        except CheckpointCorrupted as exc:  # a planted link, a damaged layout file
            raise DurableCorrupted("checkpoint_row_invalid", str(exc)) from exc
        except AgentflowError:
            raise
        except Exception as exc:
            error = self._checkpointer._driver_error(exc, operation)
            if error is None:
                raise
            raise error from exc

    # -- the durable directory -------------------------------------------------

    @overload
    def _durable(self, create: Literal[True]) -> int: ...

    @overload
    def _durable(self, create: bool) -> int | None: ...

    def _durable(self, create: bool) -> int | None:
        """``.durable`` of the namespace, its layout checked; None when there is none yet."""
        if self._durable_fd is None:
            create = create and self._may_create
            base = self._dirs.base(create)
            if base is not None:
                with self._opening:
                    if self._durable_fd is None:
                        self._durable_fd = self._open_durable(base, create)
            if self._durable_fd is None and not self._may_create:
                raise StoreNotFound(f"file store {self.root} has no durable layout")
        return self._durable_fd

    def _open_durable(self, base: int, create: bool) -> int | None:
        if create:
            fd: int | None = make_dir(base, DURABLE, _WHAT, self._modes.directory)
        else:
            fd = open_dir(base, DURABLE, _WHAT)
        if fd is None:
            return None
        try:
            version = self._layout(fd, create)
        except BaseException:
            os.close(fd)
            raise
        if version is None:  # a first writer is creating it: read as empty for now
            os.close(fd)
            return None
        return fd

    def _layout(self, fd: int, create: bool) -> int | None:
        what = "the durable store's layout file"
        found = read_file(fd, _LAYOUT, what, 64)
        if found is None and create:
            publish(fd, _LAYOUT, f"{LAYOUT_VERSION}\n".encode(), self._modes.file)
            found = read_file(fd, _LAYOUT, what, 64)
        if found is None:
            return None
        text = found[0].strip()
        if not text.isascii() or not text.isdigit():
            raise CheckpointCorrupted(f"{what} is damaged")
        version = int(text)
        if version > LAYOUT_VERSION:
            raise IncompatibleSchema(
                f"file store {self.root} has durable layout {version}; this agentflow reads up "
                f"to {LAYOUT_VERSION}: upgrade agentflow"
            )
        if version < LAYOUT_VERSION:
            raise CheckpointCorrupted(f"{what} is damaged")
        return version

    @contextlib.contextmanager
    def _within(self, parts: tuple[str, ...], create: bool) -> Iterator[int | None]:
        """The directory ``.durable/parts...`` (made when ``create``), None when missing."""
        durable = self._durable(create)
        if durable is None:
            yield None
            return
        mode = self._modes.directory if create else None
        with opened(durable, parts, _WHAT, mode) as fds:
            yield None if fds is None else (fds[-1] if fds else durable)

    def _locked(self, name: str) -> contextlib.AbstractContextManager[None]:
        """The ``flock`` of ``name`` (a run, the event log) on the checkpointer's stripes."""
        if not self._may_create:
            self._durable(create=False)  # no lock files in a root without the layout
        return self._dirs.locked(f"{DURABLE}/{name}")

    # -- lifecycle -------------------------------------------------------------

    async def close(self) -> None:
        """Release the descriptors once the calls in flight are done; safe to call twice."""
        self._closed = True
        await self._checkpointer.close()  # waits for the calls in flight
        fd, self._durable_fd = self._durable_fd, None
        if fd is not None:
            os.close(fd)
