from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import af


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose default store holds thread ``t``, a demo paused at its approval."""
    cwd = tmp_path_factory.mktemp("demo")
    af(cwd, "demo", "--thread", "t", "--hold", "0")
    return cwd
