"""The file store's event log: accepted-once events, one file each, under several names.

Each accepted event is one file (a header line, then its stored payload)
with several names (hard links) in ``.durable/events/``:

```
seq/<sequence:016x>                    every sequence drawn: always exactly 1..N
runs/<h(run_id)>/<sequence:016x>       the events of one run
parents/<h(parent_run_id)>/<sequence>  the events whose parent is that run
ids/<h(event_id)>                      the accepted event: this name exists iff it was accepted
```

``h`` is BLAKE2b-128 in hex (the header holds the ids themselves, which reads
check). Writers hold the namespace's event lock, so sequences are drawn and
accepted one at a time, in order: an append draws N + 1, writes the file,
links it under ``seq/``, ``runs/`` and ``parents/``, makes those durable,
and commits by linking it under ``ids/``. A kill before the commit leaves a
drawn sequence whose event was never accepted: replays skip it (its ``ids/``
name is not that event) and a re-sent append is accepted under a later
sequence. So a replay cursor ``{"sequence": n}`` never skips an accepted
event. Replay lists one run's index (and its children's) and reads only the
page; every event read back is checked against its digest. Deleting a run's
events unlinks each one's ``ids/`` name first (no longer accepted), then
its other names, and leaves an empty file at its ``seq/`` name, which must
stay drawn.
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

from agentflow.checkpoint.envelope import stored_event
from agentflow.checkpoint.events import EventsBase
from agentflow.checkpoint.file.directories import FileParts
from agentflow.checkpoint.file.fs import (
    link_refused,
    link_replace,
    opened,
    read_file,
    rmdir,
    unlink,
    write_new,
)
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.run.events import (
    AcceptedEvent,
    AppendOnceResult,
    repeated_append,
    run_member,
)
from agentflow.durable.wire.canonical import canonical_json
from agentflow.errors import InvalidArgument

__all__ = ["EVENTS", "FileEvents"]

#: The event log's directory in ``.durable``, and the name of its lock.
EVENTS: Final = "events"
EVENTS_LOCK: Final = ".durable/events"
_MEMBERS: Final = {"runs": "run_id", "parents": "parent_run_id"}
_TEMP: Final = ".append.tmp"
_GONE: Final = ".gone.tmp"
_WHAT: Final = "the store's event log"
_FORMAT: Final = 1


def _name(text: str) -> str:
    """The file name of an id: its BLAKE2b-128 (ids are any text, of any length)."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _seq_name(sequence: int) -> str:
    return f"{sequence:016x}"


def _damaged(what: str) -> DurableCorrupted:
    return DurableCorrupted("checkpoint_row_invalid", f"stored event {what} is damaged")


def _header(data: bytes, where: str) -> tuple[dict[str, Any], bytes]:
    """The header of an event file and its stored payload."""
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


class FileEvents(FileParts, EventsBase):
    """The event part of :class:`~agentflow.checkpoint.file.FileCheckpointer`."""

    #: The highest sequence this store saw drawn; where the next search starts.
    _drawn: int = 0

    async def _append_once(
        self, event_id: str, payload_digest: str, computed_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        if not event_id.isascii():
            try:
                event_id.encode()
            except UnicodeEncodeError as exc:
                raise InvalidArgument("event_id is not valid Unicode") from exc
        if computed_digest == payload_digest:
            data = self._parts.seal_event(event_id, canonical_json(event, what="event payload"))
            runs = {
                index: run
                for index, member in _MEMBERS.items()
                if (run := run_member(event, member)) is not None
            }
            inserted, stored = await self._io(
                "append_once", self._append, event_id, payload_digest, data, runs
            )
        else:  # refused either way; the stored digest decides which error
            inserted, stored = False, await self._io("append_once", self._stored, event_id)
        if inserted:
            assert stored is not None
            return AppendOnceResult(True, {"sequence": stored[1]})
        return repeated_append(event_id, payload_digest, computed_digest, stored)

    def _stored(self, event_id: str) -> tuple[str, int] | None:
        with self._within((EVENTS, "ids"), create=False) as ids:
            return None if ids is None else self._lookup(ids, event_id)

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
        with self._lock(EVENTS_LOCK), self._within((EVENTS,), create=True) as events:
            assert events is not None
            with opened(events, ("ids",), _WHAT, self._modes.directory) as ids:
                assert ids is not None
                stored = self._lookup(ids[0], event_id)
                if stored is not None:
                    return False, stored
                sequence = self._write_event(events, event_id, digest, data, runs)
                _link(events, ids[0], _name(event_id))  # the commit
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
            write_new(events, _TEMP, (orjson.dumps(header), b"\n", data), _WHAT, modes.file)
            _link(events, seq[0], _seq_name(sequence))
        self._drawn = sequence
        for index, run in runs.items():
            with opened(events, (index, _name(run)), _WHAT, modes.directory) as members:
                assert members is not None
                _link(events, members[-1], _seq_name(sequence))
        return sequence

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
        self, run_id: str, after: int, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        indexes = ("runs", "parents") if include_children else ("runs",)
        return await self._io("replay", self._read_events, run_id, after, count, indexes)

    def _read_events(
        self, run_id: str, start: int, count: int, indexes: tuple[str, ...]
    ) -> list[AcceptedEvent]:
        found: list[AcceptedEvent] = []
        with self._within((EVENTS,), create=False) as events, contextlib.ExitStack() as held:
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
                header, payload, accepted = _read(members[index], ids[0], index, run_id, sequence)
                if accepted:
                    event_id, digest = header["event_id"], header["payload_digest"]
                    where = f"stored event {event_id!r}"
                    cursor = {"sequence": sequence}
                    found.append(
                        stored_event(
                            self._parts, event_id, digest, payload, cursor=cursor, where=where
                        )
                    )
                    if len(found) == count:
                        break
        return found

    async def _delete_events(self, run_id: str) -> int:
        return await self._io(
            "delete", self._locked_call, (EVENTS_LOCK,), self._drop_events, run_id
        )

    def _drop_events(self, run_id: str) -> int:
        """Delete every event of ``run_id`` (the caller holds the event lock); return
        how many of them were accepted."""
        accepted = 0
        with (
            self._within((EVENTS,), create=False) as events,
            contextlib.ExitStack() as held,
        ):
            if events is None:
                return 0
            fds = held.enter_context(opened(events, ("runs", _name(run_id)), _WHAT))
            ids = held.enter_context(opened(events, ("ids",), _WHAT))
            seq = held.enter_context(opened(events, ("seq",), _WHAT))
            if fds is None:
                return 0
            if ids is None or seq is None:  # made by the first append, before any index
                raise _damaged(f"log of run {run_id!r}")
            runs, run = fds
            for sequence, _ in list(_sequences(run, "runs", 0)):
                header, _, live = _read(run, ids[0], "runs", run_id, sequence)
                if live:  # no longer accepted, before anything else goes
                    accepted += unlink(ids[0], _name(header["event_id"]))
                if type(parent := header.get("parent_run_id")) is str:
                    with opened(events, ("parents", _name(parent)), _WHAT) as parents:
                        if parents is not None:
                            unlink(parents[-1], _seq_name(sequence))
                # The sequence stays drawn; the payload goes.
                write_new(seq[0], _GONE, (), _WHAT, self._modes.file)
                os.replace(_GONE, _seq_name(sequence), src_dir_fd=seq[0], dst_dir_fd=seq[0])
                unlink(run, _seq_name(sequence))
            for directory in (ids[0], seq[0], run):
                os.fsync(directory)
            if rmdir(runs, _name(run_id)):
                os.fsync(runs)
        return accepted

    async def _rewrite_event(self, event_id: str, stored: bytes) -> bool:
        return await self._io("rekey", self._rewrite, event_id, stored)

    def _rewrite(self, event_id: str, stored: bytes) -> bool:
        """Give the accepted event a new file holding ``stored``, name by name, its
        ``ids/`` name last; a replay meanwhile tells the two files apart by header."""
        with self._lock(EVENTS_LOCK), self._within((EVENTS,), create=False) as events:
            if events is None:
                return False
            with opened(events, ("ids",), _WHAT) as ids:
                found = None if ids is None else read_file(ids[0], _name(event_id), _WHAT)
                if ids is None or found is None:
                    return False
                header, _ = _header(found[0], repr(event_id))
                if header["event_id"] != event_id:
                    raise _damaged(repr(event_id))
                line = found[0][: found[0].index(b"\n") + 1]
                write_new(events, _TEMP, (line, stored), _WHAT, self._modes.file)
                names: list[tuple[tuple[str, ...], str]] = [
                    (("seq",), _seq_name(header["sequence"]))
                ]
                for index, member in _MEMBERS.items():
                    if type(run := header.get(member)) is str:
                        names.append(((index, _name(run)), _seq_name(header["sequence"])))
                for parts, name in names:
                    with opened(events, parts, _WHAT) as fds:
                        if fds is not None:
                            link_replace(events, _TEMP, name, into=fds[-1])
                            os.fsync(fds[-1])
                link_replace(events, _TEMP, _name(event_id), into=ids[0])
                os.fsync(ids[0])
            unlink(events, _TEMP)
            return True


def _link(events: int, directory: int, name: str) -> None:
    """Give the event in flight one more name, durably."""
    os.link(_TEMP, name, src_dir_fd=events, dst_dir_fd=directory, follow_symlinks=False)
    os.fsync(directory)


def _sequences(directory: int, index: str, start: int) -> Iterator[tuple[int, str]]:
    """The sequences an index directory holds after ``start``, in order."""
    names = sorted(os.listdir(directory))  # fixed-width hex: name order is sequence order
    for name in names[bisect.bisect_right(names, _seq_name(start)) :]:
        if len(name) == 16 and name.isalnum():
            yield int(name, 16), index


def _read(
    directory: int, ids: int, index: str, run_id: str, sequence: int
) -> tuple[dict[str, Any], bytes, bool]:
    """The header and payload at ``sequence`` of an index, and whether the event was
    accepted: a drawn event whose ``ids/`` name is another file, or none, was not."""
    where = f"{sequence} of run {run_id!r}"
    found = read_file(directory, _seq_name(sequence), f"stored event {where}")
    if found is None:
        raise _damaged(where)
    data, status = found
    header, payload = _header(data, where)
    if header["sequence"] != sequence or header.get(_MEMBERS[index]) != run_id:
        raise _damaged(where)
    name = _name(header["event_id"])
    try:
        named = os.stat(name, dir_fd=ids, follow_symlinks=False)
    except FileNotFoundError:
        return header, payload, False
    if stat.S_ISLNK(named.st_mode):
        raise link_refused(f"the accepted event {header['event_id']!r}")
    if (named.st_ino, named.st_dev) == (status.st_ino, status.st_dev):
        return header, payload, True
    # Another file: a later acceptance of the id, or this event rewritten meanwhile.
    accepted = read_file(ids, name, f"the accepted event {header['event_id']!r}")
    return header, payload, accepted is not None and _header(accepted[0], where)[0] == header
