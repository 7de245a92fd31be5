"""Sets, as django-redis has them: sadd, smembers, sinter... and their async twins.

Signatures, defaults and return values are django-redis 7's (minus its ``client`` argument).
Reads of a set that does not exist return an empty set, 0 or False. Adding, removing or
asking about no members at all sends nothing. Under IGNORE_EXCEPTIONS an unreachable server
reads as an empty set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from redoxide._members import StructuresBase

if TYPE_CHECKING:
    from redoxide.plans import Plan

__all__ = ["SetsMixin"]

#: SSCAN's COUNT hint when none is given, as in django-redis.
SSCAN_COUNT = 10


class SetsMixin(StructuresBase):
    """Redis sets of encoded members, sync and async (a mixin for RedisCache)."""

    # -- plans ----------------------------------------------------------------------------------

    def _sadd(self, key: Any, members: tuple[Any, ...], version: int | None) -> Plan[int]:
        if not members:
            return 0
        made = self._key(key, version)
        return int((yield self._client.execute, (("SADD", made, *map(self._member, members)),)))

    def _srem(self, key: Any, members: tuple[Any, ...], version: int | None) -> Plan[int]:
        if not members:
            return 0
        made = self._key(key, version)
        return int((yield self._client.execute, (("SREM", made, *map(self._member, members)),)))

    def _scard(self, key: Any, version: int | None) -> Plan[int]:
        return int((yield self._client.execute, (("SCARD", self._key(key, version)),)))

    def _sismember(self, key: Any, member: Any, version: int | None) -> Plan[bool]:
        command = ("SISMEMBER", self._key(key, version), self._member(member))
        return bool((yield self._client.execute, (command,)))

    def _smismember(
        self, key: Any, members: tuple[Any, ...], version: int | None
    ) -> Plan[list[bool]]:
        if not members:
            return []
        command = ("SMISMEMBER", self._key(key, version), *map(self._member, members))
        return [bool(found) for found in (yield self._client.execute, (command,))]

    def _smembers(self, key: Any, version: int | None) -> Plan[set[Any]]:
        reply = yield self._client.execute, (("SMEMBERS", self._key(key, version)),)
        return self._decode_set(reply, key)

    def _combined(self, name: str, keys: tuple[Any, ...], version: int | None) -> Plan[set[Any]]:
        """SDIFF, SINTER or SUNION of the sets at keys (of nothing: the empty set)."""
        if not keys:
            return set()
        reply = yield self._client.execute, ((name, *self._keys(keys, version)),)
        return self._decode_set(reply, keys[0])

    def _stored(
        self,
        name: str,
        dest: Any,
        keys: tuple[Any, ...],
        version_dest: int | None,
        version_keys: int | None,
    ) -> Plan[int]:
        """SDIFFSTORE, SINTERSTORE or SUNIONSTORE into dest; return the size of the result."""
        command = (name, self._key(dest, version_dest), *self._keys(keys, version_keys))
        return int((yield self._client.execute, (command,)))

    def _smove(self, source: Any, destination: Any, member: Any, version: int | None) -> Plan[bool]:
        # The version applies to both keys (django-redis gives destination the default one).
        made = self._keys((source, destination), version)
        return bool((yield self._client.execute, (("SMOVE", *made, self._member(member)),)))

    def _spop(self, key: Any, count: int | None, version: int | None) -> Plan[Any]:
        made = self._key(key, version)
        if count is None:
            reply = yield self._client.execute, (("SPOP", made),)
            return None if reply is None else self._decode(reply, key)
        return self._decode_set((yield self._client.execute, (("SPOP", made, count),)), key)

    def _srandmember(self, key: Any, count: int | None, version: int | None) -> Plan[Any]:
        made = self._key(key, version)
        if count is None:
            reply = yield self._client.execute, (("SRANDMEMBER", made),)
            return None if reply is None else self._decode(reply, key)
        reply = yield self._client.execute, (("SRANDMEMBER", made, count),)
        return self._decode_list(reply, key)

    def _match(self, match: str | None) -> bytes | None:
        """SSCAN's MATCH pattern: encoded like a member, as django-redis does (so it matches
        members of the same encoded shape, e.g. strings of the same length under pickle)."""
        if not match:
            return None
        if self._compress:
            raise ValueError("Using match with compression is not supported.")
        return self._member(match)

    def _sscan_page(
        self,
        key: Any,
        made: str,
        cursor: bytes | int,
        match: bytes | None,
        count: int | None,
    ) -> Plan[tuple[bytes, list[Any]]]:
        """Run one SSCAN step; return the next cursor (b"0" when done) and decoded members."""
        command: tuple[Any, ...] = ("SSCAN", made, cursor)
        if match is not None:
            command += ("MATCH", match)
        if count is not None:
            command += ("COUNT", count)
        following, found = yield self._client.execute, (command,)
        return following, self._decode_list(found, key)

    def _sscan(
        self, key: Any, match: str | None, count: int | None, version: int | None
    ) -> Plan[set[Any]]:
        page = self._sscan_page(key, self._key(key, version), 0, self._match(match), count)
        return set((yield from page)[1])

    # -- the API --------------------------------------------------------------------------------

    def sadd(self, key: Any, *members: Any, version: int | None = None) -> int:
        """Add members to the set at key; return how many were not there already."""
        return self._run(self._sadd(key, members, version), 0)

    async def asadd(self, key: Any, *members: Any, version: int | None = None) -> int:
        """Add members to the set at key; return how many were not there already."""
        return await self._arun(self._sadd(key, members, version), 0)

    def srem(self, key: Any, *members: Any, version: int | None = None) -> int:
        """Remove members from the set at key; return how many were there."""
        return self._run(self._srem(key, members, version), 0)

    async def asrem(self, key: Any, *members: Any, version: int | None = None) -> int:
        """Remove members from the set at key; return how many were there."""
        return await self._arun(self._srem(key, members, version), 0)

    def scard(self, key: Any, version: int | None = None) -> int:
        """Return the number of members of the set at key."""
        return self._run(self._scard(key, version), 0)

    async def ascard(self, key: Any, version: int | None = None) -> int:
        """Return the number of members of the set at key."""
        return await self._arun(self._scard(key, version), 0)

    def sismember(self, key: Any, member: Any, version: int | None = None) -> bool:
        """Return whether member is in the set at key."""
        return self._run(self._sismember(key, member, version), False)

    async def asismember(self, key: Any, member: Any, version: int | None = None) -> bool:
        """Return whether member is in the set at key."""
        return await self._arun(self._sismember(key, member, version), False)

    def smismember(self, key: Any, *members: Any, version: int | None = None) -> list[bool]:
        """Return, for each member, whether it is in the set at key."""
        return self._run(self._smismember(key, members, version), [False] * len(members))

    async def asmismember(self, key: Any, *members: Any, version: int | None = None) -> list[bool]:
        """Return, for each member, whether it is in the set at key."""
        return await self._arun(self._smismember(key, members, version), [False] * len(members))

    def smembers(self, key: Any, version: int | None = None) -> set[Any]:
        """Return the members of the set at key."""
        return self._run(self._smembers(key, version), set())

    async def asmembers(self, key: Any, version: int | None = None) -> set[Any]:
        """Return the members of the set at key."""
        return await self._arun(self._smembers(key, version), set())

    def sdiff(self, *keys: Any, version: int | None = None) -> set[Any]:
        """Return the members of the first set that are in none of the others."""
        return self._run(self._combined("SDIFF", keys, version), set())

    async def asdiff(self, *keys: Any, version: int | None = None) -> set[Any]:
        """Return the members of the first set that are in none of the others."""
        return await self._arun(self._combined("SDIFF", keys, version), set())

    def sinter(self, *keys: Any, version: int | None = None) -> set[Any]:
        """Return the members every one of the sets has."""
        return self._run(self._combined("SINTER", keys, version), set())

    async def asinter(self, *keys: Any, version: int | None = None) -> set[Any]:
        """Return the members every one of the sets has."""
        return await self._arun(self._combined("SINTER", keys, version), set())

    def sunion(self, *keys: Any, version: int | None = None) -> set[Any]:
        """Return the members any of the sets has."""
        return self._run(self._combined("SUNION", keys, version), set())

    async def asunion(self, *keys: Any, version: int | None = None) -> set[Any]:
        """Return the members any of the sets has."""
        return await self._arun(self._combined("SUNION", keys, version), set())

    def sdiffstore(
        self,
        dest: Any,
        *keys: Any,
        version_dest: int | None = None,
        version_keys: int | None = None,
    ) -> int:
        """Store sdiff(*keys) at dest (replacing it); return its size."""
        return self._run(self._stored("SDIFFSTORE", dest, keys, version_dest, version_keys), 0)

    async def asdiffstore(
        self,
        dest: Any,
        *keys: Any,
        version_dest: int | None = None,
        version_keys: int | None = None,
    ) -> int:
        """Store sdiff(*keys) at dest (replacing it); return its size."""
        plan = self._stored("SDIFFSTORE", dest, keys, version_dest, version_keys)
        return await self._arun(plan, 0)

    def sinterstore(self, dest: Any, *keys: Any, version: int | None = None) -> int:
        """Store sinter(*keys) at dest (replacing it); return its size."""
        return self._run(self._stored("SINTERSTORE", dest, keys, version, version), 0)

    async def asinterstore(self, dest: Any, *keys: Any, version: int | None = None) -> int:
        """Store sinter(*keys) at dest (replacing it); return its size."""
        return await self._arun(self._stored("SINTERSTORE", dest, keys, version, version), 0)

    def sunionstore(self, destination: Any, *keys: Any, version: int | None = None) -> int:
        """Store sunion(*keys) at destination (replacing it); return its size."""
        return self._run(self._stored("SUNIONSTORE", destination, keys, version, version), 0)

    async def asunionstore(self, destination: Any, *keys: Any, version: int | None = None) -> int:
        """Store sunion(*keys) at destination (replacing it); return its size."""
        plan = self._stored("SUNIONSTORE", destination, keys, version, version)
        return await self._arun(plan, 0)

    def smove(self, source: Any, destination: Any, member: Any, version: int | None = None) -> bool:
        """Move member from the set at source to the one at destination; return whether it
        was in source."""
        return self._run(self._smove(source, destination, member, version), False)

    async def asmove(
        self, source: Any, destination: Any, member: Any, version: int | None = None
    ) -> bool:
        """Move member from the set at source to the one at destination; return whether it
        was in source."""
        return await self._arun(self._smove(source, destination, member, version), False)

    def spop(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return a random member (None if the set is empty), or with count a set
        of up to count of them."""
        return self._run(self._spop(key, count, version), None if count is None else set())

    async def aspop(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return a random member (None if the set is empty), or with count a set
        of up to count of them."""
        fallback: set[Any] | None = None if count is None else set()
        return await self._arun(self._spop(key, count, version), fallback)

    def srandmember(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Return a random member (None if the set is empty), or with count a list of them
        (count < 0: repeats allowed)."""
        plan = self._srandmember(key, count, version)
        return self._run(plan, None if count is None else [])

    async def asrandmember(
        self, key: Any, count: int | None = None, version: int | None = None
    ) -> Any:
        """Return a random member (None if the set is empty), or with count a list of them
        (count < 0: repeats allowed)."""
        plan = self._srandmember(key, count, version)
        return await self._arun(plan, None if count is None else [])

    def sscan(
        self,
        key: Any,
        match: str | None = None,
        count: int | None = SSCAN_COUNT,
        version: int | None = None,
    ) -> set[Any]:
        """Return the members of the first SSCAN page (all of a small set; for a large one,
        use sscan_iter). match is encoded like a member, as in django-redis."""
        return self._run(self._sscan(key, match, count, version), set())

    async def asscan(
        self,
        key: Any,
        match: str | None = None,
        count: int | None = SSCAN_COUNT,
        version: int | None = None,
    ) -> set[Any]:
        """Return the members of the first SSCAN page, like sscan, with awaits."""
        return await self._arun(self._sscan(key, match, count, version), set())

    def sscan_iter(
        self,
        key: Any,
        match: str | None = None,
        count: int | None = SSCAN_COUNT,
        version: int | None = None,
    ) -> Iterator[Any]:
        """Yield the members of the set at key, fetching about count per round trip.

        A member present for the whole iteration is yielded at least once; SSCAN may yield it
        twice.
        """
        made, pattern = self._key(key, version), self._match(match)
        cursor: bytes | int = 0
        while True:
            page = self._sscan_page(key, made, cursor, pattern, count)
            cursor, found = self._run(page, (b"0", []))
            yield from found
            if cursor == b"0":
                return

    async def asscan_iter(
        self,
        key: Any,
        match: str | None = None,
        count: int | None = SSCAN_COUNT,
        version: int | None = None,
    ) -> AsyncIterator[Any]:
        """Yield the members of the set at key, like sscan_iter, with awaits."""
        made, pattern = self._key(key, version), self._match(match)
        cursor: bytes | int = 0
        while True:
            page = self._sscan_page(key, made, cursor, pattern, count)
            cursor, found = await self._arun(page, (b"0", []))
            for member in found:
                yield member
            if cursor == b"0":
                return
