"""What a fleet of workers asks of a store: due runs claimed in batches, and the runs
one holder holds.

:meth:`FleetBase.claim_due` claims up to N due runs in one operation that
other claimers skip, so workers sharing a store split the due runs instead
of racing for each one (PostgreSQL ``FOR UPDATE SKIP LOCKED``, one Redis
script, one MongoDB ``find_one_and_update`` per run, one SQLite
transaction). A due run is a thread whose latest checkpoint waits on a timer
that is due, whose record nobody holds (no lease, or a lapsed one) and that
a resume may continue: running, or awaiting reconciliation with every
ambiguous call decided. ``max_concurrent`` caps the runs of the given
definitions that hold a live lease at once, counted in the store when the
claim is decided, as DBOS queues' ``concurrency`` is.

:meth:`FleetBase.list_held` lists the records whose claim token names a
holder (``HOLDER#...``, the token the runtime mints for an owner), from an
index: a worker restarted under the same identity takes back at once the
runs its dead incarnation held, instead of waiting for their leases.

Both have defaults here, over the public methods of the store, for a
third-party store built on :class:`~agentflow.checkpoint.store_base.StoreBase`;
agentflow's backends override the hooks :meth:`FleetBase._claim_due` and
:meth:`FleetBase._held`.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, NoReturn

from agentflow.checkpoint.cursor import CursorSigner
from agentflow.checkpoint.model import ThreadPage
from agentflow.checkpoint.rows import RunHead, head_of, summary_of
from agentflow.checkpoint.timestamps import instant_of, wall_clock_ms
from agentflow.checkpoint.validation import check_limit, validate_thread
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointNotFound,
    ClaimActive,
    CycleConflict,
    DurableError,
    RecoveryRequired,
    TerminalImmutable,
)
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import RunPage, RunSummary
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER
from agentflow.durable.wire.validators import is_blank, validate_checkpoint_key, validate_sha256
from agentflow.errors import InvalidArgument, InvalidCursor

__all__ = [
    "HOLDER_SEPARATOR",
    "MAX_BATCH",
    "DueClaim",
    "DueRun",
    "FleetBase",
    "check_holder",
    "due_claim_mode",
    "held_params",
    "held_range",
    "is_record_key",
]

#: Ends a claim token's holder part: ``HOLDER#RANDOM``.
HOLDER_SEPARATOR: Final = "#"
#: The most runs one :meth:`FleetBase.claim_due` claims.
MAX_BATCH: Final = 1_000
_CLAIM: Final = "checkpoint_claim_invalid"
_HELD: Final = "held"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: Due threads the default reads per page.
_PAGE: Final = 100
#: What a claim raises when another claimer won or the run moved on.
_REFUSED: Final = (
    CheckpointNotFound,
    ClaimActive,
    CycleConflict,
    RecoveryRequired,
    TerminalImmutable,
)


@dataclass(frozen=True, slots=True)
class DueRun:
    """A due run :meth:`FleetBase.claim_due` claimed: its thread, the step whose
    timer is due (as the thread summary had it when the claim was decided), the
    claimed record, and whether the claim was a recovery (a lapsed lease, a
    decided ambiguity: ``resume_attempt`` counted one more)."""

    thread: str
    step: int
    record: DurableCheckpoint
    recovery: bool


def due_claim_mode(head: RunHead, now_ms: int) -> ClaimMode | None:
    """How a due run whose record has ``head`` is claimed at ``now_ms``, or None when
    :meth:`FleetBase.claim_due` leaves it (ended, held, awaiting a decision, at
    the end of the JSON-safe range). The rule every backend's claim evaluates."""
    if head.terminal or max(head.revision, head.cycle_index) >= MAX_WIRE_INTEGER:
        return None
    lease = head.lease_expires_at_ms
    if lease is not None and lease > now_ms:
        return None
    if head.status is CheckpointStatus.RECONCILIATION_REQUIRED:
        return None if head.ambiguous else ClaimMode.RECOVERY
    if head.status is not CheckpointStatus.RUNNING:
        return None
    if lease is not None or head.ambiguous:
        return ClaimMode.RECOVERY if head.resume_attempt < MAX_WIRE_INTEGER else None
    return ClaimMode.CONTINUE


def check_holder(holder: object) -> str:
    """A holder name: non-blank, without the separator (``checkpoint_claim_invalid``)."""
    if not isinstance(holder, str) or is_blank(holder) or HOLDER_SEPARATOR in holder:
        raise DurableError(_CLAIM, f"a holder is non-blank text without {HOLDER_SEPARATOR!r}")
    return holder


def held_range(holder: str) -> tuple[str, str]:
    """The claim tokens of ``holder`` are the strings ``lo <= token < hi`` in code point
    (and UTF-8 byte) order: those that start with ``HOLDER#``."""
    prefix = holder + HOLDER_SEPARATOR
    return prefix, holder + chr(ord(HOLDER_SEPARATOR) + 1)


@dataclass(frozen=True, slots=True)
class DueClaim:
    """A checked :meth:`FleetBase.claim_due` request, as a backend's hook gets it."""

    now_us: int
    tokens: tuple[str, ...]
    lease_ms: int
    #: Sorted digests (None: any definition).
    definitions: tuple[str, ...] | None
    max_concurrent: int | None
    exclude: frozenset[str]

    @property
    def scope(self) -> str:
        """Which records the batch may claim: ``"any"``; ``"definitions"``, those of
        the definitions and those written before the store kept definitions; or
        ``"limited"``, those of the definitions only (only they are counted)."""
        if self.max_concurrent is not None:
            return "limited"
        return "any" if self.definitions is None else "definitions"


def held_params(namespace: str, holder: str, after: str | None, limit: int) -> dict[str, object]:
    """The parameters of an SQL holder listing: the token range, where the page starts
    (after the token ``after``), and one row past the page."""
    lo, hi = held_range(holder)
    return {"namespace": namespace, "lo": lo, "hi": hi, "after": after or "", "limit": limit + 1}


def is_record_key(thread: str) -> bool:
    """Whether ``thread`` can be a record's key (a thread id that cannot has no record)."""
    try:
        validate_checkpoint_key(thread)
    except DurableError:
        return False
    return True


def _check_batch(
    claim_tokens: Sequence[str],
    lease_ms: int,
    definitions: Sequence[str] | None,
    max_concurrent: int | None,
) -> tuple[list[str], tuple[str, ...] | None]:
    if isinstance(claim_tokens, str) or not isinstance(claim_tokens, Sequence):
        raise DurableError(_CLAIM, "claim_tokens must be a sequence of claim tokens")
    tokens = list(claim_tokens)
    if not 1 <= len(tokens) <= MAX_BATCH:
        raise DurableError(_CLAIM, f"claim from 1 to {MAX_BATCH} runs at once")
    if any(not isinstance(t, str) or is_blank(t) for t in tokens) or len(set(tokens)) != len(
        tokens
    ):
        raise DurableError(_CLAIM, "claim tokens must be distinct and non-empty")
    if isinstance(lease_ms, bool) or not isinstance(lease_ms, int):
        raise DurableError(_CLAIM, "lease_ms must be positive and JSON-safe")
    if not 0 < lease_ms <= MAX_WIRE_INTEGER:
        raise DurableError(_CLAIM, "lease_ms must be positive and JSON-safe")
    chosen: tuple[str, ...] | None = None
    if definitions is not None:
        if isinstance(definitions, str) or not definitions:
            raise DurableError(_CLAIM, "definitions must be a non-empty sequence of digests")
        chosen = tuple(
            sorted({validate_sha256(d, "run definition digest", _CLAIM) for d in definitions})
        )
    if max_concurrent is not None:
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int):
            raise DurableError(_CLAIM, "max_concurrent must be a positive int")
        if not 0 < max_concurrent <= MAX_WIRE_INTEGER:
            raise DurableError(_CLAIM, "max_concurrent must be a positive int")
        if chosen is None:
            raise DurableError(_CLAIM, "max_concurrent limits the runs of given definitions")
    return tokens, chosen


def _check_exclude(exclude: Sequence[str]) -> frozenset[str]:
    if isinstance(exclude, str) or not isinstance(exclude, Sequence | frozenset | set):
        raise InvalidArgument("exclude must be a sequence of thread ids")
    return frozenset(validate_thread(thread) for thread in exclude)


class FleetBase(abc.ABC):
    """:meth:`claim_due` and :meth:`list_held`, with defaults over the store's public
    methods (a store of agentflow overrides :meth:`_claim_due` and :meth:`_held`)."""

    _fleet_lock: asyncio.Lock | None = None

    @abc.abstractmethod
    def _check_open(self) -> None: ...

    @abc.abstractmethod
    def _reraise(self, exc: Exception, operation: str) -> NoReturn: ...

    @abc.abstractmethod
    async def _cursors(self, operation: str) -> CursorSigner: ...

    @abc.abstractmethod
    async def load(self, key: str) -> DurableCheckpoint | None: ...

    @abc.abstractmethod
    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint: ...

    @abc.abstractmethod
    async def list_due(
        self, now: str | datetime, *, limit: int = 100, cursor: str | None = None
    ) -> ThreadPage: ...

    @abc.abstractmethod
    async def list_runs(
        self,
        *,
        status: CheckpointStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage: ...

    async def claim_due(
        self,
        now: str | datetime,
        *,
        claim_tokens: Sequence[str],
        lease_ms: int,
        definitions: Sequence[str] | None = None,
        max_concurrent: int | None = None,
        exclude: Sequence[str] = (),
    ) -> list[DueRun]:
        """Claim up to ``len(claim_tokens)`` due runs for ``lease_ms``, in wake order.

        Due at ``now`` (as :meth:`list_due` reads it); the i-th run claimed
        takes ``claim_tokens[i]``. Runs another claimer holds or is claiming
        are skipped, never waited for nor lost to: of racing claimers each
        run goes to one. ``definitions`` (run definition digests) claims only
        runs of those; ``max_concurrent`` (with ``definitions``) claims only
        while fewer runs of them hold a live lease than that, decided with the
        claim. ``exclude`` names threads not to claim (a worker's pass leaves
        the runs it already tried to its next pass). Leases run on the store's
        clock, as :meth:`claim`'s do. Records written before the store kept
        definitions match any and count toward no limit.
        """
        self._check_open()
        now_us = instant_of(now, what="now")
        tokens, chosen = _check_batch(claim_tokens, lease_ms, definitions, max_concurrent)
        request = DueClaim(
            now_us, tuple(tokens), lease_ms, chosen, max_concurrent, _check_exclude(exclude)
        )
        return await self._claim_due(request)

    async def list_held(
        self, holder: str, *, limit: int = 100, cursor: str | None = None
    ) -> RunPage:
        """The records whose claim token starts with ``holder#``, lease live or lapsed,
        in token order, from an index (a page costs O(limit)); cursors as
        :meth:`list_runs`."""
        self._check_open()
        check_holder(holder)
        check_limit(limit)
        listing = f"{_HELD}:{holder}"
        after: str | None = None
        if cursor is not None:
            after = (await self._cursors("list_held")).decode(listing, cursor).get("after")
            if not isinstance(after, str):
                raise InvalidCursor("cursor body is malformed")
        runs, last = await self._held(holder, after, limit)
        if last is None:
            return RunPage(runs, None)
        return RunPage(runs, (await self._cursors("list_held")).encode(listing, {"after": last}))

    # -- the defaults ---------------------------------------------------------------

    async def _claim_due(self, request: DueClaim) -> list[DueRun]:
        """Page through :meth:`list_due` and claim each run the rule admits; one call
        at a time per store object, so a limit holds within this process (across
        processes, only a store that decides it in the database enforces it)."""
        if self._fleet_lock is None:
            self._fleet_lock = asyncio.Lock()
        async with self._fleet_lock:
            tokens, definitions = request.tokens, request.definitions
            room = len(tokens)
            if request.max_concurrent is not None and definitions is not None:
                room = min(room, request.max_concurrent - await self._live_count(definitions))
            claimed: list[DueRun] = []
            now = _EPOCH + timedelta(microseconds=request.now_us)
            cursor: str | None = None
            while len(claimed) < room:
                page = await self.list_due(now, limit=_PAGE, cursor=cursor)
                for info in page.threads:
                    if len(claimed) >= room:
                        break
                    if info.thread in request.exclude:
                        continue
                    due = await self._claim_one(
                        info.thread,
                        info.latest_step,
                        tokens[len(claimed)],
                        request.lease_ms,
                        definitions,
                    )
                    if due is not None:
                        claimed.append(due)
                cursor = page.next_cursor
                if cursor is None:
                    break
            return claimed

    async def _claim_one(
        self,
        thread: str,
        step: int,
        token: str,
        lease_ms: int,
        definitions: tuple[str, ...] | None,
    ) -> DueRun | None:
        if not is_record_key(thread):
            return None
        record = await self.load(thread)
        if record is None or (
            definitions is not None and record.run_definition_digest not in definitions
        ):
            return None
        # Every lease counts as lapsed here: the store's claim decides on its own clock.
        mode = due_claim_mode(head_of(record), MAX_WIRE_INTEGER)
        if mode is None:
            return None
        try:
            claimed = await self.claim(
                thread,
                cycle_index=record.cycle_index + 1,
                claim_token=token,
                lease_ms=lease_ms,
                mode=mode,
            )
        except _REFUSED:  # another claimer won, or the run moved on: skip it
            return None
        return DueRun(thread, step, claimed, mode is ClaimMode.RECOVERY)

    async def _live_count(self, definitions: tuple[str, ...]) -> int:
        """Runs of ``definitions`` holding a live lease (by this machine's clock)."""
        now = wall_clock_ms()
        live = 0
        cursor: str | None = None
        while True:
            page = await self.list_runs(status=CheckpointStatus.RUNNING, limit=500, cursor=cursor)
            for run in page.runs:
                if run.claimed and (run.lease_expires_at_ms or 0) > now:
                    record = await self.load(run.key)
                    live += record is not None and record.run_definition_digest in definitions
            cursor = page.next_cursor
            if cursor is None:
                return live

    async def _held(
        self, holder: str, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        """Up to ``limit`` summaries of ``holder``'s records with a token after ``after``,
        in token order, and the token the next page resumes after. The default reads
        every record (a store of agentflow reads an index)."""
        lo, hi = held_range(holder)
        held: list[tuple[str, RunSummary]] = []
        cursor: str | None = None
        while True:
            page = await self.list_runs(limit=500, cursor=cursor)
            for run in page.runs:
                record = await self.load(run.key) if run.claimed else None
                token = "" if record is None else record.claim_token or ""
                if record is not None and lo <= token < hi and (after is None or token > after):
                    held.append((token, summary_of(run.key, head_of(record))))
            cursor = page.next_cursor
            if cursor is None:
                break
        held.sort(key=lambda pair: pair[0])
        more = len(held) > limit
        return [s for _, s in held[:limit]], held[limit - 1][0] if more else None
