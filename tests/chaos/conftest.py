"""The chaos suite honours ``AGENTFLOW_TEST_BACKENDS`` as the runtime suites do."""

from tests.runtime.selection import pytest_collection_modifyitems, pytest_configure

__all__ = ["pytest_collection_modifyitems", "pytest_configure"]
