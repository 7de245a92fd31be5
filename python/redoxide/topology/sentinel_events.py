"""Sentinel's Pub/Sub events, followed as they happen (a daemon thread per followed service).

The sentinels publish every step of a failover on their Pub/Sub channels. A primary asked for
only when a call fails keeps writing to an old primary that is still up (a planned
``SENTINEL FAILOVER``) until the sentinels turn it into a replica, and those writes are lost
then. So ``SentinelPrimary`` subscribes to every sentinel of its service (one connection each,
``PSUBSCRIBE *``, one thread for all of them) and acts on the events of its service:

- ``+selected-slave`` / ``+failover-state-send-slaveof-noone`` (a failover chose the replica
  to promote): writes are held, and the replica is asked for its ``ROLE`` every few ms; the
  moment it answers ``master``, it is the primary and the writes are released to it;
- ``+promoted-slave`` and ``+switch-master`` (the sentinels name the new primary): the same
  switch, for a watcher that missed the start (a sentinel that was not the leader);
- ``-failover-abort-*`` and ``+failover-end-for-timeout``: the hold is lifted (the primary
  stays where it was, asked for again on the next call); a hold nothing ends is reviewed
  after HOLD_LIMIT and lasts while a sentinel reports the failover in progress
  (sentinel_hold.py);
- ``+odown`` / ``+sdown`` / ``+reset-master`` of the primary, ``+convert-to-slave`` of any
  node: the primary is in doubt, asked for again on the next call; replicas coming and going
  (``+slave``, ``+sdown`` / ``-sdown`` of a replica, ``+slave-reconf-done``) make it re-read
  the replicas when it reads from them.

Only the sentinel that leads a failover publishes its first steps, so every sentinel of the
service is watched: the listed ones (SENTINELS) and the others they name, learnt from each
listed or learnt sentinel as its connection is made (``SENTINEL SENTINELS``) and from its
``+sentinel`` events; one connection per address (a learnt address that a listed sentinel's
connection reaches is that sentinel), at most MAX_SENTINELS in all. A learnt sentinel is
followed as a listed one is. The connections are plain RESP2 over a socket (the core's client
speaks no Pub/Sub) with ``AUTH`` for ``SENTINEL_KWARGS``' credentials; a connection that breaks
or stays silent is made again (by a short-lived helper thread, so the reading thread never waits
on a sentinel that does not answer; one out of reach is tried again less and less often, up to
every RETRY_INTERVAL_MAX, and a sentinel that refuses is named once in a warning). The thread
holds its primary weakly and stops with it or with ``close()``. A forked child closes its
copies of the connections (a sentinel would otherwise keep the parent's subscription for as
long as the child lives) and starts a thread of its own (lazily, on its first call).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from redoxide.topology.sentinel_resp import (
    Incomplete,
    addresses_of,
    command,
    fields_of,
    parse,
    parse_event,
    reply,
)

__all__ = ["MAX_SENTINELS", "SentinelWatcher"]

logger = logging.getLogger("redoxide")

#: Each connection is pinged this often, and made again after 3 intervals of silence.
PING_INTERVAL = 1.0
#: A sentinel that cannot be reached is tried again after this long, doubling up to the
#: second figure while it stays out of reach.
RETRY_INTERVAL = 0.5
RETRY_INTERVAL_MAX = 5.0
#: The most sentinels followed per service, listed and learnt (all the listed ones, whatever
#: their number).
MAX_SENTINELS = 16


class _Link:
    """One sentinel connection in subscribed mode."""

    def __init__(
        self, sock: socket.socket, address: tuple[str, int], others: list[tuple[str, int]]
    ) -> None:
        self.sock = sock
        self.address = address
        self.peer: tuple[str, int] = sock.getpeername()[:2]  # the address it reached
        self.others = others  # the other sentinels it named (SENTINEL SENTINELS)
        self.buffer = bytearray()
        self.heard = time.monotonic()
        self.pinged = self.heard


class _Run:
    """One run of the watcher's thread: what its connecting helpers hand over, and the
    sockets they are still making (closed in a forked child, as are the links)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.made: list[tuple[tuple[str, int], _Link | None]] = []  # handed to the loop
        self.opening: set[socket.socket] = set()
        self.connecting: set[tuple[str, int]] = set()
        self.tried: set[tuple[str, int]] = set()  # sentinels whose first try has ended

    def hand_over(self, address: tuple[str, int], link: _Link | None) -> None:
        with self.lock:
            self.connecting.discard(address)
            if link is not None:
                self.opening.discard(link.sock)
                if self.stop.is_set():  # the loop is gone: nobody reads this link
                    link.sock.close()
                    return
            self.made.append((address, link))

    def take(self) -> list[tuple[tuple[str, int], _Link | None]]:
        with self.lock:
            made, self.made = self.made, []
        return made

    def end(self) -> None:
        """The loop ends: nothing is handed over any more."""
        with self.lock:
            self.stop.set()
            made, self.made = self.made, []
        for _, link in made:
            if link is not None:
                link.sock.close()

    def close_in_child(self) -> None:
        # No lock: a thread of the parent may have held it at fork(); the child has one thread.
        for sock in list(self.opening):
            sock.close()
        for _, link in list(self.made):
            if link is not None:
                link.sock.close()
        self.opening = set()
        self.made = []


class SentinelWatcher:
    """Follows the events of one service on every sentinel (listed, or learnt from them) and
    tells `primary` (held weakly) through its ``_event(channel, kind, ip, port, sentinel)``.

    The thread that reads the events never waits on one sentinel: each connection (connect,
    ``AUTH``, ``PSUBSCRIBE``, bounded by the connect timeout) is made by a short-lived helper
    thread that hands the subscribed socket to it, and the checks an event calls for (``ROLE``)
    run on threads of the primary's."""

    def __init__(
        self,
        primary: Any,
        sentinels: list[tuple[str, int]],
        login: tuple[str | None, str | None],
        connect_timeout: float,
    ) -> None:
        self._primary = weakref.ref(primary)
        self._service = primary.service
        self._warned: set[tuple[str, int]] = set()
        self._sentinels = list(sentinels)  # the listed ones
        #: The other sentinels each followed one named (SENTINEL SENTINELS, +sentinel).
        self._found: dict[tuple[str, int], list[tuple[str, int]]] = {}
        #: The sentinels followed now: the listed ones, then learnt ones (see _follow).
        self.following = list(sentinels)
        self._login = login
        self._connect_timeout = connect_timeout
        #: How long asking the sentinels whether a failover is in progress may take, in all.
        self.ask_budget = 2 * connect_timeout
        self._run_now = _Run()
        self._run_now.stop.set()  # not started
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: The subscribed connections (the thread's; kept here so a forked child closes them).
        self._links: dict[tuple[str, int], _Link] = {}
        self._selector: selectors.BaseSelector | None = None
        #: Set once every sentinel that could be reached has confirmed the subscription
        #: (tests and benchmarks wait on it; calls never do).
        self.subscribed = threading.Event()
        self.links = 0  # connections in subscribed mode now
        self.connections = 0  # subscriptions made since this watcher was made (reconnects too)

    def start(self) -> None:
        """Start the thread unless it runs (called on every discovery: cheap)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            run = self._run_now = _Run()
            self.subscribed = threading.Event()
            self._thread = threading.Thread(
                target=self._run,
                args=(run,),
                name=f"redoxide-sentinel-events-{id(self):x}",
                daemon=True,
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close its connections (at most one poll interval later).
        Idempotent."""
        self._run_now.stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(2 * PING_INTERVAL)

    def after_fork(self) -> None:
        # The parent's threads do not exist in the child, and the sockets they used are the
        # parent's: closed here (the child's copies only), or each sentinel would keep the
        # parent's subscription for as long as the child lives. No lock of the parent's is
        # taken: another thread may have held it at fork().
        for link in list(self._links.values()):
            link.sock.close()
        self._links = {}
        if self._selector is not None:
            with contextlib.suppress(Exception):
                self._selector.close()
            self._selector = None
        self._run_now.close_in_child()
        self._run_now = _Run()
        self._run_now.stop.set()
        self._lock = threading.Lock()
        self._thread = None
        self.links = 0
        self.subscribed = threading.Event()

    def failover_underway(self, first: tuple[str, int]) -> float | None:
        """Ask the followed sentinels, `first` first, ``SENTINEL MASTER`` (a connection each,
        all within ask_budget): the failover-timeout, in seconds, of the first that reports a
        failover of the service in progress, or None if none that answers does."""
        run = self._run_now
        deadline = time.monotonic() + self.ask_budget
        for address in dict.fromkeys([first, *self.following]):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            fields: dict[bytes, Any] = {}
            try:
                sock = self._open(address, run, left)
            except OSError:
                continue
            try:
                buf = bytearray()
                if self._log_in(sock, buf, address):
                    sock.sendall(command("SENTINEL", "MASTER", self._service))
                    fields = fields_of(reply(sock, buf))
            except (OSError, ValueError):
                pass
            finally:
                with run.lock:
                    run.opening.discard(sock)
                sock.close()
            if b"failover_in_progress" in (fields.get(b"flags") or b"").split(b","):
                with contextlib.suppress(KeyError, ValueError, TypeError):
                    return int(fields[b"failover-timeout"]) / 1000
                return 180.0  # Sentinel's default
        return None

    # -- connecting (on a helper thread)

    def _open(
        self, address: tuple[str, int], run: _Run, timeout: float | None = None
    ) -> socket.socket:
        """A connected socket to `address` (`timeout` for each step: the connect timeout if
        None), known to `run` while it is being made (or used, by failover_underway)."""
        error: OSError = OSError(f"{address[0]}:{address[1]} resolves to nothing")
        for family, kind, proto, _, sockaddr in socket.getaddrinfo(
            address[0], address[1], type=socket.SOCK_STREAM
        ):
            sock = socket.socket(family, kind, proto)
            with run.lock:
                run.opening.add(sock)
            try:
                sock.settimeout(self._connect_timeout if timeout is None else timeout)
                sock.connect(sockaddr)
            except OSError as exc:
                with run.lock:
                    run.opening.discard(sock)
                sock.close()
                error = exc
                continue
            return sock
        raise error

    def _connect(self, address: tuple[str, int], run: _Run) -> None:
        """Connect, log in and subscribe to `address`, then hand the link (or None) over."""
        link = None
        try:
            link = self._subscribe(address, run)
        finally:
            run.hand_over(address, link)

    def _subscribe(self, address: tuple[str, int], run: _Run) -> _Link | None:
        try:
            sock = self._open(address, run)
        except OSError:
            return None
        buf = bytearray()

        def give_up() -> None:
            with run.lock:
                run.opening.discard(sock)
            sock.close()

        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self._log_in(sock, buf, address):
                give_up()
                return None
            # The other sentinels of the service, asked before the subscription (in subscribed
            # mode a connection takes no SENTINEL command): one round trip for both.
            sock.sendall(
                command("SENTINEL", "SENTINELS", self._service) + command("PSUBSCRIBE", "*")
            )
            others = addresses_of(reply(sock, buf))  # none if refused or unknown
            answer = reply(sock, buf)
            if not (isinstance(answer, list) and answer and answer[0] == b"psubscribe"):
                self._refused(address, "PSUBSCRIBE *", answer)
                give_up()
                return None
            link = _Link(sock, address, others)
            sock.setblocking(False)
        except (OSError, ValueError):
            give_up()
            return None
        link.buffer = buf  # events that came with the confirmation, read with the next ones
        return link

    def _log_in(self, sock: socket.socket, buf: bytearray, address: tuple[str, int]) -> bool:
        """AUTH with SENTINEL_KWARGS' credentials, if any; False if refused."""
        username, password = self._login
        if password is None:
            return True
        sock.sendall(command(*(("AUTH", username, password) if username else ("AUTH", password))))
        answer = reply(sock, buf)
        if isinstance(answer, Exception):
            self._refused(address, "AUTH", answer)
            return False
        return True

    def _refused(self, address: tuple[str, int], what: str, answer: Any) -> None:
        """Warn once per sentinel that it refuses what following its events needs (an ACL
        without Pub/Sub, a wrong password): writes then move only when a call fails."""
        if address in self._warned:
            return
        self._warned.add(address)
        logger.warning(
            "redoxide: sentinel %s:%s refused %s (%s): failovers of %r are followed only when "
            "a call fails",
            address[0], address[1], what, answer, self._service,
        )  # fmt: skip

    # -- the thread

    def _run(self, run: _Run) -> None:
        selector = self._selector = selectors.DefaultSelector()
        links = self._links = {}
        retry: dict[tuple[str, int], tuple[float, float]] = {}  # when, then the next delay
        try:
            while not run.stop.is_set():
                if self._primary() is None:
                    return
                self._adopt_links(run, selector, links, retry)
                following = self._follow(selector, links)
                self._connect_missing(run, following, links, retry)
                self.links = len(links)
                if links and run.tried.issuperset(following):
                    self.subscribed.set()
                for key, _ in selector.select(timeout=0.1) if selector.get_map() else ():
                    link = key.data
                    if not self._read(link):
                        self._drop(selector, links, link)
                if not links:
                    run.stop.wait(0.1)  # nothing to read yet: the helpers are connecting
                now = time.monotonic()
                for link in list(links.values()):
                    if now - link.heard > 3 * PING_INTERVAL:
                        self._drop(selector, links, link)
                    elif now - link.pinged > PING_INTERVAL:
                        link.pinged = now
                        try:
                            link.sock.send(command("PING"))
                        except OSError:
                            self._drop(selector, links, link)
        finally:
            run.end()
            for link in list(links.values()):
                self._drop(selector, links, link)
            selector.close()
            self.links = 0

    def _adopt_links(
        self,
        run: _Run,
        selector: selectors.BaseSelector,
        links: dict[tuple[str, int], _Link],
        retry: dict[tuple[str, int], tuple[float, float]],
    ) -> None:
        """Take what the helpers made: read a new link's events, schedule the next try of a
        sentinel out of reach (or refusing), later each time it stays so."""
        now = time.monotonic()
        for address, link in run.take():
            run.tried.add(address)
            _, delay = retry.get(address, (0.0, RETRY_INTERVAL))
            if link is None:
                retry[address] = (now + delay, min(2 * delay, RETRY_INTERVAL_MAX))
                continue
            retry[address] = (now + RETRY_INTERVAL, RETRY_INTERVAL)
            links[address] = link
            self._found[address] = link.others  # what it says now, in place of what it said
            selector.register(link.sock, selectors.EVENT_READ, link)
            self.connections += 1
            # Events that came with the confirmation are handled now.
            if link.buffer and not self._parse_buffer(link):
                self._drop(selector, links, link)

    def _follow(
        self, selector: selectors.BaseSelector, links: dict[tuple[str, int], _Link]
    ) -> list[tuple[str, int]]:
        """The sentinels to follow now: the listed ones, then those that the followed ones
        named, one per address (an address a listed one's link reached is that one), at most
        MAX_SENTINELS in all. A link to one no longer followed is closed."""
        listed = self._sentinels
        seen = set(listed) | {links[a].peer for a in listed if a in links}
        learnt = []
        for named in self._found.values():
            for address in named:
                if address not in seen:
                    seen.add(address)
                    learnt.append(address)
        following = listed + learnt[: max(0, MAX_SENTINELS - len(listed))]
        if not set(self._found) <= set(following):  # forget what unfollowed ones named
            self._found = {a: n for a, n in self._found.items() if a in following}
        for link in [link for address, link in links.items() if address not in following]:
            self._drop(selector, links, link)
        self.following = following
        return following

    def _connect_missing(
        self,
        run: _Run,
        following: list[tuple[str, int]],
        links: dict[tuple[str, int], _Link],
        retry: dict[tuple[str, int], tuple[float, float]],
    ) -> None:
        """A helper thread for each sentinel not linked, not being connected, and due."""
        now = time.monotonic()
        for address in following:
            when, _ = retry.get(address, (0.0, RETRY_INTERVAL))
            if address in links or address in run.connecting or now < when:
                continue
            with run.lock:
                run.connecting.add(address)
            threading.Thread(
                target=self._connect, args=(address, run), daemon=True,
                name=f"redoxide-sentinel-connect-{address[0]}:{address[1]}",
            ).start()  # fmt: skip

    def _drop(
        self, selector: selectors.BaseSelector, links: dict[tuple[str, int], _Link], link: _Link
    ) -> None:
        links.pop(link.address, None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(link.sock)
        link.sock.close()
        primary = self._primary()
        if primary is not None:
            primary._lost_sentinel(link.address)

    def _read(self, link: _Link) -> bool:
        try:
            chunk = link.sock.recv(65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        link.heard = time.monotonic()
        link.buffer += chunk
        return self._parse_buffer(link)

    def _parse_buffer(self, link: _Link) -> bool:
        """Handle the whole messages in the link's buffer; False if it holds garbage."""
        pos = 0
        try:
            while pos < len(link.buffer):
                message, pos = parse(link.buffer, pos)
                self._message(message, link.address)
        except Incomplete:
            pass
        except ValueError:
            return False
        del link.buffer[:pos]
        return True

    def _message(self, message: Any, sentinel: tuple[str, int]) -> None:
        # ["pmessage", pattern, channel, data]; pongs and confirmations are only signs of life.
        if not (isinstance(message, list) and len(message) == 4 and message[0] == b"pmessage"):
            return
        channel = message[2].decode(errors="replace")
        event = parse_event(channel, message[3].decode(errors="replace"))
        primary = self._primary()
        if event is None or primary is None or event[1] != primary.service:
            return
        if channel == "+sentinel" and event[2] == "sentinel":  # one more sentinel of it
            named = self._found.setdefault(sentinel, [])
            if event[3:] not in named:
                named.append(event[3:])
            return
        handle: Callable[..., None] = primary._event
        try:
            handle(*event[0:1], *event[2:], sentinel)
        except Exception:  # the watcher must outlive a bad event
            primary._stale_now()
