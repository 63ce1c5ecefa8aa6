"""The key layout of a Redis store: a namespace's threads, runs and events, and the bytes in them.

For prefix ``P``, namespace ``N``, thread (= run key) ``T`` and event run
``R`` (``b64`` is unpadded base64url of the UTF-8 bytes; ``docs/redis.md``
gives the reasons)::

    P:{t.b64(N).b64(T)}:s   ZSET    step index, score 0, member = 20-digit step
    P:{t.b64(N).b64(T)}:d   HASH    step -> payload,
                                    step + "m" -> "revision:write-id:instant:summary"
    P:{n.b64(N)}:idx        ZSET    thread ids of N, score 0 (listing by BYLEX)
    P:{n.b64(N)}:exp        ZSET    thread id -> expiry deadline (ms), with ttl
    P:{n.b64(N)}:sum        HASH    thread id -> summary of its latest step
    P:{n.b64(N)}:st         ZSET    status letter + thread id (the record's status, else the step's)
    P:{n.b64(N)}:due        ZSET    wake instant + thread id of waiting threads
    P:{n.b64(N)}:rs         HASH    thread id -> the status letter its record imposes (q, f)
    P:{n.b64(N)}:v          STR     the layout version of everything in N (3)
    P:{r.b64(N).b64(T)}:run HASH    the thread's record: head fields, write_id, body, journals
    P:{r.b64(N).b64(T)}:gone STR    write id and answer of the delete that removed it (a minute)
    P:{d.b64(N)}:all        ZSET    every record key of N, score 0
    P:{d.b64(N)}:st         ZSET    record status letter + key, score 0
    P:{d.b64(N)}:ct         ZSET    claim token + NUL + the run's hash key, of claimed runs
    P:{d.b64(N)}:v          STR     3, so that releases before it refuse N (they kept 1 here)
    P:{e.b64(N)}:n          STR     last event sequence of N
    P:{e.b64(N)}:id         HASH    event id -> "sequence:digest:write id"
    P:{e.b64(N)}:ev         HASH    seq -> event bytes, seq + "m" -> "digest:event id",
                                    seq + "p" -> the parent index the event joined
    P:{e.b64(N)}:r.b64(R)   ZSET    sequences of the events whose run_id is R (score = sequence)
    P:{e.b64(N)}:p.b64(R)   ZSET    sequences of the events whose parent_run_id is R
    P:secret                STR     the cursor secret of the prefix

Caller data never shapes a key: ids are base64url-encoded, whose alphabet
has no ``.``, ``:``, ``{``, ``}`` or glob characters, and a prefix may not
contain a brace, so the first ``{`` of a key always opens our hash tag.
"""

from __future__ import annotations

import base64
from typing import Final

from agentflow.checkpoint.base import ThreadStatus
from agentflow.checkpoint.store_base import RUN_STATUSES
from agentflow.durable.enums import CheckpointStatus
from agentflow.errors import InvalidArgument

__all__ = [
    "IMPOSED",
    "LAYOUT",
    "RUN_LETTERS",
    "STATUS_LETTERS",
    "SUMMARY_HEAD",
    "Keys",
    "check_prefix",
    "due_range",
    "instant_bound",
    "listing_range",
    "run_range",
    "sortable_instant",
    "step_member",
    "utf8",
]

#: The layout this code writes, in ``P:{n...}:v`` (2: checkpoints alone; 1: before summaries).
LAYOUT: Final = b"3"
#: Shifts epoch microseconds of year 1 to 0, so every instant is 18 sortable digits.
_EPOCH_SHIFT_US: Final = 62_135_596_800_000_000
#: Bytes of a stored summary before its JSON: status letter and wake instant.
SUMMARY_HEAD: Final = 19
#: The letter of each thread status in summaries and in the thread status index.
STATUS_LETTERS: Final[dict[ThreadStatus, bytes]] = {
    "running": b"r",
    "interrupted": b"i",
    "waiting": b"w",
    "done": b"d",
    "reconciliation_required": b"q",
    "failed": b"f",
}
#: The letter of each record status in the record status index.
RUN_LETTERS: Final[dict[CheckpointStatus, bytes]] = {
    CheckpointStatus.PENDING: b"p",
    CheckpointStatus.RUNNING: b"r",
    CheckpointStatus.WAIT_USER: b"w",
    CheckpointStatus.COMPLETED: b"c",
    CheckpointStatus.FAILED: b"f",
    CheckpointStatus.MAX_CYCLES: b"m",
    CheckpointStatus.RECONCILIATION_REQUIRED: b"q",
}
#: The thread letter a record in each status imposes (the rest impose none).
IMPOSED: Final = {status: STATUS_LETTERS[thread] for status, thread in RUN_STATUSES.items()}


def utf8(text: str) -> bytes:
    """UTF-8 of an id; bytewise order of UTF-8 is code point order, which is
    why the indexes store ids this way."""
    return text.encode()  # ids passed validation: never a lone surrogate


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


class Keys:
    """Every key of one namespace under one prefix."""

    def __init__(self, prefix: str, namespace: str) -> None:
        self.prefix = prefix.encode()
        self.namespace = _b64(utf8(namespace))
        n, d, e = (
            b"%s:{%s.%s}:" % (self.prefix, tag, self.namespace) for tag in (b"n", b"d", b"e")
        )
        #: Thread index, expiry deadlines, summaries, status index, due index and
        #: imposed statuses: what every script that moves a thread's status takes.
        self.threads = [n + kind for kind in (b"idx", b"exp", b"sum", b"st", b"due", b"rs")]
        self.version = n + b"v"
        #: The record index, the record status index and the old durable version key.
        self.runs = [d + b"all", d + b"st", d + b"v"]
        #: The claimed runs by claim token (a worker identity's claims, a limit's leases).
        self.holders = d + b"ct"
        #: The event sequence, id index and event data.
        self.events = [e + b"n", e + b"id", e + b"ev"]

    def _tagged(self, tag: bytes, thread: str) -> bytes:
        return b"%s:{%s.%s.%s}:" % (self.prefix, tag, self.namespace, _b64(utf8(thread)))

    def thread(self, thread: str) -> list[bytes]:
        """The step index and data of one thread (one hash tag)."""
        base = self._tagged(b"t", thread)
        return [base + b"s", base + b"d"]

    def run(self, key: str, kind: bytes = b"run") -> bytes:
        """The record of ``key``, or with ``kind=b"gone"`` the marker its delete leaves."""
        return self._tagged(b"r", key) + kind

    def key_of_run(self, run: bytes) -> str:
        """The record key whose hash is ``run`` (as :meth:`run` makes it)."""
        tag = run[run.index(b"{") + 1 : run.index(b"}")]
        encoded = tag.rsplit(b".", 1)[1]
        return base64.urlsafe_b64decode(encoded + b"=" * (-len(encoded) % 4)).decode()

    def event_index(self, run_id: str, *, parent: bool) -> bytes:
        """The sequences of a run's events (``parent``: of its children's events)."""
        kind = b"p" if parent else b"r"
        return b"%s:{e.%s}:%s.%s" % (self.prefix, self.namespace, kind, _b64(utf8(run_id)))

    @property
    def parent_pattern(self) -> bytes:
        """A ``SCAN MATCH`` pattern of every parent index of the namespace."""
        escaped = b"".join(
            b"\\" + bytes([c]) if c in b"*?[]\\" else bytes([c]) for c in self.prefix
        )
        return b"%s:{e.%s}:p.*" % (escaped, self.namespace)

    @property
    def secret(self) -> bytes:
        """The prefix's cursor secret; braceless, so no id key's twin."""
        return b"%s:secret" % self.prefix


def step_member(step: int) -> bytes:
    return b"%020d" % step


def sortable_instant(us: int) -> bytes:
    """An instant a record stores (never before 1970: the base refuses those),
    as 18 digits that compare as the instants do."""
    if us < 0:
        raise InvalidArgument(f"instant {us} µs is before 1970-01-01T00:00:00Z")
    return b"%018d" % (us + _EPOCH_SHIFT_US)


def instant_bound(us: int) -> bytes:
    """An instant a query compares against, as :func:`sortable_instant` would
    store it, clamped to the range a stored instant can have."""
    return b"%018d" % min(max(us + _EPOCH_SHIFT_US, 0), 10**18 - 1)


def _letter_range(letter: bytes, after: bytes | None) -> tuple[bytes, bytes]:
    start = b"[" + letter if after is None else b"(" + letter + after
    return start, b"(" + bytes([letter[0] + 1])


def listing_range(status: ThreadStatus | None, after: str) -> tuple[bytes, bytes, int]:
    """``ZRANGE BYLEX`` bounds of the threads after ``after`` (of ``status``
    when given: its index then) and the bytes each member has before the id."""
    if status is None:
        return (b"(" + utf8(after) if after else b"-"), b"+", 0
    return *_letter_range(STATUS_LETTERS[status], utf8(after) if after else None), 1


def run_range(status: CheckpointStatus | None, after: str | None) -> tuple[bytes, bytes, int]:
    """The same for the records (their index, or their status index)."""
    tail = None if after is None else utf8(after)
    if status is None:
        return b"-" if tail is None else b"(" + tail, b"+", 0
    return *_letter_range(RUN_LETTERS[status], tail), 1


def due_range(now_us: int, after: tuple[int, str] | None) -> tuple[bytes, bytes, int]:
    """``ZRANGE BYLEX`` bounds of the due index: waits up to ``now_us``
    after ``after`` (wake instant, thread), and the bytes before each id."""
    start = b"-" if after is None else b"(" + instant_bound(after[0]) + utf8(after[1])
    return start, b"(" + instant_bound(now_us + 1), 18


def check_prefix(prefix: object) -> str:
    """A brace would let the prefix open the hash tag that must be ours."""
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise InvalidArgument(f"prefix must be a non-empty string without braces, got {prefix!r}")
    try:
        prefix.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"prefix {prefix!r} is not valid Unicode") from exc
    return prefix
