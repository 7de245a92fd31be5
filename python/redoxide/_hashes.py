"""Hashes, as django-redis has them (hset, hdel, hlen, hkeys, hexists), plus hget, hgetall,
hmget and hincrby in the same style, and their async twins.

The hash's key is a cache key; its fields are sent as they are (str, bytes, int; a float as
its repr, as redis-py does) and come back as str; its values go through the serializer, ints
raw, so hincrby counts on what hset stored. Reads of a missing hash or field return 0, False,
an empty list or dict, or the default; under IGNORE_EXCEPTIONS so does an unreachable server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from redoxide._members import StructuresBase, as_field
from redoxide.exceptions import SerializationError

if TYPE_CHECKING:
    from redoxide.plans import Plan

__all__ = ["HashesMixin"]


def _field_name(raw: bytes) -> str:
    # Fields come back as str, as in django-redis' hkeys; bytes that are not UTF-8 survive.
    return raw.decode(errors="surrogateescape")


class HashesMixin(StructuresBase):
    """Redis hashes of encoded values, sync and async (a mixin for RedisCache)."""

    # -- plans ----------------------------------------------------------------------------------

    def _hset(
        self,
        key: Any,
        field: Any,
        value: Any,
        mapping: Mapping[Any, Any] | None,
        version: int | None,
    ) -> Plan[int]:
        pairs: list[Any] = []
        if field is not None:
            pairs += (as_field(field), self._encode(value, key))
        for name, item in (mapping or {}).items():
            pairs += (as_field(name), self._encode(item, key))
        if not pairs:
            return 0
        return int((yield self._client.execute, (("HSET", self._key(key, version), *pairs),)))

    def _hdel(self, key: Any, field: Any, version: int | None) -> Plan[int]:
        command = ("HDEL", self._key(key, version), as_field(field))
        return int((yield self._client.execute, (command,)))

    def _hlen(self, key: Any, version: int | None) -> Plan[int]:
        return int((yield self._client.execute, (("HLEN", self._key(key, version)),)))

    def _hkeys(self, key: Any, version: int | None) -> Plan[list[str]]:
        reply = yield self._client.execute, (("HKEYS", self._key(key, version)),)
        return [_field_name(raw) for raw in reply]

    def _hexists(self, key: Any, field: Any, version: int | None) -> Plan[bool]:
        command = ("HEXISTS", self._key(key, version), as_field(field))
        return bool((yield self._client.execute, (command,)))

    def _hget(self, key: Any, field: Any, default: Any, version: int | None) -> Plan[Any]:
        command = ("HGET", self._key(key, version), as_field(field))
        data = yield self._client.execute, (command,)
        return default if data is None else self._decode(data, key)

    def _hgetall(self, key: Any, version: int | None) -> Plan[dict[str, Any]]:
        reply = yield self._client.execute, (("HGETALL", self._key(key, version)),)
        pairs = iter(reply)
        found = {}
        for f, v in zip(pairs, pairs, strict=True):
            try:
                found[_field_name(f)] = self._decode(v, key)
            except SerializationError as exc:
                self._failed(exc, None)  # raises unless fail-open: then a miss for this field
        return found

    def _hmget(self, key: Any, fields: tuple[Any, ...], version: int | None) -> Plan[list[Any]]:
        if not fields:
            return []
        command = ("HMGET", self._key(key, version), *map(as_field, fields))
        reply = yield self._client.execute, (command,)
        return [None if data is None else self._hmget_one(data, key) for data in reply]

    def _hmget_one(self, data: bytes, key: Any) -> Any:
        try:
            return self._decode(data, key)
        except SerializationError as exc:
            return self._failed(exc, None)  # raises unless fail-open: then None, a miss

    def _hincrby(self, key: Any, field: Any, amount: int, version: int | None) -> Plan[int]:
        command = ("HINCRBY", self._key(key, version), as_field(field), amount)
        return int((yield self._client.execute, (command,)))

    # -- the API --------------------------------------------------------------------------------

    def hset(
        self,
        key: Any,
        field: Any = None,
        value: Any = None,
        mapping: Mapping[Any, Any] | None = None,
        version: int | None = None,
    ) -> int:
        """Set field to value in the hash at key, and every field of mapping; return how many
        fields were new. (A value of None is stored, and reads back as None.)"""
        return self._run(self._hset(key, field, value, mapping, version), 0)

    async def ahset(
        self,
        key: Any,
        field: Any = None,
        value: Any = None,
        mapping: Mapping[Any, Any] | None = None,
        version: int | None = None,
    ) -> int:
        """Set field to value in the hash at key, and every field of mapping; return how many
        fields were new. (A value of None is stored, and reads back as None.)"""
        return await self._arun(self._hset(key, field, value, mapping, version), 0)

    def hdel(self, key: Any, field: Any, version: int | None = None) -> int:
        """Remove field from the hash at key; return 1 if it was there, else 0."""
        return self._run(self._hdel(key, field, version), 0)

    async def ahdel(self, key: Any, field: Any, version: int | None = None) -> int:
        """Remove field from the hash at key; return 1 if it was there, else 0."""
        return await self._arun(self._hdel(key, field, version), 0)

    def hlen(self, key: Any, version: int | None = None) -> int:
        """Return the number of fields of the hash at key."""
        return self._run(self._hlen(key, version), 0)

    async def ahlen(self, key: Any, version: int | None = None) -> int:
        """Return the number of fields of the hash at key."""
        return await self._arun(self._hlen(key, version), 0)

    def hkeys(self, key: Any, version: int | None = None) -> list[str]:
        """Return the fields of the hash at key."""
        return self._run(self._hkeys(key, version), [])

    async def ahkeys(self, key: Any, version: int | None = None) -> list[str]:
        """Return the fields of the hash at key."""
        return await self._arun(self._hkeys(key, version), [])

    def hexists(self, key: Any, field: Any, version: int | None = None) -> bool:
        """Return whether the hash at key has field."""
        return self._run(self._hexists(key, field, version), False)

    async def ahexists(self, key: Any, field: Any, version: int | None = None) -> bool:
        """Return whether the hash at key has field."""
        return await self._arun(self._hexists(key, field, version), False)

    def hget(self, key: Any, field: Any, default: Any = None, version: int | None = None) -> Any:
        """Return the value of field in the hash at key, or default."""
        return self._run(self._hget(key, field, default, version), default)

    async def ahget(
        self, key: Any, field: Any, default: Any = None, version: int | None = None
    ) -> Any:
        """Return the value of field in the hash at key, or default."""
        return await self._arun(self._hget(key, field, default, version), default)

    def hgetall(self, key: Any, version: int | None = None) -> dict[str, Any]:
        """Return the hash at key as a dict of fields to values."""
        return self._run(self._hgetall(key, version), {})

    async def ahgetall(self, key: Any, version: int | None = None) -> dict[str, Any]:
        """Return the hash at key as a dict of fields to values."""
        return await self._arun(self._hgetall(key, version), {})

    def hmget(self, key: Any, *fields: Any, version: int | None = None) -> list[Any]:
        """Return the values of fields in the hash at key, in order (None for a missing one)."""
        return self._run(self._hmget(key, fields, version), [None] * len(fields))

    async def ahmget(self, key: Any, *fields: Any, version: int | None = None) -> list[Any]:
        """Return the values of fields in the hash at key, in order (None for a missing one)."""
        return await self._arun(self._hmget(key, fields, version), [None] * len(fields))

    def hincrby(
        self, key: Any, field: Any, amount: int = 1, version: int | None = None
    ) -> int | None:
        """Add amount to the int at field (0 if missing) in the hash at key; return the sum.
        (None under IGNORE_EXCEPTIONS when the server is unreachable, as incr.)"""
        return self._run(self._hincrby(key, field, amount, version))

    async def ahincrby(
        self, key: Any, field: Any, amount: int = 1, version: int | None = None
    ) -> int | None:
        """Add amount to the int at field (0 if missing) in the hash at key; return the sum.
        (None under IGNORE_EXCEPTIONS when the server is unreachable, as incr.)"""
        return await self._arun(self._hincrby(key, field, amount, version))
