"""redoxide: a Django cache backend for Redis and Valkey with a Rust core and native async.

CACHES = {"default": {"BACKEND": "redoxide.RedisCache", "LOCATION": "redis://127.0.0.1:6379/0"}}
"""

from redoxide.cache import RedisCache, ValkeyCache
from redoxide.connection import get_redis_connection
from redoxide.lock import AsyncLock, Lock

__all__ = ["AsyncLock", "Lock", "RedisCache", "ValkeyCache", "get_redis_connection"]
__version__ = "0.1.0"
