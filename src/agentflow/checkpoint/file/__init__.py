"""The file backend: one file per step under a directory, for processes on one host."""

from agentflow.checkpoint.file.checkpointer import FileCheckpointer, from_url

__all__ = ["FileCheckpointer", "from_url"]
