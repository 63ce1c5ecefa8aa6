"""Opaque, versioned, authenticated keyset cursors for the listings.

A cursor carries where a page ended (the last thread id, and for
:meth:`list_due` its wake instant). It is authenticated with a key derived
from a random secret kept in the store itself, the backend kind, the
namespace, the listing and its filter, so a tampered, truncated, foreign or
unknown-version cursor fails closed with
:class:`~agentflow.errors.InvalidCursor`, and nobody who knows only the
namespace can mint one. It is not encrypted and grants nothing: the namespace
a checkpointer reads is fixed at its construction, not taken from the cursor.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any, Final

import orjson

from agentflow.errors import InvalidCursor

__all__ = ["CURSOR_VERSION", "SECRET_BYTES", "CursorSigner"]

CURSOR_VERSION: Final = 2
#: Length of the random secret a store keeps for its cursors.
SECRET_BYTES: Final = 32
_MAC_BYTES: Final = 16


class CursorSigner:
    """Issues and checks the cursors of one store, backend kind and namespace."""

    __slots__ = ("_key",)

    def __init__(self, secret: bytes, backend: str, namespace: str) -> None:
        if len(secret) < 16:
            raise ValueError("a cursor secret must be at least 16 bytes")
        self._key = hashlib.blake2b(
            f"{backend}\x00{namespace}".encode(),
            key=secret[:64],
            digest_size=32,
            person=b"agentflow-cursor",
        ).digest()

    def __repr__(self) -> str:
        return "CursorSigner(<secret>)"

    def _mac(self, listing: str, body: bytes) -> bytes:
        data = bytes([CURSOR_VERSION]) + listing.encode() + b"\x00" + body
        return hashlib.blake2b(data, key=self._key, digest_size=_MAC_BYTES).digest()

    def encode(self, listing: str, body: dict[str, Any]) -> str:
        """A cursor for ``listing`` (the listing's name and filter) carrying ``body``."""
        blob = orjson.dumps(body)
        raw = bytes([CURSOR_VERSION]) + self._mac(listing, blob) + blob
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    def decode(self, listing: str, cursor: object) -> dict[str, Any]:
        """The body of a cursor this signer issued for ``listing``, else InvalidCursor."""
        if not isinstance(cursor, str) or not cursor:
            raise InvalidCursor("cursor must be a non-empty string returned by a listing")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError) as exc:
            raise InvalidCursor("cursor is not valid base64url") from exc
        if base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") != cursor:
            raise InvalidCursor("cursor is not in canonical form")
        if len(raw) <= 1 + _MAC_BYTES:
            raise InvalidCursor("cursor is truncated")
        version, mac, blob = raw[0], raw[1 : 1 + _MAC_BYTES], raw[1 + _MAC_BYTES :]
        if version != CURSOR_VERSION:
            raise InvalidCursor(f"cursor version {version} is not supported")
        if not hmac.compare_digest(mac, self._mac(listing, blob)):
            raise InvalidCursor(
                "cursor was altered, or issued by another store, namespace or listing"
            )
        try:
            body = orjson.loads(blob)
        except orjson.JSONDecodeError as exc:
            raise InvalidCursor("cursor body is malformed") from exc
        if not isinstance(body, dict):
            raise InvalidCursor("cursor body is malformed")
        return body
