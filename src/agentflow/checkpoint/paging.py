"""Argument checks shared by every backend's listing and pruning."""

from __future__ import annotations

from agentflow.checkpoint.codec import validate_step
from agentflow.errors import InvalidArgument

__all__ = ["MAX_PAGE", "check_page_args", "check_prune_bounds"]

#: The largest page a listing returns; bounds the memory of one call.
MAX_PAGE = 10_000


def check_page_args(limit: object, offset: object = 0) -> None:
    """Refuse a limit outside 1..MAX_PAGE or a negative offset."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit must be an int from 1 to {MAX_PAGE}, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidArgument(f"offset must be a non-negative int, got {offset!r}")


def check_prune_bounds(before_step: int | None, older_than: str | None) -> None:
    """Refuse a prune with no bound: it would silently delete the whole thread."""
    if before_step is None and older_than is None:
        raise InvalidArgument("prune needs before_step, older_than, or both")
    if before_step is not None:
        validate_step(before_step)
