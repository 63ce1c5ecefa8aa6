"""Checks of every argument and every :class:`Checkpoint` field, shared by all stores.

They run before a store does any I/O, so bad input raises a typed error with a
stable code and nothing is written, whichever backend is behind the call. A
value that passed these checks may still fail to encode (state that is not
JSON): the codec reports that, also before any write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple, get_args

from agentflow.checkpoint.deltas import check_changes
from agentflow.checkpoint.model import Checkpoint, ThreadStatus
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import InvalidArgument, InvalidThreadId

__all__ = [
    "MAX_PAGE",
    "MAX_REVISION",
    "WHOLE_THREAD",
    "StepRange",
    "check_checkpoint",
    "check_history_bounds",
    "check_limit",
    "check_offset",
    "check_prune_bounds",
    "check_status",
    "is_unicode",
    "validate_namespace",
    "validate_revision",
    "validate_step",
    "validate_thread",
]

#: The largest page a listing returns; bounds the memory of one call.
MAX_PAGE: Final = 10_000
#: Steps and revisions are stored as signed 64-bit integers.
MAX_REVISION: Final = 2**63 - 1
_THREAD_STATUSES: Final = frozenset(get_args(ThreadStatus))


def is_unicode(text: str) -> bool:
    """False for a lone surrogate, which no store can keep as UTF-8 text."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def validate_thread(thread: object) -> str:
    """Return ``thread`` if it is a usable thread id, else raise InvalidThreadId."""
    if not isinstance(thread, str) or not thread or "\x00" in thread or not is_unicode(thread):
        raise InvalidThreadId(
            f"thread id must be a non-empty Unicode string without NUL, got {thread!r}"
        )
    return thread


def validate_step(step: object, *, what: str = "step") -> int:
    """Return ``step`` if it is a non-negative int (not a bool) below 2**63, else raise."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidArgument(f"{what} must be a non-negative int, got {step!r}")
    if step > MAX_REVISION:
        raise InvalidArgument(f"{what} {step} does not fit in 64 bits")
    return step


def validate_revision(if_revision: object) -> int:
    """Return ``if_revision`` if it is an int from 0 to 2**63-1, else raise."""
    if isinstance(if_revision, bool) or not isinstance(if_revision, int):
        raise InvalidArgument(f"if_revision must be None or an int, got {if_revision!r}")
    if not 0 <= if_revision <= MAX_REVISION:
        raise InvalidArgument(f"if_revision must be from 0 to 2**63-1, got {if_revision}")
    return if_revision


def validate_namespace(namespace: object) -> str:
    """Map the constructor's ``namespace`` to its stored form ("" for None)."""
    if namespace is None:
        return ""
    if (
        not isinstance(namespace, str)
        or not namespace
        or "\x00" in namespace
        or not is_unicode(namespace)
    ):
        raise InvalidArgument(
            f"namespace must be None or a non-empty string without NUL, got {namespace!r}"
        )
    return namespace


def check_limit(limit: object) -> int:
    """Return ``limit`` if it is an int from 1 to MAX_PAGE, else raise."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit must be an int from 1 to {MAX_PAGE}, got {limit!r}")
    return limit


def check_offset(offset: object) -> int:
    """Return ``offset`` if it is a non-negative int, else raise."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidArgument(f"offset must be a non-negative int, got {offset!r}")
    return offset


def check_status(status: object) -> ThreadStatus | None:
    """Return ``status`` if it is None or one of :data:`ThreadStatus`, else raise."""
    if status is None or (isinstance(status, str) and status in _THREAD_STATUSES):
        return status  # type: ignore[return-value]
    raise InvalidArgument(
        f"status must be None or one of {sorted(_THREAD_STATUSES)}, not {status!r}"
    )


class StepRange(NamedTuple):
    """Which steps of a thread a history read yields, checked: those strictly
    between ``after`` (-1: from the first) and ``before`` (None: to the last),
    at most ``limit`` of them (None: all), newest first or oldest first."""

    after: int = -1
    before: int | None = None
    limit: int | None = None
    newest_first: bool = False

    def holds(self, step: int) -> bool:
        """Whether ``step`` lies between the bounds."""
        return self.after < step and (self.before is None or step < self.before)


#: The whole thread, oldest first: what ``history(thread)`` reads.
WHOLE_THREAD: Final = StepRange()


def check_history_bounds(
    after: object, before: object, limit: object, newest_first: object
) -> StepRange:
    """The :class:`StepRange` of ``history``'s bounds once each is valid: steps
    (exclusive) or None, a positive int ``limit`` or None, a bool order."""
    low = -1 if after is None else validate_step(after, what="after")
    high = None if before is None else validate_step(before, what="before")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidArgument(f"limit must be None or a positive int, got {limit!r}")
    if not isinstance(newest_first, bool):
        raise InvalidArgument(f"newest_first must be a bool, got {newest_first!r}")
    return StepRange(low, high, limit, newest_first)


def check_prune_bounds(before_step: object, older_than: object) -> int | None:
    """Return the cutoff instant of ``older_than`` (or None) once both bounds are valid.

    A prune with no bound would silently delete the whole thread, so it is refused.
    """
    if before_step is None and older_than is None:
        raise InvalidArgument("prune needs before_step, older_than, or both")
    if before_step is not None:
        validate_step(before_step, what="before_step")
    return None if older_than is None else parse_instant(older_than, what="older_than")


def _where(cp: Checkpoint) -> str:
    """How a refusal names the checkpoint (built only once one is refused)."""
    return f"checkpoint of thread {cp.thread!r} step {cp.step}:"


def _check_names(cp: Checkpoint) -> None:
    value = cp.next
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise InvalidArgument(f"{_where(cp)} next must be a tuple of node names, got {value!r}")
    for name in value:
        if not isinstance(name, str):
            raise InvalidArgument(f"{_where(cp)} next must hold only str node names, got {name!r}")


def _check_str_keys(cp: Checkpoint, field: str, value: object, *, exact_dict: bool) -> None:
    kind = dict if exact_dict else Mapping
    if not isinstance(value, kind):
        raise InvalidArgument(
            f"{_where(cp)} {field} must be a {kind.__name__} with str keys, got {value!r:.80}"
        )
    for key in value:
        if not isinstance(key, str):
            raise InvalidArgument(f"{_where(cp)} {field} keys must be str, got {key!r:.80}")


def _check_optional_str(cp: Checkpoint, field: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(f"{_where(cp)} {field} must be a str or None, got {value!r:.80}")


def _check_instant(cp: Checkpoint, field: str, value: str) -> None:
    try:
        instant = parse_instant(value)
    except InvalidArgument:
        parse_instant(value, what=f"{_where(cp)} {field}")  # raises again, naming the checkpoint
        raise
    if instant < 0:
        raise InvalidArgument(f"{_where(cp)} {field} {value!r} is before 1970-01-01T00:00:00Z")


def check_checkpoint(cp: object) -> Checkpoint:
    """Return ``cp`` once every field has the type the model promises on read.

    Stored data is read back with these types, so a field of another type
    would come back changed (a bare string ``next`` as its letters) or not at
    all; refusing it here keeps what is stored readable.
    """
    if not isinstance(cp, Checkpoint):
        raise InvalidArgument(f"put takes a Checkpoint, got {type(cp).__name__}")
    validate_thread(cp.thread)
    validate_step(cp.step)
    _check_str_keys(cp, "state", cp.state, exact_dict=False)
    _check_names(cp)
    _check_optional_str(cp, "parent", cp.parent)
    _check_optional_str(cp, "interrupt_node", cp.interrupt_node)
    if not isinstance(cp.interrupted, bool):
        raise InvalidArgument(
            f"{_where(cp)} interrupted must be a bool, got {cp.interrupted!r:.80}"
        )
    if not isinstance(cp.ts, str):
        raise InvalidArgument(f"{_where(cp)} ts must be an ISO-8601 str, got {cp.ts!r:.80}")
    if cp.ts:
        _check_instant(cp, "ts", cp.ts)
    if cp.wake_at is not None:
        _check_instant(cp, "wake_at", cp.wake_at)
    _check_str_keys(cp, "extra", cp.extra, exact_dict=True)
    check_changes(cp)
    return cp
