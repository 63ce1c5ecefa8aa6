"""The Redis backend: plain Redis 7 or Valkey, one Lua script per write."""

from agentflow.checkpoint.redis.keys import Keys
from agentflow.checkpoint.redis.store import RedisCheckpointer, from_url

__all__ = ["Keys", "RedisCheckpointer", "from_url"]
