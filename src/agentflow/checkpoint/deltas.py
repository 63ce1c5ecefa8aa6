"""Steps stored as what they changed: the records of a delta chain and their replay.

A put whose checkpoint carries :class:`~agentflow.checkpoint.model.StateChanges`
is stored as a *chained* record (envelope version 3, :mod:`.envelope`): a
**full** state, or a **delta** (what the step changed in the state of its
base: the keys it set, the items it appended to lists, the keys it removed).
Both go through the store's codec like any checkpoint (the record's own
fields as they are, its ``state`` replaced by the chain document below), so
sealing and the integrity envelope cover them and no backend stores anything
new:

* full: ``{"t": token, "full": state}``;
* delta: ``{"t": token, "bt": the base's token, "c": [the steps its state is
  replayed from, its full state first and its base last], "set": {key:
  value}, "add": {key: [base length, [items]]}, "del": [key]}`` (empty parts
  left out; ``"l": 1`` marks a segment, below).

A token names the stored state of a record (random, kept when a checkpoint is
put back as it was read). A delta names its base's token, so a base rewritten
with other content, or missing, makes it raise
:class:`~agentflow.errors.CheckpointCorrupted` instead of reading as another
state; a list it appends to must still have the length it recorded.

**Two levels.** A step's delta is stored on the step before it; every
:data:`SEGMENT_STEPS` steps the delta is a *segment* instead: everything that
changed since the previous segment (or the full state), stored on that one.
So a read replays at most :data:`MAX_SEGMENTS` segments and
:data:`SEGMENT_STEPS` steps, whose records its delta lists (one read of
exactly them), and every item is stored about twice (in its step and in one
segment) however long the chain. A full state is stored again when the
segments since the last one weigh :data:`FULL_RATIO` times it (so the full
states of a growing state form a geometric series: total bytes stay O(N)), or
when :data:`MAX_SEGMENTS` segments are on it: past that many steps
(:data:`SEGMENT_STEPS` x :data:`MAX_SEGMENTS`) the bound on a read wins, and
full states come every so many steps, so bytes grow again with the square of
the length, 1/512 as fast as storing every state.
"""

from __future__ import annotations

import os
import random
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple, cast

from agentflow.checkpoint.model import Checkpoint, StateChanges
from agentflow.errors import CheckpointCorrupted, InvalidArgument

__all__ = [
    "FULL_RATIO",
    "MAX_SEGMENTS",
    "MAX_SPAN",
    "SEGMENT_STEPS",
    "ChainLink",
    "ChainLinks",
    "ChainRecord",
    "Delta",
    "check_changes",
    "full_document",
    "full_link",
    "link_of",
    "next_delta",
    "new_token",
    "read_chained",
    "replayed",
]

#: Steps stored on the step before them between two segments.
SEGMENT_STEPS: Final = 16
#: Segments on one full state at most.
MAX_SEGMENTS: Final = 32
#: The segments on a full state may weigh this many times it.
FULL_RATIO: Final = 2.0
#: No delta is more than this many steps above its full state (what ``prune``
#: reads above its bound to keep every chain whole).
MAX_SPAN: Final = 4 * SEGMENT_STEPS * MAX_SEGMENTS
_TOKENS: Final = random.Random(os.urandom(16))
_TOKEN_BITS: Final = 62
_NO_KEYS: Final[frozenset[str]] = frozenset()


def new_token() -> int:
    """A fresh identity for a stored state."""
    return _TOKENS.getrandbits(_TOKEN_BITS)


class Segment(NamedTuple):
    """A full state or a segment: what the steps after it are stored against."""

    step: int
    token: int
    #: The steps its own state is replayed from (empty for a full state).
    chain: tuple[int, ...]
    #: The keys its state holds, and the length of each list among them.
    keys: frozenset[str]
    lengths: Mapping[str, int]


class ChainLink(NamedTuple):
    """Where a stored chained record stands: what a delta stored on it needs."""

    step: int
    token: int
    #: The steps its state is replayed from, full state first (empty: it is one).
    chain: tuple[int, ...]
    #: Stored bytes of the full state, and of the segments on it so far.
    full_size: int
    since: int
    #: The last segment (or the full state) at or below it, the steps stored
    #: one on another since, and the keys those set, appended to and removed.
    segment: Segment
    steps: int = 0
    written: frozenset[str] = _NO_KEYS
    appended: frozenset[str] = _NO_KEYS
    removed: frozenset[str] = _NO_KEYS

    @property
    def anchor(self) -> int:
        """The step of its chain's full state."""
        return self.chain[0] if self.chain else self.step


def _segment(step: int, token: int, chain: tuple[int, ...], state: Mapping[str, Any]) -> Segment:
    lengths = {key: len(value) for key, value in state.items() if type(value) is list}
    return Segment(step, token, chain, frozenset(state), lengths)


def full_link(step: int, token: int, size: int, state: Mapping[str, Any]) -> ChainLink:
    """The link of a full state of ``size`` stored bytes."""
    return ChainLink(step, token, (), size, 0, _segment(step, token, (), state))


@dataclass(frozen=True, slots=True)
class Delta:
    """A delta to store: its chain document, and how to link it once its size is known."""

    doc: dict[str, Any]
    #: The record it is stored on, and whether it is a segment.
    base: ChainLink
    segment: bool

    def fits(self, size: int) -> bool:
        """Whether a segment of ``size`` stored bytes keeps the full-state ratio."""
        base = self.base
        return not self.segment or base.since + size <= FULL_RATIO * base.full_size

    def link(self, step: int, token: int, size: int, state: Mapping[str, Any]) -> ChainLink:
        """The link of this delta, stored at ``step`` with ``token`` in ``size`` bytes."""
        return link_of(step, token, size, doc=self.doc, state=state, base=self.base)


def link_of(
    step: int,
    token: int,
    size: int,
    *,
    doc: Mapping[str, Any],
    state: Mapping[str, Any],
    base: ChainLink | None,
) -> ChainLink:
    """The link of the chained record at ``step`` (its chain document ``doc``, its
    state ``state``, ``size`` stored bytes) stored on the record of ``base`` (None:
    a full state)."""
    if base is None:
        return full_link(step, token, size, state)
    chain = tuple(doc["c"])
    if doc.get("l") == 1:
        segment = _segment(step, token, chain, state)
        return ChainLink(step, token, chain, base.full_size, base.since + size, segment)
    return ChainLink(
        step,
        token,
        chain,
        base.full_size,
        base.since,
        base.segment,
        base.steps + 1,
        base.written | doc.get("set", {}).keys(),
        base.appended | doc.get("add", {}).keys(),
        base.removed | frozenset(doc.get("del", ())),
    )


def next_delta(
    state: Mapping[str, Any], changes: StateChanges, token: int, base: ChainLink, step: int
) -> Delta | None:
    """The delta that stores ``state`` (``changes`` since the record of ``base``) at
    ``step``: on that record, or as a segment on the last segment; None when a full
    state is due instead."""
    if step - base.anchor > MAX_SPAN:
        return None
    written, removed = set(changes.written), set(changes.removed)
    appended = dict(changes.appended)  # no item appended still makes a missing key []
    if base.steps + 1 < SEGMENT_STEPS and not (changes.segment and not base.steps):
        adds = {
            key: [len(state[key]) - n, state[key][len(state[key]) - n :]]
            for key, n in appended.items()
        }
        chain = (*base.chain, base.step)
        doc = _document(
            token, base.token, chain, state=state, written=written, adds=adds, removed=removed
        )
        return Delta(doc, base, segment=False)
    segment = base.segment
    if len(segment.chain) >= MAX_SEGMENTS:
        return None
    # Everything since the segment: a key removed and there again is set whole.
    removed |= base.removed
    written |= base.written | (removed & state.keys())
    removed &= segment.keys - state.keys()
    adds = {}
    for key in (base.appended | appended.keys()) - written:
        if key in state:
            length = segment.lengths.get(key, 0)
            if key in segment.keys and key not in segment.lengths:
                written.add(key)  # not a list at the segment: set whole
            else:
                adds[key] = [length, state[key][length:]]
    chain = (*segment.chain, segment.step)
    doc = _document(
        token,
        segment.token,
        chain,
        state=state,
        written=written & state.keys(),
        adds=adds,
        removed=removed,
    )
    doc["l"] = 1
    return Delta(doc, base, segment=True)


def _document(
    token: int,
    base_token: int,
    chain: tuple[int, ...],
    *,
    state: Mapping[str, Any],
    written: set[str] | frozenset[str],
    adds: dict[str, list[Any]],
    removed: set[str],
) -> dict[str, Any]:
    doc: dict[str, Any] = {"t": token, "bt": base_token, "c": list(chain)}
    if written:
        doc["set"] = {key: state[key] for key in state if key in written}
    if adds:
        doc["add"] = adds
    if removed:
        doc["del"] = sorted(removed)
    return doc


def full_document(state: Mapping[str, Any], token: int) -> dict[str, Any]:
    """The chain document of a full state."""
    return {"t": token, "full": state}


class ChainLinks:
    """The links of the chained records a store wrote or read lately, per thread.

    A put with changes needs the link of its base; the runtime builds each step
    on the one it stored or read just before, so this store remembers them.
    Without it (another process wrote the base, or it was forgotten) the step is
    stored as a full state: never a wrong delta, at worst a larger record.
    Bounded: the few steps last used of the threads last used. Safe from any
    thread (puts encode on writer threads).
    """

    _THREADS: Final = 1_024
    _STEPS: Final = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: OrderedDict[str, OrderedDict[int, ChainLink]] = OrderedDict()

    def get(self, thread: str, step: int) -> ChainLink | None:
        """The link of (thread, step), also when only the segment of a later step
        it remembers is that step (a segment stores everything since the one before
        it, so a copy or a rekey puts it back on a step far below)."""
        with self._lock:
            steps = self._threads.get(thread)
            if steps is None:
                return None
            found = steps.get(step)
            if found is not None:
                steps.move_to_end(step)
                return found
            for link in steps.values():
                segment = link.segment
                if segment.step == step:
                    return ChainLink(
                        step, segment.token, segment.chain, link.full_size, link.since, segment
                    )
            return None

    def put(self, thread: str, step: int, link: ChainLink | None) -> None:
        """Remember ``link`` for (thread, step); None forgets it (a plain record)."""
        with self._lock:
            steps = self._threads.get(thread)
            if link is None:
                if steps is not None:
                    steps.pop(step, None)
                return
            if steps is None:
                steps = self._threads[thread] = OrderedDict()
                if len(self._threads) > self._THREADS:
                    self._threads.popitem(last=False)
            else:
                self._threads.move_to_end(thread)
            steps[step] = link
            steps.move_to_end(step)
            if len(steps) > self._STEPS:
                steps.popitem(last=False)

    def forget(self, thread: str) -> None:
        with self._lock:
            self._threads.pop(thread, None)


def check_changes(cp: Checkpoint) -> StateChanges | None:
    """``cp.changes`` when they still describe its state and are consistent with it,
    None when it has none or they describe another state (it is then stored whole).

    Raises :class:`~agentflow.errors.InvalidArgument` for changes that claim what
    the state contradicts: a base that is not an earlier step, a written key the
    state lacks, an appended key that is not a list as long, a removed key it
    holds, a key named twice.
    """
    changes = cp.changes
    if changes is None:
        return None
    if not isinstance(changes, StateChanges):
        raise InvalidArgument(f"changes must be StateChanges or None, got {changes!r:.80}")
    if not changes.describes(cp.state):
        return None
    where = f"checkpoint of thread {cp.thread!r} step {cp.step}: changes"
    base = changes.base
    if base is not None and (type(base) is not int or not 0 <= base < cp.step):
        raise InvalidArgument(f"{where} name base {base!r}, not an earlier step")
    named = [*changes.written, *changes.appended, *changes.removed]
    if len(set(named)) != len(named) or not all(type(key) is str for key in named):
        raise InvalidArgument(f"{where} name a key twice, or a key that is not a str")
    state = cp.state
    if any(key not in state for key in changes.written):
        raise InvalidArgument(f"{where} name a written key the state does not hold")
    if any(key in state for key in changes.removed):
        raise InvalidArgument(f"{where} name a removed key the state still holds")
    for key, count in changes.appended.items():
        value = state.get(key)
        if type(count) is not int or count < 0 or type(value) is not list or len(value) < count:
            raise InvalidArgument(f"{where} append {count!r} items to {key!r}, which it lacks")
    return changes


@dataclass(frozen=True, slots=True)
class ChainRecord:
    """A decoded chained record: a full state, or a delta still to be replayed."""

    #: The record as stored: its own fields, and as ``state`` the full state (a
    #: full record) or the delta's chain document.
    stored: Checkpoint
    token: int
    #: Stored bytes of the record.
    size: int
    #: The steps a delta is replayed from, full state first (empty: a full state).
    chain: tuple[int, ...] = ()
    base_token: int = 0

    @property
    def step(self) -> int:
        return self.stored.step

    @property
    def revision(self) -> int:
        return self.stored.revision

    @property
    def ts(self) -> str:
        return self.stored.ts

    @property
    def base(self) -> int | None:
        """The step it is stored on (None: a full state)."""
        return self.chain[-1] if self.chain else None

    @property
    def anchor(self) -> int:
        """The step of its chain's full state."""
        return self.chain[0] if self.chain else self.step

    def whole(self, state: dict[str, Any]) -> Checkpoint:
        """The checkpoint this record stores, once its full ``state`` is known."""
        doc = self.stored.state
        if not self.chain:
            changes = StateChanges(state, base=None, token=self.token)
        else:
            changes = StateChanges(
                state,
                base=self.chain[-1],
                written=doc.get("set", ()),
                appended={key: len(add[1]) for key, add in doc.get("add", {}).items()},
                removed=doc.get("del", ()),
                token=self.token,
                segment=doc.get("l") == 1,
            )
        return replace(self.stored, state=state, changes=changes)

    def link(self, state: Mapping[str, Any], base: ChainLink | None) -> ChainLink:
        """Its link, from its replayed ``state`` and its base's link."""
        return link_of(
            self.step, self.token, self.size, doc=self.stored.state, state=state, base=base
        )


def _corrupted(cp: Checkpoint, what: str) -> CheckpointCorrupted:
    return CheckpointCorrupted(f"thread {cp.thread!r} step {cp.step}: the stored {what}")


def _is_int(value: object) -> bool:
    """A non-negative JSON integer (never a bool)."""
    return type(value) is int and value >= 0


def read_chained(stored: Checkpoint, size: int) -> ChainRecord:
    """The chained record a codec decoded as ``stored`` (``size`` stored bytes).

    A chain document without a token, a full state that is not a mapping, or a
    delta whose chain is not strictly ascending steps below its own raises
    :class:`~agentflow.errors.CheckpointCorrupted`; what a delta changes is
    checked as it is replayed."""
    doc = stored.state
    token = doc.get("t")
    if not _is_int(token):
        raise _corrupted(stored, "chained record has no valid token")
    if "full" in doc:
        if len(doc) != 2 or type(doc["full"]) is not dict:
            raise _corrupted(stored, "full state of its chain is malformed")
        return ChainRecord(stored, cast(int, token), size)
    chain, base_token = doc.get("c"), doc.get("bt")
    if type(chain) is not list or not chain or not _is_int(base_token):
        raise _corrupted(stored, "delta does not name its base")
    if any(type(step) is not int for step in chain) or chain[0] < 0 or chain != sorted(set(chain)):
        raise _corrupted(stored, "delta's chain is malformed")
    if chain[-1] >= stored.step:
        raise _corrupted(stored, "delta names a base that cannot be its own")
    return ChainRecord(stored, cast(int, token), size, tuple(chain), cast(int, base_token))


def replayed(
    state: dict[str, Any], record: ChainRecord, base: ChainRecord, *, in_place: bool
) -> dict[str, Any]:
    """The state of ``record`` (a delta) from ``state``, the state of ``base``: in
    place, or as a new mapping that leaves ``state`` and its lists untouched.

    Raises :class:`~agentflow.errors.CheckpointCorrupted` when ``base`` is not the
    record the delta was stored on, or the state does not fit it."""
    stored = record.stored
    if base.step != record.base or base.token != record.base_token:
        raise _corrupted(stored, "delta's base was rewritten or is another record")
    doc = stored.state
    sets, adds, dels = doc.get("set", {}), doc.get("add", {}), doc.get("del", [])
    if type(sets) is not dict or type(adds) is not dict or type(dels) is not list:
        raise _corrupted(stored, "delta is malformed")
    new = state if in_place else dict(state)
    try:
        for key in dels:
            if new.pop(key, _MISSING) is _MISSING:
                raise _corrupted(stored, "delta removes a key its base does not hold")
        new.update(sets)
        for key, (length, items) in adds.items():
            current = new.get(key)
            if current is None and length == 0 and type(items) is list:
                new[key] = list(items)
            elif type(current) is list and len(current) == length and type(items) is list:
                if in_place:
                    current.extend(items)
                else:
                    new[key] = current + items
            else:
                raise _corrupted(stored, f"delta appends to {key!r}, which its base does not hold")
    except (TypeError, ValueError, AttributeError) as exc:
        raise _corrupted(stored, "delta is malformed") from exc
    return new


_MISSING: Final = object()
