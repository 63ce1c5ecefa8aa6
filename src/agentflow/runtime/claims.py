"""The runtime's own section of ``Checkpoint.extra``, and claims on suspends.

Everything the runtime keeps in a checkpoint beyond the model's fields lives
under ``extra["runtime"]``, so other layers (the operation journal to come)
get keys of their own:

- ``graph``: the graph's name, so a worker or the CLI knows what to run;
- ``writes``: on a suspend, the updates of the step's nodes that finished, so
  they are not run again on resume;
- ``answers``: on a suspend, the answers each unfinished node has already had;
- ``claim``: ``{"by", "until", "revision"}`` once a resume has taken the
  suspend. ``revision`` is the revision the claimer read, so a loser is told
  both revisions; ``until`` lets a crashed claimer's claim be taken over.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointConflict
from agentflow.runtime.errors import StepClaimed

__all__ = [
    "RUNTIME_KEY",
    "claim_of",
    "instant_us",
    "refuse_if_claimed",
    "release_claim",
    "runtime_of",
    "take_claim",
    "with_claim",
]

RUNTIME_KEY = "runtime"


def runtime_of(cp: Checkpoint) -> dict[str, Any]:
    """The runtime's section of ``cp.extra`` (empty for foreign checkpoints)."""
    section = cp.extra.get(RUNTIME_KEY)
    return section if isinstance(section, dict) else {}


def claim_of(cp: Checkpoint) -> dict[str, Any] | None:
    """The claim on a suspended checkpoint, if a resume has taken it."""
    claim = runtime_of(cp).get("claim")
    return claim if isinstance(claim, dict) else None


def instant_us(moment: datetime) -> int:
    """``moment`` as epoch microseconds, comparable with stored ISO times."""
    return parse_instant(moment.isoformat())


def with_claim(cp: Checkpoint, claim: dict[str, Any] | None) -> Checkpoint:
    """``cp`` with its claim set (or removed), as the next revision of its step."""
    section = {k: v for k, v in runtime_of(cp).items() if k != "claim"}
    if claim is not None:
        section["claim"] = claim
    return replace(cp, extra={**cp.extra, RUNTIME_KEY: section}, revision=cp.revision + 1)


async def refuse_if_claimed(
    checkpointer: Checkpointer, cp: Checkpoint, now: datetime, *, superseded_check: bool
) -> None:
    """Raise :class:`StepClaimed` if another resume holds ``cp``.

    A claim holds until it lapses. With ``superseded_check`` (the caller named
    the step it answers) a lapsed claim still refuses when the run has moved
    past ``cp``: that suspend was answered, by someone else.
    """
    claim = claim_of(cp)
    if claim is None:
        return
    holder, until = str(claim.get("by")), str(claim.get("until"))
    expected = int(claim["revision"])
    if parse_instant(until) > instant_us(now):
        raise StepClaimed(cp.thread, cp.step, expected, cp.revision, holder=holder, until=until)
    if superseded_check:
        latest = await checkpointer.get(cp.thread)
        if latest is None or latest.step != cp.step:
            moved_on = latest.step if latest is not None else cp.step
            raise StepClaimed(
                cp.thread,
                cp.step,
                expected,
                cp.revision,
                holder=holder,
                until=until,
                moved_on=moved_on,
            )


async def take_claim(
    checkpointer: Checkpointer, cp: Checkpoint, owner: str, until: datetime
) -> Checkpoint:
    """Claim ``cp`` by rewriting it conditionally on the revision read.

    Losing that race to another resume raises :class:`StepClaimed` naming the
    winner (read back from the store), not a bare revision mismatch.
    """
    claim = {"by": owner, "until": until.astimezone(UTC).isoformat(), "revision": cp.revision}
    claimed = with_claim(cp, claim)
    try:
        await checkpointer.put(claimed, if_revision=cp.revision)
    except CheckpointConflict as lost:
        winner = await checkpointer.get(cp.thread, cp.step)
        held = claim_of(winner) if winner is not None else None
        if winner is None or held is None:
            raise
        raise StepClaimed(
            cp.thread,
            cp.step,
            cp.revision,
            winner.revision,
            holder=str(held.get("by")),
            until=str(held.get("until")),
        ) from lost
    return claimed


async def release_claim(checkpointer: Checkpointer, claimed: Checkpoint) -> None:
    """Give a suspend back after its resume failed, so it can be retried now."""
    # A conflict means the claim had lapsed and another resume took the suspend.
    with contextlib.suppress(CheckpointConflict):
        await checkpointer.put(with_claim(claimed, None), if_revision=claimed.revision)
