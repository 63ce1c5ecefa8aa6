"""The conformance suite: one class per protocol method, and their union.

A test module subclasses :class:`CheckpointerConformance` (or only the parts it
wants) and provides an async ``harness`` fixture yielding a
:class:`~agentflow.checkpoint.testing.BackendHarness` on a fresh store.
"""

from agentflow.checkpoint.testing.conformance._support import (
    HOSTILE_THREAD_IDS,
    PATH_LIKE_THREAD_IDS,
    UNICODE_THREAD_IDS,
)
from agentflow.checkpoint.testing.conformance.delete import DeleteConformance
from agentflow.checkpoint.testing.conformance.due import DueConformance
from agentflow.checkpoint.testing.conformance.get import GetConformance
from agentflow.checkpoint.testing.conformance.history import HistoryConformance
from agentflow.checkpoint.testing.conformance.lifecycle import LifecycleConformance
from agentflow.checkpoint.testing.conformance.listing import ListingConformance
from agentflow.checkpoint.testing.conformance.prune import PruneConformance
from agentflow.checkpoint.testing.conformance.put import PutConformance

__all__ = [
    "HOSTILE_THREAD_IDS",
    "PATH_LIKE_THREAD_IDS",
    "UNICODE_THREAD_IDS",
    "CheckpointerConformance",
    "DeleteConformance",
    "DueConformance",
    "GetConformance",
    "HistoryConformance",
    "LifecycleConformance",
    "ListingConformance",
    "PruneConformance",
    "PutConformance",
]


class CheckpointerConformance(
    PutConformance,
    GetConformance,
    HistoryConformance,
    ListingConformance,
    DueConformance,
    PruneConformance,
    DeleteConformance,
    LifecycleConformance,
):
    """Behaviour every :class:`~agentflow.checkpoint.Checkpointer` must show."""
