"""Listing cursors of durable stores and the page-size check.

A cursor carries the last key of a page and is authenticated (keyed BLAKE2b)
with the store kind, namespace and status filter that issued it, so a cursor
from another store, tenant or filter fails closed with
:class:`~agentflow.errors.InvalidCursor` instead of skipping or leaking rows.
It grants nothing: a store's namespace is fixed at construction.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from agentflow.durable.canonical import canonical_json, parse_json
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import DurableError
from agentflow.errors import InvalidArgument, InvalidCursor

__all__ = ["MAX_PAGE", "check_limit", "decode_run_cursor", "encode_run_cursor"]

MAX_PAGE = 10_000
_TAG_BYTES = 16


def check_limit(limit: object) -> int:
    """Return ``limit`` if it is an int in ``1..10000``, else raise InvalidArgument."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE:
        raise InvalidArgument(f"limit must be an int between 1 and {MAX_PAGE}, got {limit!r}")
    return limit


def _tag(kind: str, namespace: str, status: CheckpointStatus | None, body: bytes) -> bytes:
    scope = canonical_json([kind, namespace, None if status is None else status.value])
    key = hashlib.blake2b(scope, digest_size=32, person=b"agentflow-runs").digest()
    return hashlib.blake2b(body, key=key, digest_size=_TAG_BYTES).digest()


def encode_run_cursor(
    kind: str, namespace: str, status: CheckpointStatus | None, after_key: str
) -> str:
    """A cursor that resumes a listing after ``after_key``."""
    body = canonical_json({"after": after_key})
    raw = _tag(kind, namespace, status, body) + body
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_run_cursor(
    kind: str, namespace: str, status: CheckpointStatus | None, cursor: object
) -> str:
    """The key a cursor resumes after; InvalidCursor for anything not issued here."""
    if not isinstance(cursor, str) or not cursor:
        raise InvalidCursor("cursor must be a non-empty string returned by list_runs")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor("cursor is not base64url") from exc
    tag, body = raw[:_TAG_BYTES], raw[_TAG_BYTES:]
    if len(tag) != _TAG_BYTES or not hmac.compare_digest(tag, _tag(kind, namespace, status, body)):
        raise InvalidCursor("cursor was altered or issued by another store, namespace or filter")
    try:
        after = parse_json(body)["after"]
    except (DurableError, KeyError, TypeError) as exc:
        raise InvalidCursor("cursor body is malformed") from exc
    if not isinstance(after, str):
        raise InvalidCursor("cursor body is malformed")
    return after
