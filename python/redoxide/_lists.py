"""Lists, as django-cachex has them: lpush, rpush, lpop, rpop, lrange... and their async twins.

Signatures are django-cachex's (``version`` keyword, ``count`` on the pops, ``lmove`` with
``version_src`` / ``version_dst``), return values redis-py's decoded: elements go through the
cache's serializer and compressor, ints raw, as set members do (the bytes django-redis writes
for a member), so LREM, LPOS and LINSERT find an element by its value. Every call is one
command, one round trip, on the key's node. Reads of a list that does not exist return an
empty list, 0 or None; pushing no elements sends nothing. Under IGNORE_EXCEPTIONS an
unreachable server reads as an empty list and writes report nothing done (0, None, False).

The blocking pops (BLPOP, BRPOP, BLMOVE) are left out on purpose: a command that waits on the
server would hold up every other command sharing its connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redoxide._members import StructuresBase
from redoxide._raw_commands import lpos_options

if TYPE_CHECKING:
    from redoxide.plans import Plan

__all__ = ["ListsMixin"]

_ENDS = ("LEFT", "RIGHT")
_PLACES = ("BEFORE", "AFTER")


def _word(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    word = value.upper() if isinstance(value, str) else None
    if word not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return word


class ListsMixin(StructuresBase):
    """Redis lists of encoded elements, sync and async (a mixin for RedisCache)."""

    # -- plans ----------------------------------------------------------------------------------

    def _push(self, name: str, key: Any, values: tuple[Any, ...], version: int | None) -> Plan[int]:
        if not values:
            return 0
        command = (name, self._key(key, version), *map(self._member, values))
        return int((yield self._client.execute, (command,)))

    def _pop(self, name: str, key: Any, count: int | None, version: int | None) -> Plan[Any]:
        made = self._key(key, version)
        if count is None:
            reply = yield self._client.execute, ((name, made),)
            return None if reply is None else self._decode(reply, key)
        reply = yield self._client.execute, ((name, made, count),)
        return None if reply is None else self._decode_list(reply, key)

    def _lrange(self, key: Any, start: int, end: int, version: int | None) -> Plan[list[Any]]:
        reply = yield self._client.execute, (("LRANGE", self._key(key, version), start, end),)
        return self._decode_list(reply, key)

    def _lindex(self, key: Any, index: int, version: int | None) -> Plan[Any]:
        reply = yield self._client.execute, (("LINDEX", self._key(key, version), index),)
        return None if reply is None else self._decode(reply, key)

    def _llen(self, key: Any, version: int | None) -> Plan[int]:
        return int((yield self._client.execute, (("LLEN", self._key(key, version)),)))

    def _lpos(
        self,
        key: Any,
        value: Any,
        rank: int | None,
        count: int | None,
        maxlen: int | None,
        version: int | None,
    ) -> Plan[Any]:
        made, member = self._key(key, version), self._member(value)
        command = ("LPOS", made, member, *lpos_options(rank, count, maxlen))
        return (yield self._client.execute, (command,))

    def _lmove(
        self,
        src: Any,
        dst: Any,
        wherefrom: str,
        whereto: str,
        version: int | None,
        version_src: int | None,
        version_dst: int | None,
    ) -> Plan[Any]:
        """LMOVE; version_src / version_dst, when given, override version for their key."""
        command = (
            "LMOVE",
            self._key(src, version if version_src is None else version_src),
            self._key(dst, version if version_dst is None else version_dst),
            _word("wherefrom", wherefrom, _ENDS),
            _word("whereto", whereto, _ENDS),
        )
        reply = yield self._client.execute, (command,)
        return None if reply is None else self._decode(reply, src)

    def _lrem(self, key: Any, count: int, value: Any, version: int | None) -> Plan[int]:
        command = ("LREM", self._key(key, version), count, self._member(value))
        return int((yield self._client.execute, (command,)))

    def _ltrim(self, key: Any, start: int, end: int, version: int | None) -> Plan[bool]:
        yield self._client.execute, (("LTRIM", self._key(key, version), start, end),)
        return True

    def _lset(self, key: Any, index: int, value: Any, version: int | None) -> Plan[bool]:
        command = ("LSET", self._key(key, version), index, self._member(value))
        yield self._client.execute, (command,)
        return True

    def _linsert(
        self, key: Any, where: str, pivot: Any, value: Any, version: int | None
    ) -> Plan[int]:
        place = _word("where", where, _PLACES)
        made = self._key(key, version)
        command = ("LINSERT", made, place, self._member(pivot), self._member(value))
        return int((yield self._client.execute, (command,)))

    # -- the API --------------------------------------------------------------------------------

    def lpush(self, key: Any, *values: Any, version: int | None = None) -> int:
        """Put values at the head of the list at key, the last one first; return its length."""
        return self._run(self._push("LPUSH", key, values, version), 0)

    async def alpush(self, key: Any, *values: Any, version: int | None = None) -> int:
        """Put values at the head of the list at key, the last one first; return its length."""
        return await self._arun(self._push("LPUSH", key, values, version), 0)

    def rpush(self, key: Any, *values: Any, version: int | None = None) -> int:
        """Append values to the list at key; return its length."""
        return self._run(self._push("RPUSH", key, values, version), 0)

    async def arpush(self, key: Any, *values: Any, version: int | None = None) -> int:
        """Append values to the list at key; return its length."""
        return await self._arun(self._push("RPUSH", key, values, version), 0)

    def lpop(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return the first element (None if the list is empty); with count, a
        list of up to count elements (None if there is no list)."""
        return self._run(self._pop("LPOP", key, count, version), None)

    async def alpop(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return the first element, or with count up to count of them."""
        return await self._arun(self._pop("LPOP", key, count, version), None)

    def rpop(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return the last element, or with count up to count of them."""
        return self._run(self._pop("RPOP", key, count, version), None)

    async def arpop(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return the last element, or with count up to count of them."""
        return await self._arun(self._pop("RPOP", key, count, version), None)

    def lrange(self, key: Any, start: int, end: int, version: int | None = None) -> list[Any]:
        """Return the elements from start to end, both included (negative: from the end)."""
        return self._run(self._lrange(key, start, end, version), [])

    async def alrange(
        self, key: Any, start: int, end: int, version: int | None = None
    ) -> list[Any]:
        """Return the elements from start to end, both included (negative: from the end)."""
        return await self._arun(self._lrange(key, start, end, version), [])

    def lindex(self, key: Any, index: int, version: int | None = None) -> Any:
        """Return the element at index (negative: from the end), or None."""
        return self._run(self._lindex(key, index, version), None)

    async def alindex(self, key: Any, index: int, version: int | None = None) -> Any:
        """Return the element at index (negative: from the end), or None."""
        return await self._arun(self._lindex(key, index, version), None)

    def llen(self, key: Any, version: int | None = None) -> int:
        """Return the length of the list at key (0 if there is none)."""
        return self._run(self._llen(key, version), 0)

    async def allen(self, key: Any, version: int | None = None) -> int:
        """Return the length of the list at key (0 if there is none)."""
        return await self._arun(self._llen(key, version), 0)

    def lpos(
        self,
        key: Any,
        value: Any,
        rank: int | None = None,
        count: int | None = None,
        maxlen: int | None = None,
        version: int | None = None,
    ) -> Any:
        """Return the index of value in the list (None if absent); with count, a list of
        indexes. rank picks the nth match (negative: from the end); maxlen bounds the scan."""
        return self._run(self._lpos(key, value, rank, count, maxlen, version), None)

    async def alpos(
        self,
        key: Any,
        value: Any,
        rank: int | None = None,
        count: int | None = None,
        maxlen: int | None = None,
        version: int | None = None,
    ) -> Any:
        """Return the index of value in the list, as lpos."""
        return await self._arun(self._lpos(key, value, rank, count, maxlen, version), None)

    def lmove(
        self,
        src: Any,
        dst: Any,
        wherefrom: str = "LEFT",
        whereto: str = "RIGHT",
        version: int | None = None,
        version_src: int | None = None,
        version_dst: int | None = None,
    ) -> Any:
        """Move an element from one end of src to one end of dst, atomically; return it (None
        if src is empty). On a cluster both keys need one slot (a {hash tag})."""
        plan = self._lmove(src, dst, wherefrom, whereto, version, version_src, version_dst)
        return self._run(plan, None)

    async def almove(
        self,
        src: Any,
        dst: Any,
        wherefrom: str = "LEFT",
        whereto: str = "RIGHT",
        version: int | None = None,
        version_src: int | None = None,
        version_dst: int | None = None,
    ) -> Any:
        """Move an element between lists, atomically, as lmove."""
        plan = self._lmove(src, dst, wherefrom, whereto, version, version_src, version_dst)
        return await self._arun(plan, None)

    def lrem(self, key: Any, count: int, value: Any, version: int | None = None) -> int:
        """Remove count elements equal to value (0: all; negative: from the end); return how
        many were removed."""
        return self._run(self._lrem(key, count, value, version), 0)

    async def alrem(self, key: Any, count: int, value: Any, version: int | None = None) -> int:
        """Remove elements equal to value, as lrem."""
        return await self._arun(self._lrem(key, count, value, version), 0)

    def ltrim(self, key: Any, start: int, end: int, version: int | None = None) -> bool:
        """Keep only the elements from start to end, both included."""
        return self._run(self._ltrim(key, start, end, version), False)

    async def altrim(self, key: Any, start: int, end: int, version: int | None = None) -> bool:
        """Keep only the elements from start to end, both included."""
        return await self._arun(self._ltrim(key, start, end, version), False)

    def lset(self, key: Any, index: int, value: Any, version: int | None = None) -> bool:
        """Replace the element at index (an index out of range raises ResponseError)."""
        return self._run(self._lset(key, index, value, version), False)

    async def alset(self, key: Any, index: int, value: Any, version: int | None = None) -> bool:
        """Replace the element at index, as lset."""
        return await self._arun(self._lset(key, index, value, version), False)

    def linsert(
        self, key: Any, where: str, pivot: Any, value: Any, version: int | None = None
    ) -> int:
        """Insert value BEFORE or AFTER the first element equal to pivot; return the new
        length (-1 if pivot is not there, 0 if there is no list)."""
        return self._run(self._linsert(key, where, pivot, value, version), 0)

    async def alinsert(
        self, key: Any, where: str, pivot: Any, value: Any, version: int | None = None
    ) -> int:
        """Insert value next to pivot, as linsert."""
        return await self._arun(self._linsert(key, where, pivot, value, version), 0)
