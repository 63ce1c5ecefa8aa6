"""A clock tests set by hand, for timers and claims without real waiting."""

from __future__ import annotations

from datetime import UTC, datetime


class Clock:
    """Pass as ``compile(clock=...)``; move time with ``clock.now += timedelta(...)``."""

    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now
