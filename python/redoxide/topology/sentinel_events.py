"""Sentinel's Pub/Sub events, followed as they happen (a daemon thread per followed service).

The sentinels publish every step of a failover on their Pub/Sub channels. A primary asked for
only when a call fails keeps writing to an old primary that is still up (a planned
``SENTINEL FAILOVER``) until the sentinels turn it into a replica, and those writes are lost
then. So ``SentinelPrimary`` subscribes to every sentinel it knows (one connection each,
``PSUBSCRIBE *``, one thread for all of them) and acts on the events of its service:

- ``+selected-slave`` / ``+failover-state-send-slaveof-noone`` (a failover chose the replica
  to promote): writes are held, and the replica is asked for its ``ROLE`` every few ms; the
  moment it answers ``master``, it is the primary and the writes are released to it;
- ``+promoted-slave`` and ``+switch-master`` (the sentinels name the new primary): the same
  switch, for a watcher that missed the start (a sentinel that was not the leader);
- ``-failover-abort-*`` and ``+failover-end-for-timeout``: the hold is lifted (the primary
  stays where it was, asked for again on the next call);
- ``+odown`` / ``+sdown`` / ``+reset-master`` of the primary, ``+convert-to-slave`` of any
  node: the primary is in doubt, asked for again on the next call; replicas coming and going
  (``+slave``, ``+sdown`` / ``-sdown`` of a replica, ``+slave-reconf-done``) make it re-read
  the replicas when it reads from them.

Only the sentinel that leads a failover publishes its first steps, so every sentinel is
watched. The connections are plain RESP2 over a socket (the core's client speaks no Pub/Sub)
with ``AUTH`` for ``SENTINEL_KWARGS``' credentials; a connection that breaks or stays silent is
made again. The thread holds its primary weakly and stops with it, with ``close()``, and is
started again (lazily) in a forked child.
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

__all__ = ["HOLD_LIMIT", "SentinelWatcher", "parse_event"]

logger = logging.getLogger("redoxide")

#: A hold on writes that neither a promotion nor an abort ends lifts itself after this long
#: (writes then go where the sentinels name, as without the watcher).
HOLD_LIMIT = 5.0
#: Each connection is pinged this often, and made again after 3 intervals of silence.
PING_INTERVAL = 1.0
#: A sentinel that cannot be reached is tried again after this long, doubling up to the
#: second figure while it stays out of reach.
RETRY_INTERVAL = 0.5
RETRY_INTERVAL_MAX = 5.0


class _Incomplete(Exception):
    """The buffer ends inside a reply."""


def _parse(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    """One RESP2 value from `buf` at `pos`: (value, position after it)."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind, line = buf[pos : pos + 1], bytes(buf[pos + 1 : end])
    pos = end + 2
    if kind == b"+":
        return line, pos
    if kind == b"-":
        return ValueError(line.decode(errors="replace")), pos
    if kind == b":":
        return int(line), pos
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, pos
        if len(buf) < pos + size + 2:
            raise _Incomplete
        return bytes(buf[pos : pos + size]), pos + size + 2
    if kind == b"*":
        count = int(line)
        items = []
        for _ in range(max(count, 0)):
            item, pos = _parse(buf, pos)
            items.append(item)
        return (items if count >= 0 else None), pos
    raise ValueError(f"not a RESP2 reply: {bytes(buf[pos - 2 - len(line) - 1 : end])!r}")


def _command(*args: str | bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def parse_event(channel: str, data: str) -> tuple[str, str, str, str, int] | None:
    """An event's (channel, service, instance type, ip, port), or None if it names no
    service. ``+switch-master``'s address is the new primary's."""
    parts = data.split()
    try:
        if channel == "+switch-master":  # <name> <old ip> <old port> <new ip> <new port>
            return channel, parts[0], "master", parts[3], int(parts[4])
        # <type> <name> <ip> <port> [@ <master name> <master ip> <master port>]
        kind = parts[0]
        service = parts[parts.index("@") + 1] if "@" in parts else parts[1]
        return channel, service, kind, parts[2], int(parts[3])
    except (IndexError, ValueError):
        return None


class _Link:
    """One sentinel connection in subscribed mode."""

    def __init__(self, sock: socket.socket, address: tuple[str, int]) -> None:
        self.sock = sock
        self.address = address
        self.buffer = bytearray()
        self.heard = time.monotonic()
        self.pinged = self.heard


class SentinelWatcher:
    """Follows the events of one service on every sentinel and tells `primary` (held weakly)
    through its ``_event(channel, service, kind, ip, port, sentinel)`` method."""

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
        self._sentinels = list(sentinels)
        self._login = login
        self._connect_timeout = connect_timeout
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: Set once every sentinel that could be reached has confirmed the subscription
        #: (tests and benchmarks wait on it; calls never do).
        self.subscribed = threading.Event()
        self.links = 0  # connections in subscribed mode now

    def start(self) -> None:
        """Start the thread unless it runs (called on every discovery: cheap)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = threading.Event()
            self.subscribed = threading.Event()
            self._thread = threading.Thread(
                target=self._run,
                args=(self._stop,),
                name=f"redoxide-sentinel-events-{id(self):x}",
                daemon=True,
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close its connections (at most one poll interval later)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(2 * PING_INTERVAL)

    def after_fork(self) -> None:
        # The parent's thread does not exist in the child; its sockets are the parent's.
        self._lock = threading.Lock()
        self._thread = None
        self.links = 0
        self.subscribed = threading.Event()

    # -- the thread

    def _connect(self, address: tuple[str, int]) -> _Link | None:
        try:
            sock = socket.create_connection(address, timeout=self._connect_timeout)
        except OSError:
            return None
        buf = bytearray()
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            username, password = self._login
            if password is not None:
                auth = ("AUTH", username, password) if username else ("AUTH", password)
                sock.sendall(_command(*auth))
                reply = self._reply(sock, buf)
                if isinstance(reply, Exception):
                    self._refused(address, "AUTH", reply)
                    sock.close()
                    return None
            sock.sendall(_command("PSUBSCRIBE", "*"))
            reply = self._reply(sock, buf)
            if not (isinstance(reply, list) and reply and reply[0] == b"psubscribe"):
                self._refused(address, "PSUBSCRIBE *", reply)
                sock.close()
                return None
            sock.setblocking(False)
        except (OSError, ValueError):
            sock.close()
            return None
        link = _Link(sock, address)
        link.buffer = buf  # events that came with the confirmation, read with the next ones
        return link

    def _refused(self, address: tuple[str, int], command: str, reply: Any) -> None:
        """Warn once per sentinel that it refuses what following its events needs (an ACL
        without Pub/Sub, a wrong password): writes then move only when a call fails."""
        if address in self._warned:
            return
        self._warned.add(address)
        logger.warning(
            "redoxide: sentinel %s:%s refused %s (%s): failovers of %r are followed only when "
            "a call fails",
            address[0], address[1], command, reply, self._service,
        )  # fmt: skip

    @staticmethod
    def _reply(sock: socket.socket, buf: bytearray) -> Any:
        """The next reply on `sock`; `buf` keeps what came after it (an event, say)."""
        while True:
            try:
                value, end = _parse(buf, 0)
            except _Incomplete:
                chunk = sock.recv(65536)
                if not chunk:
                    raise OSError("closed") from None
                buf += chunk
            else:
                del buf[:end]
                return value

    def _run(self, stop: threading.Event) -> None:
        selector = selectors.DefaultSelector()
        links: dict[tuple[str, int], _Link] = {}
        retry: dict[tuple[str, int], tuple[float, float]] = {}  # when, then the next delay
        try:
            while not stop.is_set():
                if self._primary() is None:
                    return
                now = time.monotonic()
                for address in self._sentinels:
                    when, delay = retry.get(address, (0.0, RETRY_INTERVAL))
                    if address in links or now < when:
                        continue
                    link = self._connect(address)
                    if link is None:
                        retry[address] = (now + delay, min(2 * delay, RETRY_INTERVAL_MAX))
                        continue
                    retry[address] = (now + RETRY_INTERVAL, RETRY_INTERVAL)
                    links[address] = link
                    selector.register(link.sock, selectors.EVENT_READ, link)
                self.links = len(links)
                if links:
                    self.subscribed.set()
                for key, _ in selector.select(timeout=0.1):
                    link = key.data
                    if not self._read(link):
                        self._drop(selector, links, link)
                now = time.monotonic()
                for link in list(links.values()):
                    if now - link.heard > 3 * PING_INTERVAL:
                        self._drop(selector, links, link)
                    elif now - link.pinged > PING_INTERVAL:
                        link.pinged = now
                        try:
                            link.sock.send(_command("PING"))
                        except OSError:
                            self._drop(selector, links, link)
        finally:
            for link in list(links.values()):
                self._drop(selector, links, link)
            selector.close()
            self.links = 0

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
        pos = 0
        try:
            while pos < len(link.buffer):
                message, pos = _parse(link.buffer, pos)
                self._message(message, link.address)
        except _Incomplete:
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
        handle: Callable[..., None] = primary._event
        try:
            handle(*event[0:1], *event[2:], sentinel)
        except Exception:  # the watcher must outlive a bad event
            primary._stale_now()
