"""``AGENTFLOW_TEST_BACKENDS`` for the runtime and chaos suites: deselect, never skip.

A test that needs particular backends outside the ``runtime_backend`` fixture
(an SQLite file by path, real processes on a shared store) is marked
``@pytest.mark.backends(NAME, ...)``; it runs when any of them is selected and
is deselected otherwise. CI leaves the variable unset and runs them all.
"""

from __future__ import annotations

import pytest

from tests.conftest import BACKENDS

__all__ = ["pytest_collection_modifyitems", "pytest_configure"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "backends(*names): needs one of these backends (deselected when "
        "AGENTFLOW_TEST_BACKENDS leaves them all out)",
    )


def _left_out(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("backends")
    return marker is not None and not any(name in BACKENDS for name in marker.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    dropped = [item for item in items if _left_out(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not _left_out(item)]
