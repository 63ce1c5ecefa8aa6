"""The in-process backend: not durable; for tests and short-lived runs."""

from agentflow.checkpoint.memory.store import MemoryCheckpointer, MemoryStore, from_url

__all__ = ["MemoryCheckpointer", "MemoryStore", "from_url"]
