"""Every backend in tests/backends passes the shared conformance suites."""

from agentflow.checkpoint.testing import (
    CheckpointerConformance,
    FleetConformance,
    RestoreConformance,
    StoreConformance,
)
from agentflow.checkpoint.testing.conformance import OutboxConformance


class TestConformance(CheckpointerConformance):
    pass


class TestStoreConformance(StoreConformance):
    pass


class TestRestoreConformance(RestoreConformance):
    pass


class TestFleetConformance(FleetConformance):
    pass


class TestOutboxConformance(OutboxConformance):
    pass
