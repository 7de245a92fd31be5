"""Expiry extras from django-redis: ttl, pttl, expire, pexpire, expire_at, pexpire_at, persist.

Return values follow django-redis: ttl/pttl give 0 for a missing key and None for a key that
never expires; the others return whether the key existed. Under IGNORE_EXCEPTIONS an unreachable
server reads as a missing key: ttl/pttl return 0 and the others False.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from redoxide._protocols import ClientLike
    from redoxide.plans import Plan

T = TypeVar("T")

__all__ = ["ExpiryMixin"]


class ExpiryMixin:
    """Read and change the expiry of cache keys, sync and async (a mixin for RedisCache)."""

    if TYPE_CHECKING:  # what RedisCache provides
        _client: ClientLike

        def _key(self, key: Any, version: int | None) -> str: ...
        def _touch(self, key: Any, timeout: Any, version: int | None) -> Plan[bool]: ...
        def _run(self, plan: Plan[T], fallback: Any = None) -> T: ...
        async def _arun(self, plan: Plan[T], fallback: Any = None) -> T: ...

    # -- plans ----------------------------------------------------------------------------------

    def _ttl(self, key: Any, version: int | None, command: str) -> Plan[int | None]:
        # One TTL/PTTL reply tells all: -2 is a missing key, -1 a key without expiry.
        left = yield self._client.execute, ((command, self._key(key, version)),)
        return None if left == -1 else max(left, 0)

    def _expire(self, key: Any, timeout: Any, version: int | None, unit: int) -> Plan[bool]:
        # `unit` is how many ms one unit of `timeout` is. Django's conventions then apply, as
        # in touch(): DEFAULT_TIMEOUT is the cache's TIMEOUT, None never expires, and zero or
        # less deletes the key.
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            timeout = timeout * unit / 1000
        return (yield from self._touch(key, timeout, version))

    def _expire_at(self, key: Any, when: Any, version: int | None, unit: int) -> Plan[bool]:
        # `when` is a datetime (naive means local time, as in datetime.timestamp()) or a Unix
        # time counted in units of `unit` ms. A time in the past deletes the key.
        if isinstance(when, datetime.datetime):
            at_ms = round(when.timestamp() * 1000)
        elif isinstance(when, (int, float)) and not isinstance(when, bool):
            at_ms = round(when * unit)
        else:
            raise TypeError(f"when must be a datetime or a Unix time, not {when!r}")
        made = self._key(key, version)
        return bool((yield self._client.execute, (("PEXPIREAT", made, at_ms),)))

    def _persist(self, key: Any, version: int | None) -> Plan[bool]:
        return bool((yield self._client.execute, (("PERSIST", self._key(key, version)),)))

    # -- the API --------------------------------------------------------------------------------

    def ttl(self, key: Any, version: int | None = None) -> int | None:
        """Return the seconds key has left: None if it never expires, 0 if it is missing."""
        return self._run(self._ttl(key, version, "TTL"), 0)

    async def attl(self, key: Any, version: int | None = None) -> int | None:
        """Return the seconds key has left: None if it never expires, 0 if it is missing."""
        return await self._arun(self._ttl(key, version, "TTL"), 0)

    def pttl(self, key: Any, version: int | None = None) -> int | None:
        """Return the ms key has left: None if it never expires, 0 if it is missing."""
        return self._run(self._ttl(key, version, "PTTL"), 0)

    async def apttl(self, key: Any, version: int | None = None) -> int | None:
        """Return the ms key has left: None if it never expires, 0 if it is missing."""
        return await self._arun(self._ttl(key, version, "PTTL"), 0)

    def expire(self, key: Any, timeout: Any, version: int | None = None) -> bool:
        """Make key expire in timeout seconds (or a timedelta); return whether it exists."""
        return self._run(self._expire(key, timeout, version, 1000), False)

    async def aexpire(self, key: Any, timeout: Any, version: int | None = None) -> bool:
        """Make key expire in timeout seconds (or a timedelta); return whether it exists."""
        return await self._arun(self._expire(key, timeout, version, 1000), False)

    def pexpire(self, key: Any, timeout: Any, version: int | None = None) -> bool:
        """Make key expire in timeout ms (or a timedelta); return whether it exists."""
        return self._run(self._expire(key, timeout, version, 1), False)

    async def apexpire(self, key: Any, timeout: Any, version: int | None = None) -> bool:
        """Make key expire in timeout ms (or a timedelta); return whether it exists."""
        return await self._arun(self._expire(key, timeout, version, 1), False)

    def expire_at(self, key: Any, when: Any, version: int | None = None) -> bool:
        """Make key expire at a datetime or Unix time in seconds; return whether it exists."""
        return self._run(self._expire_at(key, when, version, 1000), False)

    async def aexpire_at(self, key: Any, when: Any, version: int | None = None) -> bool:
        """Make key expire at a datetime or Unix time in seconds; return whether it exists."""
        return await self._arun(self._expire_at(key, when, version, 1000), False)

    def pexpire_at(self, key: Any, when: Any, version: int | None = None) -> bool:
        """Make key expire at a datetime or Unix time in ms; return whether it exists."""
        return self._run(self._expire_at(key, when, version, 1), False)

    async def apexpire_at(self, key: Any, when: Any, version: int | None = None) -> bool:
        """Make key expire at a datetime or Unix time in ms; return whether it exists."""
        return await self._arun(self._expire_at(key, when, version, 1), False)

    def persist(self, key: Any, version: int | None = None) -> bool:
        """Remove key's expiry; return whether it had one."""
        return self._run(self._persist(key, version), False)

    async def apersist(self, key: Any, version: int | None = None) -> bool:
        """Remove key's expiry; return whether it had one."""
        return await self._arun(self._persist(key, version), False)
