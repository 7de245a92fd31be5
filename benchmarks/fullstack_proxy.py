"""A loopback TCP proxy that delays each direction: the simulated network of fullstack.py.

The kernel here has no netem, so the "network" is this proxy on 127.0.0.1 in
front of the redis-server. Each direction of each connection has a reader thread, which
stamps every chunk it receives with ``now + delay``, and a writer thread, which sends each
chunk once its time has come (coalescing chunks already due into one send). Delays overlap,
so pipelined traffic keeps its throughput and only gains latency, as on a real link.
Threads rather than asyncio: ``time.sleep`` is precise to tens of microseconds, asyncio's
timers only to a millisecond.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import statistics
import threading
import time

_CHUNK = 65536
_EMPTY: tuple[float, bytes] = (0.0, b"")  # "nothing queued" marker, compared by identity


def _nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class DelayProxy:
    """Listen on a free 127.0.0.1 port; forward to 127.0.0.1:target_port, delay each way."""

    def __init__(self, target_port: int, delay_ms: float) -> None:
        self.target_port = target_port
        self.delay = delay_ms / 1000.0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(512)
        self.port: int = self._listener.getsockname()[1]
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> DelayProxy:
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def stop(self) -> None:
        """Close the listener and every proxied connection (their threads then exit)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                if self._closed:
                    return
                continue
            for sock in (client, upstream):
                _nodelay(sock)
            with self._lock:
                self._sockets.update((client, upstream))
            self._pipe(client, upstream)
            self._pipe(upstream, client)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        chunks: queue.SimpleQueue[tuple[float, bytes] | None] = queue.SimpleQueue()
        threading.Thread(target=self._read, args=(src, chunks), daemon=True).start()
        threading.Thread(target=self._write, args=(dst, chunks), daemon=True).start()

    def _read(
        self, src: socket.socket, chunks: queue.SimpleQueue[tuple[float, bytes] | None]
    ) -> None:
        try:
            while data := src.recv(_CHUNK):
                chunks.put((time.monotonic() + self.delay, data))
        except OSError:
            pass
        chunks.put(None)

    def _write(
        self, dst: socket.socket, chunks: queue.SimpleQueue[tuple[float, bytes] | None]
    ) -> None:
        item = chunks.get()
        try:
            while item is not None:
                wait = item[0] - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                out = [item[1]]
                # Send everything already due in one write, as a NIC queue would.
                nxt: tuple[float, bytes] | None
                while True:
                    try:
                        nxt = chunks.get_nowait()
                    except queue.Empty:
                        nxt = _EMPTY
                        break
                    if nxt is None or nxt[0] > time.monotonic():
                        break
                    out.append(nxt[1])
                dst.sendall(b"".join(out))
                item = chunks.get() if nxt is _EMPTY else nxt
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with self._lock:
            self._sockets.discard(dst)
        with contextlib.suppress(OSError):
            dst.close()


def ping_rtt_ms(port: int, samples: int = 50) -> float:
    """Return the median PING round trip to 127.0.0.1:port in milliseconds."""
    times = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        _nodelay(sock)
        for _ in range(samples):
            started = time.perf_counter()
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            if not sock.recv(64).startswith(b"+PONG"):
                raise RuntimeError("unexpected PING reply")
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000.0
