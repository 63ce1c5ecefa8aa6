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

import struct
from dataclasses import dataclass
from typing import Final

from agentflow.checkpoint.sealing.cipher import Unopened
from agentflow.checkpoint.sealing.keyring import KeyRing, check_key_id
from agentflow.errors import CheckpointCorrupted, InvalidArgument

__all__ = ["SEALED_VERSION", "Opened", "Sealer", "is_sealed", "record_context"]

#: Version of the sealed record layout; bound into every record's associated data.
SEALED_VERSION: Final = 1
_MARK: Final = 0xAF
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
    return data[:1] == b"\xaf"


@dataclass(frozen=True, slots=True)
class Opened:
    """What a sealed record held, and the key id that opened it."""

    plaintext: bytes
    key_id: str


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
        """``plaintext`` sealed for the record ``context`` names."""
        key_id, cipher = self._keyring.sealing_key()
        name = key_id.encode("ascii")
        header = bytes((_MARK, SEALED_VERSION, len(name))) + name
        return header + cipher.seal(plaintext, header + context)

    def open(self, sealed: bytes, context: bytes, where: str) -> Opened:
        """The plaintext of a record sealed for ``context``; ``where`` names it in errors."""
        if not is_sealed(sealed):
            raise CheckpointCorrupted(
                f"{where}: the record is not sealed, and a store with sealing configured "
                "refuses plaintext"
            )
        if len(sealed) < _HEAD or sealed[1] != SEALED_VERSION:
            raise CheckpointCorrupted(f"{where}: the sealed record is damaged or of a newer format")
        end = _HEAD + sealed[2]
        key_id = sealed[_HEAD:end].decode("ascii", "replace")
        cipher = self._keyring.opening_key(key_id) if len(sealed) >= end else None
        if cipher is None:
            # Only ids the ring holds were checked so far; name no other text.
            if len(sealed) < end or not _valid_key_id(key_id):
                raise CheckpointCorrupted(f"{where}: the sealed record's key id is damaged")
            raise CheckpointCorrupted(
                f"{where}: sealed with key id {key_id!r}, which the key ring does not hold"
            )
        view = memoryview(sealed)
        try:
            plaintext = cipher.open(view[end:], sealed[:end] + context)
        except Unopened:
            plaintext = None
        if plaintext is None:
            raise CheckpointCorrupted(
                f"{where}: the sealed record does not open: it was altered, or sealed for "
                "another record, tenant or store"
            )
        return Opened(plaintext, key_id)


def _valid_key_id(key_id: str) -> bool:
    try:
        check_key_id(key_id)
    except InvalidArgument:
        return False
    return True
