"""The Redis backend: plain Redis 7 or Valkey, one Lua script per write."""

from agentflow.checkpoint.redis.checkpointer import RedisCheckpointer, from_url
from agentflow.checkpoint.redis.scripts import namespace_keys, thread_keys

__all__ = ["RedisCheckpointer", "from_url", "namespace_keys", "thread_keys"]
