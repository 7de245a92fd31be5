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
import re
import threading
import time
from collections.abc import Callable, Coroutine, Generator, Iterable, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from redoxide import _redoxide
from redoxide.exceptions import CacheError, CacheTimeout, ConnectionInterrupted, ResponseError
from redoxide.options import Config

__all__ = ["make_client", "scan_targets"]

Client = _redoxide.Client
key_slot = _redoxide.key_slot
key_slots = _redoxide.key_slots
fanout = _redoxide.fanout

# A router's own little plans (topology discovery), driven like cache.py's.
Step = tuple[Callable[..., Any], tuple[Any, ...]]
Plan = Generator[Step, Any, Any]

#: How long a replica that refused a connection is left out of the read rotation.
REPLICA_DOWN_SECONDS = 5.0
#: Redirects followed for one call before giving up (a cluster mid-resharding settles fast).
MAX_REDIRECTS = 5
#: Pause before retrying a TRYAGAIN / CLUSTERDOWN reply.
RETRY_PAUSE = 0.05
#: Topology re-discovery runs at most this often (many callers fail at once in an outage).
MIN_REFRESH_INTERVAL = 0.05

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
    """How long asking nodes (or sentinels) about the topology may take, all of them: one
    slow node's worth, so a call that re-learns the topology stays bounded."""
    return config.connect_timeout + config.socket_timeout


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


def scan_targets(client: Any) -> list[Any]:
    """The clients a key scan must visit: every cluster primary, else the client itself."""
    primaries = getattr(client, "scan_nodes", None)
    return [client] if primaries is None else list(primaries())


def _name(arg: Any) -> str:
    if isinstance(arg, bytes):
        return arg.decode("latin-1").upper()
    return str(arg).upper()


# -- read replicas and Sentinel ----------------------------------------------------------------


class ReplicaRouter:
    """Writes to the primary; get / get_many spread over the replicas that answer."""

    def __init__(self, primary: Any, replicas: Sequence[Any], read_from_replicas: bool) -> None:
        self.primary = primary
        self.replicas = list(replicas)
        self.read_from_replicas = read_from_replicas and bool(self.replicas)
        self._turn = itertools.count()
        self._down: dict[int, float] = {}  # id(replica) -> monotonic time it may be retried

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
        except ConnectionInterrupted:
            # A replica that is down is skipped: the primary answers instead.
            self._mark_down(replica)
            return self._write(name, args, None)
        except CacheTimeout:
            self._mark_down(replica)
            raise

    async def _aread(self, replica: Any, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        try:
            return await getattr(replica, name)(*args, bridge)
        except ConnectionInterrupted:
            self._mark_down(replica)
            return await self._write(name, args, bridge)
        except CacheTimeout:
            self._mark_down(replica)
            raise

    def _write(self, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        if bridge is None:
            return getattr(self.primary, name)(*args)
        return getattr(self.primary, name)(*args, bridge)

    # -- the Client interface

    def get(self, key: str, bridge: Any = None) -> Any:
        return self._read("get", (key,), bridge)

    def mget(self, keys: Iterable[Any], bridge: Any = None) -> Any:
        return self._read("mget", (keys,), bridge)

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
        return self._write("set_many", (keys, values, ttl_ms), bridge)

    def execute(self, args: Sequence[Any], bridge: Any = None) -> Any:
        return self._write("execute", (args,), bridge)

    def pipeline(self, commands: Iterable[Sequence[Any]], bridge: Any = None) -> Any:
        return self._write("pipeline", (commands,), bridge)


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
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<redoxide SentinelRouter {self._service}>"

    # -- discovery

    def _discover(self) -> Plan:
        """Ask the sentinels, in order, for the primary (and replicas); switch to them."""
        errors = []
        deadline = time.monotonic() + _discovery_budget(self._config)
        for sentinel in list(self._sentinels):
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
            # The sentinel that answered is asked first next time.
            if sentinel is not self._sentinels[0]:
                self._sentinels.remove(sentinel)
                self._sentinels.insert(0, sentinel)
            return self.primary
        self._learnt_at = time.monotonic()
        raise ConnectionInterrupted(
            f"no sentinel could name the primary of {self._service!r} ({'; '.join(errors)})"
        )

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

    def _primary_now(self) -> Any:
        if self.primary is None or self._suspect:
            with self._lock:
                if self.primary is None or (self._suspect and not self._fresh()):
                    _drive(self._discover())
        return self.primary

    def _relearn(self) -> Any:
        with self._lock:
            if not self._fresh():
                _drive(self._discover())
        return self.primary

    async def _aprimary_now(self, bridge: Any) -> Any:
        if self.primary is None or (self._suspect and not self._fresh()):
            await _adrive(self._discover(), bridge)
        return self.primary

    async def _arelearn(self, bridge: Any) -> Any:
        if not self._fresh():
            await _adrive(self._discover(), bridge)
        return self.primary

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
# Keyless commands that concern every primary's data.
_EVERY_PRIMARY = frozenset({"FLUSHDB", "FLUSHALL", "SCRIPT"})
# Keyless commands answered by any node.
_KEYLESS = frozenset(
    {
        "PING",
        "INFO",
        "TIME",
        "ECHO",
        "CLIENT",
        "CONFIG",
        "CLUSTER",
        "COMMAND",
        "DBSIZE",
        "KEYS",
        "SCAN",
        "RANDOMKEY",
        "LASTSAVE",
        "MEMORY",
        "SLOWLOG",
        "LATENCY",
        "ACL",
        "DEBUG",
        "WAIT",
    }
)
_SCRIPTS = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})


class _Split:
    """One command of a caller's pipeline, cut into per-node parts."""

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


class ClusterRouter:
    """Redis / Valkey Cluster: keys routed by hash slot to the node serving it.

    The slot table is learnt from CLUSTER SLOTS on first use and again after a MOVED reply, a
    connection failure, or a timeout. Multi-key calls are split by node and sent to every node
    before any reply is awaited (async), so a get_many over many slots costs about one round
    trip; sync calls visit the nodes one after another.
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
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self._down: dict[int, float] = {}

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
        errors = []
        deadline = time.monotonic() + _discovery_budget(config)
        for host, port in candidates:
            if time.monotonic() > deadline:
                errors.append("out of time")
                break
            try:
                reply = yield node_client(config, host, port).execute, (("CLUSTER", "SLOTS"),)
            except CacheError as exc:
                errors.append(f"{host}:{port}: {type(exc).__name__}")
                continue
            if reply:
                self._adopt(reply, host)
                return self._table
            errors.append(f"{host}:{port}: no slots assigned")
        self._learnt_at = time.monotonic()
        raise ConnectionInterrupted(
            f"no cluster node could describe the cluster ({'; '.join(errors)})"
        )

    def _adopt(self, reply: list[Any], asked_host: str) -> None:
        config = self._config
        table: list[Any] = [None] * 16384
        replica_table: list[list[Any]] = (
            [[] for _ in range(16384)] if config.read_from_replicas else []
        )
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

    def _needs_table(self) -> bool:
        return self._table is None or (self._suspect and not self._fresh())

    def _relearn(self) -> None:
        with self._lock:
            if self._table is None or not self._fresh():
                _drive(self._discover())

    async def _arelearn(self, bridge: Any) -> None:
        if self._table is None or not self._fresh():
            await _adrive(self._discover(), bridge)

    def _table_now(self) -> list[Any]:
        if self._needs_table():
            self._relearn()
        assert self._table is not None
        return self._table

    async def _atable_now(self, bridge: Any) -> list[Any]:
        if self._needs_table():
            await self._arelearn(bridge)
        assert self._table is not None
        return self._table

    def scan_nodes(self) -> list[Any]:
        """Every primary (for SCAN, FLUSHDB and the like)."""
        self._table_now()
        return list(self._primaries)

    # -- routing one command

    def _slot_of(self, args: Sequence[Any]) -> int | None:
        """The slot a command must run in, or None for a keyless command."""
        name = _name(args[0])
        if name in _SCRIPTS:
            if len(args) > 3 and int(args[2]) > 0:
                return key_slot(_key_arg(args[3]))
            return None
        if name in _KEYLESS or len(args) < 2:
            return None
        return key_slot(_key_arg(args[1]))

    def _recover(self, exc: CacheError, slot: int | None, node: Any, attempt: int) -> Any:
        """What to do after a failed call: return ("retry", node) or ("ask", node), or raise."""
        if attempt >= MAX_REDIRECTS:
            raise exc
        if isinstance(exc, ResponseError):
            text = str(exc)
            found = _REDIRECT.search(text)
            if found:
                host, _, port = found.group(3).rpartition(":")
                target = node_client(self._config, host.strip("[]"), int(port))
                if found.group(1).upper() == "ASK":
                    return "ask", target
                # The slot moved: use the new owner now, re-learn the whole table soon.
                if self._table is not None:
                    self._table[int(found.group(2))] = target
                self._suspect = True
                return "retry", target
            upper = text.upper()
            if "TRYAGAIN" in upper or "CLUSTERDOWN" in upper:
                self._suspect = True
                return "pause", None
            raise exc
        if isinstance(exc, CacheTimeout):
            self._suspect = True
            raise exc
        # The node is gone: learn the table again; retry only if the slot has a new home.
        self._suspect = True
        return "relearn", node

    def _call(self, slot: int | None, name: str, args: tuple[Any, ...]) -> Any:
        """Run one single-slot call, following redirects (blocking)."""
        table = self._table_now() if self._table is None or self._suspect else self._table
        node = table[slot] if slot is not None else self._primaries[0]
        attempt = 0
        while True:
            try:
                return getattr(node, name)(*args)
            except CacheError as exc:
                action, target = self._recover(exc, slot, node, attempt)
                failure = exc
            attempt += 1
            if action == "ask":
                return target.pipeline((("ASKING",), _as_command(name, args)))[1]
            if action == "pause":
                time.sleep(RETRY_PAUSE)
                self._relearn()
            elif action == "relearn":
                self._relearn()
                fresh = self._table_now()
                target = fresh[slot] if slot is not None else self._primaries[0]
                if target is node:
                    raise failure
            node = target if target is not None else self._table_now()[slot or 0]

    async def _acall(self, slot: int | None, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        if self._table is None or self._suspect:
            table = await self._atable_now(bridge)
        else:
            table = self._table
        node = table[slot] if slot is not None else self._primaries[0]
        attempt = 0
        while True:
            try:
                return await getattr(node, name)(*args, bridge)
            except CacheError as exc:
                action, target = self._recover(exc, slot, node, attempt)
                failure = exc
            attempt += 1
            if action == "ask":
                asking = (("ASKING",), _as_command(name, args))
                return (await target.pipeline(asking, bridge))[1]
            if action == "pause":
                await asyncio.sleep(RETRY_PAUSE)
                await self._arelearn(bridge)
            elif action == "relearn":
                await self._arelearn(bridge)
                fresh = await self._atable_now(bridge)
                target = fresh[slot] if slot is not None else self._primaries[0]
                if target is node:
                    raise failure
            node = target if target is not None else (await self._atable_now(bridge))[slot or 0]

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
            if isinstance(exc, (ConnectionInterrupted, CacheTimeout)):
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
            if isinstance(exc, (ConnectionInterrupted, CacheTimeout)):
                self._down[id(replica)] = time.monotonic() + REPLICA_DOWN_SECONDS
            if isinstance(exc, CacheTimeout):
                raise
            return await self._acall(slot, name, args, bridge)

    # -- fan-out over nodes

    def _groups(self, slots: list[int]) -> dict[int, tuple[Any, list[int]]]:
        """Positions grouped by the node serving their slot: {id(node): (node, [i, ...])}."""
        table = self._table
        assert table is not None
        groups: dict[int, tuple[Any, list[int]]] = {}
        for i, slot in enumerate(slots):
            node = table[slot]
            group = groups.get(id(node))
            if group is None:
                groups[id(node)] = (node, [i])
            else:
                group[1].append(i)
        return groups

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
        keys = list(keys)
        slots = key_slots(keys)
        if len(set(slots)) == 1:
            if self._config.read_from_replicas:
                return self._read(slots[0], "mget", (keys,), bridge)
            return self._route(slots[0], "mget", (keys,), bridge)
        if bridge is not None:
            return self._amget(keys, slots, bridge)
        self._table_now()
        values: list[Any] = [None] * len(keys)
        groups = list(self._groups(slots).values())
        try:
            # Every node's request is sent before any reply is awaited.
            replies = fanout([(node, [("GET", keys[i]) for i in pos]) for node, pos in groups])
            for (_, positions), got in zip(groups, replies, strict=True):
                for i, value in zip(positions, got, strict=True):
                    values[i] = value
            return values
        except CacheError:
            pass
        # A node failed or redirected: per key, with redirects followed.
        return [self._call(slot, "get", (key,)) for key, slot in zip(keys, slots, strict=True)]

    async def _amget(self, keys: list[Any], slots: list[int], bridge: Any) -> list[Any]:
        await self._atable_now(bridge)
        groups = list(self._groups(slots).values())
        # Send to every node before awaiting any reply.
        pending = [node.pipeline([("GET", keys[i]) for i in pos], bridge) for node, pos in groups]
        _together(pending)
        values: list[Any] = [None] * len(keys)
        failed = False
        for (_, positions), waiting in zip(groups, pending, strict=True):
            try:
                got = await waiting
            except CacheError:
                failed = True
                continue
            for i, value in zip(positions, got, strict=True):
                values[i] = value
        if failed:
            return [
                await self._acall(slot, "get", (key,), bridge)
                for key, slot in zip(keys, slots, strict=True)
            ]
        return values

    def set_many(
        self, keys: Any, values: Any, ttl_ms: int | None = None, bridge: Any = None
    ) -> Any:
        keys, values = list(keys), list(values)
        commands: list[tuple[Any, ...]] = []
        for key, value in zip(keys, values, strict=True):
            if ttl_ms is None:
                commands.append(("SET", key, value))
            else:
                commands.append(("SET", key, value, "PX", max(1, ttl_ms)))
        return self.pipeline(commands, bridge)

    def execute(self, args: Sequence[Any], bridge: Any = None) -> Any:
        name = _name(args[0])
        if name in _SUMMED and len(args) > 2:
            if bridge is None:
                return self.pipeline([args])[0]
            return _first_of(self.pipeline([args], bridge))
        if name == "MGET":
            return self.mget(args[1:], bridge)
        if name in _EVERY_PRIMARY or name in ("DBSIZE", "KEYS"):
            return self._every_primary(tuple(args), name, bridge)
        return self._route(self._slot_of(args), "execute", (args,), bridge)

    def _every_primary(self, args: tuple[Any, ...], name: str, bridge: Any) -> Any:
        combine = _sum if name == "DBSIZE" else _concat if name == "KEYS" else _first
        if bridge is not None:
            return self._aevery_primary(args, combine, bridge)
        return combine([got[0] for got in fanout([(n, [args]) for n in self.scan_nodes()])])

    async def _aevery_primary(
        self, args: tuple[Any, ...], combine: Callable[[list[Any]], Any], bridge: Any
    ) -> Any:
        await self._atable_now(bridge)
        pending = [node.execute(args, bridge) for node in self._primaries]
        _together(pending)
        return combine([await waiting for waiting in pending])

    def _plan_pipeline(
        self, commands: list[Sequence[Any]]
    ) -> tuple[list[Any], list[tuple[Any, ...]], list[_Split | None]]:
        """Cut a pipeline into single-slot parts: their slots, the parts, and how to rejoin."""
        part_slots: list[Any] = []
        parts: list[tuple[Any, ...]] = []
        splits: list[_Split | None] = []
        for command in commands:
            name = _name(command[0])
            if name in _SUMMED and len(command) > 2:
                keys = command[1:]
                for key in keys:
                    part_slots.append(key_slot(_key_arg(key)))
                    parts.append((command[0], key))
                splits.append(_Split(len(keys), _sum))
            else:
                part_slots.append(self._slot_of(command))
                parts.append(tuple(command))
                splits.append(None)
        return part_slots, parts, splits

    @staticmethod
    def _rejoin(replies: list[Any], splits: list[_Split | None]) -> list[Any]:
        out, at = [], 0
        for split in splits:
            if split is None:
                out.append(replies[at])
                at += 1
            else:
                out.append(split.combine(replies[at : at + split.count]))
                at += split.count
        return out

    def _node_groups(self, part_slots: list[Any]) -> list[tuple[Any, list[int]]]:
        table = self._table
        assert table is not None
        first = self._primaries[0]
        groups: dict[int, tuple[Any, list[int]]] = {}
        for i, slot in enumerate(part_slots):
            node = first if slot is None else table[slot]
            group = groups.get(id(node))
            if group is None:
                groups[id(node)] = (node, [i])
            else:
                group[1].append(i)
        return list(groups.values())

    def pipeline(self, commands: Iterable[Sequence[Any]], bridge: Any = None) -> Any:
        commands = list(commands)
        if not commands:
            return [] if bridge is None else _done([])
        part_slots, parts, splits = self._plan_pipeline(commands)
        if bridge is not None:
            return self._apipeline(part_slots, parts, splits, bridge)
        for attempt in range(MAX_REDIRECTS + 1):
            self._table_now()
            replies: list[Any] = [None] * len(parts)
            groups = self._node_groups(part_slots)
            try:
                if len(groups) == 1:
                    node, positions = groups[0]
                    got_all = [node.pipeline([parts[i] for i in positions])]
                else:
                    got_all = fanout([(node, [parts[i] for i in pos]) for node, pos in groups])
                for (_, positions), got in zip(groups, got_all, strict=True):
                    for i, reply in zip(positions, got, strict=True):
                        replies[i] = reply
                return self._rejoin(replies, splits)
            except CacheError as exc:
                self._pipeline_failed(exc, attempt)
                self._relearn()
        raise AssertionError("unreachable")

    async def _apipeline(
        self,
        part_slots: list[Any],
        parts: list[tuple[Any, ...]],
        splits: list[_Split | None],
        bridge: Any,
    ) -> list[Any]:
        for attempt in range(MAX_REDIRECTS + 1):
            await self._atable_now(bridge)
            groups = self._node_groups(part_slots)
            pending = [node.pipeline([parts[i] for i in pos], bridge) for node, pos in groups]
            _together(pending)
            replies: list[Any] = [None] * len(parts)
            failure: CacheError | None = None
            for (_, positions), waiting in zip(groups, pending, strict=True):
                try:
                    got = await waiting
                except CacheError as exc:
                    failure = failure or exc
                    continue
                for i, reply in zip(positions, got, strict=True):
                    replies[i] = reply
            if failure is None:
                return self._rejoin(replies, splits)
            self._pipeline_failed(failure, attempt)
            if "TRYAGAIN" in str(failure).upper() or "CLUSTERDOWN" in str(failure).upper():
                await asyncio.sleep(RETRY_PAUSE)
            await self._arelearn(bridge)
        raise AssertionError("unreachable")

    def _pipeline_failed(self, exc: CacheError, attempt: int) -> None:
        """Decide whether a failed fan-out is retried (after re-learning) or raised."""
        if attempt >= MAX_REDIRECTS or isinstance(exc, CacheTimeout):
            self._suspect = True
            raise exc
        if isinstance(exc, ResponseError):
            upper = str(exc).upper()
            retried = ("TRYAGAIN" in upper) or ("CLUSTERDOWN" in upper)
            if _REDIRECT.search(str(exc)) is None and not retried:
                raise exc
        elif attempt >= 1:
            raise exc  # the connection failed again after re-learning: the node is down
        self._suspect = True


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
            waiting.sent_with(len(pending))


async def _done(value: Any) -> Any:
    return value


async def _first_of(replies: Any) -> Any:
    return (await replies)[0]


_Coro = Coroutine[Any, Any, Any]
