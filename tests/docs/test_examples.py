"""Every Python and shell block in README.md and docs/*.md runs, as a reader would run it.

How blocks are run (the rules a docs writer needs):

- ```` ```python ```` and ```` ```bash ```` (or ``sh``, ``shell``) blocks run; other
  languages (``text``, ``json``, ``sql``, ``console``) are only read.
- A fragment that cannot run on its own says so on its opening fence, after
  the language: ```` ```python partial ```` (a reason may follow:
  ```` ```bash partial: installs packages ````). Exactly those are skipped.
- The blocks of one document run in order in one scratch directory, a fresh
  clone's look-alike (the repository's top-level entries are linked there),
  so a block may use files an earlier one wrote. The venv's ``bin`` comes
  first on ``PATH``, as after ``. .venv/bin/activate``; ``MONGODB_URI``,
  ``AGENTFLOW_POSTGRES_DSN`` and ``REDIS_URL`` name the test servers.
- A Python block is a complete script, run as ``python block.py`` with the
  scratch directory on the import path (so it imports the modules named
  blocks wrote there, and the repository's top-level packages); one that
  imports pytest is a test module and runs under ``python -m pytest`` with no
  configuration but its own (so it must declare any plugin it needs). Every
  Python block that runs also passes ``mypy --strict`` under the project's
  configuration (which names the installed packages that carry no types).
- A shell block runs under ``bash -euo pipefail``.
- A reader runs an example twice: every Python block that keeps what it
  writes (a store under ``.runs``, a file store, a server) runs a second time
  once the document is through, in the same directory, and must pass again
  (no fixed thread id that the first run left behind).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends.postgres import DSN
from tests.backends.redis import REDIS_URL
from tests.docs.blocks import Block, blocks_of

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Entries of the repository a scratch directory must not share.
_PRIVATE = {".git", ".venv", ".runs", "build", "dist"}
_IMPORTS_PYTEST = re.compile(r"^\s*(import pytest|from pytest)", re.MULTILINE)
_TIMEOUT = 180
#: What a Python block names when it writes a store that outlives it.
_KEEPS = (".runs", "sqlite:///", "file://", "DSN", "MONGODB_URI", "REDIS_URL")


def _runnable(path: Path) -> list[Block]:
    return [block for block in blocks_of(path) if block.runs]


def _scratch(tmp_path: Path) -> Path:
    """A directory that looks like a fresh clone: the repository's entries, linked."""
    for entry in ROOT.iterdir():
        if entry.name not in _PRIVATE and not entry.name.endswith(("_cache", ".egg-info")):
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


def _environment(needs_mongodb: bool) -> dict[str, str]:
    variables = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLOW_")}
    bin_dir = str(Path(sys.executable).parent)
    variables.update(
        PATH=f"{bin_dir}{os.pathsep}{variables.get('PATH', '')}",
        VIRTUAL_ENV=str(Path(sys.executable).parent.parent),
        AGENTFLOW_POSTGRES_DSN=DSN,
        REDIS_URL=REDIS_URL,
        COLUMNS="100",
    )
    variables.pop("PYTHONPATH", None)
    if needs_mongodb:
        from tests.support.mongod import mongodb_uri

        variables["MONGODB_URI"] = mongodb_uri()
    return variables


def _command(block: Block, script: Path) -> list[str]:
    if block.kind == "shell":
        return ["bash", "-euo", "pipefail", str(script)]
    if _IMPORTS_PYTEST.search(block.code):
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)]
    return [sys.executable, str(script)]


def _script(cwd: Path, block: Block) -> Path:
    if block.file_name is not None:  # a module later blocks import: where they look
        script = cwd / block.file_name
        script.write_text(block.code)
        return script
    suffix = ".sh" if block.kind == "shell" else ".py"
    name = f"_{block.path.stem.replace('-', '_')}_block_{block.line}"
    script = cwd / ".doc-blocks" / f"{name.lower()}{suffix}"
    script.parent.mkdir(exist_ok=True)
    script.write_text(block.code)
    return script


def _run(
    command: list[str], cwd: Path, variables: dict[str, str] | None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=cwd,
        env=variables,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_block_of_the_document_runs(document: Path, tmp_path: Path) -> None:
    blocks = _runnable(document)
    if not blocks:
        return  # a document without runnable blocks has nothing to check
    cwd = _scratch(tmp_path)
    variables = _environment(any("mongodb" in b.code.lower() for b in blocks))
    variables["PYTHONPATH"] = str(cwd)  # modules written there import, as from the clone's root
    again = [b for b in blocks if b.kind == "python" and any(k in b.code for k in _KEEPS)]
    for block, run in [*((b, "") for b in blocks), *((b, " run a second time") for b in again)]:
        done = _run(_command(block, _script(cwd, block)), cwd, variables)
        if done.returncode != 0:
            pytest.fail(
                f"{block}{run} exited {done.returncode}\n--- code\n{block.code}"
                f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}",
                pytrace=False,
            )


def test_the_readme_starts_a_mongod_when_none_is_named(tmp_path: Path) -> None:
    """The README's MongoDB block with no ``MONGODB_URI``, as a newcomer runs it.

    The document run above names the test server, so the branch that starts
    a throwaway mongod would otherwise never run.
    """
    [block] = [b for b in _runnable(ROOT / "README.md") if "MONGODB_URI:-" in b.code]
    cwd = _scratch(tmp_path)
    variables = _environment(needs_mongodb=False)
    variables.pop("MONGODB_URI", None)  # as on a machine that names none (CI names the suite's own)
    with socket.socket() as probe:  # a free port, so no other mongod is met
        probe.bind(("127.0.0.1", 0))
        variables["MONGOD_PORT"] = str(probe.getsockname()[1])
    variables["PYTHONPATH"] = str(cwd)
    pid_file = cwd / ".runs" / "mongod" / "mongod.pid"
    try:
        done = _run(_command(block, _script(cwd, block)), cwd, variables)
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
    assert done.returncode == 0, f"{block}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert pid_file.exists(), "the block started no mongod of its own"


def test_every_python_block_passes_mypy_strict(tmp_path: Path) -> None:
    blocks = [b for path in DOCUMENTS for b in _runnable(path) if b.kind == "python"]
    assert blocks, "the docs have Python examples"
    modules = []
    for block in blocks:  # named for where they are (README_md_63.py), or as they say
        folder = tmp_path / block.path.name.replace(".", "_")
        folder.mkdir(exist_ok=True)
        module = folder / (
            block.file_name or f"{block.path.name.replace('.', '_')}_{block.line}.py"
        )
        module.write_text(block.code)
        modules.append(str(module))
    mypy = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(ROOT / ".mypy_cache")]
    mypy += ["--config-file", str(ROOT / "pyproject.toml")]  # which packages have no types
    done = _run([*mypy, *modules], tmp_path, None)
    if done.returncode != 0:
        pytest.fail(f"mypy --strict on the docs' Python blocks:\n{done.stdout}", pytrace=False)


def test_partial_blocks_are_marked_by_name_only(tmp_path: Path) -> None:
    """The marker is the word after the language, and nothing else skips a block."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```python\nprint(1)\n```\n"
        "```python partial: needs a server\nconnect()\n```\n"
        "```bash\necho partial\n```\n"
        "```text\nnot run\n```\n"
        "   ```sh\n   echo indented\n   ```\n"
    )
    found = blocks_of(doc)
    assert [(b.language, b.partial, b.runs) for b in found] == [
        ("python", False, True),
        ("python", True, False),
        ("bash", False, True),
        ("text", False, False),
        ("sh", False, True),
    ]
    assert found[-1].code == "echo indented\n" and found[1].line == 4
