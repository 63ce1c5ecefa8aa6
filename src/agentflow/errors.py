"""Every error agentflow raises, each with a stable ``code``.

Callers branch on ``code`` (or the class), never on message text: messages
may improve, codes never change. ``retryable`` tells a caller whether the
same call may succeed if simply tried again (a dropped connection) or whether
something about the request or the data must change first (a conflict, bad
input, corrupted storage).

This module imports nothing of agentflow's so that every layer may use it.
"""

from __future__ import annotations

__all__ = [
    "AgentflowError",
    "CheckpointConflict",
    "CheckpointCorrupted",
    "CheckpointError",
    "CheckpointNotSerializable",
    "IncompatibleSchema",
    "InvalidArgument",
    "InvalidCursor",
    "InvalidStoreUrl",
    "InvalidThreadId",
    "StoreClosed",
    "StoreNotFound",
    "StoreUnavailable",
]


class AgentflowError(Exception):
    """Base of every agentflow error."""

    code: str = "agentflow_error"
    retryable: bool = False


class CheckpointError(AgentflowError):
    """A checkpoint could not be stored or read."""

    code = "checkpoint_error"


class InvalidArgument(CheckpointError, ValueError):
    """The caller passed a value the API does not accept; nothing was stored."""

    code = "invalid_argument"


class InvalidStoreUrl(InvalidArgument):
    """A store URL has an unknown scheme, names nothing, or needs a driver that is missing."""

    code = "invalid_store_url"


class InvalidThreadId(InvalidArgument):
    """A thread id is empty, contains NUL, or is unsafe for the backend."""

    code = "invalid_thread_id"


class CheckpointNotSerializable(CheckpointError, TypeError):
    """The checkpoint's state is not JSON; nothing was stored."""

    code = "checkpoint_not_serializable"


class CheckpointConflict(CheckpointError):
    """A conditional ``put(..., if_revision=)`` lost: the stored revision differs.

    ``expected`` is the revision the caller read; ``actual`` is the one stored
    now (0 when the step does not exist). Re-read and decide again.
    """

    code = "checkpoint_conflict"

    def __init__(self, thread: str, step: int, expected: int, actual: int) -> None:
        self.thread = thread
        self.step = step
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"checkpoint conflict on thread {thread!r} step {step}: "
            f"expected revision {expected}, found revision {actual}"
        )

    def __reduce__(self) -> tuple[type[CheckpointConflict], tuple[str, int, int, int]]:
        return (type(self), (self.thread, self.step, self.expected, self.actual))


class CheckpointCorrupted(CheckpointError):
    """Stored data could not be decoded. It is never silently read as missing."""

    code = "checkpoint_corrupted"


class IncompatibleSchema(CheckpointError):
    """The store was written by a newer agentflow; it is refused, never misread."""

    code = "incompatible_schema"


class InvalidCursor(CheckpointError, ValueError):
    """A pagination cursor was tampered with, is foreign, or of an unknown version."""

    code = "invalid_cursor"


class StoreClosed(CheckpointError):
    """The checkpointer was closed; open a new one to go on."""

    code = "store_closed"


class StoreNotFound(CheckpointError):
    """A store opened with ``create=False`` has no tables, keys or layout yet.

    Nothing was created: a read-only caller sees an absent store as absent
    instead of leaving an empty one behind.
    """

    code = "store_not_found"


class StoreUnavailable(CheckpointError):
    """The store could not be reached or dropped the connection mid-call.

    The driver's exception is the ``__cause__``. Whether the write in flight
    landed is decided by the store's atomicity: it either landed whole or not
    at all, so re-reading (or retrying a conditional put) is safe.
    """

    code = "store_unavailable"
    retryable = True
