"""One kind's journal of a record: an immutable sequence whose writes cost O(1).

A cycle's journal grows by an entry per call and each entry moves a few
times (``started``, then its receipt), and every move makes a new record,
so a journal that is copied per move makes a node of ``n`` calls cost
``O(n²)``. A :class:`Journal` is persistent instead: :meth:`Journal.put`
returns a new journal and leaves the old one as it was, in O(1), and
:meth:`Journal.position` finds a call's entry in O(1).

How: the versions of one lineage share one list, which holds the contents of
the newest version (the *tip*). A put on the tip changes the list in place
and leaves on the old version a note of what it changed (the index and the
entry that was there), pointing at the new version; an old version reads
itself by walking those notes forward to the tip (Baker's "rerooting"
trick, without the rerooting), and copies itself out (O(n), once) when it is
read whole or changed in another way. Positions of operation ids never move
in a lineage (a put replaces an entry of the same call, or appends), so one
id-to-index map serves every version: an id maps below a version's length
exactly when that version holds it.

The runtime's lease derives each write from the last stored record, and its
own view (stored record plus receipts not yet written) from the same record
with the same entries; :meth:`Journal.put` recognises a put its version
already made and returns the version it made then, so the two stay one
lineage and neither copies.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any, Final, overload

from agentflow.durable.enums import OperationState
from agentflow.durable.run.journal import OperationJournalEntry

__all__ = ["Journal", "ambiguous_in", "journal_of"]

_AMBIGUOUS: Final = OperationState.AMBIGUOUS
_STATE: Final = attrgetter("state")
#: Notes an old version walks before it copies itself out instead.
_WALK: Final = 32


class _Lineage:
    """The list the newest version of a lineage reads, and every id's place in it."""

    __slots__ = ("entries", "positions", "stamp")

    def __init__(self, entries: list[OperationJournalEntry]) -> None:
        self.entries = entries
        self.positions = {entry.operation_id: i for i, entry in enumerate(entries)}
        #: The stamp of the tip (every version of the lineage has its own).
        self.stamp = 0


class Journal(Sequence[OperationJournalEntry]):
    """An immutable journal of one kind (see the module docstring).

    Equal to a list or journal of the same entries; iterating, ``len`` and
    indexing behave as a list's. Built from any iterable of entries (O(n));
    a journal read back from a store is a plain list until the first write.
    """

    __slots__ = ("_ambiguous", "_index", "_length", "_lineage", "_new", "_next", "_old", "_stamp")

    def __init__(self, entries: Iterable[OperationJournalEntry] = ()) -> None:
        items = list(entries)
        self._adopt(_Lineage(items), len(items))
        self._ambiguous = sum(entry.state is _AMBIGUOUS for entry in items)

    def _adopt(self, lineage: _Lineage, length: int) -> None:
        """Become the tip of ``lineage``, ``length`` entries long."""
        lineage.stamp += 1
        self._lineage, self._stamp, self._length = lineage, lineage.stamp, length
        self._next: Journal | None = None
        self._index = -1
        self._old: OperationJournalEntry | None = None
        self._new: OperationJournalEntry | None = None

    @classmethod
    def _version(cls, lineage: _Lineage, length: int, ambiguous: int) -> Journal:
        journal = cls.__new__(cls)
        journal._adopt(lineage, length)
        journal._ambiguous = ambiguous
        return journal

    # -- reads -----------------------------------------------------------------------

    @property
    def ambiguous(self) -> int:
        """How many entries are ``ambiguous`` (O(1))."""
        return self._ambiguous

    def position(self, operation_id: str) -> int | None:
        """The index of the entry of ``operation_id``, None when there is none (O(1))."""
        index = self._lineage.positions.get(operation_id)
        return index if index is not None and index < self._length else None

    def find(self, operation_id: str) -> OperationJournalEntry | None:
        """The entry of ``operation_id``, None when there is none."""
        index = self.position(operation_id)
        return None if index is None else self[index]

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> OperationJournalEntry: ...
    @overload
    def __getitem__(self, index: slice) -> list[OperationJournalEntry]: ...
    def __getitem__(
        self, index: int | slice
    ) -> OperationJournalEntry | list[OperationJournalEntry]:
        if isinstance(index, slice):
            return self._entries()[index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("journal index out of range")
        version, walked = self, 0
        while version._stamp != version._lineage.stamp:  # an old version: follow its notes
            if version._index == index and version._old is not None:
                return version._old
            version, walked = version._later(), walked + 1
            if walked > _WALK:
                self._copy_out()
                return self._lineage.entries[index]
        return version._lineage.entries[index]

    def _later(self) -> Journal:
        """The version an old version's note points at."""
        later = self._next
        assert later is not None  # a version is old because a put made this one
        return later

    def _entries(self) -> list[OperationJournalEntry]:
        """This version's entries, as a list of its own (the tip's list is copied)."""
        if self._stamp != self._lineage.stamp:
            self._copy_out()
        return self._lineage.entries[: self._length]

    def __iter__(self) -> Iterator[OperationJournalEntry]:
        return iter(self._entries())

    def __reversed__(self) -> Iterator[OperationJournalEntry]:
        return reversed(self._entries())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Journal | list):
            return len(other) == self._length and self._entries() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Journal({self._entries()!r})"

    def __copy__(self) -> Journal:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Journal:
        return Journal(copy.deepcopy(self._entries(), memo))

    def __reduce__(self) -> tuple[type[Journal], tuple[list[OperationJournalEntry]]]:
        return Journal, (self._entries(),)

    # -- writes ----------------------------------------------------------------------

    def put(self, index: int, entry: OperationJournalEntry) -> Journal:
        """A journal with ``entry`` at ``index`` (``len(self)`` appends), in O(1).

        An entry replaced must be of the same call, and an appended call must
        be new (:class:`ValueError` otherwise: the caller found the place by
        :meth:`position`). ``self`` stays as it was.
        """
        if self._stamp != self._lineage.stamp:
            if self._next is not None and self._index == index and self._new is entry:
                return self._next  # the put this version made already
            self._copy_out()
        lineage, length = self._lineage, self._length
        entries, ambiguous = lineage.entries, self._ambiguous + (entry.state is _AMBIGUOUS)
        old: OperationJournalEntry | None = None
        if index == length:
            if entry.operation_id in lineage.positions:
                raise ValueError(f"call {entry.operation_id!r} is in the journal already")
            entries.append(entry)
            lineage.positions[entry.operation_id] = index
        elif 0 <= index < length:
            old = entries[index]
            if old.operation_id != entry.operation_id:
                raise ValueError(f"entry {index} journals another call than {entry.operation_id!r}")
            ambiguous -= old.state is _AMBIGUOUS
            entries[index] = entry
        else:
            raise IndexError("journal index out of range")
        new = Journal._version(lineage, length + (old is None), ambiguous)
        self._next, self._index, self._old, self._new = new, index, old, entry
        return new

    def _copy_out(self) -> None:
        """Make this old version the tip of a lineage of its own (O(n), once)."""
        undone: dict[int, OperationJournalEntry] = {}
        version = self
        while version._stamp != version._lineage.stamp:
            if version._old is not None and version._index < self._length:
                undone.setdefault(version._index, version._old)
            version = version._later()
        entries = version._lineage.entries[: self._length]
        for index, old in undone.items():
            entries[index] = old
        self._adopt(_Lineage(entries), self._length)


def journal_of(entries: Sequence[OperationJournalEntry]) -> Journal:
    """``entries`` as a :class:`Journal` (itself when it is one; else O(n), once)."""
    return entries if isinstance(entries, Journal) else Journal(entries)


def ambiguous_in(entries: Sequence[OperationJournalEntry]) -> bool:
    """Whether any entry is ``ambiguous`` (O(1) for a :class:`Journal`)."""
    if isinstance(entries, Journal):
        return entries.ambiguous > 0
    return _AMBIGUOUS in map(_STATE, entries)  # the scan in C
