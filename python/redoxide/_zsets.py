"""Sorted sets, as django-redis has them: zadd, zrange, zscore... and their async twins.

Signatures, defaults and return values are django-redis 7's (minus its ``client`` argument):
scores are floats (``score_cast_func`` changes that, as in redis-py), ranges are lists,
``withscores`` lists of (member, score) tuples. Members are serialized even when they are ints,
as django-redis does. Reads of a missing sorted set return 0, None or an empty list; under
IGNORE_EXCEPTIONS so does an unreachable server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from redoxide._members import StructuresBase

if TYPE_CHECKING:
    from redoxide.plans import Plan

__all__ = ["SortedSetsMixin", "limit_args"]

Score = float | str
ScoreCast = Callable[[Any], Any]


def zadd_flags(
    nx: bool, xx: bool, ch: bool, incr: bool, gt: bool, lt: bool, size: int
) -> tuple[str, ...]:
    """ZADD's options, refusing the combinations redis-py refuses."""
    if not (nx or xx or ch or incr or gt or lt):
        return ()
    if nx and xx:
        raise ValueError("ZADD allows either 'nx' or 'xx', not both")
    if gt and lt:
        raise ValueError("ZADD allows either 'gt' or 'lt', not both")
    if nx and (gt or lt):
        raise ValueError("Only one of 'nx', 'lt', or 'gt' may be defined.")
    if incr and size != 1:
        raise ValueError("ZADD option 'incr' only works when passing a single element/score pair")
    chosen = (("NX", nx), ("XX", xx), ("GT", gt), ("LT", lt), ("CH", ch), ("INCR", incr))
    return tuple(name for name, wanted in chosen if wanted)


def limit_args(start: int | None, num: int | None) -> tuple[Any, ...]:
    """ZRANGEBYSCORE's LIMIT start num, both or neither (as redis-py insists)."""
    if (start is None) != (num is None):
        raise ValueError("``start`` and ``num`` must both be specified")
    return () if start is None else ("LIMIT", start, num)


class SortedSetsMixin(StructuresBase):
    """Redis sorted sets of encoded members, sync and async (a mixin for RedisCache)."""

    # -- plans ----------------------------------------------------------------------------------

    def _zadd(
        self,
        key: Any,
        mapping: Mapping[Any, float],
        flags: tuple[str, ...],
        version: int | None,
    ) -> Plan[int | float | None]:
        if not mapping:
            return 0
        pairs: list[Any] = []
        for member, score in mapping.items():
            pairs += (score, self._member(member, False))
        reply = yield self._client.execute, (("ZADD", self._key(key, version), *flags, *pairs),)
        if "INCR" in flags:
            return None if reply is None else float(reply)
        return int(reply)

    def _zcard(self, key: Any, version: int | None) -> Plan[int]:
        return int((yield self._client.execute, (("ZCARD", self._key(key, version)),)))

    def _zcount(self, key: Any, low: Score, high: Score, version: int | None) -> Plan[int]:
        command = ("ZCOUNT", self._key(key, version), low, high)
        return int((yield self._client.execute, (command,)))

    def _zincrby(self, key: Any, amount: float, member: Any, version: int | None) -> Plan[float]:
        command = ("ZINCRBY", self._key(key, version), amount, self._member(member, False))
        return float((yield self._client.execute, (command,)))

    def _zpop(self, name: str, key: Any, count: int | None, version: int | None) -> Plan[Any]:
        made = self._key(key, version)
        command = (name, made) if count is None else (name, made, count)
        popped = self._decode_scored((yield self._client.execute, (command,)), key)
        if count is None:
            return popped[0] if popped else None
        return popped

    def _ranged(
        self,
        name: str,
        key: Any,
        bounds: tuple[Any, ...],
        withscores: bool,
        cast: ScoreCast,
        version: int | None,
    ) -> Plan[list[Any]]:
        """Run ZRANGE, ZREVRANGE, Z(REV)RANGEBYSCORE; decode the members (and scores if asked)."""
        command = (name, self._key(key, version), *bounds)
        if withscores:
            reply = yield self._client.execute, ((*command, "WITHSCORES"),)
            return self._decode_scored(reply, key, cast)
        return self._decode_list((yield self._client.execute, (command,)), key)

    def _zrank(self, key: Any, member: Any, withscore: bool, version: int | None) -> Plan[Any]:
        command: tuple[Any, ...] = ("ZRANK", self._key(key, version), self._member(member, False))
        if not withscore:
            return (yield self._client.execute, (command,))
        reply = yield self._client.execute, ((*command, "WITHSCORE"),)
        return None if reply is None else [reply[0], float(reply[1])]

    def _zrem(self, key: Any, members: tuple[Any, ...], version: int | None) -> Plan[int]:
        if not members:
            return 0
        encoded = [self._member(m, False) for m in members]
        return int((yield self._client.execute, (("ZREM", self._key(key, version), *encoded),)))

    def _zremrangebyscore(
        self, key: Any, low: Score, high: Score, version: int | None
    ) -> Plan[int]:
        command = ("ZREMRANGEBYSCORE", self._key(key, version), low, high)
        return int((yield self._client.execute, (command,)))

    def _zscore(self, key: Any, member: Any, version: int | None) -> Plan[float | None]:
        command = ("ZSCORE", self._key(key, version), self._member(member, False))
        reply = yield self._client.execute, (command,)
        return None if reply is None else float(reply)

    # -- the API --------------------------------------------------------------------------------

    def zadd(
        self,
        key: Any,
        mapping: Mapping[Any, float],
        nx: bool = False,
        xx: bool = False,
        ch: bool = False,
        incr: bool = False,
        gt: bool = False,
        lt: bool = False,
        version: int | None = None,
    ) -> int | float | None:
        """Add the members of mapping with their scores; return how many were new (with ch:
        changed), or with incr the member's new score (None if nx/xx/gt/lt refused it)."""
        flags = zadd_flags(nx, xx, ch, incr, gt, lt, len(mapping))
        return self._run(self._zadd(key, mapping, flags, version), None if incr else 0)

    async def azadd(
        self,
        key: Any,
        mapping: Mapping[Any, float],
        nx: bool = False,
        xx: bool = False,
        ch: bool = False,
        incr: bool = False,
        gt: bool = False,
        lt: bool = False,
        version: int | None = None,
    ) -> int | float | None:
        """Add the members of mapping with their scores, like zadd, with awaits."""
        flags = zadd_flags(nx, xx, ch, incr, gt, lt, len(mapping))
        return await self._arun(self._zadd(key, mapping, flags, version), None if incr else 0)

    def zcard(self, key: Any, version: int | None = None) -> int:
        """Return the number of members of the sorted set at key."""
        return self._run(self._zcard(key, version), 0)

    async def azcard(self, key: Any, version: int | None = None) -> int:
        """Return the number of members of the sorted set at key."""
        return await self._arun(self._zcard(key, version), 0)

    def zcount(self, key: Any, min: Score, max: Score, version: int | None = None) -> int:
        """Return how many members score from min to max ("(1" excludes 1; "-inf", "+inf")."""
        return self._run(self._zcount(key, min, max, version), 0)

    async def azcount(self, key: Any, min: Score, max: Score, version: int | None = None) -> int:
        """Return how many members score from min to max ("(1" excludes 1; "-inf", "+inf")."""
        return await self._arun(self._zcount(key, min, max, version), 0)

    def zincrby(
        self, key: Any, amount: float, value: Any, version: int | None = None
    ) -> float | None:
        """Add amount to value's score (0 if it is not a member); return the new score."""
        return self._run(self._zincrby(key, amount, value, version))

    async def azincrby(
        self, key: Any, amount: float, value: Any, version: int | None = None
    ) -> float | None:
        """Add amount to value's score (0 if it is not a member); return the new score."""
        return await self._arun(self._zincrby(key, amount, value, version))

    def zpopmax(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return the (member, score) scoring highest (None if empty), or with
        count a list of up to count of them, highest first."""
        plan = self._zpop("ZPOPMAX", key, count, version)
        return self._run(plan, None if count is None else [])

    async def azpopmax(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return the highest-scoring (member, score), like zpopmax, with awaits."""
        plan = self._zpop("ZPOPMAX", key, count, version)
        return await self._arun(plan, None if count is None else [])

    def zpopmin(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return the (member, score) scoring lowest (None if empty), or with
        count a list of up to count of them, lowest first."""
        plan = self._zpop("ZPOPMIN", key, count, version)
        return self._run(plan, None if count is None else [])

    async def azpopmin(self, key: Any, count: int | None = None, version: int | None = None) -> Any:
        """Remove and return the lowest-scoring (member, score), like zpopmin, with awaits."""
        plan = self._zpop("ZPOPMIN", key, count, version)
        return await self._arun(plan, None if count is None else [])

    def zrange(
        self,
        key: Any,
        start: int,
        end: int,
        desc: bool = False,
        withscores: bool = False,
        score_cast_func: ScoreCast = float,
        version: int | None = None,
    ) -> list[Any]:
        """Return the members ranked start to end (inclusive; -1 is the last), lowest score
        first (desc: highest first); withscores: (member, score) tuples."""
        name = "ZREVRANGE" if desc else "ZRANGE"
        plan = self._ranged(name, key, (start, end), withscores, score_cast_func, version)
        return self._run(plan, [])

    async def azrange(
        self,
        key: Any,
        start: int,
        end: int,
        desc: bool = False,
        withscores: bool = False,
        score_cast_func: ScoreCast = float,
        version: int | None = None,
    ) -> list[Any]:
        """Return the members ranked start to end, like zrange, with awaits."""
        name = "ZREVRANGE" if desc else "ZRANGE"
        plan = self._ranged(name, key, (start, end), withscores, score_cast_func, version)
        return await self._arun(plan, [])

    def zrevrange(
        self,
        key: Any,
        start: int,
        end: int,
        withscores: bool = False,
        score_cast_func: ScoreCast = float,
        version: int | None = None,
    ) -> list[Any]:
        """Return the members ranked start to end, highest score first."""
        plan = self._ranged("ZREVRANGE", key, (start, end), withscores, score_cast_func, version)
        return self._run(plan, [])

    async def azrevrange(
        self,
        key: Any,
        start: int,
        end: int,
        withscores: bool = False,
        score_cast_func: ScoreCast = float,
        version: int | None = None,
    ) -> list[Any]:
        """Return the members ranked start to end, highest score first."""
        plan = self._ranged("ZREVRANGE", key, (start, end), withscores, score_cast_func, version)
        return await self._arun(plan, [])

    def zrangebyscore(
        self,
        key: Any,
        min: Score,
        max: Score,
        start: int | None = None,
        num: int | None = None,
        withscores: bool = False,
        score_cast_func: ScoreCast = float,
        version: int | None = None,
    ) -> list[Any]:
        """Return the members scoring from min to max, lowest first; start and num (both or
        neither) take a slice of them."""
        bounds = (min, max, *limit_args(start, num))
        plan = self._ranged("ZRANGEBYSCORE", key, bounds, withscores, score_cast_func, version)
        return self._run(plan, [])

    async def azrangebyscore(
        self,
        key: Any,
        min: Score,
        max: Score,
        start: int | None = None,
        num: int | None = None,
        withscores: bool = False,
        score_cast_func: ScoreCast = float,
        version: int | None = None,
    ) -> list[Any]:
        """Return the members scoring from min to max, like zrangebyscore, with awaits."""
        bounds = (min, max, *limit_args(start, num))
        plan = self._ranged("ZRANGEBYSCORE", key, bounds, withscores, score_cast_func, version)
        return await self._arun(plan, [])

    def zrevrangebyscore(
        self,
        key: Any,
        max: Score,
        min: Score,
        start: int | None = None,
        num: int | None = None,
        withscores: bool = False,
        score_cast_func: ScoreCast = float,
        version: int | None = None,
    ) -> list[Any]:
        """Return the members scoring from max down to min, highest first (max comes first,
        as in Redis and django-redis)."""
        bounds = (max, min, *limit_args(start, num))
        plan = self._ranged("ZREVRANGEBYSCORE", key, bounds, withscores, score_cast_func, version)
        return self._run(plan, [])

    async def azrevrangebyscore(
        self,
        key: Any,
        max: Score,
        min: Score,
        start: int | None = None,
        num: int | None = None,
        withscores: bool = False,
        score_cast_func: ScoreCast = float,
        version: int | None = None,
    ) -> list[Any]:
        """Return the members scoring from max down to min, like zrevrangebyscore, with awaits."""
        bounds = (max, min, *limit_args(start, num))
        plan = self._ranged("ZREVRANGEBYSCORE", key, bounds, withscores, score_cast_func, version)
        return await self._arun(plan, [])

    def zrank(
        self, key: Any, value: Any, withscore: bool = False, version: int | None = None
    ) -> Any:
        """Return value's rank, lowest score first (None if not a member); withscore: [rank,
        score] (Redis 7.2 or later)."""
        return self._run(self._zrank(key, value, withscore, version))

    async def azrank(
        self, key: Any, value: Any, withscore: bool = False, version: int | None = None
    ) -> Any:
        """Return value's rank, like zrank, with awaits."""
        return await self._arun(self._zrank(key, value, withscore, version))

    def zrem(self, key: Any, *values: Any, version: int | None = None) -> int:
        """Remove values from the sorted set at key; return how many were members."""
        return self._run(self._zrem(key, values, version), 0)

    async def azrem(self, key: Any, *values: Any, version: int | None = None) -> int:
        """Remove values from the sorted set at key; return how many were members."""
        return await self._arun(self._zrem(key, values, version), 0)

    def zremrangebyscore(self, key: Any, min: Score, max: Score, version: int | None = None) -> int:
        """Remove the members scoring from min to max; return how many were removed."""
        return self._run(self._zremrangebyscore(key, min, max, version), 0)

    async def azremrangebyscore(
        self, key: Any, min: Score, max: Score, version: int | None = None
    ) -> int:
        """Remove the members scoring from min to max; return how many were removed."""
        return await self._arun(self._zremrangebyscore(key, min, max, version), 0)

    def zscore(self, key: Any, value: Any, version: int | None = None) -> float | None:
        """Return value's score, or None if it is not a member."""
        return self._run(self._zscore(key, value, version))

    async def azscore(self, key: Any, value: Any, version: int | None = None) -> float | None:
        """Return value's score, or None if it is not a member."""
        return await self._arun(self._zscore(key, value, version))
