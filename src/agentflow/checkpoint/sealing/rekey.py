"""Re-sealing a store online: every part of every thread onto the current key, no downtime.

:func:`rekey` walks one namespace thread by thread (every id with checkpoints
or a durable record: :class:`~agentflow.checkpoint.walk.StoreIds`) and, for
each, re-seals its checkpoints, its durable record (body and every journal
entry) and its events: each part is read once to learn which key opened it,
and each part not on the current key is written again as itself, guarded so
that a concurrent writer wins (:mod:`~agentflow.checkpoint.sealing.rekey_parts`
has the rules per part; a record a live lease holds is left as busy).
Plaintext parts (a store being moved to sealing) and parts on older keys are
re-sealed alike.

It is resumable: every progress report carries a token; pass it back as
``resume=`` and the walk goes on after the last thread it finished. At the
end it reports the parts still left on a key other than the current one,
marking those on a retired key.

Without a key ring it writes every checkpoint and record again as it is (no
sealing), which moves those written before the integrity envelope into it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import orjson

from agentflow.checkpoint.codec import CheckpointCodec, JsonCodec
from agentflow.checkpoint.sealing.keyring import KeyRing
from agentflow.checkpoint.sealing.rekey_parts import (
    MAX_LISTED,
    LeftRecord,
    PartCounts,
    RekeyReport,
    Walk,
)
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.walk import Position, StoreIds
from agentflow.errors import InvalidArgument

__all__ = [
    "MAX_LISTED",
    "LeftRecord",
    "PartCounts",
    "RekeyProgress",
    "RekeyReport",
    "StoreOpener",
    "rekey",
]

#: Opens the store to re-seal with the codec rekey passes (rekey closes it).
StoreOpener = Callable[[CheckpointCodec], Store]
_TOKEN_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class RekeyProgress:
    """Counts so far, and the token that resumes after the last finished thread."""

    threads: int
    records: int
    resealed: int
    skipped: int
    resume: str
    #: Durable records and events re-sealed so far, and records busy (a live lease).
    runs_resealed: int = 0
    events_resealed: int = 0
    busy: int = 0


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
    """Re-seal every part of the store ``open_store(codec)`` opens with the
    current key of ``keyring`` (None: write checkpoints and records again
    unsealed); see the module docstring.

    ``inner`` is the codec under the sealing (JSON by default). With
    ``check_only`` nothing is written: the report lists every part not on
    the current key. ``progress`` is called after each thread.
    """
    if keyring is not None and not isinstance(keyring, KeyRing):
        raise InvalidArgument(f"keyring must be a KeyRing or None, got {type(keyring).__name__}")
    if check_only and keyring is None:
        raise InvalidArgument("check_only needs a key ring: plain records carry no key id")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise InvalidArgument(f"page_size must be a positive int, got {page_size!r}")
    position, after = _parse_token(resume)
    walk = Walk(keyring, check_only)
    report = walk.report
    async with open_store(walk.codec(inner or JsonCodec())) as store:
        ids = StoreIds(store, page_size=page_size, position=position, after=after)
        async for thread in ids:
            await walk.thread(store, thread)
            report.threads += 1
            if progress is not None:
                progress(
                    RekeyProgress(
                        report.threads,
                        report.records,
                        report.resealed,
                        report.skipped,
                        _token(ids.position, thread),
                        report.runs.resealed,
                        report.events.resealed,
                        len(report.busy),
                    )
                )
    return report


def _token(position: Position, after: str) -> str:
    body = {"v": _TOKEN_VERSION, "cursor": position.threads, "runs": position.runs, "after": after}
    return base64.urlsafe_b64encode(orjson.dumps(body)).decode("ascii")


def _parse_token(token: str | None) -> tuple[Position | None, str | None]:
    """The walk position a token names; a token saved before records were walked
    has no ``runs`` cursor, and the record listing starts over (skipping up to
    ``after``)."""
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
        or not isinstance(body.get("runs"), str | None)
    ):
        raise InvalidArgument("resume must be a token from a rekey progress report")
    return Position(body["cursor"], body.get("runs")), body["after"]
