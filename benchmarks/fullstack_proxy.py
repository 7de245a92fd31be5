"""A loopback TCP proxy that delays each direction: the simulated network of fullstack.py.

The kernel here has no netem, so the "network" is this proxy on 127.0.0.1 in front of the
redis-server. It runs as a process of its own with one thread: a ``select`` loop that stamps
every chunk it receives with ``now + delay`` and sends each direction's chunks once their time
has come (those already due in one send). Delays overlap, so pipelined traffic keeps its
throughput and only gains latency, as on a real link.

One thread in its own process because the proxy must cost the same whatever the backend: with
a thread per direction inside the benchmark's own interpreter, every chunk waited for that
process' GIL, and a backend with more connections (one per WSGI thread) paid more for the same
network (PING through it measured 2-4 ms instead of 1 ms on a loaded host). ``select`` takes
its timeout in microseconds (epoll and asyncio's timers round to milliseconds).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import time

_CHUNK = 65536
START_TIMEOUT = 10.0


def _nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class DelayProxy:
    """Listen on a free 127.0.0.1 port; forward to 127.0.0.1:target_port, delay each way.

    The proxy is a child process (this file run as a script), stopped by its pid."""

    def __init__(self, target_port: int, delay_ms: float) -> None:
        self.target_port = target_port
        self.delay_ms = delay_ms
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        """The proxy process' pid while it runs (its CPU is the simulated network's cost)."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> DelayProxy:
        script = os.path.abspath(__file__)
        args = [sys.executable, script, str(self.target_port), str(self.delay_ms)]
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], START_TIMEOUT)
        line = self._proc.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"the delay proxy did not start (said {line!r})")
        self.port = int(line)
        return self

    def stop(self) -> None:
        """Stop the proxy process (its connections close with it)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


class _Direction:
    """Bytes on their way to one socket (what its peer sent, delayed): (due, chunk) in arrival
    order; a chunk of None means the peer closed: shut this socket's sending side once all
    before it is sent."""

    __slots__ = ("ended", "queue")

    def __init__(self) -> None:
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.ended = False


def _send_due(sock: socket.socket, way: _Direction, now: float) -> bool:
    """Send what is due to sock (in one send) and shut its sending side if that is due; False
    if the socket failed. What it does not take now stays first in line, due at once."""
    out = []
    while way.queue and way.queue[0][0] <= now and way.queue[0][1] is not None:
        out.append(way.queue.popleft()[1])
    if out:
        data = b"".join(out)  # type: ignore[arg-type]  # None never reaches out
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            return False
        if sent < len(data):
            way.queue.appendleft((now, data[sent:]))
            return True
    if way.queue and way.queue[0][1] is None and way.queue[0][0] <= now:
        way.queue.popleft()
        way.ended = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
    return True


class _Proxy:
    """The proxy's connections: each open socket's incoming bytes, its peer, and which sockets
    are still being read (not yet at end of stream)."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port = target_port
        self.delay = delay
        self.towards: dict[socket.socket, _Direction] = {}
        self.peer: dict[socket.socket, socket.socket] = {}
        self.reading: set[socket.socket] = set()

    def accept(self, listener: socket.socket) -> None:
        with contextlib.suppress(OSError):
            client, _ = listener.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for s in (client, upstream):
                _nodelay(s)
                s.setblocking(False)
                self.towards[s] = _Direction()
                self.reading.add(s)
            self.peer[client], self.peer[upstream] = upstream, client

    def close_pair(self, sock: socket.socket) -> None:
        for s in (sock, self.peer.get(sock)):
            if s is not None:
                self.towards.pop(s, None)
                self.peer.pop(s, None)
                self.reading.discard(s)
                with contextlib.suppress(OSError):
                    s.close()

    def send_pass(self, now: float) -> tuple[float | None, list[socket.socket]]:
        """Send everything due; return when the next chunk falls due, and the sockets whose
        buffers are full (to wait for until writable). Pairs done both ways are closed."""
        next_due = None
        blocked = []
        for sock, way in list(self.towards.items()):
            if sock not in self.towards:
                continue  # closed with its peer in this pass
            if not _send_due(sock, way, now):
                self.close_pair(sock)
                continue
            if way.queue:
                due = way.queue[0][0]
                if due <= now:
                    blocked.append(sock)
                else:
                    next_due = due if next_due is None else min(next_due, due)
            other = self.peer[sock]
            ended = way.ended and self.towards[other].ended
            if ended and sock not in self.reading and other not in self.reading:
                self.close_pair(sock)
        return next_due, blocked

    def read(self, sock: socket.socket, now: float) -> None:
        other = self.peer.get(sock)
        if other is None:
            return
        try:
            data = sock.recv(_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.reading.discard(sock)
        self.towards[other].queue.append((now + self.delay, data or None))


def _precise_timers() -> None:
    """Ask Linux to end sleeps within 1 us of their deadline (the default slack is 50 us)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK, in nanoseconds


def serve(target_port: int, delay_ms: float) -> None:
    """The proxy's loop: print the port it listens on, then run until SIGTERM."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(512)
    listener.setblocking(False)
    print(listener.getsockname()[1], flush=True)
    proxy = _Proxy(target_port, delay_ms / 1000.0)
    _precise_timers()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        next_due, blocked = proxy.send_pass(time.monotonic())
        timeout = None if next_due is None else max(0.0, next_due - time.monotonic())
        readable, _, _ = select.select([listener, *proxy.reading], blocked, [], timeout)
        now = time.monotonic()
        for sock in readable:
            if sock is listener:
                proxy.accept(listener)
            else:
                proxy.read(sock, now)


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


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]))
