"""The MongoDB backend: a thread's checkpoints, durable record and events in one
database (docs/mongodb.md)."""

from agentflow.checkpoint.mongodb.store import MongoCheckpointer, from_url

__all__ = ["MongoCheckpointer", "from_url"]
