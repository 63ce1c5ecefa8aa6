"""The stored form of every part of a thread: its checkpoints, its record's body and
journal entries, its event payloads. One framing, ``[1,"<checksum>",<bytes>]``,
checked on every read, seeded with where the bytes belong.

**Checkpoints.** Whatever a codec returns is stored as ``[1,"<checksum>",<codec
bytes>]``: the envelope version, then XXH3-64 over the record's namespace, thread
and step and the codec's bytes (:func:`wrap`, :func:`unwrap`). A step stored as
what it changed, or as a full state such steps build on, is ``[3,...]`` instead
(:mod:`agentflow.checkpoint.deltas`): the version is in the checksum's seed, so a
record cannot be passed off as the other kind, and a reader that predates it
refuses it as from a newer version rather than read its codec bytes as a state.
Every read verifies
it before the codec sees a byte, so a flipped bit, an edited value or a payload
copied to another key raises :class:`~agentflow.errors.CheckpointCorrupted`
instead of reading back as other data. It lives in the base, not in a codec, so
no codec can leave it out; at about 0.5 µs per 10 KB it costs under 1% of a
SQLite read (CRC-32 about 6%, SHA-256 about 13%). It is not keyed: it catches
damage, careless edits and misplaced rows, not someone who rewrites the checksum
too (sealing, a keyed authenticated cipher, is for that). Records written before
it (a bare version-1 JSON payload, ``{"v":1,...``) still read, without a check.

**Records and events.** Every part a durable store keeps is checked on every read, on every backend,
because the canonical JSON it holds validates only its shape: a flipped bit
inside a string (a message, a tool argument, an event field) would still
decode, as other data. A part is stored in one of two envelopes:

* ``[1,"<16 hex digits>",<canonical JSON>]`` (integrity, always on): XXH3-64
  of the JSON, seeded with the part's identity (envelope version, namespace,
  run key, part name), so a damaged part, or one copied to another run,
  place or namespace, raises :class:`~agentflow.durable.errors.DurableCorrupted`.
  It is JSON, so it fits the SQLite store's JSON journal columns and stays
  readable with a JSON tool;
* ``[2,"<base64 of a sealed record>"]`` (sealing, opt in): AES-256-GCM by
  :class:`~agentflow.checkpoint.sealing.Sealer`, the associated data naming
  the namespace, run key (or event id), part name and envelope version.

Parts written before the envelopes (a bare JSON object) still read, without
a check, unless sealing is configured: then anything not sealed is refused,
except while a store is being moved to sealing (``accept_plaintext``: the
migration mode a :class:`~agentflow.checkpoint.sealing.SealedCodec` given as
the store's codec brings, as ``rekey`` opens stores). ``on_open`` hears of
every part opened and the key id that opened it (None: not sealed), which is
how ``rekey`` learns what is left on an old key.
The head (revision, status, claim, lease, flags, identity digest) is not a
part: writes compare it, so it stays plain, and decoding checks it against
the body.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from xxhash import xxh3_64_hexdigest, xxh3_64_intdigest

from agentflow.checkpoint.codec import RecordKey
from agentflow.checkpoint.plans import JournalPut, JournalReplace, Write
from agentflow.checkpoint.rows import RunRow, decode_row, encode_row
from agentflow.durable.enums import OperationKind
from agentflow.durable.errors import DurableCorrupted, DurableError
from agentflow.durable.run.events import AcceptedEvent
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.wire.canonical import parse_json
from agentflow.errors import CheckpointCorrupted, InvalidArgument

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing.keyring import KeyRing
    from agentflow.checkpoint.sealing.sealer import Sealer

__all__ = [
    "BODY",
    "CHAINED_VERSION",
    "CHECKED_VERSION",
    "ENVELOPE_VERSION",
    "EVENT",
    "SEALED_VERSION",
    "PartOpened",
    "RunParts",
    "StoredParts",
    "entry_part",
    "stored_event",
    "unwrap",
    "unwrap_record",
    "wrap",
]

#: Envelope versions; each is bound into what it checks. Checkpoints and parts share 1.
ENVELOPE_VERSION: Final = 1
CHECKED_VERSION: Final = ENVELOPE_VERSION
SEALED_VERSION: Final = 2
#: A checkpoint of a delta chain (a step stored as its changes, or a full state
#: steps are stored on): checked as version 1 is, under its own seed.
CHAINED_VERSION: Final = 3
#: Part names: the body, and the payload of an event (whose key is the event id).
BODY: Final = "body"
EVENT: Final = "event"
_CHECKED: Final = b'[1,"'
_SEALED: Final = b'[2,"'
_CHAINED: Final = b'[3,"'
_DIGITS: Final = 16
_MID: Final = b'",'
_START: Final = len(_CHECKED) + _DIGITS + len(_MID)
_SEALED_TAIL: Final = b'"]'
_INTEGRITY: Final = "checkpoint_integrity_invalid"
_SEALING: Final = "checkpoint_sealing_invalid"
#: How every checkpoint written before the envelope begins (the JSON codec's layout 1).
_LEGACY: Final = b'{"v":1,'


def _framed(checksum: bytes, data: bytes, head: bytes = _CHECKED) -> bytes:
    """``data`` in the checked envelope (``head``: its version's opening)."""
    return b"".join((head, checksum, _MID, data, b"]"))


def _unframed(stored: bytes, head: bytes = _CHECKED) -> tuple[bytes, bytes] | None:
    """The checksum and bytes of a checked envelope, or None: ``stored`` is not one."""
    if stored.startswith(head) and stored.endswith(b"]") and stored[_START - 2 : _START] == _MID:
        return stored[len(head) : _START - 2], stored[_START:-1]
    return None


def _checkpoint_checksum(key: RecordKey, payload: bytes, version: int = ENVELOPE_VERSION) -> bytes:
    # Neither a namespace nor a thread id may hold NUL, so NUL separates them.
    identity = f"{version}\x00{key.namespace}\x00{key.thread}\x00{key.step}"
    seed = xxh3_64_intdigest(identity.encode())
    return xxh3_64_hexdigest(payload, seed=seed).encode("ascii")


def wrap(key: RecordKey, payload: bytes, *, chained: bool = False) -> bytes:
    """The stored form of a codec's ``payload`` for the checkpoint at ``key``
    (``chained``: a record of a delta chain)."""
    if chained:
        checksum = _checkpoint_checksum(key, payload, CHAINED_VERSION)
        return _framed(checksum, payload, _CHAINED)
    return _framed(_checkpoint_checksum(key, payload), payload)


def unwrap(key: RecordKey, stored: object) -> bytes:
    """The codec's bytes of a stored checkpoint of ``key``, once its checksum holds
    (of either kind: see :func:`unwrap_record`)."""
    return unwrap_record(key, stored)[0]


def unwrap_record(key: RecordKey, stored: object) -> tuple[bytes, bool]:
    """The codec's bytes of a stored checkpoint of ``key``, once its checksum holds,
    and whether it is a record of a delta chain.

    Raises :class:`~agentflow.errors.CheckpointCorrupted` naming the thread and
    step, never any stored data, when the record is damaged, belongs to
    another key or is in no format this version reads.
    """
    if not isinstance(stored, bytes):
        if not isinstance(stored, bytearray | memoryview):
            raise _checkpoint_corrupted(key, "is not bytes")
        stored = bytes(stored)
    for head, version in ((_CHECKED, ENVELOPE_VERSION), (_CHAINED, CHAINED_VERSION)):
        framed = _unframed(stored, head)
        if framed is not None:
            checksum, payload = framed
            if checksum == _checkpoint_checksum(key, payload, version):
                return payload, version == CHAINED_VERSION
            raise _checkpoint_corrupted(
                key, "fails its integrity check: damaged or edited, or it holds another record"
            )
    if stored.startswith(_LEGACY):
        return stored, False
    raise _checkpoint_corrupted(
        key, "is in no format this version reads (damaged, or from a newer version)"
    )


def _checkpoint_corrupted(key: RecordKey, what: str) -> CheckpointCorrupted:
    return CheckpointCorrupted(
        f"thread {key.thread!r} step {key.step}: the stored checkpoint {what}"
    )


#: Told of each part opened: the run key (an event's id), the part name and
#: the key id that opened it (None: the part was not sealed).
PartOpened = Callable[[str, str, "str | None"], None]


def entry_part(kind: OperationKind, index: int) -> str:
    """The part name of the journal entry at ``index`` of ``kind`` (``model.0``, ``tool.3``)."""
    return f"{kind.value}.{index}"


def _identity(*fields: str | int) -> bytes:
    """The fields, each length-prefixed, so no two different lists give the same bytes."""
    data = [str(field).encode() for field in fields]
    return b"".join(len(item).to_bytes(4, "big") + item for item in data)


class RunParts:
    """How one store keeps the parts of its namespace's runs and events.

    ``sealing`` (a :class:`~agentflow.checkpoint.sealing.KeyRing`) seals every
    part with its current key and opens with any key it holds, retired ones
    included; without it parts carry the integrity checksum. A store builds
    one from its ``namespace`` and ``sealing`` arguments and passes every
    row, planned write and event payload through it. ``accept_plaintext``
    (with ``sealing``, only while a store is moved to sealing) still opens
    parts that are not sealed; ``on_open`` is told of every part opened.
    """

    __slots__ = ("_accept_plaintext", "_namespace", "_on_open", "_sealer")

    def __init__(
        self,
        namespace: str,
        sealing: KeyRing | None = None,
        *,
        accept_plaintext: bool = False,
        on_open: PartOpened | None = None,
    ) -> None:
        self._namespace = namespace
        self._accept_plaintext = bool(accept_plaintext)
        self._on_open = on_open
        self._sealer: Sealer | None = None
        if sealing is not None:
            from agentflow.checkpoint.sealing.keyring import KeyRing
            from agentflow.checkpoint.sealing.sealer import Sealer

            if not isinstance(sealing, KeyRing):
                raise InvalidArgument(f"sealing needs a KeyRing, got {type(sealing).__name__}")
            self._sealer = Sealer(sealing)

    @property
    def sealed(self) -> bool:
        return self._sealer is not None

    def __repr__(self) -> str:
        return f"RunParts({self._namespace!r}, sealing={self._sealer!r})"

    def _checksum(self, key: str, part: str, data: bytes) -> bytes:
        seed = xxh3_64_intdigest(_identity(CHECKED_VERSION, self._namespace, key, part))
        return xxh3_64_hexdigest(data, seed=seed).encode("ascii")

    def _context(self, key: str, part: str) -> bytes:
        return _identity("durable-part", SEALED_VERSION, self._namespace, key, part)

    def seal(self, key: str, part: str, data: bytes) -> bytes:
        """The stored form of the canonical JSON ``data`` of ``part`` of run (or event) ``key``."""
        if self._sealer is None:
            return _framed(self._checksum(key, part, data), data)
        sealed = self._sealer.seal(data, self._context(key, part))
        return b"".join((_SEALED, binascii.b2a_base64(sealed, newline=False), _SEALED_TAIL))

    def open(self, key: str, part: str, stored: bytes) -> bytes:
        """The canonical JSON a stored part holds, once its checksum or seal holds.

        Raises :class:`DurableCorrupted` naming the run and part, never its data.
        """
        where = f"stored {part} of {key!r}"
        if not isinstance(stored, bytes):
            raise DurableCorrupted(_INTEGRITY, f"{where} is not bytes")
        key_id: str | None = None
        if self._sealer is not None and (stored.startswith(_SEALED) or not self._accept_plaintext):
            data, key_id = self._unseal(key, part, stored, where)
        else:
            data = self._unchecked(key, part, stored, where)
        if self._on_open is not None:
            self._on_open(key, part, key_id)
        return data

    def _unseal(self, key: str, part: str, stored: bytes, where: str) -> tuple[bytes, str]:
        assert self._sealer is not None
        if not (stored.startswith(_SEALED) and stored.endswith(_SEALED_TAIL)):
            raise DurableCorrupted(
                _SEALING, f"{where} is not sealed, and a store with sealing configured refuses it"
            )
        try:
            text = stored[len(_SEALED) : -len(_SEALED_TAIL)]
            sealed = binascii.a2b_base64(text, strict_mode=True)
            opened = self._sealer.open(sealed, self._context(key, part), where)
        except binascii.Error:
            raise DurableCorrupted(_SEALING, f"{where}: the sealed record is damaged") from None
        except CheckpointCorrupted as exc:
            raise DurableCorrupted(_SEALING, str(exc)) from None
        return opened.plaintext, opened.key_id

    def _unchecked(self, key: str, part: str, stored: bytes, where: str) -> bytes:
        """A part that is not sealed: checked by its checksum, or from before the envelopes."""
        framed = _unframed(stored)
        if framed is not None:
            checksum, data = framed
            if checksum == self._checksum(key, part, data):
                return data
            raise DurableCorrupted(
                _INTEGRITY,
                f"{where} fails its integrity check: damaged or edited, or it belongs elsewhere",
            )
        if stored.startswith(_SEALED):
            raise DurableCorrupted(_SEALING, f"{where} is sealed, and this store has no key ring")
        if stored.startswith(b"{"):
            return stored  # written before the envelopes; decoding still validates it
        raise DurableCorrupted(
            _INTEGRITY, f"{where} is in no format this version reads (damaged, or newer)"
        )

    def seal_event(self, event_id: str, data: bytes) -> bytes:
        """The stored form of an event's canonical JSON: sealed, or as it is (the
        event's SHA-256 digest, kept beside it and checked on every read, is its
        integrity check)."""
        return data if self._sealer is None else self.seal(event_id, EVENT, data)

    def open_event(self, event_id: str, stored: bytes) -> bytes:
        """The canonical JSON of a stored event, opened when sealing is configured.

        The payload of a plain event is a JSON object, so one that starts like a
        sealed part is sealed, and refused by a store without keys.
        """
        if self._sealer is not None and (stored.startswith(_SEALED) or not self._accept_plaintext):
            return self.open(event_id, EVENT, stored)
        if stored.startswith(_SEALED):
            raise DurableCorrupted(
                _SEALING, f"stored event {event_id!r} is sealed, and this store has no key ring"
            )
        if self._on_open is not None:
            self._on_open(event_id, EVENT, None)
        return stored

    def _journal(
        self, key: str, kind: OperationKind, entries: tuple[bytes, ...]
    ) -> tuple[bytes, ...]:
        return tuple(self.seal(key, entry_part(kind, i), entry) for i, entry in enumerate(entries))

    def encode_row(self, record: DurableCheckpoint) -> RunRow:
        """Validate ``record`` and lay it out as a row of stored parts."""
        row = encode_row(record)
        return replace(
            row,
            body=self.seal(row.key, BODY, row.body),
            model_journal=self._journal(row.key, OperationKind.MODEL, row.model_journal),
            tool_journal=self._journal(row.key, OperationKind.TOOL, row.tool_journal),
        )

    def decode_row(self, row: RunRow) -> DurableCheckpoint:
        """The record a row of stored parts holds; :class:`DurableCorrupted` if it cannot."""
        key = row.key
        plain = replace(
            row,
            body=self.open(key, BODY, row.body),
            model_journal=tuple(
                self.open(key, entry_part(OperationKind.MODEL, i), entry)
                for i, entry in enumerate(row.model_journal)
            ),
            tool_journal=tuple(
                self.open(key, entry_part(OperationKind.TOOL, i), entry)
                for i, entry in enumerate(row.tool_journal)
            ),
        )
        return decode_row(plain)

    def write(self, write: Write) -> Write:
        """``write`` with its body and journal change in their stored form."""
        key = write.key
        journal: JournalReplace | tuple[JournalPut, ...] | None = write.journal
        if isinstance(journal, JournalReplace):
            journal = JournalReplace(
                self._journal(key, OperationKind.MODEL, journal.model),
                self._journal(key, OperationKind.TOOL, journal.tool),
            )
        elif journal is not None:
            journal = tuple(
                replace(put, entry=self.seal(key, entry_part(put.kind, put.index), put.entry))
                for put in journal
            )
        body = None if write.body is None else self.seal(key, BODY, write.body)
        return replace(write, body=body, journal=journal)


class StoredParts:
    """A store whose parts pass through one :class:`RunParts`, built on first use
    from the ``_namespace`` and ``_sealing`` (a key ring or None) the store keeps.

    A store's checkpoint codec (``_codec``) in a migration mode puts records
    and events in the same mode, so one knob moves a whole store: a
    :class:`~agentflow.checkpoint.sealing.SealedCodec` with
    ``accept_plaintext`` (the parts still open unsealed), and any codec with
    an ``on_open_part`` hook (``rekey``'s, to learn the key of every part).
    """

    _namespace: str
    _sealing: KeyRing | None = None

    @functools.cached_property
    def _parts(self) -> RunParts:
        codec = getattr(self, "_codec", None)
        return RunParts(
            self._namespace,
            self._sealing,
            accept_plaintext=getattr(codec, "accept_plaintext", False) is True,
            on_open=getattr(codec, "on_open_part", None),
        )


def stored_event(
    parts: RunParts,
    event_id: str,
    digest: object,
    stored: object,
    *,
    cursor: dict[str, Any],
    where: str,
) -> AcceptedEvent:
    """An event read back from a store: ``stored``, opened by ``parts`` (sealed
    payloads are bound to the namespace and event id), must be the bytes
    ``digest`` names and a JSON object, else :class:`DurableCorrupted` naming
    ``where``. Damage never replays."""
    if not isinstance(stored, bytes):
        raise DurableCorrupted("event_payload_digest_mismatch", f"{where} fails its digest")
    data = parts.open_event(event_id, stored)
    if not isinstance(digest, str) or hashlib.sha256(data).hexdigest() != digest:
        raise DurableCorrupted("event_payload_digest_mismatch", f"{where} fails its digest")
    try:
        event = parse_json(data)
    except DurableError as exc:
        raise DurableCorrupted(exc.code, f"{where}: {exc.message}") from exc
    if not isinstance(event, dict):
        raise DurableCorrupted("event_payload_invalid", f"{where} is not an object")
    return AcceptedEvent(event_id, digest, event, cursor)
