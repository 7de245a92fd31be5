"""Sentinel: a primary (and replicas) that the sentinels name, followed on failover.

The primary is asked for on first use, and again when a call to it finds the connection
refused or broken (then the call is retried once if the primary moved), when it answers
READONLY (a demoted primary; the write was not applied, so it is retried), and on the call
after a timeout. Reads go through a ReplicaRouter whose primary is the followed primary.
"""

from __future__ import annotations

import time
from typing import Any

from redoxide import plans
from redoxide._redoxide import Bridge, Client
from redoxide.exceptions import CacheError, CacheTimeout, ConnectionInterrupted, ReadOnlyError
from redoxide.options import Config
from redoxide.plans import Plan
from redoxide.topology.base import Router
from redoxide.topology.calls import Call
from redoxide.topology.flight import Flight
from redoxide.topology.nodes import discovery_budget, new_client, node_client
from redoxide.topology.replicas import ReplicaRouter

__all__ = ["MIN_REFRESH_INTERVAL", "SentinelPrimary", "SentinelRouter"]

#: Topology re-discovery runs at most this often (many callers fail at once in an outage).
MIN_REFRESH_INTERVAL = 0.05


class SentinelPrimary(Router):
    """The current primary of a Sentinel service, as a ClientLike that follows failovers."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self.service = config.servers.service_name or ""
        self._sentinels = [
            new_client(
                config,
                f"redis://{host}:{port}",
                login=(config.servers.sentinel_username, config.servers.sentinel_password),
            )
            for host, port in config.servers.sentinels
        ]
        self.node: Client | None = None  # the primary's Rust client, once known
        self.replicas: list[Client] = []
        self.suspect = True  # nothing learnt yet
        self._learnt_at = -1.0
        self._last_error = "not asked yet"
        self._flight = Flight()

    @property
    def sentinels(self) -> list[Any]:
        """The sentinels' clients, the one that answered last first."""
        return list(self._sentinels)

    @property
    def settled(self) -> bool:
        """The primary is known and nothing has cast doubt on it since."""
        return self.node is not None and not self.suspect

    # -- discovery

    def _discover(self) -> Plan[Any]:
        """Ask the sentinels, in order, for the primary (and replicas); switch to them."""
        errors = []
        deadline = time.monotonic() + discovery_budget(self._config)
        sentinels = list(self._sentinels)
        for sentinel in sentinels:
            if time.monotonic() > deadline:
                errors.append("out of time")
                break
            ask = ("SENTINEL", "get-master-addr-by-name", self.service)
            try:
                addr = yield sentinel.execute, (ask,)
                replicas = []
                if addr and self._config.servers.read_from_replicas:
                    replicas = yield sentinel.execute, (("SENTINEL", "replicas", self.service),)
            except CacheError as exc:
                errors.append(f"{sentinel.address}: {type(exc).__name__}")
                continue
            if not addr:
                errors.append(f"{sentinel.address}: does not know {self.service!r}")
                continue
            self._adopt(addr, replicas)
            # The sentinel that answered is asked first next time (one assignment: other
            # threads may be reading the list).
            self._sentinels = [sentinel] + [s for s in sentinels if s is not sentinel]
            return self.node
        self._learnt_at = time.monotonic()
        self._last_error = (
            f"no sentinel could name the primary of {self.service!r} ({'; '.join(errors)})"
        )
        raise ConnectionInterrupted(self._last_error)

    def _adopt(self, addr: list[bytes], replicas: list[Any]) -> None:
        config = self._config
        host, port = addr[0].decode(), int(addr[1])
        primary = node_client(config, host, port, db=config.servers.db)
        found = []
        for entry in replicas or ():
            fields = dict(zip(entry[::2], entry[1::2], strict=False))
            flags = fields.get(b"flags", b"").split(b",")
            if any(f in flags for f in (b"s_down", b"o_down", b"disconnected")):
                continue
            if fields.get(b"master-link-status", b"ok") != b"ok":
                continue
            found.append(
                node_client(
                    config, fields[b"ip"].decode(), int(fields[b"port"]), db=config.servers.db
                )
            )
        self.node, self.replicas = primary, found
        self._learnt_at = time.monotonic()
        self.suspect = False

    def _fresh(self) -> bool:
        return time.monotonic() - self._learnt_at < MIN_REFRESH_INTERVAL

    def _stale(self) -> bool:
        return self.node is None or (self.suspect and not self._fresh())

    def primaries(self) -> tuple[Client, ...] | None:
        node = self.node
        return (node,) if node is not None and not self.suspect else None

    def owner(self, key: str) -> Client | None:
        return None if self.suspect else self.node

    def _not_fresh(self) -> bool:
        return self.node is None or not self._fresh()

    def _known(self) -> Client:
        if self.node is None:
            raise ConnectionInterrupted(self._last_error)
        return self.node

    def primary_now(self, bridge: Bridge | None = None) -> Any:
        """A step: the primary, asking the sentinels first if it is unknown or in doubt."""
        if bridge is not None:
            return self._aprimary_now(bridge)
        if self._stale():
            self._flight.run(self._discover, self._stale)
        return self._known()

    async def _aprimary_now(self, bridge: Bridge) -> Client:
        if self._stale():
            await self._flight.arun(self._discover, self._stale, bridge)
        return self._known()

    def relearn(self, bridge: Bridge | None = None) -> Any:
        """A step: ask the sentinels again (unless just asked); return the primary."""
        if bridge is not None:
            return self._arelearn(bridge)
        self._flight.run(self._discover, self._not_fresh)
        return self._known()

    async def _arelearn(self, bridge: Bridge) -> Client:
        await self._flight.arun(self._discover, self._not_fresh, bridge)
        return self._known()

    # -- calls

    def _write(self, call: Call, bridge: Bridge | None) -> Any:
        primary = self.node
        if primary is None or self.suspect:
            plan = self._discover_then_call(call)
            return plans.run(plan) if bridge is None else plans.arun(plan, bridge)
        if bridge is not None:
            return self._acall(primary, call, bridge)
        try:
            return call.on(primary, None)
        except CacheError as exc:
            return plans.run(self._recover(exc, primary, call))

    async def _acall(self, primary: Client, call: Call, bridge: Bridge) -> Any:
        try:
            return await call.on(primary, bridge)
        except CacheError as exc:
            return await plans.arun(self._recover(exc, primary, call), bridge)

    def _discover_then_call(self, call: Call) -> Plan[Any]:
        primary = yield self.primary_now, ()
        try:
            return (yield call.step(primary))
        except CacheError as exc:
            return (yield from self._recover(exc, primary, call))

    def _recover(self, exc: CacheError, primary: Client, call: Call) -> Plan[Any]:
        """After a call to `primary` failed: retry it once on the new primary if the failure
        says the primary may have moved and asking the sentinels confirms it; else raise."""
        if isinstance(exc, CacheTimeout):
            self.suspect = True  # asked again on the next call: this one's time is spent
            raise exc
        if not isinstance(exc, (ConnectionInterrupted, ReadOnlyError)):
            raise exc
        now = yield self.relearn, ()
        if now is primary:
            raise exc
        return (yield call.step(now))


class SentinelRouter(Router):
    """Writes to the Sentinel-followed primary; reads from its replicas when asked to."""

    def __init__(self, config: Config) -> None:
        self.primary = SentinelPrimary(config)
        self._reads = ReplicaRouter(self.primary, [], config.servers.read_from_replicas)

    def __repr__(self) -> str:
        return f"<redoxide SentinelRouter {self.primary.service}>"

    def primaries(self) -> tuple[Client, ...] | None:
        return self.primary.primaries()

    def owner(self, key: str) -> Client | None:
        return self.primary.owner(key)

    def _read(self, call: Call, bridge: Bridge | None) -> Any:
        if not self.primary.settled:
            return call.on(self.primary, bridge)
        self._reads.replicas = self.primary.replicas  # as last learnt
        return self._reads._read(call, bridge)

    def _write(self, call: Call, bridge: Bridge | None) -> Any:
        return call.on(self.primary, bridge)
