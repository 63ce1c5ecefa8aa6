"""Re-sealing a store online: every record onto the current key, no downtime.

:func:`rekey` walks one namespace thread by thread, reads each thread's
history to learn which key opened each step, and re-puts every step not on
the current key with ``if_revision=`` the revision it read: a writer that
changes the step meanwhile wins, and the step is counted as skipped (then
read once more to see which key the winner used). Plaintext records (a store
being moved to sealing) and records on older keys are re-sealed alike.

It is resumable: every progress report carries a token; pass it back as
``resume=`` and the walk goes on after the last thread it finished. At the
end it reports the records still left on a key other than the current one,
marking those on a retired key.

Without a key ring it re-puts every record as it is (no sealing), which
moves records written before the integrity envelope into it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import orjson

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.codec import CheckpointCodec, JsonCodec, RecordKey
from agentflow.checkpoint.sealing.codec import OpenedHook, SealedCodec
from agentflow.checkpoint.sealing.keyring import KeyRing
from agentflow.errors import CheckpointConflict, CheckpointCorrupted, InvalidArgument

__all__ = ["LeftRecord", "RekeyProgress", "RekeyReport", "StoreOpener", "rekey"]

#: Opens the store to re-seal with the codec rekey passes (rekey closes it).
StoreOpener = Callable[[CheckpointCodec], Checkpointer]
#: At most this many left records are listed in a report (all are counted).
MAX_LISTED: Final = 1_000
_TOKEN_VERSION: Final = 1
_REWRITE_ALL: Final = "\x00every record"


@dataclass(frozen=True, slots=True)
class LeftRecord:
    """A record left on a key other than the current one (key id None: plaintext)."""

    thread: str
    step: int
    key_id: str | None
    retired: bool


@dataclass(frozen=True, slots=True)
class RekeyProgress:
    """Counts so far, and the token that resumes after the last finished thread."""

    threads: int
    records: int
    resealed: int
    skipped: int
    resume: str


@dataclass
class RekeyReport:
    """What a rekey (or, with ``check_only``, an audit) found and did."""

    threads: int = 0
    records: int = 0
    resealed: int = 0
    #: Steps a concurrent write changed first (the write wins).
    skipped: int = 0
    #: Records per key id as read (None: plaintext), before any re-sealing.
    by_key: dict[str | None, int] = field(default_factory=dict)
    #: Records still on another key than the current one (up to MAX_LISTED).
    left: list[LeftRecord] = field(default_factory=list)
    left_count: int = 0
    #: (thread, message) for each thread that could not be read whole.
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    @property
    def retired_left(self) -> list[LeftRecord]:
        """The listed records still sealed with a retired key."""
        return [record for record in self.left if record.retired]


class _Observed:
    """A plain codec that reports each record it decodes, as :class:`SealedCodec` does."""

    __slots__ = ("_inner", "_observe")

    def __init__(self, inner: CheckpointCodec, observe: OpenedHook) -> None:
        self._inner, self._observe = inner, observe

    def encode(self, cp: Checkpoint, key: RecordKey) -> bytes:
        return self._inner.encode(cp, key)

    def decode(self, payload: bytes, key: RecordKey, revision: int) -> Checkpoint:
        self._observe(key, None)
        return self._inner.decode(payload, key, revision)


class _Walk:
    """One rekey run: what the codec saw opened, and the report."""

    def __init__(self, keyring: KeyRing | None, check_only: bool) -> None:
        self.keyring, self.check_only = keyring, check_only
        #: The key id records should end on; in plain mode no record has it.
        self.current = keyring.current if keyring is not None else _REWRITE_ALL
        self.opened: dict[tuple[str, int], str | None] = {}
        self.report = RekeyReport()

    def observe(self, key: RecordKey, key_id: str | None) -> None:
        self.opened[key.thread, key.step] = key_id

    def codec(self, inner: CheckpointCodec) -> CheckpointCodec:
        if self.keyring is None:
            return _Observed(inner, self.observe)
        return SealedCodec(self.keyring, inner, accept_plaintext=True, on_open=self.observe)

    def leave(self, thread: str, step: int, key_id: str | None) -> None:
        report = self.report
        report.left_count += 1
        if len(report.left) < MAX_LISTED:
            retired = self.keyring is not None and key_id in self.keyring.retired
            report.left.append(LeftRecord(thread, step, key_id, retired))

    async def thread(self, store: Checkpointer, thread: str) -> None:
        report, current = self.report, self.current
        self.opened.clear()
        try:
            async for cp in store.history(thread):
                report.records += 1
                key_id = self.opened.get((thread, cp.step))
                report.by_key[key_id] = report.by_key.get(key_id, 0) + 1
        except CheckpointCorrupted as exc:
            report.unreadable.append((thread, str(exc)))
        stale = sorted(step for (_, step), key_id in self.opened.items() if key_id != current)
        found = dict(self.opened)
        for step in stale:
            if self.check_only:
                self.leave(thread, step, found[thread, step])
                continue
            try:
                await self._reseal(store, thread, step)
            except CheckpointCorrupted as exc:
                report.unreadable.append((thread, str(exc)))

    async def _reseal(self, store: Checkpointer, thread: str, step: int) -> None:
        cp = await store.get(thread, step)
        if cp is None or self.opened.get((thread, step)) == self.current:
            return  # deleted or re-sealed by someone else meanwhile
        try:
            await store.put(cp, if_revision=cp.revision)
        except CheckpointConflict:
            self.report.skipped += 1
            if self.keyring is not None:
                await self._recheck(store, cp)
            return
        self.report.resealed += 1

    async def _recheck(self, store: Checkpointer, read: Checkpoint) -> None:
        self.opened.pop((read.thread, read.step), None)
        if await store.get(read.thread, read.step) is None:
            return
        key_id = self.opened.get((read.thread, read.step))
        if key_id != self.current:
            self.leave(read.thread, read.step, key_id)


async def rekey(
    open_store: StoreOpener,
    keyring: KeyRing | None,
    *,
    inner: CheckpointCodec | None = None,
    resume: str | None = None,
    progress: Callable[[RekeyProgress], object] | None = None,
    check_only: bool = False,
    page_size: int = 100,
) -> RekeyReport:
    """Re-seal every record of the store ``open_store(codec)`` opens with the
    current key of ``keyring`` (None: re-put every record unsealed); see the
    module docstring.

    ``inner`` is the codec under the sealing (JSON by default). With
    ``check_only`` nothing is written: the report lists every record not on
    the current key. ``progress`` is called after each thread.
    """
    if keyring is not None and not isinstance(keyring, KeyRing):
        raise InvalidArgument(f"keyring must be a KeyRing or None, got {type(keyring).__name__}")
    if check_only and keyring is None:
        raise InvalidArgument("check_only needs a key ring: plain records carry no key id")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise InvalidArgument(f"page_size must be a positive int, got {page_size!r}")
    cursor, after = _parse_token(resume)
    walk = _Walk(keyring, check_only)
    report = walk.report
    async with open_store(walk.codec(inner or JsonCodec())) as store:
        while True:
            page = await store.list_threads_page(limit=page_size, cursor=cursor)
            for info in page.threads:
                if after is not None and info.thread <= after:
                    continue
                await walk.thread(store, info.thread)
                report.threads += 1
                after = info.thread
                if progress is not None:
                    token = _token(cursor, after)
                    progress(
                        RekeyProgress(
                            report.threads, report.records, report.resealed, report.skipped, token
                        )
                    )
            if page.next_cursor is None:
                return report
            cursor = page.next_cursor


def _token(cursor: str | None, after: str) -> str:
    body = orjson.dumps({"v": _TOKEN_VERSION, "cursor": cursor, "after": after})
    return base64.urlsafe_b64encode(body).decode("ascii")


def _parse_token(token: str | None) -> tuple[str | None, str | None]:
    if token is None:
        return None, None
    try:
        body = orjson.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeEncodeError, AttributeError):
        body = None
    if (
        not isinstance(body, dict)
        or body.get("v") != _TOKEN_VERSION
        or not isinstance(body.get("after"), str)
        or not isinstance(body.get("cursor"), str | None)
    ):
        raise InvalidArgument("resume must be a token from a rekey progress report")
    return body["cursor"], body["after"]
