"""Where the suites' servers are: the same variables the project's own tests read."""

from __future__ import annotations

import os
from typing import Final

__all__ = ["POSTGRES_DSN", "mongodb_uri"]

POSTGRES_DSN: Final = os.environ.get(
    "AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)


def mongodb_uri() -> str:
    """``MONGODB_URI`` (the command starts a mongod and sets it when it is missing)."""
    uri = os.environ.get("MONGODB_URI")
    if not uri:
        raise RuntimeError("MONGODB_URI names no MongoDB server")
    return uri
