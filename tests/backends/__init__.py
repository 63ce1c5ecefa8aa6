"""One module per backend, each with an async ``harness(tmp_path)`` context manager.

The conformance, concurrency and runtime suites run over every module here,
so a new backend joins all of them by adding one file.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def server_missing(what: str, why: BaseException | str) -> None:
    """Skip locally, but fail under CI=true: CI must never skip a real server."""
    message = f"{what} is not reachable: {why}"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)
