"""A reusable conformance suite for :class:`~agentflow.checkpoint.Checkpointer`.

Every agentflow backend passes it, and a third-party backend can too::

    import pytest
    from agentflow.checkpoint.testing import BackendHarness, CheckpointerConformance

    @pytest.fixture
    async def harness(tmp_path):
        yield BackendHarness(name="mine", factory=MyCheckpointer, kwargs={"path": tmp_path})

    class TestMyCheckpointer(CheckpointerConformance):
        pass

It needs pytest and pytest-asyncio.
"""

from agentflow.checkpoint.testing.conformance import CheckpointerConformance
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint

__all__ = ["BackendHarness", "CheckpointerConformance", "make_checkpoint"]
