"""get_redis_connection: django-redis' raw-connection helper, over the cache's own client.

django-redis hands out a redis-py client. This module hands out a small object with the
commands code most often sends that way (get, set, delete, exists, expire, ttl, incr, incrby,
keys, scan_iter, hget, hset, hgetall, sadd, smembers, zadd, zrange), each returning what
redis-py returns for it (bytes, ints, lists, a set, a dict; ``set`` True), an
``execute_command`` for the rest (the reply as it comes), and ``pipeline()``. Nothing is
encoded or prefixed: keys are raw, so ``conn.get(cache.make_key("k"))`` reads what the cache
stored. Every command has an async twin (``aget``, ``aexecute_command``...; a pipeline has
``aexecute``). Commands go through the cache's connections and topology routing;
IGNORE_EXCEPTIONS does not apply, as with django-redis' raw client.

Each command is written once, in ``Commands``: it builds the command and says how its reply
converts. What happens then is the subclass' business: ``Connection`` runs it, its async view
awaits it, ``Pipeline`` queues it.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from redoxide import plans
from redoxide._bridges import bridge as _bridge
from redoxide._protocols import Arg, ClientLike
from redoxide._zsets import zadd_flags

__all__ = ["Connection", "Pipeline", "get_redis_connection"]

R = TypeVar("R")
Convert = Callable[[Any], Any]
#: A key, a field or a value, as redis-py accepts them.
Key = str | bytes


def _as_is(reply: Any) -> Any:
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


def _scan_command(cursor: Any, match: Key | None, count: int | None, _type: str | None) -> Any:
    command: tuple[Any, ...] = ("SCAN", cursor)
    if match is not None:
        command += ("MATCH", match)
    if count is not None:
        command += ("COUNT", count)
    if _type is not None:
        command += ("TYPE", _type)
    return command


class Commands(Generic[R]):
    """The commands, each written once; ``_send`` decides what sending one means."""

    def _send(self, command: tuple[Arg, ...], convert: Convert = _as_is) -> R:
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
        return self._send(command, _float_or_none if incr else _as_is)

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


class _AsyncCommands(Commands[Awaitable[Any]]):
    """The commands, each returning an awaitable of its converted reply."""

    def __init__(self, client: ClientLike) -> None:
        self._client = client

    def _send(self, command: tuple[Arg, ...], convert: Convert = _as_is) -> Awaitable[Any]:
        return plans.then(self._client.execute(command, _bridge()), convert)


class Connection(Commands[Any]):
    """Raw commands on a redoxide cache's client, with redis-py's method names and replies."""

    def __init__(self, client: ClientLike) -> None:
        self._client = client
        self._async = _AsyncCommands(client)

    def _send(self, command: tuple[Arg, ...], convert: Convert = _as_is) -> Any:
        return convert(self._client.execute(command))

    def pipeline(self, transaction: bool = True) -> Pipeline:
        """Return a pipeline: commands queue until execute() sends them in one round trip.

        With transaction (redis-py's default) they run inside MULTI / EXEC, atomically; a
        cluster refuses that (keys of several slots cannot share a transaction): pass
        transaction=False there.
        """
        if transaction and hasattr(self._client, "scan_nodes"):  # a cluster router
            raise NotImplementedError(
                "redoxide: a cluster cannot run a pipeline as a transaction; "
                "use pipeline(transaction=False)"
            )
        return Pipeline(self._client, transaction)

    def scan_iter(
        self,
        match: Key | None = None,
        count: int | None = None,
        _type: str | None = None,
    ) -> Iterator[bytes]:
        """Yield the keys SCAN finds (on a cluster, on every primary); may yield one twice."""
        for node in self._nodes(plans.run(self._scan_nodes())):
            cursor: Any = 0
            while True:
                cursor, found = node.execute(_scan_command(cursor, match, count, _type))
                yield from found
                if cursor == b"0":
                    break

    async def ascan_iter(
        self,
        match: Key | None = None,
        count: int | None = None,
        _type: str | None = None,
    ) -> AsyncIterator[bytes]:
        """Yield the keys SCAN finds, like scan_iter, with awaits."""
        for node in self._nodes(await plans.arun(self._scan_nodes(), _bridge())):
            cursor: Any = 0
            while True:
                command = _scan_command(cursor, match, count, _type)
                cursor, found = await node.execute(command, _bridge())
                for key in found:
                    yield key
                if cursor == b"0":
                    break

    def _scan_nodes(self) -> plans.Plan[Any]:
        if not hasattr(self._client, "scan_nodes"):
            return None
        return (yield self._client.scan_nodes, ())

    def _nodes(self, cluster_nodes: Any) -> list[Any]:
        return [self._client] if cluster_nodes is None else list(cluster_nodes)

    # -- the async twins ---------------------------------------------------------------------

    async def aexecute_command(self, *args: Arg) -> Any:
        return await self._async.execute_command(*args)

    async def aget(self, name: Key) -> Any:
        return await self._async.get(name)

    async def aset(
        self,
        name: Key,
        value: Arg,
        ex: int | datetime.timedelta | None = None,
        px: int | datetime.timedelta | None = None,
        nx: bool = False,
        xx: bool = False,
        keepttl: bool = False,
    ) -> Any:
        return await self._async.set(name, value, ex, px, nx, xx, keepttl)

    async def adelete(self, *names: Key) -> Any:
        return await self._async.delete(*names)

    async def aexists(self, *names: Key) -> Any:
        return await self._async.exists(*names)

    async def aexpire(self, name: Key, time: int | datetime.timedelta) -> Any:
        return await self._async.expire(name, time)

    async def attl(self, name: Key) -> Any:
        return await self._async.ttl(name)

    async def aincrby(self, name: Key, amount: int = 1) -> Any:
        return await self._async.incrby(name, amount)

    aincr = aincrby

    async def akeys(self, pattern: Key = "*") -> Any:
        return await self._async.keys(pattern)

    async def ahget(self, name: Key, key: Key) -> Any:
        return await self._async.hget(name, key)

    async def ahset(
        self,
        name: Key,
        key: Key | None = None,
        value: Arg | None = None,
        mapping: Mapping[Key, Arg] | None = None,
    ) -> Any:
        return await self._async.hset(name, key, value, mapping)

    async def ahgetall(self, name: Key) -> Any:
        return await self._async.hgetall(name)

    async def asadd(self, name: Key, *values: Arg) -> Any:
        return await self._async.sadd(name, *values)

    async def asmembers(self, name: Key) -> Any:
        return await self._async.smembers(name)

    async def azadd(
        self,
        name: Key,
        mapping: Mapping[Key, float],
        nx: bool = False,
        xx: bool = False,
        ch: bool = False,
        incr: bool = False,
        gt: bool = False,
        lt: bool = False,
    ) -> Any:
        return await self._async.zadd(name, mapping, nx, xx, ch, incr, gt, lt)

    async def azrange(
        self,
        name: Key,
        start: int,
        end: int,
        desc: bool = False,
        withscores: bool = False,
        score_cast_func: Callable[[Any], Any] = float,
    ) -> Any:
        return await self._async.zrange(name, start, end, desc, withscores, score_cast_func)


class Pipeline(Commands["Pipeline"]):
    """Commands queued by the same methods, sent in one round trip by execute() / aexecute()."""

    def __init__(self, client: ClientLike, transaction: bool) -> None:
        self._client = client
        self._transaction = transaction
        self._queued: list[tuple[tuple[Arg, ...], Convert]] = []

    def _send(self, command: tuple[Arg, ...], convert: Convert = _as_is) -> Pipeline:
        self._queued.append((command, convert))
        return self

    def __len__(self) -> int:
        return len(self._queued)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the queued commands."""
        self._queued.clear()

    def _take(self) -> tuple[list[Convert], list[tuple[Arg, ...]]]:
        """Empty the queue (sent or failed, as redis-py does): the converters and commands."""
        queued, self._queued = self._queued, []
        commands = [command for command, _ in queued]
        if self._transaction:
            commands = [("MULTI",), *commands, ("EXEC",)]
        return [convert for _, convert in queued], commands

    def _finish(self, converts: list[Convert], replies: list[Any]) -> list[Any]:
        if self._transaction:
            replies = replies[-1]  # EXEC's: one reply per queued command
        return [convert(reply) for convert, reply in zip(converts, replies, strict=True)]

    def execute(self) -> list[Any]:
        """Send the queued commands in one round trip; return their replies, in order.

        An error reply raises ``ResponseError`` (as redis-py's default raise_on_error does).
        """
        converts, commands = self._take()
        if not converts:
            return []
        return self._finish(converts, self._client.pipeline(commands))

    async def aexecute(self) -> list[Any]:
        """Send the queued commands in one round trip from async code."""
        converts, commands = self._take()
        if not converts:
            return []
        return self._finish(converts, await self._client.pipeline(commands, _bridge()))


def get_redis_connection(alias: str = "default", write: bool = True) -> Connection:
    """Return raw commands on the client of the redoxide cache CACHES[alias].

    ``write`` is accepted for django-redis' signature; every command goes to the primary (or,
    on a cluster, to the key's primary), so a read after a write sees it.
    """
    from django.core.cache import caches

    from redoxide.cache import RedisCache

    cache = caches[alias]
    if not isinstance(cache, RedisCache):
        backend = f"{type(cache).__module__}.{type(cache).__qualname__}"
        # NotImplementedError, as django-redis raises for a backend without raw connections.
        raise NotImplementedError(
            f"redoxide: get_redis_connection({alias!r}) needs a redoxide cache, but "
            f"CACHES[{alias!r}] is {backend}"
        )
    return Connection(cache._client)
