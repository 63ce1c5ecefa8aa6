from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.support import af, af_here


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose default store holds thread ``t``, a demo paused at its approval."""
    cwd = tmp_path_factory.mktemp("demo")
    af(cwd, "demo", "--thread", "t", "--hold", "0")
    return cwd


@pytest.fixture
def here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str]]:
    """``here(*args)`` runs the command in ``tmp_path``; returns (status, output)."""
    monkeypatch.chdir(tmp_path)
    for name in ("AGENTFLOW_STORE", "AGENTFLOW_NAMESPACE", "AGENTFLOW_GRAPHS"):
        monkeypatch.delenv(name, raising=False)
    return lambda *args: af_here(capsys, *args)
