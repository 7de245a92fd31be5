"""The raw commands of get_redis_connection, each written once: the command it sends and how
its reply converts to what redis-py returns for it (RESP2 replies, bytes not decoded).

``Commands._send`` decides what sending means: ``connection.Connection`` runs the command,
its async view returns an awaitable, ``connection.Pipeline`` queues it. A new command is one
method here (and, on Connection, a one-line async twin); tests/compat check each reply
against redis-py's for the same call on the same server. How arguments go out (redis-py's
encoder rules, its expiry options and checks) is ``_raw_args``'s; what replies become is
``_raw_replies``'.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from redoxide._raw_args import (
    Expiry,
    Moment,
    check_one,
    expire_flags,
    expiry,
    limit_option,
    list_or_args,
    lpos_options,
    milliseconds,
    scan_command,
    seconds,
    unix,
    unix_ms,
)
from redoxide._raw_replies import (
    Convert,
    as_is,
    float_or_none,
    ok,
    pairs_dict,
    parse_info,
    pong,
    scan_reply,
    scores,
    status,
    to_float,
    true,
)
from redoxide._raw_structures import Key, R, StructureCommands, Value
from redoxide.exceptions import DataError

__all__ = ["Commands", "Convert", "Key", "Value", "as_is", "lpos_options", "scan_command"]


class Commands(StructureCommands[R]):
    """The commands, each written once; ``_send`` decides what sending one means. Hashes,
    lists, sets and sorted sets are StructureCommands' (redoxide._raw_structures)."""

    def _answer(self, reply: Any) -> R:
        """Answer without sending anything (redis-py's reply to mget() of no keys)."""
        raise NotImplementedError

    def execute_command(self, *args: Value) -> R:
        """Send any command; return its reply unconverted (bytes, int, list, None, True)."""
        return self._send(args)

    def get(self, name: Key) -> R:
        return self._send(("GET", name))

    def set(
        self,
        name: Key,
        value: Value,
        ex: Expiry | None = None,
        px: Expiry | None = None,
        nx: bool = False,
        xx: bool = False,
        keepttl: bool = False,
        get: bool = False,
        exat: Moment | None = None,
        pxat: Moment | None = None,
        ifeq: Key | None = None,
        ifne: Key | None = None,
        ifdeq: str | None = None,
        ifdne: str | None = None,
    ) -> R:
        """SET: True when stored, None when a condition (nx, xx, ifeq...) prevented it; with
        get, the value it replaced (None when there was none), as redis-py replies. IFEQ,
        IFNE, IFDEQ and IFDNE need a server that has them (Redis 8.4, Valkey 8.1 for IFEQ)."""
        check_one(
            "``ex``, ``px``, ``exat``, ``pxat``, and ``keepttl`` are mutually exclusive.",
            ex is not None,
            px is not None,
            exat is not None,
            pxat is not None,
            keepttl,
        )
        conditions = (("IFEQ", ifeq), ("IFNE", ifne), ("IFDEQ", ifdeq), ("IFDNE", ifdne))
        check_one(
            "``nx``, ``xx``, ``ifeq``, ``ifne``, ``ifdeq``, ``ifdne`` are mutually exclusive.",
            nx,
            xx,
            *(given is not None for _, given in conditions),
        )
        command: tuple[Value, ...] = ("SET", name, value)
        if nx:
            command += ("NX",)
        elif xx:
            command += ("XX",)
        else:
            command += next(((word, given) for word, given in conditions if given is not None), ())
        if get:
            command += ("GET",)
        command += expiry(ex, px, exat, pxat)
        if keepttl:
            command += ("KEEPTTL",)
        return self._send(command, as_is if get else ok)

    def delete(self, *names: Key) -> R:
        return self._send(("DEL", *names))

    def exists(self, *names: Key) -> R:
        return self._send(("EXISTS", *names))

    def expire(
        self,
        name: Key,
        time: int | datetime.timedelta,
        nx: bool = False,
        xx: bool = False,
        gt: bool = False,
        lt: bool = False,
    ) -> R:
        """EXPIRE: True when the timeout was set; NX / XX / GT / LT as the server has them."""
        flags = expire_flags(nx, xx, gt, lt)
        return self._send(("EXPIRE", name, seconds(time), *flags), bool)

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
        value: Value | None = None,
        mapping: Mapping[Key, Value] | None = None,
        items: Sequence[Value] | None = None,
    ) -> R:
        """HSET the fields of items (field, value, field, value...), then key = value, then
        mapping's; return how many were added."""
        if key is None and not mapping and not items:
            raise DataError("'hset' with no key value pairs")
        pairs: list[Any] = list(items or ())
        if key is not None:
            pairs += (key, value)  # a None value is refused as redis-py refuses it
        for field, item in (mapping or {}).items():
            pairs += (field, item)
        return self._send(("HSET", name, *pairs))

    def hgetall(self, name: Key) -> R:
        return self._send(("HGETALL", name), pairs_dict)

    def sadd(self, name: Key, *values: Value) -> R:
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
            raise DataError("ZADD requires at least one element/score pair")
        if nx and xx:
            raise DataError("ZADD allows either 'nx' or 'xx', not both")
        if gt and lt:
            raise DataError("ZADD allows either 'gt' or 'lt', not both")
        if incr and len(mapping) != 1:
            raise DataError(
                "ZADD option 'incr' only works when passing a single element/score pair"
            )
        if nx and (gt or lt):
            raise DataError("Only one of 'nx', 'gt', or 'lt' may be defined.")
        chosen = (("NX", nx), ("XX", xx), ("CH", ch), ("INCR", incr), ("GT", gt), ("LT", lt))
        command: tuple[Value, ...] = ("ZADD", name, *(word for word, wanted in chosen if wanted))
        for member, score in mapping.items():
            command += (score, member)
        return self._send(command, float_or_none if incr else as_is)

    def zrange(
        self,
        name: Key,
        start: Value,
        end: Value,
        desc: bool = False,
        withscores: bool = False,
        score_cast_func: Callable[[Any], Any] = float,
        byscore: bool = False,
        bylex: bool = False,
        offset: int | None = None,
        num: int | None = None,
        use_rev: bool = False,
    ) -> R:
        """Members from start to end: by rank, or by score (byscore) or by name (bylex) from
        offset, num of them; desc reverses; withscores gives (member, score) pairs."""
        if not (byscore or bylex or use_rev) and offset is None and num is None and desc:
            return self.zrevrange(name, start, end, withscores, score_cast_func)
        if byscore and bylex:
            raise DataError("``byscore`` and ``bylex`` can not be specified together.")
        limit = limit_option(offset, num, "``offset`` and ``num``")
        if bylex and withscores:
            raise DataError("``withscores`` not supported in combination with ``bylex``.")
        chosen = (("BYSCORE", byscore), ("BYLEX", bylex), ("REV", desc))
        command = ("ZRANGE", name, start, end, *(word for word, wanted in chosen if wanted))
        command += limit
        if withscores:
            return self._send((*command, "WITHSCORES"), scores(score_cast_func))
        return self._send(command)

    # -- strings -----------------------------------------------------------------------------

    def mget(self, keys: Key | Iterable[Key], *args: Key) -> R:
        names = list_or_args(keys, args)
        if not names:
            return self._answer([])  # as redis-py: no keys, no command, no values
        return self._send(("MGET", *names))

    def mset(self, mapping: Mapping[Key, Value]) -> R:
        pairs = [item for pair in mapping.items() for item in pair]
        return self._send(("MSET", *pairs), true)

    def setex(self, name: Key, time: int | datetime.timedelta, value: Value) -> R:
        return self._send(("SETEX", name, seconds(time), value), bool)

    def setnx(self, name: Key, value: Value) -> R:
        return self._send(("SETNX", name, value), bool)

    def getdel(self, name: Key) -> R:
        return self._send(("GETDEL", name))

    def getex(
        self,
        name: Key,
        ex: Expiry | None = None,
        px: Expiry | None = None,
        exat: Moment | None = None,
        pxat: Moment | None = None,
        persist: bool = False,
    ) -> R:
        """GETEX: the value, its expiry set (ex, px, exat, pxat) or removed (persist)."""
        check_one(
            "``ex``, ``px``, ``exat``, ``pxat``, and ``persist`` are mutually exclusive.",
            ex is not None,
            px is not None,
            exat is not None,
            pxat is not None,
            persist,
        )
        persisting = ("PERSIST",) if persist else ()
        return self._send(("GETEX", name, *expiry(ex, px, exat, pxat), *persisting))

    def decrby(self, name: Key, amount: int = 1) -> R:
        return self._send(("DECRBY", name, amount))

    #: redis-py's decr is DECRBY too.
    decr = decrby

    def incrbyfloat(self, name: Key, amount: float = 1.0) -> R:
        return self._send(("INCRBYFLOAT", name, amount), to_float)

    def append(self, key: Key, value: Value) -> R:
        return self._send(("APPEND", key, value))

    def strlen(self, name: Key) -> R:
        return self._send(("STRLEN", name))

    # -- keys ----------------------------------------------------------------------------------

    def unlink(self, *names: Key) -> R:
        return self._send(("UNLINK", *names))

    def touch(self, *args: Key) -> R:
        return self._send(("TOUCH", *args))

    def pexpire(
        self,
        name: Key,
        time: int | datetime.timedelta,
        nx: bool = False,
        xx: bool = False,
        gt: bool = False,
        lt: bool = False,
    ) -> R:
        flags = expire_flags(nx, xx, gt, lt)
        return self._send(("PEXPIRE", name, milliseconds(time), *flags), bool)

    def expireat(
        self,
        name: Key,
        when: Moment,
        nx: bool = False,
        xx: bool = False,
        gt: bool = False,
        lt: bool = False,
    ) -> R:
        flags = expire_flags(nx, xx, gt, lt)
        return self._send(("EXPIREAT", name, unix(when), *flags), bool)

    def pexpireat(
        self,
        name: Key,
        when: Moment,
        nx: bool = False,
        xx: bool = False,
        gt: bool = False,
        lt: bool = False,
    ) -> R:
        flags = expire_flags(nx, xx, gt, lt)
        return self._send(("PEXPIREAT", name, unix_ms(when), *flags), bool)

    def pttl(self, name: Key) -> R:
        return self._send(("PTTL", name))

    def persist(self, name: Key) -> R:
        return self._send(("PERSIST", name), bool)

    def type(self, name: Key) -> R:
        return self._send(("TYPE", name), status)

    def rename(self, src: Key, dst: Key) -> R:
        return self._send(("RENAME", src, dst), true)

    def scan(
        self,
        cursor: int = 0,
        match: Key | None = None,
        count: int | None = None,
        _type: str | None = None,
    ) -> R:
        """One SCAN step: (next cursor, keys); the scan is over when the cursor is 0. On a
        cluster it scans one node: use scan_iter, which visits every primary."""
        return self._send(scan_command(cursor, match, count, _type), scan_reply)

    # -- server --------------------------------------------------------------------------------

    def ping(self) -> R:
        return self._send(("PING",), pong)

    def info(self, section: str | None = None, *args: str) -> R:
        """INFO (a section or several, or the default ones), parsed into redis-py's dict."""
        sections = () if section is None else (section, *args)
        return self._send(("INFO", *sections), parse_info)

    def dbsize(self) -> R:
        return self._send(("DBSIZE",))

    def time(self) -> R:
        return self._send(("TIME",), lambda r: (int(r[0]), int(r[1])))

    def publish(self, channel: Key, message: Value) -> R:
        return self._send(("PUBLISH", channel, message))

    def flushdb(self, asynchronous: bool = False) -> R:
        """FLUSHDB: every key of the cache's database, not only the cache's own."""
        return self._send(("FLUSHDB", "ASYNC") if asynchronous else ("FLUSHDB",), true)
