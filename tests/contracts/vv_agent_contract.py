"""The Rust original's language-neutral contract (vv-agent-contract v0.5.5), read at test time.

The fixture files are the contract's, not ours, so they are never committed:
each run copies them into a scratch directory, checks each against the
SHA-256 the contract's ``fixtures/SHA256SUMS`` pins at commit
:data:`COMMIT` (the digests below), and reads them from there. Sources, in
order:

1. ``$AGENTFLOW_CONTRACT_FIXTURES``: a directory holding the files (or a
   ``fixtures/`` folder of them), or a git clone of vv-agent-contract (bare or
   not) that has the commit;
2. the files at that commit on GitHub (raw URLs).

Without either, the tests are skipped locally and fail under ``CI=true``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Final

import pytest

from agentflow.durable import parse_json

__all__ = ["COMMIT", "load_contract"]

COMMIT: Final = "9d313537276d21d45ebf1164a21dbb560783c924"
#: From the contract's fixtures/SHA256SUMS at COMMIT.
SHA256: Final = {
    "checkpoint_codec_v1.json": "e7be2cfafca7f741d32b4537cb003f0179f69162171432c17cd746a0ff2119cf",
    "checkpoint_codec_v2.json": "73bc688b8992c1b5b09bae35d6fcb99cf49aca8f295ac8bc04fa9fd107868e81",
    "checkpoint_config_v1.json": "d61845e16b86f40c10c8225e8f83d2e2f1ea902172b503c6ae26b02dc313d2b3",
    "checkpoint_store_v2.json": "d8554749d01191bb785385aa5399016af99e620e16447268c064dff079185d8d",
    "operation_journal_v1.json": "4bf850a6595dd26c1e4094a98cfb23c341e6efc4a4e5f59be2bf70e9e5a122c0",
    "run_definition_v1.json": "9faf02b33421109fe58bfe377357ff19f994f8db208ea030276b4fb858e02c52",
}
SOURCE_VARIABLE: Final = "AGENTFLOW_CONTRACT_FIXTURES"
_RAW: Final = (
    "https://raw.githubusercontent.com/AndersonBY/vv-agent-contract/{commit}/fixtures/{name}"
)


def _from_directory(root: Path, name: str) -> bytes | None:
    for candidate in (root / name, root / "fixtures" / name):
        if candidate.is_file():
            return candidate.read_bytes()
    git_dir = root / ".git" if (root / ".git").exists() else root
    if not (git_dir / "objects").is_dir():
        return None
    shown = subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{COMMIT}:fixtures/{name}"],
        capture_output=True,
        check=False,
        timeout=60,
    )
    return shown.stdout if shown.returncode == 0 else None


def _from_github(name: str) -> bytes | None:
    url = _RAW.format(commit=COMMIT, name=name)
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            data: bytes = response.read()
            return data
    except OSError:
        return None


def _fetch(name: str) -> tuple[bytes, str] | None:
    source = os.environ.get(SOURCE_VARIABLE)
    found = _from_directory(Path(source), name) if source else None
    if found is not None:
        return found, source or ""
    found = _from_github(name)
    return None if found is None else (found, "github")


def _copy_into(scratch: Path) -> list[str]:
    """Copy every fixture into ``scratch``; the names that could not be had."""
    missing = []
    for name, digest in SHA256.items():
        fetched = _fetch(name)
        if fetched is None:
            missing.append(name)
            continue
        data, source = fetched
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise AssertionError(
                f"{name} from {source} has sha256 {actual}, not the pinned {digest}"
            )
        (scratch / name).write_bytes(data)
    return missing


def load_contract() -> dict[str, Any]:
    """Every pinned fixture, by file name, read from a scratch copy made now."""
    with tempfile.TemporaryDirectory(prefix="vv-agent-contract-") as directory:
        scratch = Path(directory)
        missing = _copy_into(scratch)
        if missing:
            reason = (
                f"the vv-agent-contract fixtures ({', '.join(missing)}) are not available: set "
                f"${SOURCE_VARIABLE} to a folder of them or a clone holding {COMMIT}"
            )
            if os.environ.get("CI", "").lower() == "true":
                raise RuntimeError(reason)
            pytest.skip(reason, allow_module_level=True)
        return {name: parse_json((scratch / name).read_bytes()) for name in SHA256}
