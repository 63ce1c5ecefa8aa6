"""ISO-8601 timestamps as the stores compare them: instants in epoch microseconds.

A checkpoint carries its times as ISO-8601 text (what a person reads and what
the model has always held), but text with different offsets does not sort as
instants do. Every store therefore indexes and compares the microseconds that
:func:`parse_instant` gives, never the text.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from agentflow.errors import InvalidArgument

__all__ = ["EPOCH", "instant_of", "parse_instant", "utc_now_iso", "wall_clock_ms"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc_now_iso() -> str:
    """The current time as ISO-8601 UTC with microseconds and a ``+00:00`` offset."""
    return datetime.now(UTC).isoformat()


def _micros(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def parse_instant(value: object, *, what: str = "timestamp") -> int:
    """Parse an ISO-8601 timestamp to microseconds since the epoch.

    A timestamp without an offset is taken as UTC. Raises
    :class:`~agentflow.errors.InvalidArgument` for anything unparseable.
    """
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be an ISO-8601 string, got {type(value).__name__}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidArgument(f"{what} {value!r} is not an ISO-8601 timestamp") from exc
    return _micros(parsed)


def instant_of(value: object, *, what: str = "timestamp") -> int:
    """Microseconds since the epoch of an ISO-8601 string or a ``datetime``.

    A naive ``datetime`` is taken as UTC, like a timestamp without offset.
    """
    if isinstance(value, datetime):
        return _micros(value)
    return parse_instant(value, what=what)


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the lease clock of stores without a server clock."""
    return time.time_ns() // 1_000_000
