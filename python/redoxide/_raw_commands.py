"""The raw commands of get_redis_connection, each written once: the command it sends and how
its reply converts to what redis-py returns for it (RESP2 replies, bytes not decoded).

``Commands._send`` decides what sending means: ``connection.Connection`` runs the command,
its async view returns an awaitable, ``connection.Pipeline`` queues it. A new command is one
method here (and, on Connection, a one-line async twin); tests/compat check each reply
against redis-py's for the same call on the same server.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from redoxide._protocols import Arg
from redoxide._zsets import limit_args, zadd_flags

__all__ = ["Commands", "Convert", "Key", "as_is", "lpos_options", "scan_command"]

R = TypeVar("R")
Convert = Callable[[Any], Any]
#: A key, a field or a value, as redis-py accepts them.
Key = str | bytes


def as_is(reply: Any) -> Any:
    return reply


def _ok(reply: Any) -> bool | None:
    # redis-py: True when stored, None when NX / XX kept SET from storing.
    return True if reply is True or reply == b"OK" else None


def _pairs_dict(reply: Any) -> dict[Any, Any]:
    pairs = iter(reply)
    return dict(zip(pairs, pairs, strict=True))


def _float_or_none(reply: Any) -> float | None:
    return None if reply is None else float(reply)


def _seconds(value: int | datetime.timedelta) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds())
    return value


def _ms(value: int | datetime.timedelta) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return value


def _scores(cast: Callable[[Any], Any]) -> Convert:
    """ZRANGE ... WITHSCORES: the flat reply as (member, score) pairs."""

    def convert(reply: Any) -> list[tuple[Any, Any]]:
        items = iter(reply)
        return [(member, cast(score)) for member, score in zip(items, items, strict=True)]

    return convert


def scan_command(cursor: Any, match: Key | None, count: int | None, _type: str | None) -> Any:
    command: tuple[Any, ...] = ("SCAN", cursor)
    if match is not None:
        command += ("MATCH", match)
    if count is not None:
        command += ("COUNT", count)
    if _type is not None:
        command += ("TYPE", _type)
    return command


def _true(reply: Any) -> bool:
    # redis-py's bool_ok: a +OK reply is True.
    return reply is True or reply == b"OK"


def _float(reply: Any) -> float:
    return float(reply)


def _status(reply: Any) -> Any:
    # A status reply (+string) arrives as str; redis-py gives bytes.
    return reply.encode() if isinstance(reply, str) else reply


def _pong(reply: Any) -> bool:
    return reply in (b"PONG", "PONG")


def _info_value(text: str) -> Any:
    """One INFO value as redis-py gives it: a number, a list, a dict of k=v items, or text."""
    if "=" in text:
        fields: dict[str, Any] = {}
        for item in filter(None, text.split(",")):
            name, sep, value = item.rpartition("=")
            if sep:
                fields[name] = _info_value(value)
            else:
                fields[value] = True
        return fields
    if "," in text:
        return [_info_value(item) for item in text.split(",") if item]
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text


def parse_info(reply: Any) -> dict[str, Any]:
    """INFO's text as redis-py's dict: every `name:value` line, `module` lines gathered in
    "modules", anything else in "__raw__"."""
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
    info: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if ":" not in line:
            info.setdefault("__raw__", []).append(line)
            continue
        # A value may hold ':' (and only cmdstat_host's name does).
        name, _, value = (
            line.rpartition(":") if line.startswith("cmdstat_host:") else (line.partition(":"))
        )
        if name == "module":
            info.setdefault("modules", []).append(_info_value(value))
        else:
            info[name] = _info_value(value)
    return info


def _unix(when: int | datetime.datetime) -> int:
    if isinstance(when, datetime.datetime):
        return int(when.timestamp())
    return when


def lpos_options(rank: int | None, count: int | None, maxlen: int | None) -> tuple[Any, ...]:
    """LPOS's RANK, COUNT and MAXLEN, those given."""
    given = (("RANK", rank), ("COUNT", count), ("MAXLEN", maxlen))
    return tuple(item for option, value in given if value is not None for item in (option, value))


def _count(command: tuple[Arg, ...], count: int | None) -> tuple[Arg, ...]:
    return command if count is None else (*command, count)


class Commands(Generic[R]):
    """The commands, each written once; ``_send`` decides what sending one means."""

    def _send(self, command: tuple[Arg, ...], convert: Convert = as_is) -> R:
        raise NotImplementedError

    def execute_command(self, *args: Arg) -> R:
        """Send any command; return its reply unconverted (bytes, int, list, None, True)."""
        return self._send(args)

    def get(self, name: Key) -> R:
        return self._send(("GET", name))

    def set(
        self,
        name: Key,
        value: Arg,
        ex: int | datetime.timedelta | None = None,
        px: int | datetime.timedelta | None = None,
        nx: bool = False,
        xx: bool = False,
        keepttl: bool = False,
    ) -> R:
        """SET: True when stored, None when nx / xx prevented it (redis-py's replies)."""
        command: tuple[Arg, ...] = ("SET", name, value)
        if ex is not None:
            command += ("EX", _seconds(ex))
        if px is not None:
            command += ("PX", _ms(px))
        if nx:
            command += ("NX",)
        if xx:
            command += ("XX",)
        if keepttl:
            command += ("KEEPTTL",)
        return self._send(command, _ok)

    def delete(self, *names: Key) -> R:
        return self._send(("DEL", *names))

    def exists(self, *names: Key) -> R:
        return self._send(("EXISTS", *names))

    def expire(self, name: Key, time: int | datetime.timedelta) -> R:
        return self._send(("EXPIRE", name, _seconds(time)), bool)

    def ttl(self, name: Key) -> R:
        return self._send(("TTL", name))

    def incrby(self, name: Key, amount: int = 1) -> R:
        return self._send(("INCRBY", name, amount))

    #: redis-py's incr is INCRBY too.
    incr = incrby

    def keys(self, pattern: Key = "*") -> R:
        """KEYS (blocks the server while it walks every key: prefer scan_iter)."""
        return self._send(("KEYS", pattern))

    def hget(self, name: Key, key: Key) -> R:
        return self._send(("HGET", name, key))

    def hset(
        self,
        name: Key,
        key: Key | None = None,
        value: Arg | None = None,
        mapping: Mapping[Key, Arg] | None = None,
    ) -> R:
        """HSET one field (key, value) and / or every field of mapping; return how many were
        added."""
        pairs: list[Arg] = [] if key is None or value is None else [key, value]
        for field, item in (mapping or {}).items():
            pairs += [field, item]
        if not pairs:
            raise ValueError("hset needs a key and a value, or a mapping")
        return self._send(("HSET", name, *pairs))

    def hgetall(self, name: Key) -> R:
        return self._send(("HGETALL", name), _pairs_dict)

    def sadd(self, name: Key, *values: Arg) -> R:
        return self._send(("SADD", name, *values))

    def smembers(self, name: Key) -> R:
        return self._send(("SMEMBERS", name), set)

    def zadd(
        self,
        name: Key,
        mapping: Mapping[Key, float],
        nx: bool = False,
        xx: bool = False,
        ch: bool = False,
        incr: bool = False,
        gt: bool = False,
        lt: bool = False,
    ) -> R:
        """ZADD members with their scores; with incr, return the new score (or None)."""
        if not mapping:
            raise ValueError("zadd needs at least one member and score")
        command: tuple[Arg, ...] = (
            "ZADD",
            name,
            *zadd_flags(nx, xx, ch, incr, gt, lt, len(mapping)),
        )
        for member, score in mapping.items():
            command += (score, member)
        return self._send(command, _float_or_none if incr else as_is)

    def zrange(
        self,
        name: Key,
        start: int,
        end: int,
        desc: bool = False,
        withscores: bool = False,
        score_cast_func: Callable[[Any], Any] = float,
    ) -> R:
        """Members from start to end (by rank); with withscores, (member, score) pairs."""
        command: tuple[Arg, ...] = ("ZREVRANGE" if desc else "ZRANGE", name, start, end)
        if withscores:
            return self._send((*command, "WITHSCORES"), _scores(score_cast_func))
        return self._send(command)

    # -- strings -----------------------------------------------------------------------------

    def mget(self, keys: Key | list[Key], *args: Key) -> R:
        names = [keys] if isinstance(keys, (str, bytes)) else list(keys)
        return self._send(("MGET", *names, *args))

    def mset(self, mapping: Mapping[Key, Arg]) -> R:
        if not mapping:
            raise ValueError("mset needs at least one key and value")
        pairs = [item for pair in mapping.items() for item in pair]
        return self._send(("MSET", *pairs), _true)

    def setex(self, name: Key, time: int | datetime.timedelta, value: Arg) -> R:
        return self._send(("SETEX", name, _seconds(time), value), bool)

    def setnx(self, name: Key, value: Arg) -> R:
        return self._send(("SETNX", name, value), bool)

    def getdel(self, name: Key) -> R:
        return self._send(("GETDEL", name))

    def decrby(self, name: Key, amount: int = 1) -> R:
        return self._send(("DECRBY", name, amount))

    #: redis-py's decr is DECRBY too.
    decr = decrby

    def incrbyfloat(self, name: Key, amount: float = 1.0) -> R:
        return self._send(("INCRBYFLOAT", name, amount), _float)

    def append(self, key: Key, value: Arg) -> R:
        return self._send(("APPEND", key, value))

    def strlen(self, name: Key) -> R:
        return self._send(("STRLEN", name))

    # -- keys ----------------------------------------------------------------------------------

    def unlink(self, *names: Key) -> R:
        return self._send(("UNLINK", *names))

    def touch(self, *args: Key) -> R:
        return self._send(("TOUCH", *args))

    def pexpire(self, name: Key, time: int | datetime.timedelta) -> R:
        return self._send(("PEXPIRE", name, _ms(time)), bool)

    def expireat(self, name: Key, when: int | datetime.datetime) -> R:
        return self._send(("EXPIREAT", name, _unix(when)), bool)

    def pttl(self, name: Key) -> R:
        return self._send(("PTTL", name))

    def persist(self, name: Key) -> R:
        return self._send(("PERSIST", name), bool)

    def type(self, name: Key) -> R:
        return self._send(("TYPE", name), _status)

    def rename(self, src: Key, dst: Key) -> R:
        return self._send(("RENAME", src, dst), _true)

    # -- server --------------------------------------------------------------------------------

    def ping(self) -> R:
        return self._send(("PING",), _pong)

    def info(self, section: str | None = None, *args: str) -> R:
        """INFO (a section or several, or the default ones), parsed into redis-py's dict."""
        sections = () if section is None else (section, *args)
        return self._send(("INFO", *sections), parse_info)

    def dbsize(self) -> R:
        return self._send(("DBSIZE",))

    def time(self) -> R:
        return self._send(("TIME",), lambda r: (int(r[0]), int(r[1])))

    def publish(self, channel: Key, message: Arg) -> R:
        return self._send(("PUBLISH", channel, message))

    def flushdb(self, asynchronous: bool = False) -> R:
        """FLUSHDB: every key of the cache's database, not only the cache's own."""
        return self._send(("FLUSHDB", "ASYNC") if asynchronous else ("FLUSHDB",), _true)

    # -- hashes --------------------------------------------------------------------------------

    def hmget(self, name: Key, keys: Key | list[Key], *args: Key) -> R:
        fields = [keys] if isinstance(keys, (str, bytes)) else list(keys)
        return self._send(("HMGET", name, *fields, *args))

    def hdel(self, name: Key, *keys: Key) -> R:
        return self._send(("HDEL", name, *keys))

    def hexists(self, name: Key, key: Key) -> R:
        return self._send(("HEXISTS", name, key), bool)

    def hincrby(self, name: Key, key: Key, amount: int = 1) -> R:
        return self._send(("HINCRBY", name, key, amount))

    def hincrbyfloat(self, name: Key, key: Key, amount: float = 1.0) -> R:
        return self._send(("HINCRBYFLOAT", name, key, amount), _float)

    def hsetnx(self, name: Key, key: Key, value: Arg) -> R:
        return self._send(("HSETNX", name, key, value))

    def hlen(self, name: Key) -> R:
        return self._send(("HLEN", name))

    def hkeys(self, name: Key) -> R:
        return self._send(("HKEYS", name))

    def hvals(self, name: Key) -> R:
        return self._send(("HVALS", name))

    # -- lists ---------------------------------------------------------------------------------

    def lpush(self, name: Key, *values: Arg) -> R:
        return self._send(("LPUSH", name, *values))

    def rpush(self, name: Key, *values: Arg) -> R:
        return self._send(("RPUSH", name, *values))

    def lpushx(self, name: Key, *values: Arg) -> R:
        return self._send(("LPUSHX", name, *values))

    def rpushx(self, name: Key, *values: Arg) -> R:
        return self._send(("RPUSHX", name, *values))

    def lpop(self, name: Key, count: int | None = None) -> R:
        return self._send(_count(("LPOP", name), count))

    def rpop(self, name: Key, count: int | None = None) -> R:
        return self._send(_count(("RPOP", name), count))

    def lrange(self, name: Key, start: int, end: int) -> R:
        return self._send(("LRANGE", name, start, end))

    def ltrim(self, name: Key, start: int, end: int) -> R:
        return self._send(("LTRIM", name, start, end), _true)

    def llen(self, name: Key) -> R:
        return self._send(("LLEN", name))

    def lindex(self, name: Key, index: int) -> R:
        return self._send(("LINDEX", name, index))

    def lset(self, name: Key, index: int, value: Arg) -> R:
        return self._send(("LSET", name, index, value), _true)

    def lrem(self, name: Key, count: int, value: Arg) -> R:
        return self._send(("LREM", name, count, value))

    def linsert(self, name: Key, where: str, refvalue: Arg, value: Arg) -> R:
        return self._send(("LINSERT", name, where, refvalue, value))

    def lpos(
        self,
        name: Key,
        value: Arg,
        rank: int | None = None,
        count: int | None = None,
        maxlen: int | None = None,
    ) -> R:
        return self._send(("LPOS", name, value, *lpos_options(rank, count, maxlen)))

    def lmove(self, first_list: Key, second_list: Key, src: str = "LEFT", dest: str = "RIGHT") -> R:
        return self._send(("LMOVE", first_list, second_list, src, dest))

    # -- sets ----------------------------------------------------------------------------------

    def srem(self, name: Key, *values: Arg) -> R:
        return self._send(("SREM", name, *values))

    def scard(self, name: Key) -> R:
        return self._send(("SCARD", name))

    def sismember(self, name: Key, value: Arg) -> R:
        return self._send(("SISMEMBER", name, value))

    def spop(self, name: Key, count: int | None = None) -> R:
        return self._send(_count(("SPOP", name), count))

    def srandmember(self, name: Key, number: int | None = None) -> R:
        return self._send(_count(("SRANDMEMBER", name), number))

    # -- sorted sets ---------------------------------------------------------------------------

    def zrevrange(
        self,
        name: Key,
        start: int,
        end: int,
        withscores: bool = False,
        score_cast_func: Callable[[Any], Any] = float,
    ) -> R:
        return self.zrange(name, start, end, True, withscores, score_cast_func)

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
        command = ("ZRANGEBYSCORE", name, min, max, *limit_args(start, num))
        if withscores:
            return self._send((*command, "WITHSCORES"), _scores(score_cast_func))
        return self._send(command)

    def zrem(self, name: Key, *values: Arg) -> R:
        return self._send(("ZREM", name, *values))

    def zcard(self, name: Key) -> R:
        return self._send(("ZCARD", name))

    def zcount(self, name: Key, min: float | str, max: float | str) -> R:
        return self._send(("ZCOUNT", name, min, max))

    def zscore(self, name: Key, value: Arg) -> R:
        return self._send(("ZSCORE", name, value), _float_or_none)

    def zincrby(self, name: Key, amount: float, value: Arg) -> R:
        return self._send(("ZINCRBY", name, amount, value), _float)

    def zrank(self, name: Key, value: Arg) -> R:
        return self._send(("ZRANK", name, value))

    def zremrangebyscore(self, name: Key, min: float | str, max: float | str) -> R:
        return self._send(("ZREMRANGEBYSCORE", name, min, max))

    def zremrangebyrank(self, name: Key, min: int, max: int) -> R:
        return self._send(("ZREMRANGEBYRANK", name, min, max))
