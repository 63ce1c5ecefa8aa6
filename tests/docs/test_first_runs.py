"""A guide's first example runs on a reader's machine with no server named.

The document runner names the test servers (``AGENTFLOW_POSTGRES_DSN`` and
the rest), so it cannot see an example whose fallback URL points at a host
the reader does not have (``postgresql://app@db/agents`` died with a
traceback). Here the first example of each guide runs with none of those
variables set, as a newcomer pastes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import blocks_of

ROOT = Path(__file__).resolve().parents[2]
#: (document, the file its first example writes): the examples a reader runs first.
FIRST = [("docs/langgraph.md", "essay.py")]
#: Variables that name a server; none is set for a newcomer.
_SERVERS = ("AGENTFLOW_", "MONGODB_URI", "REDIS_URL", "DATABASE_URL", "PG")


@pytest.mark.parametrize(("document", "name"), FIRST, ids=[f"{d}:{n}" for d, n in FIRST])
def test_the_first_example_runs_with_no_server_named(
    document: str, name: str, tmp_path: Path
) -> None:
    block = next(b for b in blocks_of(ROOT / document) if b.file_name == name)
    (tmp_path / name).write_text(block.code)
    variables = {k: v for k, v in os.environ.items() if not k.startswith(_SERVERS)}
    for run in ("first", "second"):  # a reader runs it again
        done = subprocess.run(
            [sys.executable, name],
            cwd=tmp_path,
            env=variables,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, (run, done.stderr)
