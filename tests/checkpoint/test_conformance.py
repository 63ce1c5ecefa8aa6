"""Every backend in tests/backends passes the shared conformance suite."""

from agentflow.checkpoint.testing import CheckpointerConformance


class TestConformance(CheckpointerConformance):
    pass
