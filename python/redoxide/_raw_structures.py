"""The raw client's commands on hashes, lists, sets and sorted sets, each written once (see
redoxide._raw_commands, whose Commands has these too): the command sent and how its reply
converts to what redis-py returns for it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from redoxide._raw_args import counted, limit_option, list_or_args, lpos_options
from redoxide._raw_replies import (
    Convert,
    as_is,
    float_or_none,
    rank_score,
    scores,
    to_float,
    true,
)

__all__ = ["Key", "R", "StructureCommands", "Value"]

R = TypeVar("R")
#: A key or a field, as redis-py accepts them.
Key = str | bytes | bytearray | memoryview
#: A value, as redis-py's encoder takes them (a bool, None or any other type: DataError).
Value = Key | int | float


class StructureCommands(Generic[R]):
    """The commands on structures; ``_send`` decides what sending one means."""

    def _send(self, command: tuple[Value, ...], convert: Convert = as_is) -> R:
        raise NotImplementedError

    # -- hashes --------------------------------------------------------------------------------

    def hmget(self, name: Key, keys: Key | Iterable[Key], *args: Key) -> R:
        return self._send(("HMGET", name, *list_or_args(keys, args)))

    def hdel(self, name: Key, *keys: Key) -> R:
        return self._send(("HDEL", name, *keys))

    def hexists(self, name: Key, key: Key) -> R:
        return self._send(("HEXISTS", name, key), bool)

    def hincrby(self, name: Key, key: Key, amount: int = 1) -> R:
        return self._send(("HINCRBY", name, key, amount))

    def hincrbyfloat(self, name: Key, key: Key, amount: float = 1.0) -> R:
        return self._send(("HINCRBYFLOAT", name, key, amount), to_float)

    def hsetnx(self, name: Key, key: Key, value: Value) -> R:
        return self._send(("HSETNX", name, key, value))

    def hlen(self, name: Key) -> R:
        return self._send(("HLEN", name))

    def hkeys(self, name: Key) -> R:
        return self._send(("HKEYS", name))

    def hvals(self, name: Key) -> R:
        return self._send(("HVALS", name))

    # -- lists ---------------------------------------------------------------------------------

    def lpush(self, name: Key, *values: Value) -> R:
        return self._send(("LPUSH", name, *values))

    def rpush(self, name: Key, *values: Value) -> R:
        return self._send(("RPUSH", name, *values))

    def lpushx(self, name: Key, *values: Value) -> R:
        return self._send(("LPUSHX", name, *values))

    def rpushx(self, name: Key, *values: Value) -> R:
        return self._send(("RPUSHX", name, *values))

    def lpop(self, name: Key, count: int | None = None) -> R:
        return self._send(counted(("LPOP", name), count))

    def rpop(self, name: Key, count: int | None = None) -> R:
        return self._send(counted(("RPOP", name), count))

    def lrange(self, name: Key, start: int, end: int) -> R:
        return self._send(("LRANGE", name, start, end))

    def ltrim(self, name: Key, start: int, end: int) -> R:
        return self._send(("LTRIM", name, start, end), true)

    def llen(self, name: Key) -> R:
        return self._send(("LLEN", name))

    def lindex(self, name: Key, index: int) -> R:
        return self._send(("LINDEX", name, index))

    def lset(self, name: Key, index: int, value: Value) -> R:
        return self._send(("LSET", name, index, value), true)

    def lrem(self, name: Key, count: int, value: Value) -> R:
        return self._send(("LREM", name, count, value))

    def linsert(self, name: Key, where: str, refvalue: Value, value: Value) -> R:
        return self._send(("LINSERT", name, where, refvalue, value))

    def lpos(
        self,
        name: Key,
        value: Value,
        rank: int | None = None,
        count: int | None = None,
        maxlen: int | None = None,
    ) -> R:
        return self._send(("LPOS", name, value, *lpos_options(rank, count, maxlen)))

    def lmove(self, first_list: Key, second_list: Key, src: str = "LEFT", dest: str = "RIGHT") -> R:
        return self._send(("LMOVE", first_list, second_list, src, dest))

    # -- sets ----------------------------------------------------------------------------------

    def srem(self, name: Key, *values: Value) -> R:
        return self._send(("SREM", name, *values))

    def scard(self, name: Key) -> R:
        return self._send(("SCARD", name))

    def sismember(self, name: Key, value: Value) -> R:
        return self._send(("SISMEMBER", name, value))

    def spop(self, name: Key, count: int | None = None) -> R:
        return self._send(counted(("SPOP", name), count))

    def srandmember(self, name: Key, number: int | None = None) -> R:
        return self._send(counted(("SRANDMEMBER", name), number))

    # -- sorted sets ---------------------------------------------------------------------------

    def zrevrange(
        self,
        name: Key,
        start: Value,
        end: Value,
        withscores: bool = False,
        score_cast_func: Callable[[Any], Any] = float,
    ) -> R:
        command = ("ZREVRANGE", name, start, end)
        if withscores:
            return self._send((*command, "WITHSCORES"), scores(score_cast_func))
        return self._send(command)

    def zrangebyscore(
        self,
        name: Key,
        min: float | str,
        max: float | str,
        start: int | None = None,
        num: int | None = None,
        withscores: bool = False,
        score_cast_func: Callable[[Any], Any] = float,
    ) -> R:
        limit = limit_option(start, num, "``start`` and ``num``")
        command = ("ZRANGEBYSCORE", name, min, max, *limit)
        if withscores:
            return self._send((*command, "WITHSCORES"), scores(score_cast_func))
        return self._send(command)

    def zrevrangebyscore(
        self,
        name: Key,
        max: float | str,
        min: float | str,
        start: int | None = None,
        num: int | None = None,
        withscores: bool = False,
        score_cast_func: Callable[[Any], Any] = float,
    ) -> R:
        limit = limit_option(start, num, "``start`` and ``num``")
        command = ("ZREVRANGEBYSCORE", name, max, min, *limit)
        if withscores:
            return self._send((*command, "WITHSCORES"), scores(score_cast_func))
        return self._send(command)

    def zrem(self, name: Key, *values: Value) -> R:
        return self._send(("ZREM", name, *values))

    def zcard(self, name: Key) -> R:
        return self._send(("ZCARD", name))

    def zcount(self, name: Key, min: float | str, max: float | str) -> R:
        return self._send(("ZCOUNT", name, min, max))

    def zscore(self, name: Key, value: Value) -> R:
        return self._send(("ZSCORE", name, value), float_or_none)

    def zincrby(self, name: Key, amount: float, value: Value) -> R:
        return self._send(("ZINCRBY", name, amount, value), to_float)

    def zrank(
        self,
        name: Key,
        value: Value,
        withscore: bool = False,
        score_cast_func: Callable[[Any], Any] = float,
    ) -> R:
        """The member's rank (low to high), or None; with withscore (Redis 7.2), [rank, score]."""
        if withscore:
            return self._send(("ZRANK", name, value, "WITHSCORE"), rank_score(score_cast_func))
        return self._send(("ZRANK", name, value))

    def zrevrank(
        self,
        name: Key,
        value: Value,
        withscore: bool = False,
        score_cast_func: Callable[[Any], Any] = float,
    ) -> R:
        """The member's rank from high to low, or None; with withscore, [rank, score]."""
        if withscore:
            command = ("ZREVRANK", name, value, "WITHSCORE")
            return self._send(command, rank_score(score_cast_func))
        return self._send(("ZREVRANK", name, value))

    def zremrangebyscore(self, name: Key, min: float | str, max: float | str) -> R:
        return self._send(("ZREMRANGEBYSCORE", name, min, max))

    def zremrangebyrank(self, name: Key, min: int, max: int) -> R:
        return self._send(("ZREMRANGEBYRANK", name, min, max))
