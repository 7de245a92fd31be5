"""Serializers turn values into the bytes stored in Redis and back.

Every serializer stores ints (not bools) as raw digits, as Django's builtin RedisCache and
django-redis do, so INCR and DECR work on them atomically on the server.
"""

from __future__ import annotations

import pickle
from typing import Any, Protocol

__all__ = ["BaseSerializer", "PickleSerializer", "Serializer"]


class Serializer(Protocol):
    """What redoxide needs from a serializer."""

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class BaseSerializer:
    """Convenience base: subclasses implement `dumps` and `loads`."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    def dumps(self, value: Any) -> bytes:
        raise NotImplementedError

    def loads(self, data: bytes) -> Any:
        raise NotImplementedError


class PickleSerializer(BaseSerializer):
    """Pickle, the default: any picklable value, compatible with Django and django-redis.

    Only unpickle data from a Redis you trust: a value planted in Redis can run code when read.
    """

    def __init__(self, protocol: int | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.protocol = pickle.HIGHEST_PROTOCOL if protocol is None else protocol

    def dumps(self, value: Any) -> bytes:
        return pickle.dumps(value, self.protocol)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)
