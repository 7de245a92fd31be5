"""The near cache (OPTIONS["NEAR_CACHE"]): hot keys served from this process' memory, kept
coherent by the server's client tracking.

``NearClient`` wraps the cache's client (the Rust client or a router) and satisfies
``ClientLike`` itself, so the cache's methods and plans run unchanged over it:

- get / get_many / has_key (EXISTS) look in the Rust store first, and a miss is filled in the
  same call into the core (its token registered *before* the request is sent, and never seen
  by Python): GET and PTTL in one round trip, installed only if no invalidation or flush
  killed the token;
- every other command drops the tracked keys it names before it is sent and again once it
  is answered, in every near cache of the process (so this process reads its own writes
  even against a concurrent fill); FLUSHDB / FLUSHALL / SWAPDB drop everything;
- the store and its tracking connections live in Rust (src/near/): invalidations are applied
  there without the GIL, and hits are refused while the tracking connections are silent;
- on one server, get / get_many / execute / set / set_many are the store's own methods
  (`_bind`): lookups and fill, or a write and its drops (the process' other near caches are
  the store's peers, and drop there too); on a router, get, get_many and set are the store's
  ``get_routed`` / ``mget_routed`` / ``set_routed`` (the router's `homes()` name each key's
  primary, and the router reads or writes what cannot be placed or meets a moved slot:
  `_or_router`, `_finish_many`, `_set_routed`).

Fills read the tracked primary (a lagging replica could hand back a value older than an
invalidation already sent), one protocol in the core (``NearCache.fill`` / ``fill_keys``: one
round trip per primary); this process' writes of kept keys go through the tracking connection
of the primary that owns them (a cluster's set_many over several slots, each slot's part
through its primary's: ``_set_parts``), and the value written is kept.
"""

from __future__ import annotations

import functools
import secrets
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar, overload

from redoxide import _redoxide, plans
from redoxide._near_options import NearCacheConfig, marker_name
from redoxide._near_parts import (
    ROUTER_RECOVERS,
    NearReads,
    answered,
    by_slot,
    forgets,
    placed,
    tracked_prefixes,
    unsent,
)
from redoxide._protocols import ClientLike, Command, Topology, owner, primaries, spans_primaries
from redoxide._redoxide import Bridge, Client
from redoxide._registry import Registry, track
from redoxide.exceptions import CacheError
from redoxide.plans import Plan
from redoxide.topology.calls import Call, Pipeline, PipelineResults, Set, SetMany
from redoxide.topology.parts import together

__all__ = ["NearClient", "near_client", "tracked_prefixes"]

R = TypeVar("R")

#: Stores a forked child replaced: never dropped (their tasks belong to the parent's runtime).
_left_behind: list[Any] = []

#: Every near cache of the process (they live as long as it does: see `near_client`).
_every: tuple[NearClient, ...] = ()
_joining = threading.Lock()  # makes each append to _every one read-and-write


async def _or_router(again: Callable[..., Any], pending: Awaitable[R], *args: Any) -> R:
    """An awaited call sent to a key's primary by the store, or `again(*args)` (the router's)
    if it meets what a router recovers from (a moved slot, a primary changed or read-only)."""
    try:
        return await pending
    except ROUTER_RECOVERS:
        reply: R = await again(*args)
        return reply


class NearClient(Topology):
    """A ClientLike that keeps values of tracked keys in process memory."""

    def __init__(
        self,
        inner: Any,
        settings: NearCacheConfig,
        prefixes: tuple[str, ...],
        logger: str,
        marker: Callable[[str], str] | None = None,
    ) -> None:
        self._inner = inner
        self._settings = settings
        self._prefixes = prefixes
        self._logger = logger
        #: Names a store's database marker from a random token (None: the core's own name).
        self._marker_of = marker
        self._nodes: tuple[Any, ...] | None = None
        # A cluster has no SWAPDB (and a marker key would belong to some other node's slots).
        self._check_db = not spans_primaries(inner)
        self._store = self._new_store()
        #: One server: its nodes never change (the store's methods take it: `_bind`).
        self._direct = isinstance(inner, _redoxide.Client)
        self._following = threading.Lock()
        # A router's get (the store's `get_routed`): where keys live, asked on a miss.
        self._homes_seen: Any = None
        if self._direct:
            self._nodes = (inner,)
            self._store.track([inner], self._check_db)
        else:
            self._follow()
            # A router that learns of a switch between calls (Sentinel's events) says so:
            # the new primary is tracked, and what was kept dropped, before the next hit.
            changes = getattr(inner, "on_primary_change", None)
            if changes is not None:
                changes(self._follow)
        track(self)
        global _every
        with _joining:
            _every = (*_every, self)
            for client in _every:
                client._bind()

    def _bind(self) -> None:
        """The store's methods (see the module's docstring), with the process' other near
        caches named to it: a write it makes drops its keys there too."""
        bound = self.__dict__
        store, inner = self._store, self._inner
        store.set_peers([client._store for client in _every if client is not self])
        if self._direct:
            for name in ("get", "execute", "set", "set_many", "mget"):
                extra = (self._afill_here,) if name == "mget" else ()
                bound[name] = functools.partial(getattr(store, name), inner, *extra)
            return
        reads = isinstance(inner, Topology) and inner.reads_home
        recovered = (functools.partial(_or_router, inner.get), ROUTER_RECOVERS)
        reads_of = (self._homes, reads, inner.get, *recovered, inner.mget, self._finish_many)
        writes = (self._set_routed, functools.partial(_or_router, self._set_routed), inner.execute)
        store.route(*reads_of, *writes)
        routed = (store.get_routed, store.mget_routed, store.set_routed, store.execute_routed)
        bound["get"], bound["mget"], bound["set"], bound["execute"] = routed

    def _new_store(self) -> _redoxide.NearCache:
        s = self._settings
        # A marker of its own for each store (a forked child's too).
        marker = None if self._marker_of is None else self._marker_of(secrets.token_hex(8))
        return _redoxide.NearCache(
            [p.encode() for p in self._prefixes],
            max_bytes=s.max_bytes,
            max_value_bytes=s.max_value_bytes,
            max_ttl=s.max_ttl,
            max_stale=s.max_stale_ms / 1000,
            marker=marker,
            admit_after=s.admit_after,
            logger=self._logger,
        )

    def after_fork(self) -> None:
        # The child starts empty, with tracking connections of its own made on first use.
        _left_behind.append(self._store)
        self._store = self._new_store()
        self._store.flush("fork")
        if self._nodes is not None:
            self._store.track(list(self._nodes), self._check_db)
        for client in _every:  # (the others' peers name this new store)
            client._bind()

    # -- what the cache asks beyond commands: the inner client's answers (Topology) -----------

    @property
    def spans_primaries(self) -> bool:
        return spans_primaries(self._inner)

    @overload
    def scan_nodes(self, bridge: None = None) -> Sequence[ClientLike]: ...
    @overload
    def scan_nodes(self, bridge: Bridge) -> Awaitable[Sequence[ClientLike]]: ...
    def scan_nodes(
        self, bridge: Bridge | None = None
    ) -> Sequence[ClientLike] | Awaitable[Sequence[ClientLike]]:
        # Asked only of a cluster: the nodes a key scan reads (its writes come back here).
        inner = self._inner
        assert isinstance(inner, Topology), "scan_nodes of a client on one primary"
        return inner.scan_nodes(bridge)

    def replica_reads(self) -> ClientLike:
        inner = self._inner
        reads = inner.replica_reads() if isinstance(inner, Topology) else inner
        return self if reads is inner else NearReads(self, reads)

    def primaries(self) -> tuple[Client, ...] | None:
        return primaries(self._inner)

    def owner(self, key: str) -> Client | None:
        return owner(self._inner, key)

    def __repr__(self) -> str:
        return f"<redoxide NearClient over {self._inner!r}>"

    def stats(self) -> dict[str, Any]:
        """The near cache's counters and sizes."""
        return self._store.stats()

    def _follow(self) -> bool:
        """Track the servers that own the keys now (a failover or a new slot map changes
        them, and flushes); whether they are known. Called before a fill and again before its
        install: a fill that made the router learn new nodes (it followed a MOVED, the primary
        moved) may have read a node not tracked yet, and the flush of the change kills its
        token. A slot moving between tracked primaries needs no flush: in BCAST mode both the
        source (MIGRATE deletes the key) and the target (every write) send invalidations."""
        nodes = primaries(self._inner)
        if nodes is None:
            return False
        if not self._tracks(nodes):
            # Re-read and track under a lock: a thread that read the nodes before a failover
            # must not track the old primaries after one that read the new ones.
            with self._following:
                nodes = primaries(self._inner)
                if nodes is None:
                    return False
                if not self._tracks(nodes):
                    self._store.track(list(nodes), self._check_db)
                    self._nodes = nodes
        return True

    def _tracks(self, nodes: tuple[Any, ...]) -> bool:
        known = self._nodes
        return (
            known is not None
            and len(nodes) == len(known)
            and all(a is b for a, b in zip(nodes, known, strict=True))
        )

    # -- reads ---------------------------------------------------------------------------

    @overload
    def get(self, key: str, bridge: None = None) -> bytes | None: ...
    @overload
    def get(self, key: str, bridge: Bridge) -> Awaitable[bytes | None]: ...
    def get(self, key: str, bridge: Bridge | None = None) -> bytes | Awaitable[bytes | None] | None:
        # (The store's `get` on one server, `get_routed` on a router: bound by `_bind`.)
        return self.__dict__["get"](key, bridge)  # type: ignore[no-any-return]

    def _homes(self) -> Client | list[Client] | None:
        """The router's `homes()` once the servers they name are tracked; None before."""
        homes: Client | list[Client] | None = self._inner.homes()
        if homes is not self._homes_seen:
            if homes is None or not self._follow():
                return None
            self._homes_seen = homes
        return homes

    @overload
    def mget(self, keys: Iterable[Any], bridge: None = None) -> list[bytes | None]: ...
    @overload
    def mget(self, keys: Iterable[Any], bridge: Bridge) -> Awaitable[list[bytes | None]]: ...
    def mget(
        self, keys: Iterable[Any], bridge: Bridge | None = None
    ) -> list[bytes | None] | Awaitable[list[bytes | None]]:
        # (The store's `mget` on one server, `mget_routed` on a router: bound by `_bind`.)
        return self.__dict__["mget"](keys, bridge)  # type: ignore[no-any-return]

    async def _afill_here(self, found: list[Any], at: list[int], pending: Any) -> list[Any]:
        """An awaited get_many's fill on one server (``NearCache.mget`` hands it over): its
        values put in place; an error carries what did answer as ``partial_values``."""
        try:
            values = await pending
        except CacheError as exc:
            answered(exc, found)
            raise
        for i, value in zip(at, values, strict=True):
            found[i] = value
        return found

    def _finish_many(
        self,
        keys: list[Any],
        found: list[Any],
        outcomes: list[Any],
        routed: list[int],
        bridge: Bridge | None,
    ) -> list[Any] | Awaitable[list[Any]]:
        """A get_many's end on a router (``NearCache.mget_routed`` hands it over, its fills
        sent: each primary's positions and outcome, a list of values or the exception that
        failed it; with `bridge`, its awaitable): see `_placed`."""
        if bridge is None:
            return plans.run(self._placed(keys, found, outcomes, routed))
        return self._afinish_many(keys, found, outcomes, routed, bridge)

    async def _afinish_many(
        self,
        keys: list[Any],
        found: list[Any],
        outcomes: list[Any],
        routed: list[int],
        bridge: Bridge,
    ) -> list[Any]:
        together([o for _, o in outcomes if not isinstance(o, BaseException)])
        done: list[Any] = []
        for at, outcome in outcomes:
            if not isinstance(outcome, BaseException):
                try:
                    outcome = await outcome
                except CacheError as exc:
                    outcome = exc
            done.append((at, outcome))
        return await plans.arun(self._placed(keys, found, done, routed), bridge)

    def _placed(
        self, keys: list[Any], found: list[Any], outcomes: list[Any], routed: list[int]
    ) -> Plan[list[Any]]:
        """Each primary's fill outcome put in place; the keys a fill could not place (no
        owner known, a slot moving, a primary gone) read through the router, installing
        nothing. An error carries what did answer (hits, filled keys, the router's partial
        read) as ``partial_values``: a fail-open get_many returns those."""
        try:
            for at, outcome in outcomes:
                routed += placed(at, outcome, found)
            if routed:
                routed.sort()
                try:
                    values = yield self._inner.mget, ([keys[i] for i in routed],)
                except CacheError as exc:
                    # What the router did read goes into the error's partial values too.
                    values = exc.partial_values or []
                    if len(values) == len(routed):
                        for i, value in zip(routed, values, strict=True):
                            found[i] = value
                    raise
                for i, value in zip(routed, values, strict=True):
                    found[i] = value
            return found
        except CacheError as exc:
            answered(exc, found)
            raise

    # -- writes (and has_key) ----------------------------------------------------------------

    def _write(
        self, call: Call[R], bridge: Bridge | None, on: ClientLike | None = None
    ) -> R | Awaitable[R]:
        """Run a write `call` on the inner client (or `on`): the tracked keys it names are
        dropped, in every near cache of the process, before it is sent and again once it is
        answered (a fill that read the old value meanwhile is killed): `write_around`."""
        kind, what = forgets(call)
        method = call.method(self._inner if on is None else on)
        return self._store.write_around(kind, what, method, call.args, bridge)  # type: ignore[no-any-return]

    def execute(self, args: Command, bridge: Bridge | None = None) -> Any:
        # The store's `execute` on one server, `execute_routed` over the router's on a router
        # (has_key of a kept key at once, the drops around it): bound by `_bind`.
        return self.__dict__["execute"](args, bridge)

    @overload
    def pipeline(self, commands: Iterable[Command], bridge: None = None) -> list[Any]: ...
    @overload
    def pipeline(self, commands: Iterable[Command], bridge: Bridge) -> Awaitable[list[Any]]: ...
    def pipeline(
        self, commands: Iterable[Command], bridge: Bridge | None = None
    ) -> list[Any] | Awaitable[list[Any]]:
        return self._write(Pipeline(list(commands)), bridge)

    def pipeline_results(
        self, commands: Iterable[Command], bridge: Bridge | None = None
    ) -> list[Any] | Awaitable[list[Any]]:
        """The inner client's pipeline_results (not a cluster's: it has none), as a write."""
        return self._write(PipelineResults(list(commands)), bridge)

    @overload
    def set(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: None = None,
    ) -> bool: ...
    @overload
    def set(
        self, key: str, value: bytes, ttl_ms: int | None, nx: bool, xx: bool, bridge: Bridge
    ) -> Awaitable[bool]: ...
    def set(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: Bridge | None = None,
    ) -> bool | Awaitable[bool]:
        # (The store's `set` on one server, `set_routed` on a router: bound by `_bind`.)
        return self.__dict__["set"](key, value, ttl_ms, nx, xx, bridge)  # type: ignore[no-any-return]

    def _set_routed(self, key: str, value: bytes, *how: Any) -> bool | Awaitable[bool]:
        """The router's set (`how`: ttl_ms, nx, xx, bridge), the key dropped before and after:
        `NearCache.set_routed` hands it over when it cannot place the key, or its primary
        refused it (`_or_router`, for an awaited one)."""
        *flags, bridge = how
        return self._write(Set(key, value, *flags), bridge)

    def set_many(
        self, keys: Any, values: Any, ttl_ms: int | None = None, bridge: Bridge | None = None
    ) -> Any:
        """(One server: the store's `set_many`, bound by `_bind`.) On a router: on the primary
        that owns the keys, by the store (kept keys through its tracking connection, the drops
        made there); a cluster's keys over several slots in parts (`_set_parts`); through the
        router when no primary is known, or it refuses (as `NearCache.set_routed`)."""
        keys = list(keys)
        values = list(values)
        call = SetMany(keys, values, ttl_ms)
        homes = self._homes() if keys else None
        if isinstance(homes, list):  # a cluster: by slot
            parts = by_slot(homes, keys, values)
            if len(parts) > 1:
                return self._set_parts(parts, call, bridge)
            homes = parts[0][0]
        if homes is None:
            return self._write(call, bridge)
        try:
            done = self._store.set_many(homes, keys, values, ttl_ms, bridge)
        except ROUTER_RECOVERS:
            return self._write(call, bridge)
        return done if bridge is None else _or_router(self._write, done, call, bridge)

    def _set_parts(
        self, parts: list[Any], call: SetMany, bridge: Bridge | None
    ) -> Awaitable[None] | None:
        """A cluster's set_many over several slots: each slot's keys through the tracking
        connection of its primary (`NearCache.set_many_parts`, all sent at once; the process'
        other near caches drop them there); the parts that do not go that way (no key kept),
        or that a node refused, through the router, dropping them."""
        ttl_ms = call.args[2]
        outcomes = self._store.set_many_parts(parts, ttl_ms, bridge)
        if bridge is not None:
            return self._aset_parts(parts, outcomes, ttl_ms, bridge)
        rest, error = unsent(parts, outcomes, ttl_ms)
        if rest is not None:
            self._write(rest, None)
        if error is not None:
            raise error
        return None

    async def _aset_parts(
        self, parts: list[Any], outcomes: list[Any], ttl_ms: int | None, bridge: Bridge
    ) -> None:
        sent = [o is not NotImplemented and not isinstance(o, BaseException) for o in outcomes]
        together([o for o, was_sent in zip(outcomes, sent, strict=True) if was_sent])
        done: list[Any] = []
        for outcome, was_sent in zip(outcomes, sent, strict=True):
            if was_sent:
                try:
                    outcome = await outcome
                except CacheError as exc:
                    outcome = exc
            done.append(outcome)
        rest, error = unsent(parts, done, ttl_ms)
        if rest is not None:
            await self._write(rest, bridge)
        if error is not None:
            raise error


_near_clients: Registry[NearClient] = Registry()


def near_client(
    inner: Any,
    settings: NearCacheConfig,
    key_prefix: str,
    version: int,
    default_key_func: bool,
    client_key: Any,
    logger: str,
    key_func: Callable[..., Any] | None = None,
) -> NearClient:
    """The process-wide near cache of a configuration (one store, one set of tracking
    connections, whatever the number of backend instances). `key_func` (the cache's) names
    its database marker (see `marker_name`)."""
    prefixes = tracked_prefixes(settings, key_prefix, version, default_key_func)
    key = (client_key, settings, prefixes)
    marker = None if key_func is None else functools.partial(marker_name, key_func, key_prefix)
    return _near_clients.get(key, lambda: NearClient(inner, settings, prefixes, logger, marker))
