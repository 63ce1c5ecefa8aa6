"""Secrets stay their owner's: a key file others can read or write is refused,
naming the fix (``chmod 600``), before anything is opened or created; every
store the command line creates (the default one, a copy's destination, a
file store) is its owner's only."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from agentflow.checkpoint.sealing import new_key

Run = tuple[int, str]


def _key_file(path: Path, mode: int) -> Path:
    path.write_text(json.dumps({"current": "k1", "keys": {"k1": new_key()}}))
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_key_file_others_can_reach_is_refused_naming_chmod_600(
    here: Callable[..., Run], tmp_path: Path, mode: int
) -> None:
    keys = _key_file(tmp_path / "keys.json", mode)
    status, out = here("--keys-file", str(keys), "demo", "--hold", "0", "--approve")
    assert status == 1, out
    assert f"(mode {mode:04o})" in out and f"chmod 600 {keys}" in out
    assert not (tmp_path / ".runs").exists()  # refused before the store is created
    keys.chmod(0o600)
    assert here("--keys-file", str(keys), "demo", "--hold", "0", "--approve")[0] == 0


def _owner_only(root: Path) -> list[str]:
    """Every path under ``root`` (itself included) that anyone but its owner may use."""
    paths = [root, *root.rglob("*")]
    return [str(p) for p in paths if stat.S_IMODE(p.stat().st_mode) & 0o077]


def test_every_store_the_command_line_creates_is_its_owners_only(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    assert here("demo", "--hold", "0", "--approve", "--thread", "t")[0] == 0
    for destination in ("sqlite:///copies/copy.db", "file://copies/files"):
        status, out = here("copy", "sqlite:///.runs/checkpoints.db", destination)
        assert status == 0, out
    assert _owner_only(tmp_path / ".runs") == []
    assert _owner_only(tmp_path / "copies") == []  # the directories made for them too
