"""Throwaway redis-server processes for the test suite.

Import it as ``from redis_server import RedisServer, free_port``: pytest's default
("prepend") import mode puts this directory on sys.path because tests/ is not a package.

Each RedisServer runs one ``redis-server`` in the foreground (``subprocess.Popen``, never
``--daemonize``) on a free 127.0.0.1 port, with no persistence, and is always stopped by its
own pid. Servers still running at interpreter exit are stopped by an ``atexit`` hook.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from types import TracebackType

# REDOXIDE_SERVER_BIN runs the suite against another server binary (e.g. valkey-server).
REDIS_SERVER = (
    os.environ.get("REDOXIDE_SERVER_BIN") or shutil.which("redis-server") or "/usr/bin/redis-server"
)
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

_running: set[RedisServer] = set()  # strong refs: a running server is never collected


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _command(*args: str | bytes) -> bytes:
    """Encode one command in RESP."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts.append(f"${len(data)}\r\n".encode() + data + b"\r\n")
    return b"".join(parts)


class RedisServer:
    """One redis-server process on a free loopback port, stopped by pid."""

    def __init__(self, *extra_args: str, port: int | None = None, password: str | None = None):
        self.extra_args = extra_args
        self.fixed_port = port is not None
        self.port: int = port if port is not None else free_port()
        self.password = password
        self.dir: str | None = None  # working dir (logfile, unix sockets), while running
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        state = f"pid={self._proc.pid}" if self._proc else "stopped"
        return f"<RedisServer 127.0.0.1:{self.port} {state}>"

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError(f"{self!r} is not running")
        return self._proc.pid

    @property
    def logfile(self) -> str | None:
        return os.path.join(self.dir, "redis.log") if self.dir else None

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING."""
        if self._proc is not None:
            raise RuntimeError(f"{self!r} is already running")
        attempts = 1 if self.fixed_port else 3
        for attempt in range(attempts):
            try:
                self._spawn()
                return self
            except RuntimeError:
                # Another process may have taken the free port between the check and bind.
                if attempt == attempts - 1:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self.dir = tempfile.mkdtemp(prefix=f"redis-{self.port}-")
        args = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.dir,
            "--logfile", self.logfile or "",
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        args += list(self.extra_args)
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _running.add(self)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                log = self._read_log()
                self._cleanup()
                raise RuntimeError(f"redis-server on port {self.port} exited at start:\n{log}")
            if self._ping():
                return
            time.sleep(0.02)
        log = self._read_log()
        self.kill()
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING:\n{log}")

    def flushall(self) -> None:
        """Empty every database (a direct socket command: much faster than cli())."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10.0) as sock:
            request = _command("FLUSHALL")
            if self.password:
                request = _command("AUTH", self.password) + request
            sock.sendall(request)
            replies = b""
            while replies.count(b"\r\n") < (2 if self.password else 1):
                chunk = sock.recv(4096)
                if not chunk:
                    raise ConnectionError(f"{self!r} closed the connection during FLUSHALL")
                replies += chunk
            if any(line.startswith(b"-") for line in replies.split(b"\r\n")):
                raise RuntimeError(f"FLUSHALL failed on {self!r}: {replies!r}")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                request = _command("PING")
                if self.password:
                    request = _command("AUTH", self.password) + request
                sock.sendall(request)
                data = b""
                while b"PONG" not in data:
                    chunk = sock.recv(4096)
                    if not chunk:
                        return False
                    data += chunk
                return True
        except OSError:
            return False

    def _read_log(self) -> str:
        try:
            with open(self.logfile or "", encoding="utf-8", errors="replace") as fh:
                return fh.read()[-4000:]
        except OSError:
            return "(no log)"

    def _cleanup(self) -> None:
        self._proc = None
        _running.discard(self)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def stop(self) -> None:
        """Stop the server: SIGTERM by pid, wait, SIGKILL if it does not exit."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT)
        self._cleanup()

    def kill(self) -> None:
        """Kill the server with SIGKILL by pid, as a crash would."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
        self._cleanup()

    def restart(self) -> None:
        """Stop the server (if running) and start an empty one on the same port."""
        self.stop()
        self.fixed_port = True
        self.start()

    def pause(self) -> None:
        """Freeze the server process (SIGSTOP): connections stay open, nothing answers."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Continue a paused server (SIGCONT)."""
        os.kill(self.pid, signal.SIGCONT)

    def cli(self, *args: str) -> str:
        """Run ``redis-cli -p PORT *args`` and return its stdout without the final newline."""
        cmd = [REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port)]
        if self.password:
            cmd += ["-a", self.password, "--no-auth-warning"]
        result = subprocess.run(
            [*cmd, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return result.stdout.removesuffix("\n")

    def info(self, section: str) -> dict[str, str]:
        """Return INFO <section> as a dict of strings."""
        fields: dict[str, str] = {}
        for line in self.cli("info", section).splitlines():
            line = line.strip()
            if line and not line.startswith("#") and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value
        return fields

    def client_count(self) -> int:
        """Return the number of client connections, not counting redis-cli's own."""
        lines = [line for line in self.cli("client", "list").splitlines() if line.strip()]
        return len(lines) - 1

    def __enter__(self) -> RedisServer:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_running):
        server.stop()
