"""A reusable conformance suite for :class:`~agentflow.durable.DurableStore` backends.

Every agentflow durable backend passes it, and a third-party backend can too::

    import pytest
    from agentflow.durable.testing import DurableHarness, DurableStoreConformance

    @pytest.fixture
    async def durable_harness():
        yield DurableHarness("mine", stores=lambda ns: MyStore(namespace=ns),
                             event_stores=lambda ns: MyEvents(namespace=ns))

    class TestMyStore(DurableStoreConformance):
        pass

It needs pytest and pytest-asyncio.
"""

from agentflow.durable.testing.claims import ClaimConformance
from agentflow.durable.testing.creation import CreationConformance
from agentflow.durable.testing.events import EventStoreConformance
from agentflow.durable.testing.harness import (
    DurableHarness,
    make_record,
    make_run_definition,
    make_tool_entry,
)
from agentflow.durable.testing.listing import ListingConformance
from agentflow.durable.testing.writes import WriteConformance

__all__ = [
    "DurableHarness",
    "DurableStoreConformance",
    "EventStoreConformance",
    "make_record",
    "make_run_definition",
    "make_tool_entry",
]


class DurableStoreConformance(
    ClaimConformance,
    WriteConformance,
    ListingConformance,
    CreationConformance,
    EventStoreConformance,
):
    """Every behaviour a durable backend (records and events) must show."""
