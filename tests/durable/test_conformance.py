from agentflow.durable.testing import DurableStoreConformance


class TestDurableConformance(DurableStoreConformance):
    """Runs the durable conformance suite on every backend in tests/durable/backends."""
