"""The fetched suites, in a scratch folder: never part of this repository.

LangGraph publishes its graph tests in its source distribution, so the
installed release's sdist is downloaded from the package index and
unpacked. Agent Framework ships its workflow tests only in its repository,
so a checkout of the tag of the release under test (``python-<version>``)
is made from ``--repo`` (its URL, or a local clone or mirror), and a scratch
virtual environment holds that release when it is not the installed one.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tarfile
import venv
from pathlib import Path
from typing import Final

__all__ = ["AF_REPO", "agent_framework_checkout", "framework_python", "langgraph_sdist"]

AF_REPO: Final = "https://github.com/microsoft/agent-framework"
#: What Agent Framework's workflow tests import besides the framework itself,
#: and what the plugin's storages need.
_AF_TEST_DEPENDENCIES: Final = (
    "opentelemetry-sdk",
    "pytest>=8",
    "pytest-asyncio>=0.24",
    "pytest-timeout",
    "pymongo>=4.13",
    "asyncpg>=0.30",
    "redis[hiredis]>=5.0",
    "orjson>=3.10",
    "rich>=13",
    "xxhash>=3.0",
)


def _run(*argv: str, cwd: Path | None = None) -> None:
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def langgraph_sdist(workdir: Path) -> Path:
    """The unpacked source distribution of the installed ``langgraph`` release."""
    version = importlib.metadata.version("langgraph")
    root = workdir / f"langgraph-{version}"
    if (root / "tests" / "conftest.py").exists():
        return root
    downloads = workdir / "downloads"
    _run(
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--no-binary", ":all:", f"langgraph=={version}", "-d", str(downloads),
    )  # fmt: skip
    (archive,) = downloads.glob(f"langgraph-{version}.tar.gz")
    with tarfile.open(archive) as sdist:
        sdist.extractall(workdir, filter="data")
    return root


def agent_framework_checkout(repo: str, version: str, workdir: Path) -> Path:
    """``python/packages/core`` of a checkout of ``repo`` at tag ``python-<version>``."""
    root = workdir / f"agent-framework-{version}"
    core = root / "python" / "packages" / "core"
    if not (core / "tests" / "workflow").is_dir():
        _run("git", "clone", "--quiet", "--no-checkout", repo, str(root))
        tag = f"python-{version}"
        tags = subprocess.run(
            ["git", "tag", "--list", tag], cwd=root, capture_output=True, text=True, check=True
        ).stdout.split()
        if tag not in tags:
            raise SystemExit(
                f"{repo} has no tag {tag}; pass --framework-version with a release it tags"
            )
        _run("git", "checkout", "--quiet", tag, cwd=root)
    return core


def framework_python(version: str, workdir: Path) -> str:
    """An interpreter with agent-framework-core ``version``: this one, or a scratch venv's."""
    if importlib.metadata.version("agent-framework-core") == version:
        return sys.executable
    home = workdir / f"venv-agent-framework-{version}"
    python = home / "bin" / "python"
    if not python.exists():
        venv.create(home, with_pip=True)
        _run(
            str(python), "-m", "pip", "install", "--quiet",
            f"agent-framework-core=={version}", *_AF_TEST_DEPENDENCIES,
        )  # fmt: skip
    return str(python)
