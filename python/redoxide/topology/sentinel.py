"""Sentinel: a primary (and replicas) that the sentinels name, followed on failover.

The primary is asked for on first use, and again when a call to it finds the connection
refused or broken (then the call is retried once if the primary moved), when it answers
READONLY (a demoted primary; the write was not applied, so it is retried), and on the call
after a timeout. Reads go through a ReplicaRouter whose primary is the followed primary.

Between those, the sentinels' events (sentinel_events.py) move writes at once: when a failover
picks the replica to promote, writes are held so none lands on the old primary once the replica
is promoted, which would lose it; they are released to the replica the moment it answers as a
primary, or to the old one if the failover is aborted or, after HOLD_LIMIT, once no sentinel
reports it in progress (sentinel_hold.py). A switch learnt this way tells the near cache
(``on_primary_change``), which then tracks the new primary and drops what it kept.

Time: a write takes no longer than it could without the events: SOCKET_TIMEOUT for its call,
plus, when the primary moved, one retry (asking the sentinels, at most discovery_budget, then
SOCKET_TIMEOUT again). A hold is waited on once per write, for at most SOCKET_TIMEOUT (then
CacheTimeout, the write never sent), and that wait comes out of the retry: a write that waited
before it was sent is retried only if the wait and its call took at most SOCKET_TIMEOUT, and a
write that waits after its call failed is retried only on the primary the hold ended with.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redoxide import plans
from redoxide._redoxide import Bridge, Client
from redoxide._registry import track
from redoxide._sections import Config
from redoxide.exceptions import CacheError, CacheTimeout, ConnectionInterrupted, ReadOnlyError
from redoxide.plans import Plan
from redoxide.topology.base import R, Router
from redoxide.topology.calls import Call
from redoxide.topology.flight import Flight, always
from redoxide.topology.nodes import address_of, discovery_budget, new_client, node_client
from redoxide.topology.replicas import ReplicaRouter
from redoxide.topology.sentinel_events import SentinelWatcher
from redoxide.topology.sentinel_hold import Hold

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
        #: Writes wait while this is set (a failover is promoting a replica); see _event.
        #: While it is set, `suspect` stays True (writes take the slow path, which waits).
        self._hold: Hold | None = None
        self._checking: set[tuple[str, int]] = set()  # ROLE checks under way (see _event)
        #: Addresses the primary moved away from: a sentinel that still names one of them has
        #: not heard of the switch yet (asked last, believed only if every sentinel does).
        self._left: set[tuple[str, int]] = set()
        self._listeners: list[Callable[[], Any]] = []
        self._switches = 0  # switches the events made (a discovery begun before one yields)
        self._changes = threading.Lock()  # one switch (or hold, or adoption) at a time
        self._switched = threading.Condition(threading.Lock())  # notified at each switch
        self.watcher = SentinelWatcher(
            self,
            list(config.servers.sentinels),
            (config.servers.sentinel_username, config.servers.sentinel_password),
            config.connection.connect_timeout,
        )
        self._closed = False
        track(self)

    def after_fork(self) -> None:
        # The child has no watcher thread and has missed what the sentinels said since the
        # fork: it asks again on its next call, which starts a watcher of its own. A hold of
        # the parent's is dropped, never ended: ending it takes its lock, which a thread of
        # the parent (the promotion poller, a waiting write) may have held at fork().
        self.watcher.after_fork()
        self._changes = threading.Lock()
        self._switched = threading.Condition(threading.Lock())
        self._hold = None
        self._checking = set()
        self.suspect = True
        self._learnt_at = -1.0

    def close(self) -> None:
        """Stop following the sentinels' events (calls still ask them when in doubt).
        Idempotent."""
        self._closed = True
        self.watcher.stop()
        self._release()

    @property
    def switches(self) -> int:
        """How many switches of primary the sentinels' events made."""
        return self._switches

    def wait_switches(self, count: int, timeout: float) -> bool:
        """Wait until the events have made `count` switches in all (at most `timeout` s)."""
        with self._switched:
            return self._switched.wait_for(lambda: self._switches >= count, timeout)

    def on_primary_change(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` (from the watcher's thread) after each switch of primary that
        the sentinels' events announce."""
        self._listeners.append(callback)

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
        if not self._closed:
            self.watcher.start()  # lazily, on first use (and again in a forked child)
        behind: tuple[Any, Any, list[bytes]] | None = None
        switches = self._switches
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
            if (addr[0].decode(), int(addr[1])) in self._left:
                if behind is None:  # has not heard of the switch yet, unless nobody has
                    behind = (sentinel, addr, replicas)
                continue
            self._adopt(addr, replicas, switches)
            # The sentinel that answered is asked first next time (one assignment: other
            # threads may be reading the list).
            self._sentinels = [sentinel] + [s for s in sentinels if s is not sentinel]
            return self.node
        if behind is not None:
            sentinel, addr, replicas = behind
            self._left.discard((addr[0].decode(), int(addr[1])))
            self._adopt(addr, replicas, switches)
            self._sentinels = [sentinel] + [s for s in sentinels if s is not sentinel]
            return self.node
        self._learnt_at = time.monotonic()
        self._last_error = (
            f"no sentinel could name the primary of {self.service!r} ({'; '.join(errors)})"
        )
        raise ConnectionInterrupted(self._last_error)

    def _adopt(self, addr: list[bytes], replicas: list[Any], switches: int) -> None:
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
        with self._changes:
            before = self.node
            if self._switches != switches:
                # The events switched the primary while the sentinels were asked: their
                # answer may predate the switch; the events' primary stands.
                primary = before  # type: ignore[assignment]  # not None: switched to
            else:
                self.node, self.replicas = primary, found
            self._learnt_at = time.monotonic()
            # A hold stays on whatever the sentinels said: the replica it waits for may be
            # promoted any moment, and writes must not go to the old primary meanwhile.
            self.suspect = self.node is None or self._hold is not None
        if before is not None and before is not primary:
            self._leave(before, (host, port))
            self._tell()

    # -- the sentinels' events (called from the watcher's thread)

    def _event(
        self, channel: str, kind: str, host: str, port: int, sentinel: tuple[str, int]
    ) -> None:
        """One event of this service: `kind` is the instance it is about ("master", "slave",
        "sentinel"), `host` and `port` its address (for +switch-master: the new primary's)."""
        if channel in ("+selected-slave", "+failover-state-send-slaveof-noone"):
            self._start_hold(host, port, sentinel)
        elif channel == "+failover-state-wait-promotion":
            if self._hold is None:
                self._start_hold(host, port, sentinel)
        elif channel in ("+promoted-slave", "+switch-master"):
            hold = self._hold
            if hold is not None and hold.target == (host, port):
                return  # the promotion poller asks it every few ms already
            self._check_later(host, port, sentinel)
        elif channel.startswith("-failover-abort") or channel == "+failover-end-for-timeout":
            hold = self._hold
            if hold is None or hold.sentinel == sentinel:
                self._release(hold)
                self._stale_now()
        elif channel in ("+odown", "+sdown", "+reset-master") and kind == "master":
            self._stale_now()  # the primary is in doubt
        elif channel == "+convert-to-slave" and (host, port) == address_of(self.node):
            self._stale_now()  # our primary is being demoted
        elif self._config.servers.read_from_replicas and kind == "slave" and channel in (
            "+slave", "+sdown", "-sdown", "+slave-reconf-done", "+convert-to-slave",
            "-odown", "+reboot",
        ):  # fmt: skip
            self._stale_now()  # the replicas to read from change: read them again

    def _stale_now(self) -> None:
        """Ask the sentinels again on the next call."""
        self.suspect = True
        self._learnt_at = -1.0

    def _lost_sentinel(self, address: tuple[str, int]) -> None:
        """The watcher's connection to a sentinel broke: a hold it started cannot be ended
        by its events any more."""
        hold = self._hold
        if hold is not None and hold.sentinel == address:
            self._release(hold)
            self._stale_now()

    def _check_later(self, host: str, port: int, sentinel: tuple[str, int]) -> None:
        """Switch to host:port if it says it is a primary (ROLE), else ask the sentinels again
        on the next call; on a thread of its own, so the watcher's thread never waits on a
        server. Checked first: a sentinel that rejoins after a failover may announce one it
        missed, naming a primary that has been demoted since."""
        with self._changes:
            if (host, port) in self._checking:
                return  # the same announcement from another sentinel: one check
            self._checking.add((host, port))
        threading.Thread(
            target=self._check, args=(host, port, sentinel), daemon=True,
            name="redoxide-sentinel-check",
        ).start()  # fmt: skip

    def _check(self, host: str, port: int, sentinel: tuple[str, int]) -> None:
        try:
            if self._is_primary(host, port):
                self._switch_to(host, port, sentinel)
            else:
                self._stale_now()
        finally:
            with self._changes:
                self._checking.discard((host, port))

    def _start_hold(self, host: str, port: int, sentinel: tuple[str, int]) -> None:
        """A failover chose the replica at host:port: hold writes until it is promoted."""
        with self._changes:  # not between a discovery's answer and its `suspect`
            if self._hold is not None or (host, port) == address_of(self.node):
                return
            hold = self._hold = Hold((host, port), sentinel, self.watcher.ask_budget + 1.0)
            self.suspect = True  # writes take the slow path, which waits on the hold
        threading.Thread(
            target=self._await_promotion, args=(hold, host, port, sentinel), daemon=True,
            name="redoxide-sentinel-promotion",
        ).start()  # fmt: skip

    def _await_promotion(self, hold: Hold, host: str, port: int, sentinel: tuple[str, int]) -> None:
        """Ask the chosen replica for its role until it is a primary (then switch to it), the
        hold ends otherwise, or it lapses (sentinel_hold.py: after HOLD_LIMIT, unless a
        sentinel reports the failover in progress)."""
        while self._hold is hold and not hold.lapses(self.watcher.failover_underway):
            if self._is_primary(host, port):
                self._switch_to(host, port, sentinel)
                return
            hold.ended(0.005)
        if self._hold is hold:  # neither promoted nor aborted: as without a watcher
            self._release(hold)
            self._stale_now()

    def _is_primary(self, host: str, port: int) -> bool:
        """Whether the server at host:port says it is a primary (ROLE)."""
        config = self._config
        node = node_client(config, host, port, db=config.servers.db)
        try:
            role = node.execute(("ROLE",))
        except CacheError:
            return False
        return bool(role) and role[0] in (b"master", "master")

    def _switch_to(self, host: str, port: int, sentinel: tuple[str, int]) -> None:
        """The primary is now host:port (the sentinels' events say so): writes go there from
        the next call on, held ones included."""
        config = self._config
        node = node_client(config, host, port, db=config.servers.db)
        with self._changes:
            hold = self._hold
            before = self.node
            if before is not node:
                self._leave(before, (host, port))
                self.node = node
                self.replicas = [r for r in self.replicas if r is not node]
                self._learnt_at = time.monotonic()
                # Ask the sentinel that announced it first: the others may lag behind.
                first = [s for s in self._sentinels if address_of(s) == sentinel]
                self._sentinels = first + [s for s in self._sentinels if s not in first]
                self._switches += 1  # under the lock: a discovery begun before yields
            # Settled on the new primary (a near cache asks primaries() when told); writes
            # the hold keeps wait for its end, below.
            self.suspect = False
        if before is not node:
            self._tell()  # before the held writes go: a near cache tracks the new primary
        self._release(hold)
        if before is not node:
            with self._switched:
                self._switched.notify_all()

    def _leave(self, before: Client | None, now: tuple[str, int]) -> None:
        left = address_of(before)
        if left is not None:
            self._left.add(left)
        self._left.discard(now)

    def _tell(self) -> None:
        for callback in list(self._listeners):
            with contextlib.suppress(Exception):  # a listener must not stop a switch
                callback()

    def _release(self, hold: Hold | None = None) -> None:
        """End `hold` if it is still on (without one: whichever is on)."""
        with self._changes:
            current = self._hold
            if current is None or (hold is not None and current is not hold):
                return
            self._hold = None
        current.end()

    def _wait_hold(self, bridge: Bridge | None = None) -> Awaitable[None] | None:
        """A step: wait until no failover holds writes, for at most SOCKET_TIMEOUT."""
        if bridge is not None:
            return self._await_hold()
        hold = self._hold
        if hold is not None and not hold.wait(self._config.connection.socket_timeout):
            self._held_too_long(hold)
        return None

    async def _await_hold(self) -> None:
        hold = self._hold
        if hold is not None and not await hold.await_end(self._config.connection.socket_timeout):
            self._held_too_long(hold)

    def _held_too_long(self, hold: Hold) -> None:
        if hold.overdue():  # its poller did not review it in time (see Hold)
            self._release(hold)
            self._stale_now()
            return  # the hold lapsed: the write goes where the sentinels name
        raise CacheTimeout(
            f"a failover of {self.service!r} is promoting a replica: the write waited "
            f"SOCKET_TIMEOUT for it and was not sent"
        )

    def _fresh(self) -> bool:
        return time.monotonic() - self._learnt_at < MIN_REFRESH_INTERVAL

    def _stale(self) -> bool:
        return self.node is None or (self.suspect and not self._fresh())

    def primaries(self) -> tuple[Client, ...] | None:
        node = self.node
        return (node,) if node is not None and not self.suspect else None

    def owner(self, key: str) -> Client | None:
        return None if self.suspect else self.node

    def homes(self) -> Client | None:
        return None if self.suspect else self.node

    def _not_fresh(self) -> bool:
        return self.node is None or not self._fresh()

    def _known(self) -> Client:
        if self.node is None:
            raise ConnectionInterrupted(self._last_error)
        return self.node

    def primary_now(self, bridge: Bridge | None = None) -> Client | Awaitable[Client]:
        """A step: the primary, asking the sentinels first if it is unknown or in doubt."""
        return self._flight.then(self._discover, self._stale, self._known, bridge)

    def relearn(self, bridge: Bridge | None = None) -> Client | Awaitable[Client]:
        """A step: ask the sentinels again (unless just asked); return the primary."""
        return self._flight.then(self._discover, self._not_fresh, self._known, bridge, always)

    # -- calls

    def _write(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        primary = self.node
        if primary is None or self.suspect:
            return plans.drive(self._discover_then_call(call), bridge)
        return call.on_else(primary, self._recover, (primary, call), bridge)

    def _read(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        primary = self.node
        if primary is not None and self._hold is not None:
            return call.on(primary, bridge)  # a hold is for writes: the old primary has it all
        return self._write(call, bridge)

    def _discover_then_call(self, call: Call[R]) -> Plan[R]:
        held_since = None
        if self._hold is not None:
            held_since = time.monotonic()
            yield self._wait_hold, ()
        primary = yield self.primary_now, ()
        try:
            return (yield from call.plan_on(primary))
        except CacheError as exc:
            return (yield from self._recover(exc, primary, call, held_since))

    def _recover(
        self, exc: CacheError, primary: Client, call: Call[R], held_since: float | None = None
    ) -> Plan[R]:
        """After a call to `primary` failed: retry it once on the new primary if the failure
        says the primary may have moved and asking the sentinels confirms it; else raise.
        `held_since`: when this write began waiting on a hold, if it did (see the module's
        docstring for what that leaves of its retry)."""
        if isinstance(exc, CacheTimeout):
            self.suspect = True  # asked again on the next call: this one's time is spent
            raise exc
        if not isinstance(exc, (ConnectionInterrupted, ReadOnlyError)):
            raise exc
        if held_since is not None:
            # It waited on a hold once already: no second wait, and the retry only if the
            # wait and the call took no longer than a call may.
            spent = time.monotonic() - held_since
            if self._hold is not None or spent > self._config.connection.socket_timeout:
                raise exc
        elif self._hold is not None:
            # The wait takes the place of asking the sentinels: the retry goes only to the
            # primary the hold ended with.
            yield self._wait_hold, ()
            now = self.node
            if now is primary or now is None or self.suspect:
                raise exc
            return (yield from call.plan_on(now))
        now = self.node
        if now is primary or now is None or self.suspect:
            now = yield self.relearn, ()
        if now is primary:
            raise exc
        return (yield from call.plan_on(now))


class SentinelRouter(Router):
    """Writes to the Sentinel-followed primary; reads from its replicas when asked to."""

    def __init__(self, config: Config) -> None:
        self.primary = SentinelPrimary(config)
        self._reads = ReplicaRouter(self.primary, [], config.servers.read_from_replicas)

    def __repr__(self) -> str:
        return f"<redoxide SentinelRouter {self.primary.service}>"

    def on_primary_change(self, callback: Callable[[], Any]) -> None:
        """See SentinelPrimary.on_primary_change."""
        self.primary.on_primary_change(callback)

    def close(self) -> None:
        """Stop following the sentinels' events."""
        self.primary.close()

    def primaries(self) -> tuple[Client, ...] | None:
        return self.primary.primaries()

    def owner(self, key: str) -> Client | None:
        return self.primary.owner(key)

    def homes(self) -> Client | list[Client] | None:
        return self._reads.homes()

    @property
    def reads_home(self) -> bool:
        return self._reads.reads_home

    def _read(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        if not self.primary.settled:
            return call.on(self.primary, bridge)
        self._reads.replicas = self.primary.replicas  # as last learnt
        return self._reads._read(call, bridge)

    def _write(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        return call.on(self.primary, bridge)
