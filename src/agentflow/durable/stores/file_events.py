"""An accepted-once event store on the local file system, beside the file durable store.

One file per accepted event, a header line and the canonical event bytes,
under several names (hard links) in ``.durable/events/``:

```
seq/<sequence:016x>                    every sequence drawn: always exactly 1..N
runs/<h(run_id)>/<sequence:016x>       the events of one run
parents/<h(parent_run_id)>/<sequence>  the events whose parent is that run
ids/<h(event_id)>                      the accepted event: this name exists iff it was accepted
```

``h`` is BLAKE2b-128 in hex (the header holds the ids themselves, which reads
check). An append holds the namespace's event lock, so sequences are drawn
and accepted one at a time, in order: it draws N + 1, writes the file,
links it under ``seq/``, ``runs/`` and ``parents/``, makes those durable,
and commits by linking it under ``ids/``. A kill before the commit leaves a
drawn sequence whose event was never accepted: replays skip it (its
``ids/`` name is not the same file) and a re-sent append is accepted under
a later sequence. So a replay cursor ``{"sequence": n}`` never skips an
accepted event. Replay lists one run's index (and its children's) and reads
only the page; every event read back is checked against its digest.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import heapq
import os
import stat
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

from agentflow.checkpoint.file.fs import (
    create_file,
    link_refused,
    opened,
    read_file,
    unlink,
    write_all,
)
from agentflow.durable.canonical import canonical_json
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.events import (
    AcceptedEvent,
    AppendOnceResult,
    check_append,
    repeated_append,
    run_member,
    sequence_of,
)
from agentflow.durable.paged import ReplayedEvents
from agentflow.durable.parts import RunParts
from agentflow.durable.stores.file_base import FileStoreBase
from agentflow.durable.stores.sqlite_events import _accepted
from agentflow.durable.validators import CapabilityRef
from agentflow.errors import InvalidArgument

__all__ = ["FileRunEventStore"]

_EVENTS: Final = "events"
_MEMBERS: Final = {"runs": "run_id", "parents": "parent_run_id"}
_TEMP: Final = ".append.tmp"
_WHAT: Final = "the durable store's event log"
_FORMAT: Final = 1


def _name(text: str) -> str:
    """The file name of an id: its BLAKE2b-128 (ids are any text, of any length)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _seq_name(sequence: int) -> str:
    return f"{sequence:016x}"


def _damaged(what: str) -> DurableCorrupted:
    return DurableCorrupted("checkpoint_row_invalid", f"stored event {what} is damaged")


def _header(data: bytes, where: str) -> tuple[dict[str, Any], bytes]:
    """The header of an event file and its event bytes."""
    end = data.find(b"\n")
    try:
        header = orjson.loads(data[:end]) if end > 0 else None
    except orjson.JSONDecodeError:
        header = None
    if (
        type(header) is not dict
        or header.get("format") != _FORMAT
        or type(header.get("event_id")) is not str
        or type(header.get("payload_digest")) is not str
        or type(header.get("sequence")) is not int
        or header["sequence"] < 1
    ):
        raise _damaged(where)
    return header, data[end + 1 :]


class FileRunEventStore(ReplayedEvents, FileStoreBase):
    """A :class:`~agentflow.durable.DurableEventStore` as files under ``root``.

    Takes the arguments of :class:`~agentflow.durable.stores.file.FileDurableStore`.
    Cursors are ``{"sequence": n}``, one sequence per namespace.
    """

    #: The highest sequence this store saw drawn; where the next search starts.
    _drawn: int = 0

    @property
    def store_ref(self) -> CapabilityRef:
        return CapabilityRef("events.file", "1")

    async def append_once(
        self, event_id: str, payload_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        computed = check_append(event_id, payload_digest, event)
        if not event_id.isascii():
            try:
                event_id.encode()
            except UnicodeEncodeError as exc:
                raise InvalidArgument("event_id is not valid Unicode") from exc
        if computed == payload_digest:
            data = self._parts.seal_event(event_id, canonical_json(event, what="event payload"))
            runs = {
                index: run
                for index, member in _MEMBERS.items()
                if (run := run_member(event, member)) is not None
            }
            found = await self._io(
                "append_once", self._append, event_id, payload_digest, data, runs
            )
        else:  # refused either way; the stored digest decides which error
            found = await self._io("append_once", self._stored, event_id)
        inserted, stored = found
        if inserted:
            assert stored is not None
            return AppendOnceResult(True, {"sequence": stored[1]})
        return repeated_append(event_id, payload_digest, computed, stored)

    def _stored(self, event_id: str) -> tuple[bool, tuple[str, int] | None]:
        with self._within((_EVENTS, "ids"), create=False) as ids:
            return False, None if ids is None else self._lookup(ids, event_id)

    def _lookup(self, ids: int, event_id: str) -> tuple[str, int] | None:
        """The digest and sequence ``event_id`` was accepted with, or None."""
        found = read_file(ids, _name(event_id), f"the accepted event {event_id!r}")
        if found is None:
            return None
        header, _ = _header(found[0], repr(event_id))
        if header["event_id"] != event_id:
            raise _damaged(repr(event_id))
        return header["payload_digest"], header["sequence"]

    def _append(
        self, event_id: str, digest: str, data: bytes, runs: dict[str, str]
    ) -> tuple[bool, tuple[str, int] | None]:
        with self._locked(_EVENTS), self._within((_EVENTS,), create=True) as events:
            assert events is not None
            with opened(events, ("ids",), _WHAT, self._modes.directory) as ids:
                assert ids is not None
                stored = self._lookup(ids[0], event_id)
                if stored is not None:
                    return False, stored
                sequence = self._write_event(events, event_id, digest, data, runs)
                self._link(events, ids[0], _name(event_id))  # the commit
            unlink(events, _TEMP)
            return True, (digest, sequence)

    def _write_event(
        self, events: int, event_id: str, digest: str, data: bytes, runs: dict[str, str]
    ) -> int:
        """Draw the next sequence and give the event every name but its id, durably."""
        modes = self._modes
        with opened(events, ("seq",), _WHAT, modes.directory) as seq:
            assert seq is not None
            sequence = self._draw(seq[0]) + 1
            header = {
                "format": _FORMAT,
                "event_id": event_id,
                "payload_digest": digest,
                "sequence": sequence,
                **{_MEMBERS[index]: run for index, run in runs.items()},
            }
            unlink(events, _TEMP)  # what a killed append left
            fd = create_file(events, _TEMP, os.O_WRONLY | os.O_EXCL, _WHAT, modes.file)
            try:
                write_all(fd, (orjson.dumps(header), b"\n", data))
                os.fsync(fd)
            finally:
                os.close(fd)
            self._link(events, seq[0], _seq_name(sequence))
        self._drawn = sequence
        for index, run in runs.items():
            with opened(events, (index, _name(run)), _WHAT, modes.directory) as members:
                assert members is not None
                self._link(events, members[-1], _seq_name(sequence))
        return sequence

    @staticmethod
    def _link(events: int, directory: int, name: str) -> None:
        """Give the event in flight one more name, durably."""
        os.link(_TEMP, name, src_dir_fd=events, dst_dir_fd=directory, follow_symlinks=False)
        os.fsync(directory)

    def _draw(self, seq: int) -> int:
        """N, the highest sequence drawn: ``seq/`` holds exactly 1..N, so a galloping
        search from the last one this store saw costs O(log of the appends since)."""

        def drawn(sequence: int) -> bool:
            try:
                os.stat(_seq_name(sequence), dir_fd=seq, follow_symlinks=False)
            except FileNotFoundError:
                return False
            return True

        low = self._drawn if self._drawn and drawn(self._drawn) else 0
        step = 1
        while drawn(low + step):
            low, step = low + step, step * 2
        high = low + step  # low is drawn (or 0), high is not
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if drawn(middle) else (low, middle)
        return low

    async def _replay(
        self, run_id: str, after: Mapping[str, Any] | None, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        start = sequence_of(after)
        indexes = ("runs", "parents") if include_children else ("runs",)
        return await self._io("replay", self._read_events, run_id, start, count, indexes)

    def _read_events(
        self, run_id: str, start: int, count: int, indexes: tuple[str, ...]
    ) -> list[AcceptedEvent]:
        found: list[AcceptedEvent] = []
        with self._within((_EVENTS,), create=False) as events, contextlib.ExitStack() as held:
            ids = None if events is None else held.enter_context(opened(events, ("ids",), _WHAT))
            if events is None or ids is None:
                return found
            members = {}
            for index in indexes:
                fds = held.enter_context(opened(events, (index, _name(run_id)), _WHAT))
                if fds is not None:
                    members[index] = fds[-1]
            listed = [_sequences(fd, index, start) for index, fd in members.items()]
            last = start
            for sequence, index in heapq.merge(*listed):
                if sequence == last:  # in both indexes (its own parent)
                    continue
                last = sequence
                listed_in = members[index]
                accepted = _read(self._parts, listed_in, ids[0], index, run_id, sequence=sequence)
                if accepted is not None:
                    found.append(accepted)
                    if len(found) == count:
                        break
        return found


def _sequences(directory: int, index: str, start: int) -> Iterator[tuple[int, str]]:
    """The sequences an index directory holds after ``start``, in order."""
    names = sorted(os.listdir(directory))  # fixed-width hex: name order is sequence order
    for name in names[bisect.bisect_right(names, _seq_name(start)) :]:
        if len(name) == 16 and name.isalnum():
            yield int(name, 16), index


def _read(
    parts: RunParts, directory: int, ids: int, index: str, run_id: str, *, sequence: int
) -> AcceptedEvent | None:
    """The event at ``sequence`` of an index, None when it was drawn but never accepted."""
    where = f"{sequence} of run {run_id!r}"
    found = read_file(directory, _seq_name(sequence), f"stored event {where}")
    if found is None:
        raise _damaged(where)
    data, status = found
    header, body = _header(data, where)
    if header["sequence"] != sequence or header.get(_MEMBERS[index]) != run_id:
        raise _damaged(where)
    try:
        named = os.stat(_name(header["event_id"]), dir_fd=ids, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(named.st_mode):
        raise link_refused(f"the accepted event {header['event_id']!r}")
    if (named.st_ino, named.st_dev) != (status.st_ino, status.st_dev):
        return None
    return _accepted(parts, (sequence, header["event_id"], header["payload_digest"], body))
