"""The PostgreSQL backend (asyncpg): one store of checkpoints, records and events."""

# First, so that importing the package without the driver fails here even when
# a submodule is already loaded.
import asyncpg  # noqa: F401

from agentflow.checkpoint.postgres.checkpointer import DEFAULT_DSN, PostgresCheckpointer, from_url
from agentflow.checkpoint.postgres.schema import SCHEMA_VERSION

__all__ = ["DEFAULT_DSN", "SCHEMA_VERSION", "PostgresCheckpointer", "from_url"]
