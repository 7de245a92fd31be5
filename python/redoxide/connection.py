"""get_redis_connection and ``cache.client.get_client()``: django-redis' raw-client helpers,
over the cache's own client.

django-redis hands out a redis-py client. This module hands out an object with redis-py's
method names, arguments and replies for the commands Django sites send that way (strings,
keys, hashes, lists, sets, sorted sets, ping, info, publish, scan_iter; the list is in
``redoxide._raw_commands``), an ``execute_command`` for the rest (the reply as it comes), and
``pipeline()``. Nothing is encoded or prefixed: keys are raw, so
``conn.get(cache.make_key("k"))`` reads what the cache stored. Every command has an async twin
(``aget``, ``alpush``, ``aexecute_command``...; a pipeline has ``aexecute``). Commands go
through the cache's connections and topology routing; ``write=False`` sends them where the
cache reads (a replica). IGNORE_EXCEPTIONS does not apply, as with django-redis' raw client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, Literal, overload

from redoxide import plans
from redoxide._bridges import bridge as _bridge
from redoxide._protocols import (
    Arg,
    ClientLike,
    KeepsErrors,
    Topology,
    reads_client,
    spans_primaries,
)
from redoxide._raw_args import encoded, scan_command
from redoxide._raw_commands import Commands, Convert, Key, Value, as_is
from redoxide.exceptions import ResponseError
from redoxide.topology.calls import raise_refused

__all__ = ["Connection", "Pipeline", "RawClient", "get_redis_connection", "reads_client"]


class _AsyncCommands(Commands[Awaitable[Any]]):
    """The commands, each returning an awaitable of its converted reply."""

    def __init__(self, client: ClientLike) -> None:
        self._client = client

    def _send(self, command: tuple[Value, ...], convert: Convert = as_is) -> Awaitable[Any]:
        return plans.then(self._client.execute(encoded(command), _bridge()), convert)

    def _answer(self, reply: Any) -> Awaitable[Any]:
        return plans.done(reply)


class _Twin:
    """A command's async twin on Connection: ``aNAME`` awaits ``NAME``'s reply (a coroutine
    function, like redis-py's asyncio client's methods)."""

    def __set_name__(self, owner: type, attr: str) -> None:
        self._name = attr[1:]

    @overload
    def __get__(self, obj: None, owner: type) -> _Twin: ...
    @overload
    def __get__(self, obj: Connection, owner: type) -> Callable[..., Coroutine[Any, Any, Any]]: ...
    def __get__(self, obj: Connection | None, owner: type) -> Any:
        if obj is None:
            return self
        send: Callable[..., Awaitable[Any]] = getattr(obj._async, self._name)

        async def twin(*args: Any, **kwargs: Any) -> Any:
            return await send(*args, **kwargs)

        twin.__name__ = twin.__qualname__ = "a" + self._name
        return twin


class Connection(Commands[Any]):
    """Raw commands on a redoxide cache's client, with redis-py's method names and replies."""

    def __init__(self, client: ClientLike) -> None:
        self._client = client
        self._async = _AsyncCommands(client)

    def _send(self, command: tuple[Value, ...], convert: Convert = as_is) -> Any:
        return convert(self._client.execute(encoded(command)))

    def _answer(self, reply: Any) -> Any:
        return reply

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        """Return a pipeline: commands queue until execute() sends them in one round trip.

        With transaction (redis-py's default) they run inside MULTI / EXEC, atomically; a
        cluster refuses that (keys of several slots cannot share a transaction): pass
        transaction=False there. ``shard_hint`` is accepted and ignored, as redis-py does.
        """
        if transaction and spans_primaries(self._client):  # a cluster
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
                cursor, found = node.execute(encoded(scan_command(cursor, match, count, _type)))
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
                command = encoded(scan_command(cursor, match, count, _type))
                cursor, found = await node.execute(command, _bridge())
                for key in found:
                    yield key
                if cursor == b"0":
                    break

    def _scan_nodes(self) -> plans.Plan[Any]:
        client = self._client
        if not (isinstance(client, Topology) and client.spans_primaries):
            return None
        return (yield client.scan_nodes, ())

    def _nodes(self, cluster_nodes: Any) -> list[Any]:
        return [self._client] if cluster_nodes is None else list(cluster_nodes)

    # -- the async twins: ``await conn.aget(...)`` for every command ------------------------

    aexecute_command = _Twin()
    aget = _Twin()
    aset = _Twin()
    adelete = _Twin()
    aexists = _Twin()
    aexpire = _Twin()
    attl = _Twin()
    aincrby = _Twin()
    akeys = _Twin()
    ahget = _Twin()
    ahset = _Twin()
    ahgetall = _Twin()
    asadd = _Twin()
    asmembers = _Twin()
    azadd = _Twin()
    azrange = _Twin()
    amget = _Twin()
    amset = _Twin()
    asetex = _Twin()
    asetnx = _Twin()
    agetdel = _Twin()
    adecrby = _Twin()
    aincrbyfloat = _Twin()
    aappend = _Twin()
    astrlen = _Twin()
    aunlink = _Twin()
    atouch = _Twin()
    apexpire = _Twin()
    aexpireat = _Twin()
    apttl = _Twin()
    apersist = _Twin()
    atype = _Twin()
    arename = _Twin()
    aping = _Twin()
    ainfo = _Twin()
    adbsize = _Twin()
    atime = _Twin()
    apublish = _Twin()
    aflushdb = _Twin()
    ahmget = _Twin()
    ahdel = _Twin()
    ahexists = _Twin()
    ahincrby = _Twin()
    ahincrbyfloat = _Twin()
    ahsetnx = _Twin()
    ahlen = _Twin()
    ahkeys = _Twin()
    ahvals = _Twin()
    alpush = _Twin()
    arpush = _Twin()
    alpushx = _Twin()
    arpushx = _Twin()
    alpop = _Twin()
    arpop = _Twin()
    alrange = _Twin()
    altrim = _Twin()
    allen = _Twin()
    alindex = _Twin()
    alset = _Twin()
    alrem = _Twin()
    alinsert = _Twin()
    alpos = _Twin()
    almove = _Twin()
    asrem = _Twin()
    ascard = _Twin()
    asismember = _Twin()
    aspop = _Twin()
    asrandmember = _Twin()
    azrevrange = _Twin()
    azrangebyscore = _Twin()
    azrem = _Twin()
    azcard = _Twin()
    azcount = _Twin()
    azscore = _Twin()
    azincrby = _Twin()
    azrank = _Twin()
    azremrangebyscore = _Twin()
    azremrangebyrank = _Twin()
    aincr = _Twin()
    adecr = _Twin()
    agetex = _Twin()
    apexpireat = _Twin()
    ascan = _Twin()
    azrevrangebyscore = _Twin()
    azrevrank = _Twin()


class Pipeline(Commands["Pipeline"]):
    """Commands queued by the same methods, sent in one round trip by execute() / aexecute()."""

    def __init__(self, client: ClientLike, transaction: bool) -> None:
        self._client = client
        self._transaction = transaction
        # (command, convert); a None command answers convert(None) without being sent.
        self._queued: list[tuple[tuple[Value, ...] | None, Convert]] = []

    def _send(self, command: tuple[Value, ...], convert: Convert = as_is) -> Pipeline:
        self._queued.append((command, convert))  # encoded by execute(), as redis-py does
        return self

    def _answer(self, reply: Any) -> Pipeline:
        self._queued.append((None, lambda _: reply))
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

    def _take(self) -> tuple[list[tuple[tuple[Value, ...] | None, Convert]], list[tuple[Arg, ...]]]:
        """Empty the queue (sent or failed, as redis-py does): what was queued, and the
        commands to send (a DataError for an argument redis-py refuses: nothing is sent)."""
        queued, self._queued = self._queued, []
        commands = [encoded(command) for command, _ in queued if command is not None]
        if self._transaction and commands:
            commands = [("MULTI",), *commands, ("EXEC",)]
        return queued, commands

    def _finish(
        self,
        queued: list[tuple[tuple[Value, ...] | None, Convert]],
        replies: list[Any],
        raise_on_error: bool,
    ) -> list[Any]:
        if self._transaction and replies:
            replies = _exec_replies(replies)
        sent = iter(replies)
        out = []
        for command, convert in queued:
            reply = None if command is None else next(sent)
            out.append(reply if isinstance(reply, ResponseError) else convert(reply))
        if raise_on_error:
            for reply in out:
                if isinstance(reply, ResponseError):
                    raise reply
        return out

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send the queued commands in one round trip; return their replies, in order.

        An error reply raises ``ResponseError`` (the first one, once every command has run);
        with ``raise_on_error=False`` it is returned in its command's place instead, on every
        topology and with the near cache or tracing on. A transaction runs on one node (the
        primary; on a cluster there is none, see ``pipeline()``), in one round trip there. In
        it, a command the server refused to queue raises either way (nothing ran); an error
        reply inside EXEC's (a queued command that failed as it ran) is returned in place.
        Outside a transaction a router (replicas, Sentinel, a cluster, the near cache) sends
        the commands one at a time, in order, each routed on its own.
        """
        queued, commands = self._take()
        if not commands:
            return self._finish(queued, [], raise_on_error)
        client = self._client
        keeping = None if raise_on_error else _keeping(client, self._transaction)
        if keeping is not None:
            replies = keeping.pipeline_results(commands)
        elif raise_on_error or self._transaction:
            replies = client.pipeline(commands)
        else:  # a router's plain pipeline: one command at a time, in order
            replies = [_reply_or_error(client, command) for command in commands]
        return self._finish(queued, replies, raise_on_error)

    async def aexecute(self, raise_on_error: bool = True) -> list[Any]:
        """Send the queued commands in one round trip from async code (as execute does)."""
        queued, commands = self._take()
        if not commands:
            return self._finish(queued, [], raise_on_error)
        client, bridge = self._client, _bridge()
        keeping = None if raise_on_error else _keeping(client, self._transaction)
        if keeping is not None:
            replies = await keeping.pipeline_results(commands, bridge)
        elif raise_on_error or self._transaction:
            replies = await client.pipeline(commands, bridge)
        else:
            replies = [await _areply_or_error(client, command, bridge) for command in commands]
        return self._finish(queued, replies, raise_on_error)


def _keeping(client: ClientLike, transaction: bool) -> KeepsErrors | None:
    """The client to send a ``raise_on_error=False`` pipeline through in one round trip, error
    replies kept in their places, if any: for a transaction, whatever offers
    ``pipeline_results`` (one server's client; a router, near cache or traced client forwards
    it to the node the transaction runs on); for a plain pipeline, one server's client only."""
    if not isinstance(client, KeepsErrors):
        return None
    return client if transaction or not isinstance(client, Topology) else None


def _exec_replies(replies: list[Any]) -> list[Any]:
    """EXEC's list, from the replies to MULTI, the queued commands and EXEC: a command the
    server refused to queue aborted the transaction, and raises (as in redis-py)."""
    return list(raise_refused(replies)[-1])


def _reply_or_error(client: ClientLike, command: tuple[Arg, ...]) -> Any:
    try:
        return client.execute(command)
    except ResponseError as error:
        return error


async def _areply_or_error(client: ClientLike, command: tuple[Arg, ...], bridge: Any) -> Any:
    try:
        return await client.execute(command, bridge)
    except ResponseError as error:
        return error


class RawClient:
    """``cache.client``: any Redis command through the cache's own connections (no key making,
    no encoding), and what of django-redis' DefaultClient user code calls: get_client,
    make_key, encode, decode."""

    __slots__ = ("_cache", "_client")

    def __init__(self, cache: Any) -> None:
        # `cache` is a redoxide RedisCache (not imported here: redoxide.cache imports this).
        self._cache = cache
        self._client: ClientLike = cache._client

    def make_key(self, key: Any, version: int | None = None) -> str:
        """The key as stored (KEY_PREFIX:VERSION:key, or KEY_FUNCTION's), as django-redis'
        ``cache.client.make_key``."""
        return str(self._cache.make_key(key, version))

    def encode(self, value: Any) -> bytes:
        """A value's bytes as the cache stores them (ints raw, the rest serialized and maybe
        compressed), for raw commands that write cache values."""
        return bytes(self._cache._encode(value))

    def decode(self, value: bytes) -> Any:
        """The value stored as these bytes, as the cache reads it."""
        return self._cache._decode(value, None)

    def execute(self, *args: Value) -> Any:
        """Run one command and return its reply (bytes, int, list, None, True for OK).
        Arguments are taken as get_redis_connection() takes them (redis-py's rules)."""
        return self._client.execute(encoded(args))

    async def aexecute(self, *args: Value) -> Any:
        """Run one command from async code."""
        return await self._client.execute(encoded(args), _bridge())

    def pipeline(self, *commands: tuple[Value, ...]) -> list[Any]:
        """Run several commands in one round trip (not a transaction); return the replies."""
        return self._client.pipeline([encoded(command) for command in commands])

    async def apipeline(self, *commands: tuple[Value, ...]) -> list[Any]:
        """Run several commands in one round trip from async code."""
        return await self._client.pipeline([encoded(c) for c in commands], _bridge())

    @overload
    def get_client(
        self, write: bool = True, tried: Any = None, *, show_index: Literal[False] = False
    ) -> Connection: ...
    @overload
    def get_client(
        self, write: bool = True, tried: Any = None, *, show_index: Literal[True]
    ) -> tuple[Connection, int]: ...
    def get_client(
        self, write: bool = True, tried: Any = None, show_index: bool = False
    ) -> Connection | tuple[Connection, int]:
        """django-redis' ``cache.client.get_client()``: redis-py's commands and replies on the
        cache's connections (a Connection, as get_redis_connection returns). ``write=False``:
        on the node the cache reads from (a replica where READ_FROM_REPLICAS reads from
        them). ``tried`` is accepted and ignored (redoxide picks a replica that answers
        itself); ``show_index`` returns (client, 0)."""
        client = self._client if write else reads_client(self._client)
        connection = Connection(client)
        return (connection, 0) if show_index else connection


def get_redis_connection(alias: str = "default", write: bool = True) -> Connection:
    """Return raw commands on the client of the redoxide cache CACHES[alias].

    With ``write`` (the default) every command goes to the primary (on a cluster, the key's
    primary), so a read after a write sees it. ``write=False`` sends them where the cache's
    reads go: a replica that answers when OPTIONS["READ_FROM_REPLICAS"] is on and replicas
    are configured (LOCATION list, Sentinel), else the primary; as with django-redis' read
    client, a write sent there is refused by the replica.
    """
    from django.core.cache import caches

    cache = caches[alias]
    # A redoxide cache's `client` is a RawClient (one with refused settings raises why).
    raw = getattr(cache, "client", None)
    if not isinstance(raw, RawClient):
        backend = f"{type(cache).__module__}.{type(cache).__qualname__}"
        # NotImplementedError, as django-redis raises for a backend without raw connections.
        raise NotImplementedError(
            f"redoxide: get_redis_connection({alias!r}) needs a redoxide cache, but "
            f"CACHES[{alias!r}] is {backend}"
        )
    return raw.get_client(write=write)
