"""A reusable conformance suite for :class:`~agentflow.checkpoint.Checkpointer`.

Every agentflow backend passes it, and a third-party backend can too; the
guide in ``docs/writing-a-backend.md`` has a complete example. It needs pytest
and pytest-asyncio (run with ``asyncio_mode = "auto"`` or mark the module).
"""

from agentflow.checkpoint.testing.conformance import (
    CheckpointerConformance,
    DeleteConformance,
    DueConformance,
    FleetConformance,
    GetConformance,
    HistoryConformance,
    LifecycleConformance,
    ListingConformance,
    PruneConformance,
    PutConformance,
    RestoreConformance,
    StoreConformance,
)
from agentflow.checkpoint.testing.harness import (
    BackendHarness,
    PayloadReader,
    PayloadWriter,
    StoredKeyHook,
    make_checkpoint,
)

__all__ = [
    "BackendHarness",
    "CheckpointerConformance",
    "DeleteConformance",
    "DueConformance",
    "FleetConformance",
    "GetConformance",
    "HistoryConformance",
    "LifecycleConformance",
    "ListingConformance",
    "PayloadReader",
    "PayloadWriter",
    "PruneConformance",
    "PutConformance",
    "RestoreConformance",
    "StoreConformance",
    "StoredKeyHook",
    "make_checkpoint",
]
