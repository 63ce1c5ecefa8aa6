"""Sealed records: authenticated encryption bound to the record it is for.

A sealed record is ``AF 01 <n> <key id> <nonce> <ciphertext> <tag>``: a mark,
the format version, the key id and AES-256-GCM output. The associated data is
that header plus a *context* naming the record (:func:`record_context`: its
kind, store, namespace, id parts), so the record opens only as itself: copied
to another thread, step, tenant or store, or with its key id or format version
changed, it fails to open with :class:`~agentflow.errors.CheckpointCorrupted`.

:class:`Sealer` knows nothing of checkpoints: any store can seal its records
with it by choosing a context that names them (docs/sealing.md shows one for
the durable layer's records).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Final

from agentflow.checkpoint.sealing.cipher import NONCE_BYTES, TAG_BYTES, InvalidTag
from agentflow.checkpoint.sealing.keyring import KeyRing, check_key_id
from agentflow.errors import CheckpointCorrupted, InvalidArgument

__all__ = [
    "SEALED_VERSION",
    "Opened",
    "Refused",
    "Sealer",
    "is_sealed",
    "open_sealed",
    "record_context",
]

#: Version of the sealed record layout; bound into every record's associated data.
SEALED_VERSION: Final = 1
_MARK: Final = 0xAF
_SEALED_MARK: Final = bytes((_MARK,))
_HEAD: Final = 3
_LENGTH: Final = struct.Struct(">I").pack


def record_context(kind: str, *parts: str | bytes | int) -> bytes:
    """Associated data naming one record: ``kind`` and its parts, each length-prefixed,
    so no two different part lists give the same bytes."""
    chunks: list[bytes] = []
    for part in (kind, *parts):
        data = part if type(part) is bytes else str(part).encode()
        chunks += (_LENGTH(len(data)), data)
    return b"".join(chunks)


def is_sealed(data: bytes) -> bool:
    """True when ``data`` begins as a sealed record (it may still fail to open)."""
    return data[:1] == _SEALED_MARK


@dataclass(frozen=True, slots=True)
class Opened:
    """What a sealed record held, and the key id that opened it."""

    plaintext: bytes
    key_id: str


class Refused(Exception):
    """Why :func:`open_sealed` refused a record, naming nothing of it; callers
    raise :class:`~agentflow.errors.CheckpointCorrupted` naming the record."""


def open_sealed(keyring: KeyRing, sealed: bytes, context: bytes) -> tuple[bytes, str]:
    """The plaintext of a record sealed for ``context``, and the key id that opened it."""
    if sealed[:1] != _SEALED_MARK:
        raise Refused(
            "the record is not sealed, and a store with sealing configured refuses plaintext"
        )
    if len(sealed) < _HEAD or sealed[1] != SEALED_VERSION:
        raise Refused("the sealed record is damaged or of a newer format")
    end = _HEAD + sealed[2]
    key_id = sealed[_HEAD:end].decode("ascii", "replace")
    aead = keyring.opening_key(key_id) if len(sealed) >= end + NONCE_BYTES + TAG_BYTES else None
    if aead is None:
        # Only ids the ring holds have been checked so far: quote no other text.
        if len(sealed) < end + NONCE_BYTES + TAG_BYTES or not _valid_key_id(key_id):
            raise Refused("the sealed record is cut short or its key id is damaged")
        raise Refused(f"sealed with key id {key_id!r}, which the key ring does not hold")
    view = memoryview(sealed)
    try:
        return aead.decrypt(
            view[end : end + NONCE_BYTES], view[end + NONCE_BYTES :], sealed[:end] + context
        ), key_id
    except InvalidTag:
        pass
    raise Refused(
        "the sealed record does not open: it was altered, or sealed for another record, "
        "tenant or store"
    )


class Sealer:
    """Seals with a key ring's current key, opens with any key it holds."""

    __slots__ = ("_keyring",)

    def __init__(self, keyring: KeyRing) -> None:
        if not isinstance(keyring, KeyRing):
            raise InvalidArgument(f"sealing needs a KeyRing, got {type(keyring).__name__}")
        self._keyring = keyring

    @property
    def keyring(self) -> KeyRing:
        return self._keyring

    def __repr__(self) -> str:
        return f"Sealer({self._keyring!r})"

    def seal(self, plaintext: bytes, context: bytes) -> bytes:
        """``plaintext`` sealed for the record ``context`` names, under a fresh nonce."""
        key_id, aead = self._keyring.sealing_key()
        name = key_id.encode("ascii")
        header = bytes((_MARK, SEALED_VERSION, len(name))) + name
        nonce = os.urandom(NONCE_BYTES)
        return b"".join((header, nonce, aead.encrypt(nonce, plaintext, header + context)))

    def open(self, sealed: bytes, context: bytes, where: str) -> Opened:
        """The plaintext of a record sealed for ``context``; ``where`` names it in errors."""
        try:
            plaintext, key_id = open_sealed(self._keyring, sealed, context)
        except Refused as exc:
            raise CheckpointCorrupted(f"{where}: {exc}") from None
        return Opened(plaintext, key_id)


def _valid_key_id(key_id: str) -> bool:
    try:
        check_key_id(key_id)
    except InvalidArgument:
        return False
    return True
