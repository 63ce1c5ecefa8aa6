"""The conformance suite: one class per protocol method, and their union.

A test module subclasses :class:`CheckpointerConformance` (or only the parts it
wants) and provides an async ``harness`` fixture yielding a
:class:`~agentflow.checkpoint.testing.BackendHarness` on a fresh store.
:class:`StoreConformance` adds what a :class:`~agentflow.checkpoint.store.Store`
does with a thread whole (records and events beside the checkpoints), and
:class:`RestoreConformance` the writes ``copy`` and ``rekey`` make with
(``restore``, ``reseal_event``), :class:`FleetConformance` a worker fleet's
(``claim_due``, ``list_held``), :class:`OutboxConformance` how events leave a
record (queued by a write, delivered once); the records' and events' own suites are in
:mod:`agentflow.durable.testing`.
"""

from agentflow.checkpoint.testing.conformance._support import (
    HOSTILE_THREAD_IDS,
    PATH_LIKE_THREAD_IDS,
    UNICODE_THREAD_IDS,
)
from agentflow.checkpoint.testing.conformance.delete import DeleteConformance
from agentflow.checkpoint.testing.conformance.deltas import DeltaConformance
from agentflow.checkpoint.testing.conformance.due import DueConformance
from agentflow.checkpoint.testing.conformance.fleet import FleetConformance
from agentflow.checkpoint.testing.conformance.get import GetConformance
from agentflow.checkpoint.testing.conformance.history import HistoryConformance
from agentflow.checkpoint.testing.conformance.lifecycle import LifecycleConformance
from agentflow.checkpoint.testing.conformance.listing import ListingConformance
from agentflow.checkpoint.testing.conformance.outbox import OutboxConformance
from agentflow.checkpoint.testing.conformance.prune import PruneConformance
from agentflow.checkpoint.testing.conformance.put import PutConformance
from agentflow.checkpoint.testing.conformance.restore import RestoreConformance
from agentflow.checkpoint.testing.conformance.store import StoreConformance

__all__ = [
    "HOSTILE_THREAD_IDS",
    "PATH_LIKE_THREAD_IDS",
    "UNICODE_THREAD_IDS",
    "CheckpointerConformance",
    "DeleteConformance",
    "DeltaConformance",
    "DueConformance",
    "FleetConformance",
    "GetConformance",
    "HistoryConformance",
    "LifecycleConformance",
    "ListingConformance",
    "OutboxConformance",
    "PruneConformance",
    "PutConformance",
    "RestoreConformance",
    "StoreConformance",
]


class CheckpointerConformance(
    PutConformance,
    GetConformance,
    HistoryConformance,
    DeltaConformance,
    ListingConformance,
    DueConformance,
    PruneConformance,
    DeleteConformance,
    LifecycleConformance,
):
    """Behaviour every :class:`~agentflow.checkpoint.Checkpointer` must show."""
