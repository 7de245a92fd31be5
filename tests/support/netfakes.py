"""Loopback network fakes: a port that never accepts, a node that never answers, a
round-trip counting proxy in front of a real server (which can also hold a chosen reply back
until the test releases it), and a server that takes the handshake and then misbehaves
(trickles a reply, or stops reading)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def blackhole_port() -> Iterator[int]:
    """Yield a loopback port whose listener never accepts and whose backlog is full, so a
    connect() to it hangs until the client's connect timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port: int = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.05)
    try:
        yield port
    finally:
        for sock in [*fillers, listener]:
            sock.close()


def stalled_listener() -> socket.socket:
    """A loopback port that takes connections (the kernel's backlog) and never answers: a
    node that is partitioned or frozen, as a client sees it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


class CountingProxy:
    """A TCP proxy in front of a Redis server that counts client round trips.

    A round trip ("turn") starts whenever the client sends bytes after the server has
    answered (or for the first time): a pipelined batch written at once is one turn, while
    N commands each waiting for its reply are N turns. Call ``reset()`` after warming the
    connections up so handshakes (HELLO, SELECT, ...) are not counted.

    ``hold(marker)`` holds a reply back: the first connection that then sends bytes
    containing ``marker`` gets none of the server's bytes until ``release()``. ``holding`` is
    set once the server has answered it (the reply is in the proxy), so a test can make
    something happen between a server's reply and the client reading it, by construction.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._turns = 0
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        #: What a connection must send to be held (hold()), until one is.
        self._marker: bytes | None = None
        #: The held connection's state list, and the server's bytes kept from it.
        self._held: list[Any] | None = None
        self._kept: list[bytes] = []
        self.holding = threading.Event()
        self._thread = threading.Thread(target=self._run, name="CountingProxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def turns(self) -> int:
        with self._lock:
            return self._turns

    def reset(self) -> None:
        with self._lock:
            self._turns = 0

    def hold(self, marker: bytes) -> None:
        """Hold the server's bytes to the next connection that sends ``marker``."""
        with self._lock:
            self._marker = marker

    def release(self) -> None:
        """Pass the held bytes on, and every later one as they come."""
        self._wake_w.send(b"r")

    def _released(self) -> None:
        # On the proxy's thread: deliver what was kept, in order.
        with self._lock:
            held, kept = self._held, self._kept
            self._held, self._kept, self._marker = None, [], None
        if held is not None and kept:
            with contextlib.suppress(OSError):
                held[1].sendall(b"".join(kept))

    def _run(self) -> None:
        # Per client socket: [last direction seen ("c2s" or "s2c"), client socket].
        while not self._stopping:
            for key, _ in self._sel.select(timeout=0.5):
                if key.data == "wake":
                    if b"x" in self._wake_r.recv(64):
                        return
                    self._released()
                    continue
                if key.data is None:
                    client, _ = self._listener.accept()
                    server = socket.create_connection(("127.0.0.1", self.target_port))
                    for end in (client, server):
                        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    state: list[Any] = [None, client]
                    self._sel.register(client, selectors.EVENT_READ, ("c2s", server, state))
                    self._sel.register(server, selectors.EVENT_READ, ("s2c", client, state))
                    continue
                direction, peer, state = key.data
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    for s in (sock, peer):
                        with contextlib.suppress(KeyError, ValueError):
                            self._sel.unregister(s)
                        s.close()
                    continue
                with self._lock:
                    if direction == "c2s" and state[0] != "c2s":
                        self._turns += 1
                    marker = self._marker
                    if direction == "c2s" and marker and self._held is None and marker in data:
                        self._held = state
                    keep = direction == "s2c" and self._held is state
                    if keep:
                        self._kept.append(data)
                state[0] = direction
                if keep:
                    self.holding.set()
                else:
                    peer.sendall(data)

    def close(self) -> None:
        self._stopping = True
        self._wake_w.send(b"x")
        self._thread.join(5)
        for key in list(self._sel.get_map().values()):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            sock.close()
        self._sel.close()
        self._wake_w.close()

    def __enter__(self) -> CountingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- a fake RESP server that takes the handshake, then misbehaves -----------------------------

#: What a client sends before its first command (see src/proto/handshake.rs); answered at once.
_HANDSHAKE = frozenset({b"CLIENT", b"PING", b"SELECT", b"AUTH", b"READONLY"})


def _parse_command(buf: bytes) -> tuple[list[bytes], int | None]:
    """Parse the RESP array of bulk strings at the start of `buf`: (the arguments read so far,
    the number of bytes the whole command takes, or None while it is incomplete)."""
    end = buf.find(b"\r\n")
    if end < 0:
        return [], None
    if buf[:1] != b"*":
        raise ValueError(f"not a RESP array: {buf[:20]!r}")
    count, pos = int(buf[1:end]), end + 2
    args: list[bytes] = []
    for _ in range(count):
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return args, None
        size, start = int(buf[pos + 1 : end]), end + 2
        if len(buf) < start + size + 2:
            return args, None
        args.append(buf[start : start + size])
        pos = start + size + 2
    return args, pos


class MisbehavingServer:
    """A loopback server that speaks just enough RESP for a client's handshake (PING, CLIENT,
    SELECT, AUTH, READONLY: +PONG or +OK), then misbehaves:

    - ``"trickle"`` answers GET with a bulk string header of `size` bytes, then sends one byte
      every `interval` seconds (other commands get +OK): a reply that never ends in time.
    - ``"deaf"`` stops reading at the first command that is not the handshake's and keeps the
      connection open, so a large write fills the socket buffers and blocks.

    Each connection is served for at most `duration` seconds; every thread is a daemon and
    every loop is bounded, and close() (or leaving the ``with`` block) ends them all and
    closes the sockets, which also ends any call still blocked on them.
    """

    def __init__(
        self, behaviour: str, *, size: int = 100_000, interval: float = 0.05, duration: float = 30.0
    ) -> None:
        if behaviour not in ("trickle", "deaf"):
            raise ValueError(f"behaviour must be 'trickle' or 'deaf', not {behaviour!r}")
        self.behaviour = behaviour
        self.size, self.interval, self.duration = size, interval, duration
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        #: The names of the commands received (handshake included), upper-case.
        self.commands: list[bytes] = []
        self._spawn(self._accept, "MisbehavingServer-accept")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _spawn(self, target: Any, name: str, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        deadline = time.monotonic() + self.duration
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._spawn(self._serve, "MisbehavingServer-conn", conn)

    def _serve(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + self.duration
        conn.settimeout(0.1)
        buf = b""
        with conn:
            while not self._stop.is_set() and time.monotonic() < deadline:
                args, used = _parse_command(buf)
                if used is None:
                    if args and args[0].upper() not in _HANDSHAKE and self.behaviour == "deaf":
                        break  # a command has started: read no more of it
                    try:
                        chunk = conn.recv(65536)
                    except TimeoutError:
                        continue
                    except OSError:
                        return
                    if not chunk:
                        return
                    buf += chunk
                    continue
                buf = buf[used:]
                name = args[0].upper()
                with self._lock:
                    self.commands.append(name)
                try:
                    if name in _HANDSHAKE:
                        conn.sendall(b"+PONG\r\n" if name == b"PING" else b"+OK\r\n")
                    elif self.behaviour == "deaf":
                        break
                    elif name == b"GET":
                        self._trickle(conn, deadline)
                        return
                    else:
                        conn.sendall(b"+OK\r\n")
                except OSError:
                    return
            # Deaf: hold the connection, unread, until the end.
            self._stop.wait(max(0.0, deadline - time.monotonic()))

    def _trickle(self, conn: socket.socket, deadline: float) -> None:
        conn.sendall(b"$%d\r\n" % self.size)
        for _ in range(self.size):
            if self._stop.wait(self.interval) or time.monotonic() > deadline:
                return
            conn.sendall(b"x")
        conn.sendall(b"\r\n")

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(5)

    def __enter__(self) -> MisbehavingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
