"""Loopback network fakes: a port that never accepts, a node that never answers, and a
round-trip counting proxy in front of a real server."""

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

    def _run(self) -> None:
        # Per client socket: [peer socket, "c2s" or "s2c" for the last direction seen].
        while not self._stopping:
            for key, _ in self._sel.select(timeout=0.5):
                if key.data == "wake":
                    return
                if key.data is None:
                    client, _ = self._listener.accept()
                    server = socket.create_connection(("127.0.0.1", self.target_port))
                    for end in (client, server):
                        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    state: list[Any] = [None]
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
                if direction == "c2s" and state[0] != "c2s":
                    with self._lock:
                        self._turns += 1
                state[0] = direction
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
