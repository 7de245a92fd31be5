"""Where commands go: one server, a primary with read replicas, a Sentinel-watched primary, or
a Cluster.

Each topology is a router with the Rust ``Client``'s interface (get, set, mget, set_many,
execute, pipeline; a trailing ``bridge`` makes the call awaitable), so cache.py runs the same
plans on every topology. Standalone uses the Rust client itself: no layer at all. The routers
hold one Rust client per server node (shared by the whole process, so one multiplexed
connection per node carries all async traffic) and add only what the topology needs: picking a
replica, following a failover, hash-slot routing with MOVED/ASK handling, and splitting
multi-key commands across slots.

Recovery policy, the same for every router: a redirect (MOVED, ASK, READONLY after a
failover) is followed at once, because the command was not applied; a refused or broken
connection makes the router re-learn the topology and retry once if that moved the target;
a timeout is raised (the call already used its time) and the topology is re-learnt on the
next call.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from redoxide import _redoxide
from redoxide.exceptions import CacheError, CacheTimeout, ConnectionInterrupted, ResponseError
from redoxide.options import Config

__all__ = ["make_client", "slot_tag"]

Client = _redoxide.Client
key_slot = _redoxide.key_slot
key_slots = _redoxide.key_slots
fanout = _redoxide.fanout

# A router's own little plans (topology discovery), driven like cache.py's.
Step = tuple[Callable[..., Any], tuple[Any, ...]]
Plan = Generator[Step, Any, Any]
# A cluster call's plan: steps are ("send", [(node, commands)]) (a reply list or exception
# per node), ("call", node, method, args) (its reply or exception), ("ensure",), ("relearn",)
# and ("pause",); one blocking and one async driver run them all.
PartsPlan = Generator[tuple[Any, ...], Any, Any]

#: How long a replica that refused a connection is left out of the read rotation.
REPLICA_DOWN_SECONDS = 5.0
#: Redirects followed for one call before giving up (a cluster mid-resharding settles fast).
MAX_REDIRECTS = 5
#: Pause before retrying a TRYAGAIN / CLUSTERDOWN reply.
RETRY_PAUSE = 0.05
#: Topology re-discovery runs at most this often (many callers fail at once in an outage).
MIN_REFRESH_INTERVAL = 0.05
#: A key scan (keys, iter_keys, delete_pattern, clear) re-reads an older slot table first.
SCAN_TABLE_AGE = 1.0

_REDIRECT = re.compile(r"\b(MOVED|ASK):? (\d+) (\S+)", re.IGNORECASE)

# Process-wide node clients: routers of several configurations share a node's connection.
_nodes: dict[tuple[Any, ...], _redoxide.Client] = {}
_nodes_lock = threading.Lock()


def _drive(plan: Plan) -> Any:
    """Run a router plan with blocking calls."""
    try:
        fn, args = next(plan)
        while True:
            try:
                reply = fn(*args)
            except CacheError as exc:
                fn, args = plan.throw(exc)
            else:
                fn, args = plan.send(reply)
    except StopIteration as stop:
        return stop.value


async def _adrive(plan: Plan, bridge: Any) -> Any:
    """Run a router plan with awaits."""
    try:
        fn, args = next(plan)
        while True:
            try:
                reply = await fn(*args, bridge)
            except CacheError as exc:
                fn, args = plan.throw(exc)
            else:
                fn, args = plan.send(reply)
    except StopIteration as stop:
        return stop.value


def _discovery_budget(config: Config) -> float:
    """How long asking nodes (or sentinels) about the topology may take, all of them: two
    slow nodes' worth (a first request waits for the connect and the reply), so a call that
    re-learns the topology stays bounded."""
    return 2 * (config.connect_timeout + config.socket_timeout)


def _credentials(config: Config) -> tuple[str | None, str | None]:
    """The data nodes' username and password: OPTIONS first, else the first LOCATION URL's."""
    parts = urlsplit(config.servers[0])
    username = config.username
    password = config.password
    if username is None and parts.username:
        username = unquote(parts.username)
    if password is None and parts.password is not None:
        password = unquote(parts.password)
    return username, password


def _new_client(config: Config, url: str, **kwargs: Any) -> _redoxide.Client:
    return Client(
        url,
        connect_timeout=config.connect_timeout,
        response_timeout=config.socket_timeout,
        **kwargs,
        **config.tls_kwargs,
    )


def node_client(
    config: Config, host: str, port: int, *, db: int | None = None, readonly: bool = False
) -> _redoxide.Client:
    """The process-wide client of one discovered data node."""
    scheme = "rediss" if urlsplit(config.servers[0]).scheme in ("rediss", "valkeys") else "redis"
    username, password = _credentials(config)
    key = (
        scheme,
        host,
        port,
        db,
        readonly,
        username,
        password,
        config.connect_timeout,
        config.socket_timeout,
        config.tls,
    )
    client = _nodes.get(key)
    if client is None:
        with _nodes_lock:
            client = _nodes.get(key)
            if client is None:
                url = f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
                client = _new_client(
                    config, url, username=username, password=password, db=db, readonly=readonly
                )
                _nodes[key] = client
    return client


def make_client(config: Config) -> Any:
    """Build the client (or router) for a configuration."""
    if config.topology == "cluster":
        return ClusterRouter(config)
    if config.topology == "sentinel":
        return SentinelRouter(config)

    def plain(url: str) -> _redoxide.Client:
        return _new_client(
            config, url, username=config.username, password=config.password, db=config.db
        )

    if config.topology == "replicas":
        return ReplicaRouter(
            plain(config.servers[0]),
            [plain(url) for url in config.servers[1:]],
            config.read_from_replicas,
        )
    return plain(config.servers[0])


def _name(arg: Any) -> str:
    if isinstance(arg, bytes):
        return arg.decode("latin-1").upper()
    return str(arg).upper()


# -- one discovery at a time -------------------------------------------------------------------


class _Flight:
    """At most one topology discovery at a time: blocking callers take a lock, async callers on
    one event loop wait for the discovery already running there (50 tasks that meet a failover
    send one CLUSTER SLOTS, not 50)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._running: dict[int, asyncio.Future[None]] = {}

    def reset_after_fork(self) -> None:
        self.lock = threading.Lock()
        self._running = {}

    def run(self, plan: Callable[[], Plan], needed: Callable[[], bool]) -> None:
        with self.lock:
            if needed():
                _drive(plan())

    async def arun(self, plan: Callable[[], Plan], needed: Callable[[], bool], bridge: Any) -> None:
        loop = asyncio.get_running_loop()
        running = self._running.get(id(loop))
        if running is not None and not running.done():
            await asyncio.wait([running])  # its outcome is the leader's to report
            return
        if not needed():
            return
        done: asyncio.Future[None] = loop.create_future()
        self._running[id(loop)] = done
        try:
            await _adrive(plan(), bridge)
        finally:
            if self._running.get(id(loop)) is done:
                del self._running[id(loop)]
            done.set_result(None)


# Routers whose locks a forked child must replace (a lock held by another thread at fork()
# would stay held forever in the child).
_routers: weakref.WeakSet[Any] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _nodes_lock
    _nodes_lock = threading.Lock()
    for router in list(_routers):
        router._flight.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- read replicas and Sentinel ----------------------------------------------------------------


class ReplicaRouter:
    """Writes to the primary; get / get_many spread over the replicas that answer."""

    def __init__(self, primary: Any, replicas: Sequence[Any], read_from_replicas: bool) -> None:
        self.primary = primary
        self.replicas = list(replicas)
        self.read_from_replicas = read_from_replicas and bool(self.replicas)
        self._turn = itertools.count()
        self._down: dict[int, float] = {}  # id(replica) -> monotonic time it may be retried
        self._flight = _Flight()
        _routers.add(self)

    def __repr__(self) -> str:
        return f"<redoxide {type(self).__name__}>"

    # -- choosing a replica

    def _reader(self) -> Any | None:
        replicas = self.replicas
        if not self.read_from_replicas or not replicas:
            return None
        start = next(self._turn)
        now = 0.0
        for i in range(len(replicas)):
            replica = replicas[(start + i) % len(replicas)]
            until = self._down.get(id(replica))
            if until is None:
                return replica
            now = now or time.monotonic()
            if until <= now:
                self._down.pop(id(replica), None)
                return replica
        return None

    def _mark_down(self, replica: Any) -> None:
        self._down[id(replica)] = time.monotonic() + REPLICA_DOWN_SECONDS

    def _read(self, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        replica = self._reader()
        if replica is None:
            return self._write(name, args, bridge)
        if bridge is not None:
            return self._aread(replica, name, args, bridge)
        try:
            return getattr(replica, name)(*args)
        except CacheTimeout:
            self._mark_down(replica)
            raise
        except CacheError:
            # A replica that is down, loading, or cut off from its primary (MASTERDOWN) is
            # skipped for a while: the primary answers instead.
            self._mark_down(replica)
        return self._write(name, args, None)

    async def _aread(self, replica: Any, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        try:
            return await getattr(replica, name)(*args, bridge)
        except CacheTimeout:
            self._mark_down(replica)
            raise
        except CacheError:
            self._mark_down(replica)
        return await self._write(name, args, bridge)

    def _write(self, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        if bridge is None:
            return getattr(self.primary, name)(*args)
        return getattr(self.primary, name)(*args, bridge)

    # -- the Client interface

    def get(self, key: str, bridge: Any = None) -> Any:
        return self._read("get", (key,), bridge)

    def mget(self, keys: Iterable[Any], bridge: Any = None) -> Any:
        return self._read("mget", (list(keys),), bridge)

    def set(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: Any = None,
    ) -> Any:
        return self._write("set", (key, value, ttl_ms, nx, xx), bridge)

    def set_many(
        self, keys: Any, values: Any, ttl_ms: int | None = None, bridge: Any = None
    ) -> Any:
        return self._write("set_many", (list(keys), list(values), ttl_ms), bridge)

    def execute(self, args: Sequence[Any], bridge: Any = None) -> Any:
        return self._write("execute", (args,), bridge)

    def pipeline(self, commands: Iterable[Sequence[Any]], bridge: Any = None) -> Any:
        return self._write("pipeline", (list(commands),), bridge)


class SentinelRouter(ReplicaRouter):
    """A ReplicaRouter whose primary (and replicas) the sentinels name, followed on failover.

    The primary is asked for on first use, and again when a call to it finds the connection
    refused or broken (then the call is retried once if the primary moved), when it answers
    READONLY (a demoted primary; the write was not applied, so it is retried), and on the call
    after a timeout.
    """

    def __init__(self, config: Config) -> None:
        super().__init__(None, (), config.read_from_replicas)
        self.read_from_replicas = config.read_from_replicas
        self._config = config
        self._service = config.service_name or ""
        self._sentinels = [
            _new_client(
                config,
                f"redis://{host}:{port}",
                username=config.sentinel_username,
                password=config.sentinel_password,
            )
            for host, port in config.sentinels
        ]
        self._learnt_at = -1.0
        self._suspect = True  # nothing learnt yet
        self._last_error = "not asked yet"

    def __repr__(self) -> str:
        return f"<redoxide SentinelRouter {self._service}>"

    # -- discovery

    def _discover(self) -> Plan:
        """Ask the sentinels, in order, for the primary (and replicas); switch to them."""
        errors = []
        deadline = time.monotonic() + _discovery_budget(self._config)
        sentinels = list(self._sentinels)
        for sentinel in sentinels:
            if time.monotonic() > deadline:
                errors.append("out of time")
                break
            ask = ("SENTINEL", "get-master-addr-by-name", self._service)
            try:
                addr = yield sentinel.execute, (ask,)
                replicas = []
                if addr and self.read_from_replicas:
                    replicas = yield sentinel.execute, (("SENTINEL", "replicas", self._service),)
            except CacheError as exc:
                errors.append(f"{sentinel.address}: {type(exc).__name__}")
                continue
            if not addr:
                errors.append(f"{sentinel.address}: does not know {self._service!r}")
                continue
            self._adopt(addr, replicas)
            # The sentinel that answered is asked first next time (one assignment: other
            # threads may be reading the list).
            self._sentinels = [sentinel] + [s for s in sentinels if s is not sentinel]
            return self.primary
        self._learnt_at = time.monotonic()
        self._last_error = (
            f"no sentinel could name the primary of {self._service!r} ({'; '.join(errors)})"
        )
        raise ConnectionInterrupted(self._last_error)

    def _adopt(self, addr: list[bytes], replicas: list[Any]) -> None:
        config = self._config
        host, port = addr[0].decode(), int(addr[1])
        primary = node_client(config, host, port, db=config.db)
        found = []
        for entry in replicas or ():
            fields = dict(zip(entry[::2], entry[1::2], strict=False))
            flags = fields.get(b"flags", b"").split(b",")
            if any(f in flags for f in (b"s_down", b"o_down", b"disconnected")):
                continue
            if fields.get(b"master-link-status", b"ok") != b"ok":
                continue
            found.append(
                node_client(config, fields[b"ip"].decode(), int(fields[b"port"]), db=config.db)
            )
        self.primary, self.replicas = primary, found
        self._learnt_at = time.monotonic()
        self._suspect = False

    def _fresh(self) -> bool:
        return time.monotonic() - self._learnt_at < MIN_REFRESH_INTERVAL

    def _stale(self) -> bool:
        return self.primary is None or (self._suspect and not self._fresh())

    def _not_fresh(self) -> bool:
        return self.primary is None or not self._fresh()

    def _known_primary(self) -> Any:
        if self.primary is None:
            raise ConnectionInterrupted(self._last_error)
        return self.primary

    def _primary_now(self) -> Any:
        if self.primary is None or self._suspect:
            self._flight.run(self._discover, self._stale)
        return self._known_primary()

    def _relearn(self) -> Any:
        self._flight.run(self._discover, self._not_fresh)
        return self._known_primary()

    async def _aprimary_now(self, bridge: Any) -> Any:
        if self._stale():
            await self._flight.arun(self._discover, self._stale, bridge)
        return self._known_primary()

    async def _arelearn(self, bridge: Any) -> Any:
        await self._flight.arun(self._discover, self._not_fresh, bridge)
        return self._known_primary()

    # -- calls to the primary

    def _write(self, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        if bridge is not None:
            return self._awrite(name, args, bridge)
        primary = self._primary_now()
        try:
            return getattr(primary, name)(*args)
        except ConnectionInterrupted:
            if self._relearn() is primary:
                raise
        except CacheTimeout:
            self._suspect = True
            raise
        except ResponseError as exc:
            if "READONLY" not in str(exc).upper() or self._relearn() is primary:
                raise
        return getattr(self.primary, name)(*args)

    async def _awrite(self, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        primary = await self._aprimary_now(bridge)
        try:
            return await getattr(primary, name)(*args, bridge)
        except ConnectionInterrupted:
            if await self._arelearn(bridge) is primary:
                raise
        except CacheTimeout:
            self._suspect = True
            raise
        except ResponseError as exc:
            if "READONLY" not in str(exc).upper() or await self._arelearn(bridge) is primary:
                raise
        return await getattr(self.primary, name)(*args, bridge)

    def _read(self, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        if self.primary is None or self._suspect:
            return self._write(name, args, bridge)
        return super()._read(name, args, bridge)


# -- cluster -----------------------------------------------------------------------------------

# Commands whose every argument is a key, split by slot, their integer replies summed.
_SUMMED = frozenset({"DEL", "UNLINK", "EXISTS", "TOUCH"})
# Keyless commands that concern every primary's data, and how their replies combine.
_EVERY_PRIMARY = frozenset({"FLUSHDB", "FLUSHALL", "SCRIPT", "FUNCTION", "DBSIZE", "KEYS"})
# Keyless commands answered by any node.
_KEYLESS = frozenset(
    {
        "PING", "INFO", "TIME", "ECHO", "CLIENT", "CONFIG", "CLUSTER", "COMMAND", "SCAN",
        "RANDOMKEY", "LASTSAVE", "SLOWLOG", "LATENCY", "ACL", "DEBUG", "WAIT", "ASKING",
        "READONLY", "READWRITE", "HELLO", "AUTH", "SELECT", "ROLE", "MODULE", "SAVE", "BGSAVE",
    }
)  # fmt: skip
# Commands whose key is the third word (after a subcommand).
_KEY_THIRD = frozenset({"OBJECT", "MEMORY", "XINFO"})
_SCRIPTS = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})
_STREAM_READS = frozenset({"XREAD", "XREADGROUP"})
# Replies after which a command is sent again (after a pause and a fresh slot table): the
# cluster is mid-change, or the node was a primary that has just been demoted.
_AGAIN = ("TRYAGAIN", "CLUSTERDOWN", "READONLY")


def _combine_for(name: str) -> Callable[[list[Any]], Any]:
    if name == "DBSIZE":
        return _sum
    if name == "KEYS":
        return _concat
    return _first


class _Split:
    """One command of a caller's pipeline, cut into several parts, and how to rejoin them."""

    __slots__ = ("combine", "count")

    def __init__(self, count: int, combine: Callable[[list[Any]], Any]) -> None:
        self.count = count
        self.combine = combine


def _sum(replies: list[Any]) -> Any:
    return sum(replies)


def _first(replies: list[Any]) -> Any:
    return replies[0]


def _concat(replies: list[Any]) -> Any:
    return [item for reply in replies for item in reply]


def _check(args: Sequence[Any]) -> str:
    if not args:
        raise ValueError("a command needs at least its name")
    return _name(args[0])


# One short hash tag per slot, for companion keys of keys whose own braces defeat tagging.
_slot_tags: list[str] = []


def slot_tag(slot: int) -> str:
    """A short string that hashes to `slot` (`{tag}` puts any key name in that slot)."""
    if not _slot_tags:
        table = [""] * 16384
        left, start = 16384, 0
        while left:
            candidates = [str(i) for i in range(start, start + 65536)]
            for candidate, found in zip(candidates, key_slots(candidates), strict=True):
                if not table[found]:
                    table[found] = candidate
                    left -= 1
            start += 65536
        _slot_tags[:] = table
    return _slot_tags[slot]


class ClusterRouter:
    """Redis / Valkey Cluster: keys routed by hash slot to the node serving it.

    The slot table is learnt from CLUSTER SLOTS on first use and again after a MOVED reply, a
    connection failure, or a timeout. Multi-key calls are cut into single-slot parts, sent to
    every node before any reply is awaited (sync too), and only the parts that were
    redirected are sent again: ASK parts with ASKING to the importing node, MOVED parts to the
    new owner, TRYAGAIN / CLUSTERDOWN parts after a pause.
    """

    def __init__(self, config: Config) -> None:
        self._config = config
        self._seeds: list[tuple[str, int]] = []
        for url in config.servers:
            parts = urlsplit(url)
            self._seeds.append((parts.hostname or "127.0.0.1", parts.port or 6379))
        self._table: list[Any] | None = None
        self._replica_table: list[list[Any]] = []
        self._primaries: list[Any] = []
        self._learnt_at = -1.0
        self._suspect = False
        self._failed_at: dict[tuple[str, int], float] = {}  # nodes that failed discovery
        self._last_error = "not asked yet"
        self._flight = _Flight()
        self._turn = itertools.count()
        self._down: dict[int, float] = {}
        _routers.add(self)

    def __repr__(self) -> str:
        return f"<redoxide ClusterRouter {len(self._primaries)} primaries>"

    # -- the slot table

    def _discover(self) -> Plan:
        config = self._config
        candidates: list[tuple[str, int]] = []
        for client in self._primaries:
            host, _, port = client.address.rpartition(":")
            candidates.append((host.strip("[]"), int(port)))
        candidates += [seed for seed in self._seeds if seed not in candidates]
        # Nodes that failed lately are asked last: a stalled node must not cost every
        # discovery its timeout.
        candidates.sort(key=lambda c: self._failed_at.get(c, 0.0))
        errors = []
        deadline = time.monotonic() + _discovery_budget(config)
        for host, port in candidates:
            if time.monotonic() > deadline:
                errors.append("out of time")
                break
            try:
                reply = yield node_client(config, host, port).execute, (("CLUSTER", "SLOTS"),)
            except CacheError as exc:
                self._failed_at[(host, port)] = time.monotonic()
                errors.append(f"{host}:{port}: {type(exc).__name__}")
                continue
            self._failed_at.pop((host, port), None)
            if reply:
                self._adopt(reply, host)
                return self._table
            errors.append(f"{host}:{port}: no slots assigned")
        self._learnt_at = time.monotonic()
        self._last_error = f"no cluster node could describe the cluster ({'; '.join(errors)})"
        raise ConnectionInterrupted(self._last_error)

    def _adopt(self, reply: list[Any], asked_host: str) -> None:
        config = self._config
        table: list[Any] = [None] * 16384
        replica_table: list[list[Any]] = []
        if config.read_from_replicas:
            replica_table = [[] for _ in range(16384)]
        primaries: dict[int, Any] = {}

        def node(entry: list[Any], readonly: bool) -> Any:
            host = entry[0].decode() if isinstance(entry[0], bytes) else str(entry[0])
            if host in ("", "?"):
                host = asked_host
            return node_client(config, host, int(entry[1]), readonly=readonly)

        for item in reply:
            start, end, primary_entry = int(item[0]), int(item[1]), item[2]
            primary = node(primary_entry, False)
            primaries[id(primary)] = primary
            table[start : end + 1] = [primary] * (end - start + 1)
            if config.read_from_replicas:
                replicas = [node(entry, True) for entry in item[3:]]
                for slot in range(start, end + 1):
                    replica_table[slot] = replicas
        # A slot no node serves (a cluster missing a shard) goes to any node: its MOVED or
        # CLUSTERDOWN reply then says what is wrong.
        fallback = next(iter(primaries.values()))
        self._table = [n if n is not None else fallback for n in table]
        self._replica_table = replica_table
        self._primaries = list(primaries.values())
        self._learnt_at = time.monotonic()
        self._suspect = False

    def _fresh(self) -> bool:
        return time.monotonic() - self._learnt_at < MIN_REFRESH_INTERVAL

    def _failed(self, node: Any) -> None:
        """A node timed out or dropped a call: mark the table for re-learning, and ask that
        node last when re-learning it."""
        self._suspect = True
        host, _, port = node.address.rpartition(":")
        if port.isdigit():
            self._failed_at[(host.strip("[]"), int(port))] = time.monotonic()

    def _needs_table(self) -> bool:
        return self._table is None or (self._suspect and not self._fresh())

    def _not_fresh(self) -> bool:
        return self._table is None or not self._fresh()

    def _known_table(self) -> list[Any]:
        table = self._table
        if table is None:
            raise ConnectionInterrupted(self._last_error)
        return table

    def _relearn(self) -> None:
        self._flight.run(self._discover, self._not_fresh)

    async def _arelearn(self, bridge: Any) -> None:
        await self._flight.arun(self._discover, self._not_fresh, bridge)

    def _table_now(self) -> list[Any]:
        if self._needs_table():
            self._flight.run(self._discover, self._needs_table)
        return self._known_table()

    async def _atable_now(self, bridge: Any) -> list[Any]:
        if self._needs_table():
            await self._flight.arun(self._discover, self._needs_table, bridge)
        return self._known_table()

    def _scan_stale(self) -> bool:
        # A key scan is long anyway: look at the cluster again unless the table is recent.
        return self._table is None or time.monotonic() - self._learnt_at > SCAN_TABLE_AGE

    def scan_nodes(self, bridge: Any = None) -> Any:
        """Every primary (for SCAN and the like), with a recent slot table."""
        if bridge is not None:
            return self._ascan_nodes(bridge)
        if self._scan_stale() or self._suspect:
            self._flight.run(self._discover, self._scan_stale)
        self._known_table()
        return list(self._primaries)

    async def _ascan_nodes(self, bridge: Any) -> list[Any]:
        if self._scan_stale() or self._suspect:
            await self._flight.arun(self._discover, self._scan_stale, bridge)
        self._known_table()
        return list(self._primaries)

    # -- routing one command

    def _slot_of(self, args: Sequence[Any]) -> int | None:
        """The slot a command must run in, or None for a keyless command."""
        name = _check(args)
        if name in _SCRIPTS:
            try:
                numkeys = int(args[2])
            except (IndexError, TypeError, ValueError):
                return None  # the server will say what is wrong
            return key_slot(_key_arg(args[3])) if numkeys > 0 and len(args) > 3 else None
        if name in _KEYLESS or len(args) < 2:
            return None
        if name in _KEY_THIRD:
            return key_slot(_key_arg(args[2])) if len(args) > 2 else None
        if name in _STREAM_READS:
            words = [_name(a) for a in args]
            if "STREAMS" in words and words.index("STREAMS") + 1 < len(args):
                return key_slot(_key_arg(args[words.index("STREAMS") + 1]))
            return None
        return key_slot(_key_arg(args[1]))

    def _redirect(self, exc: ResponseError, node: Any) -> tuple[str, Any]:
        """Classify an error reply: ("moved"|"ask", target node), ("again", None) or
        ("final", None)."""
        text = str(exc)
        found = _REDIRECT.search(text)
        if found:
            host, _, port = found.group(3).rpartition(":")
            host = host.strip("[]")
            if host in ("", "?"):
                host = node.address.rpartition(":")[0].strip("[]")
            target = node_client(self._config, host, int(port))
            if found.group(1).upper() == "ASK":
                return "ask", target
            # The slot moved: use the new owner now, re-learn the whole table soon.
            if self._table is not None:
                self._table[int(found.group(2))] = target
            self._suspect = True
            return "moved", target
        upper = text.upper()
        if any(word in upper for word in _AGAIN):
            self._suspect = True
            return "again", None
        return "final", None

    def _call(self, slot: int | None, name: str, args: tuple[Any, ...]) -> Any:
        """Run one single-slot call (blocking); a failure goes to `_recovery`."""
        table = self._table_now() if self._table is None or self._suspect else self._table
        node = table[slot] if slot is not None else self._primaries[0]
        try:
            return getattr(node, name)(*args)
        except CacheError as exc:
            return self._run_parts(self._recovery(exc, slot, node, name, args))

    async def _acall(self, slot: int | None, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        if self._table is None or self._suspect:
            table = await self._atable_now(bridge)
        else:
            table = self._table
        node = table[slot] if slot is not None else self._primaries[0]
        try:
            return await getattr(node, name)(*args, bridge)
        except CacheError as exc:
            return await self._arun_parts(self._recovery(exc, slot, node, name, args), bridge)

    def _recovery(
        self, exc: CacheError, slot: int | None, node: Any, name: str, args: tuple[Any, ...]
    ) -> PartsPlan:
        """After a single-slot call failed on `node`: follow MOVED / ASK, retry TRYAGAIN and
        the like after a pause, retry a lost connection only if the slot found a new home;
        raise a timeout or any other error. Shared by the blocking and the async call."""
        for attempt in range(1, MAX_REDIRECTS + 2):
            if isinstance(exc, CacheTimeout):
                self._failed(node)
                raise exc
            if isinstance(exc, ResponseError):
                kind, target = self._redirect(exc, node)
                if kind == "final" or attempt > MAX_REDIRECTS:
                    raise exc
            elif isinstance(exc, ConnectionInterrupted):
                # The node is gone: learn the table again; retry if the slot has a new home.
                self._failed(node)
                yield ("relearn",)
                target = self._node_for(slot)
                if target is node or attempt > MAX_REDIRECTS:
                    raise exc
                kind = "moved"
            else:
                raise exc
            if kind == "ask":
                asking = (("ASKING",), _as_command(name, args))
                replies = yield ("call", target, "pipeline", (asking,))
                if isinstance(replies, CacheError):
                    raise replies
                return _asking(replies)
            if kind == "again":
                yield ("pause",)
                yield ("relearn",)
                target = self._node_for(slot)
            node = target
            outcome = yield ("call", node, name, args)
            if not isinstance(outcome, CacheError):
                return outcome
            exc = outcome
        raise AssertionError("unreachable")

    def _route(self, slot: int | None, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        if bridge is None:
            return self._call(slot, name, args)
        return self._acall(slot, name, args, bridge)

    # -- reads from replicas

    def _replica_for(self, slot: int) -> Any | None:
        if not self._config.read_from_replicas or self._table is None or self._suspect:
            return None
        replicas = self._replica_table[slot]
        if not replicas:
            return None
        replica = replicas[next(self._turn) % len(replicas)]
        until = self._down.get(id(replica))
        if until is not None:
            if until > time.monotonic():
                return None
            self._down.pop(id(replica), None)
        return replica

    def _read(self, slot: int, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        replica = self._replica_for(slot)
        if replica is None:
            return self._route(slot, name, args, bridge)
        if bridge is not None:
            return self._aread(replica, slot, name, args, bridge)
        try:
            return getattr(replica, name)(*args)
        except CacheError as exc:
            self._down[id(replica)] = time.monotonic() + REPLICA_DOWN_SECONDS
            if isinstance(exc, CacheTimeout):
                raise
        return self._call(slot, name, args)

    async def _aread(
        self, replica: Any, slot: int, name: str, args: tuple[Any, ...], bridge: Any
    ) -> Any:
        try:
            return await getattr(replica, name)(*args, bridge)
        except CacheError as exc:
            self._down[id(replica)] = time.monotonic() + REPLICA_DOWN_SECONDS
            if isinstance(exc, CacheTimeout):
                raise
        return await self._acall(slot, name, args, bridge)

    # -- calls cut into single-slot parts

    def _node_for(self, target: Any) -> Any:
        if target is None:
            return self._primaries[0]
        if isinstance(target, int):
            return self._known_table()[target]
        if target[0] == "replica":
            # A replica of the slot that answers, else its primary.
            return self._replica_for(target[1]) or self._known_table()[target[1]]
        # ("primary", k): the k-th primary of the current table (for FLUSHDB and the like,
        # which a failover hands to the promoted replica in the same place).
        return self._primaries[target[1] % len(self._primaries)]

    def _parts(self, parts: list[tuple[Any, ...]], targets: list[Any]) -> PartsPlan:
        """Run single-slot commands wherever they belong; return their replies in order (an
        error reply as a ResponseError instance). A step is ("send", [(node, commands)]) ->
        one reply list or exception per node, ("relearn",) or ("pause",)."""
        yield ("ensure",)
        replies: list[Any] = [None] * len(parts)
        todo = list(range(len(parts)))
        asking: dict[int, Any] = {}
        last_error: dict[int, ResponseError] = {}
        for attempt in range(MAX_REDIRECTS + 1):
            groups: dict[int, tuple[Any, list[int], list[tuple[Any, ...]]]] = {}
            for i in todo:
                node = asking.get(i) or self._node_for(targets[i])
                group = groups.get(id(node))
                if group is None:
                    group = groups[id(node)] = (node, [], [])
                group[1].append(i)
                if i in asking:
                    group[2].append(("ASKING",))
                group[2].append(parts[i])
            outcomes = yield ("send", [(node, cmds) for node, _, cmds in groups.values()])
            retry: list[int] = []
            lost: list[tuple[int, Any, BaseException]] = []
            pause = False
            for (node, positions, _), outcome in zip(groups.values(), outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    self._failed(node)
                    if any(
                        isinstance(targets[i], tuple) and targets[i][0] == "replica"
                        for i in positions
                    ):
                        self._down[id(node)] = time.monotonic() + REPLICA_DOWN_SECONDS
                    if isinstance(outcome, CacheTimeout):
                        raise outcome
                    # The connection broke: whether these parts ran is unknown; they are sent
                    # again only if re-learning the table gives them another node.
                    lost += [(i, node, outcome) for i in positions]
                    continue
                at = 0
                for i in positions:
                    if i in asking:
                        at += 1  # ASKING's own reply
                    reply = outcome[at]
                    at += 1
                    if isinstance(reply, ResponseError):
                        last_error[i] = reply
                        kind, target = self._redirect(reply, node)
                        if kind == "ask":
                            asking[i] = target
                            retry.append(i)
                            continue
                        if kind in ("moved", "again"):
                            asking.pop(i, None)
                            pause = pause or kind == "again"
                            retry.append(i)
                            continue
                    replies[i] = reply
                    asking.pop(i, None)
            if not retry and not lost:
                return replies
            if attempt == MAX_REDIRECTS:
                break
            if pause:
                yield ("pause",)
            if lost or pause:
                yield ("relearn",)
            for i, node, error in lost:
                if self._node_for(targets[i]) is node:
                    raise error
                retry.append(i)
            todo = sorted(retry)
        for i in todo:
            # Still redirected after every retry: the last error reply is the answer.
            replies[i] = last_error.get(i) or ResponseError(f"no node ran {parts[i][0]!r}")
        return replies

    def _run_parts(self, plan: PartsPlan) -> Any:
        """Drive a cluster plan (_parts, _recovery) with blocking calls."""
        try:
            step: Any = next(plan)
            while True:
                kind = step[0]
                if kind == "send":
                    calls = step[1]
                    if len(calls) == 1:
                        node, commands = calls[0]
                        try:
                            result: Any = [node.pipeline_results(commands)]
                        except CacheError as exc:
                            result = [exc]
                    else:
                        result = fanout(calls)
                elif kind == "call":
                    try:
                        result = getattr(step[1], step[2])(*step[3])
                    except CacheError as exc:
                        result = exc
                elif kind == "ensure":
                    result = self._table_now()
                elif kind == "relearn":
                    self._relearn()
                    result = None
                else:
                    time.sleep(RETRY_PAUSE)
                    result = None
                step = plan.send(result)
        except StopIteration as stop:
            return stop.value

    async def _arun_parts(self, plan: PartsPlan, bridge: Any) -> Any:
        """Drive a cluster plan with awaits: every node's request is sent before any wait."""
        try:
            step: Any = next(plan)
            while True:
                kind = step[0]
                if kind == "send":
                    pending = [node.pipeline_results(cmds, bridge) for node, cmds in step[1]]
                    _together(pending)
                    result: Any = []
                    for waiting in pending:
                        try:
                            result.append(await waiting)
                        except CacheError as exc:
                            result.append(exc)
                elif kind == "call":
                    try:
                        result = await getattr(step[1], step[2])(*step[3], bridge)
                    except CacheError as exc:
                        result = exc
                elif kind == "ensure":
                    result = await self._atable_now(bridge)
                elif kind == "relearn":
                    await self._arelearn(bridge)
                    result = None
                else:
                    await asyncio.sleep(RETRY_PAUSE)
                    result = None
                step = plan.send(result)
        except StopIteration as stop:
            return stop.value

    def _drive_parts(self, plan: PartsPlan, finish: Callable[[list[Any]], Any], bridge: Any) -> Any:
        if bridge is None:
            return finish(self._run_parts(plan))
        return _then(self._arun_parts(plan, bridge), finish)

    # -- the Client interface

    def get(self, key: str, bridge: Any = None) -> Any:
        slot = key_slot(key)
        if self._config.read_from_replicas:
            return self._read(slot, "get", (key,), bridge)
        if bridge is None:
            return self._call(slot, "get", (key,))
        return self._acall(slot, "get", (key,), bridge)

    def set(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: Any = None,
    ) -> Any:
        return self._route(key_slot(key), "set", (key, value, ttl_ms, nx, xx), bridge)

    def mget(self, keys: Iterable[Any], bridge: Any = None) -> Any:
        keys = [_key_arg(k) for k in keys]
        slots = key_slots(keys)
        if len(set(slots)) <= 1:
            slot = slots[0] if slots else None
            if self._config.read_from_replicas and slot is not None:
                return self._read(slot, "mget", (keys,), bridge)
            return self._route(slot, "mget", (keys,), bridge)
        # One MGET per slot (MGET semantics: nil for a key of another type).
        by_slot: dict[int, list[int]] = {}
        for i, slot in enumerate(slots):
            by_slot.setdefault(slot, []).append(i)
        parts = [("MGET", *[keys[i] for i in positions]) for positions in by_slot.values()]
        table = self._table
        settled = table is not None and not self._suspect
        if settled and not self._config.read_from_replicas:
            if bridge is not None:
                return self._amget_fast(table, keys, by_slot, parts, bridge)
            fast = self._mget_fast(table, keys, by_slot, parts)  # type: ignore[arg-type]
            if fast is not None:
                return fast
        targets: list[Any] = list(by_slot)
        if self._config.read_from_replicas:
            targets = [("replica", slot) for slot in by_slot]
        plan = self._parts(parts, targets)

        def finish(replies: list[Any]) -> list[Any]:
            values: list[Any] = [None] * len(keys)
            for positions, reply in zip(by_slot.values(), replies, strict=True):
                if isinstance(reply, ResponseError):
                    raise reply
                for i, value in zip(positions, reply, strict=True):
                    values[i] = value
            return values

        return self._drive_parts(plan, finish, bridge)

    def _mget_fast(
        self,
        table: list[Any],
        keys: list[Any],
        by_slot: dict[int, list[int]],
        parts: list[tuple[Any, ...]],
    ) -> list[Any] | None:
        """get_many on a settled cluster, blocking: one fan-out, no plan. None if anything
        was off (a redirect, an error): the caller then takes the general path, which is safe
        to repeat for reads."""
        groups = _by_node(table, by_slot, parts)
        outcomes = fanout([(node, commands) for node, _, commands in groups.values()])
        values: list[Any] = [None] * len(keys)
        for (node, slots, _), outcome in zip(groups.values(), outcomes, strict=True):
            if isinstance(outcome, CacheTimeout):
                self._failed(node)
                raise outcome  # the time is spent: no second try
            if not isinstance(outcome, list):
                return None
            for slot, reply in zip(slots, outcome, strict=True):
                if not isinstance(reply, list):
                    return None
                for i, value in zip(by_slot[slot], reply, strict=True):
                    values[i] = value
        return values

    async def _amget_fast(
        self,
        table: Any,
        keys: list[Any],
        by_slot: dict[int, list[int]],
        parts: list[tuple[Any, ...]],
        bridge: Any,
    ) -> list[Any]:
        """_mget_fast with awaits (every node's request sent before the first wait); anything
        off and the general path runs the whole read again."""
        groups = _by_node(table, by_slot, parts)
        pending = [node.pipeline_results(cmds, bridge) for node, _, cmds in groups.values()]
        _together(pending)
        values: list[Any] = [None] * len(keys)
        clean = True
        timed_out: CacheTimeout | None = None
        for (node, slots, _), waiting in zip(groups.values(), pending, strict=True):
            try:
                outcome = await waiting
            except CacheTimeout as exc:
                self._failed(node)
                timed_out = timed_out or exc
                continue
            except CacheError:
                clean = False
                continue
            for slot, reply in zip(slots, outcome, strict=True):
                if not isinstance(reply, list):
                    clean = False
                    break
                for i, value in zip(by_slot[slot], reply, strict=True):
                    values[i] = value
        if timed_out is not None:
            raise timed_out  # the time is spent: no second try
        if clean:
            return values
        plan = self._parts(parts, list(by_slot))
        replies = await self._arun_parts(plan, bridge)
        for positions, reply in zip(by_slot.values(), replies, strict=True):
            if isinstance(reply, ResponseError):
                raise reply
            for i, value in zip(positions, reply, strict=True):
                values[i] = value
        return values

    def set_many(
        self, keys: Any, values: Any, ttl_ms: int | None = None, bridge: Any = None
    ) -> Any:
        commands: list[tuple[Any, ...]] = []
        for key, value in zip(keys, values, strict=True):
            if ttl_ms is None:
                commands.append(("SET", key, value))
            else:
                commands.append(("SET", key, value, "PX", max(1, ttl_ms)))
        return self.pipeline(commands, bridge)

    def execute(self, args: Sequence[Any], bridge: Any = None) -> Any:
        name = _check(args)
        if (name in _SUMMED and len(args) > 2) or name in _EVERY_PRIMARY:
            if bridge is None:
                return self.pipeline([args])[0]
            return _then(self.pipeline([args], bridge), _only)
        if name == "MGET" and len(args) > 1:
            return self.mget(args[1:], bridge)
        return self._route(self._slot_of(args), "execute", (args,), bridge)

    def _pipeline_plan(self, commands: list[Sequence[Any]]) -> tuple[Plan, Callable[..., Any]]:
        """Cut a pipeline into single-slot parts; return the plan and how to rejoin."""
        parts: list[tuple[Any, ...]] = []
        targets: list[Any] = []
        splits: list[_Split | None] = []
        primaries: list[Any] | None = None
        for command in commands:
            name = _check(command)
            if name in _SUMMED and len(command) > 2:
                keys = command[1:]
                for key in keys:
                    targets.append(key_slot(_key_arg(key)))
                    parts.append((command[0], key))
                splits.append(_Split(len(keys), _sum))
            elif name in _EVERY_PRIMARY:
                if primaries is None:
                    primaries = self._primaries if self._fresh() else self.scan_nodes()
                for k in range(len(primaries)):
                    targets.append(("primary", k))
                    parts.append(tuple(command))
                splits.append(_Split(len(primaries), _combine_for(name)))
            else:
                targets.append(self._slot_of(command))
                parts.append(tuple(command))
                splits.append(None)

        def rejoin(replies: list[Any]) -> list[Any]:
            # As on one server, an error reply raises (the first one).
            for reply in replies:
                if isinstance(reply, ResponseError):
                    raise reply
            out, at = [], 0
            for split in splits:
                if split is None:
                    out.append(replies[at])
                    at += 1
                else:
                    out.append(split.combine(replies[at : at + split.count]))
                    at += split.count
            return out

        return self._parts(parts, targets), rejoin

    def pipeline(self, commands: Iterable[Sequence[Any]], bridge: Any = None) -> Any:
        commands = list(commands)
        if not commands:
            return [] if bridge is None else _done([])
        if any(_check(c) in _EVERY_PRIMARY for c in commands) and bridge is not None:
            return self._apipeline_every(commands, bridge)
        plan, rejoin = self._pipeline_plan(commands)
        return self._drive_parts(plan, rejoin, bridge)

    async def _apipeline_every(self, commands: list[Sequence[Any]], bridge: Any) -> Any:
        await self._ascan_nodes(bridge)  # the primaries, learnt without blocking the loop
        plan, rejoin = self._pipeline_plan(commands)
        return rejoin(await self._arun_parts(plan, bridge))


def _by_node(
    table: list[Any], by_slot: dict[int, list[int]], parts: list[tuple[Any, ...]]
) -> dict[int, tuple[Any, list[int], list[tuple[Any, ...]]]]:
    """Group one part per slot by the node serving the slot: {id(node): (node, slots, parts)}."""
    groups: dict[int, tuple[Any, list[int], list[tuple[Any, ...]]]] = {}
    for slot, part in zip(by_slot, parts, strict=True):
        node = table[slot]
        group = groups.get(id(node))
        if group is None:
            group = groups[id(node)] = (node, [], [])
        group[1].append(slot)
        group[2].append(part)
    return groups


def _only(replies: list[Any]) -> Any:
    return replies[0]


def _asking(replies: list[Any]) -> Any:
    return replies[1]


async def _then(waiting: Any, finish: Callable[[Any], Any]) -> Any:
    return finish(await waiting)


def _key_arg(arg: Any) -> Any:
    if isinstance(arg, (str, bytes)):
        return arg
    return str(arg)


def _as_command(name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A router call as one command (for ASKING), when it is a single command."""
    if name == "execute":
        return tuple(args[0])
    if name == "get":
        return ("GET", args[0])
    if name == "mget":
        return ("MGET", *args[0])
    if name == "set":
        key, value, ttl_ms, nx, xx = args
        command: tuple[Any, ...] = ("SET", key, value)
        if ttl_ms is not None:
            command += ("PX", max(1, ttl_ms))
        if nx:
            command += ("NX",)
        elif xx:
            command += ("XX",)
        return command
    raise ResponseError(f"cannot follow an ASK redirect for {name}")


def _together(pending: list[Any]) -> None:
    """Tell awaitables sent at once by one caller about each other (they may then poll)."""
    if len(pending) > 1:
        for waiting in pending:
            waiting.sent_with(pending)


async def _done(value: Any) -> Any:
    return value
