"""A loopback TCP proxy that delays each direction: the simulated network of fullstack.py.

The kernel here has no netem, so the "network" is this proxy on 127.0.0.1 in front of the
redis-server. It runs as a process of its own with one thread: an epoll loop that stamps every
chunk it receives with ``now + delay`` and sends each direction's chunks once their time has
come (those already due in one send). Delays overlap, so pipelined traffic keeps its
throughput and only gains latency, as on a real link. A pass costs per chunk, not per open
connection.

One thread in its own process because the proxy must cost the same whatever the backend: with
a thread per direction inside the benchmark's own interpreter, every chunk waited for that
process' GIL, and a backend with more connections (one per WSGI thread) paid more for the same
network (PING through it measured 2-4 ms instead of 1 ms on a loaded host). ``select`` takes
its timeout in microseconds (epoll and asyncio's timers round to milliseconds), so the loop
waits in ``select`` on the epoll fd itself.
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

    __slots__ = ("ended", "queue", "waiting")

    def __init__(self) -> None:
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.ended = False
        self.waiting = False  # its send buffer is full: waiting for it to be writable


class _Proxy:
    """The proxy's connections: each open socket's incoming bytes and its peer, an epoll set
    of them, and one FIFO of (due, socket) for every chunk received.

    The delay is the same for every chunk, so chunks fall due in the order they arrived: the
    FIFO's head is always the next due, and a pass touches only the sockets that have
    something due or something to read, however many connections are open (a real network
    costs a backend nothing per idle connection)."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port = target_port
        self.delay = delay
        self.towards: dict[int, _Direction] = {}
        self.sockets: dict[int, socket.socket] = {}
        self.peer: dict[int, int] = {}
        self.due: collections.deque[tuple[float, int]] = collections.deque()
        self.finished: set[int] = set()  # read to their end of stream
        self.poller = select.epoll()

    def accept(self, listener: socket.socket) -> None:
        with contextlib.suppress(OSError):
            client, _ = listener.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for s in (client, upstream):
                _nodelay(s)
                s.setblocking(False)
                self.towards[s.fileno()] = _Direction()
                self.sockets[s.fileno()] = s
                self.poller.register(s.fileno(), select.EPOLLIN)
            self.peer[client.fileno()], self.peer[upstream.fileno()] = (
                upstream.fileno(),
                client.fileno(),
            )

    def close_pair(self, fd: int) -> None:
        for f in (fd, self.peer.get(fd)):
            if f is None or f not in self.sockets:
                continue
            self.towards.pop(f, None)
            self.peer.pop(f, None)
            self.finished.discard(f)
            sock = self.sockets.pop(f)
            with contextlib.suppress(OSError, ValueError):
                self.poller.unregister(f)
            with contextlib.suppress(OSError):
                sock.close()

    def _watch(self, fd: int) -> None:
        """Register what fd waits for: reading until its end of stream, writing while blocked."""
        events = 0 if fd in self.finished else select.EPOLLIN
        if self.towards[fd].waiting:
            events |= select.EPOLLOUT
        with contextlib.suppress(OSError):
            self.poller.modify(fd, events)

    def send_due(self, fd: int, now: float) -> None:
        """Send what is due to fd (in one send) and shut its sending side if that is due.

        What the socket does not take now stays first in line, due at once, and fd waits to be
        writable. A failed socket closes its pair."""
        way = self.towards.get(fd)
        if way is None:
            return  # closed since
        out = []
        while way.queue and way.queue[0][0] <= now and way.queue[0][1] is not None:
            out.append(way.queue.popleft()[1])
        blocked = False
        if out:
            data = b"".join(out)  # type: ignore[arg-type]  # None never reaches out
            try:
                sent = self.sockets[fd].send(data)
            except BlockingIOError:
                sent = 0
            except OSError:
                self.close_pair(fd)
                return
            if sent < len(data):
                way.queue.appendleft((now, data[sent:]))
                blocked = True
        if not blocked and way.queue and way.queue[0][1] is None and way.queue[0][0] <= now:
            way.queue.popleft()
            with contextlib.suppress(OSError):
                self.sockets[fd].shutdown(socket.SHUT_WR)
            if self.towards[self.peer[fd]].ended:
                self.close_pair(fd)  # done both ways
                return
            way.ended = True
        if blocked != way.waiting:
            way.waiting = blocked
            self._watch(fd)

    def read(self, fd: int, now: float) -> None:
        other = self.peer.get(fd)
        if other is None:
            return
        if fd in self.finished:
            # Hung up after its end of stream: stop watching it (epoll reports a hang-up
            # whatever it is asked); what is still due to it is sent, or fails and closes.
            with contextlib.suppress(OSError):
                self.poller.unregister(fd)
            return
        try:
            data = self.sockets[fd].recv(_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        self.towards[other].queue.append((now + self.delay, data or None))
        self.due.append((now + self.delay, other))
        if not data:
            self.finished.add(fd)  # its peer's sending side is shut when this falls due
            self._watch(fd)

    def send_pass(self, now: float) -> float | None:
        """Send everything due; return when the next chunk falls due (None: nothing queued)."""
        due = self.due
        while due and due[0][0] <= now:
            self.send_due(due.popleft()[1], now)
        return due[0][0] if due else None


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
    proxy.poller.register(listener.fileno(), select.EPOLLIN)
    _precise_timers()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # epoll's own timeout is in milliseconds; select on the epoll fd waits to the microsecond.
    ready_fd = [proxy.poller.fileno()]
    while True:
        next_due = proxy.send_pass(time.monotonic())
        timeout = None if next_due is None else max(0.0, next_due - time.monotonic())
        if not select.select(ready_fd, [], [], timeout)[0]:
            continue
        now = time.monotonic()
        for fd, events in proxy.poller.poll(0):
            if fd == listener.fileno():
                proxy.accept(listener)
                continue
            if events & select.EPOLLOUT:
                proxy.send_due(fd, now)
            if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                proxy.read(fd, now)


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
