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

from dataclasses import replace
from datetime import datetime
from typing import Any

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import parse_instant

__all__ = ["RUNTIME_KEY", "claim_of", "runtime_of", "with_claim", "instant_us"]

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
