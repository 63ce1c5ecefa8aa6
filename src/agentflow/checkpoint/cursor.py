"""Opaque, versioned keyset cursors for :meth:`list_threads_page`.

A cursor carries the last thread id of a page. It is integrity-checked and
bound to the backend kind and the namespace that issued it, so a tampered,
truncated, foreign or unknown-version cursor fails closed with
:class:`~agentflow.errors.InvalidCursor`. It is not secret and grants
nothing: the namespace a checkpointer reads is fixed at its construction, not
taken from the cursor.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

import orjson

from agentflow.errors import InvalidCursor

__all__ = ["CURSOR_VERSION", "decode_cursor", "encode_cursor"]

CURSOR_VERSION = 1
_MAC_BYTES = 16


def _mac(version: int, backend: str, namespace: str, body: bytes) -> bytes:
    key = hashlib.blake2b(
        f"{backend}\x00{namespace}".encode(), digest_size=32, person=b"agentflow-cursor"
    ).digest()
    return hashlib.blake2b(bytes([version]) + body, key=key, digest_size=_MAC_BYTES).digest()


def encode_cursor(backend: str, namespace: str, after_thread: str) -> str:
    """Return a cursor that resumes listing after ``after_thread``."""
    body = orjson.dumps({"after": after_thread})
    raw = bytes([CURSOR_VERSION]) + _mac(CURSOR_VERSION, backend, namespace, body) + body
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(backend: str, namespace: str, cursor: str) -> str:
    """Return the thread id a cursor resumes after, or raise InvalidCursor."""
    if not isinstance(cursor, str) or not cursor:
        raise InvalidCursor("cursor must be a non-empty string returned by list_threads_page")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor("cursor is not valid base64url") from exc
    if base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") != cursor:
        raise InvalidCursor("cursor is not in canonical form")
    if len(raw) <= 1 + _MAC_BYTES:
        raise InvalidCursor("cursor is truncated")
    version, mac, body = raw[0], raw[1 : 1 + _MAC_BYTES], raw[1 + _MAC_BYTES :]
    if version != CURSOR_VERSION:
        raise InvalidCursor(f"cursor version {version} is not supported")
    if not hmac.compare_digest(mac, _mac(version, backend, namespace, body)):
        raise InvalidCursor("cursor was altered or issued by another store or namespace")
    try:
        after = orjson.loads(body)["after"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise InvalidCursor("cursor body is malformed") from exc
    if not isinstance(after, str):
        raise InvalidCursor("cursor body is malformed")
    return after
