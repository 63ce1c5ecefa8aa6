"""The MongoDB backend: checkpoints and thread summaries in one collection (docs/mongodb.md)."""

from agentflow.checkpoint.mongodb.checkpointer import MongoCheckpointer, from_url

__all__ = ["MongoCheckpointer", "from_url"]
