"""Throwaway multi-server setups for the topology tests: a 6-node cluster and a sentinel set.

Import it as ``from topologies import Cluster, SentinelSet``. Every process is a RedisServer
(tests/redis_server.py): foreground, free loopback ports, stopped by its own pid.
"""

from __future__ import annotations

import os
import subprocess
import time
from types import TracebackType

from redis_server import REDIS_CLI, RedisServer, free_port

READY_TIMEOUT = 30.0


def _wait(what: str, check: object, timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            last = exc
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what} (last error: {last!r})")


class Cluster:
    """A Redis/Valkey cluster of `primaries` primaries with one replica each."""

    def __init__(
        self, primaries: int = 3, node_timeout_ms: int = 1000, tls_args: tuple[str, ...] = ()
    ) -> None:
        """With tls_args (certificate options), every node also serves TLS on its own port
        (`tls_ports[i]`), cluster bus and replication included."""
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
        self.nodes = [
            RedisServer(
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
                # The bus port defaults to port + 10000, which can pass 65535 for a free port.
                "--cluster-port",
                str(free_port()),
                "--appendonly",
                "no",
                *tls[i],
            )
            for i in range(primaries * 2)
        ]
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
        except BaseException:
            self.stop()
            raise
        return self

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


class Sentinel(RedisServer):
    """One sentinel process (redis-server --sentinel) watching `service` on a primary."""

    def __init__(self, service: str, primary_port: int, quorum: int, down_after_ms: int) -> None:
        super().__init__()
        self.service = service
        self.primary_port = primary_port
        self.quorum = quorum
        self.down_after_ms = down_after_ms

    def _spawn(self) -> None:
        # A sentinel needs a config file it can rewrite; the base class passes only flags.
        import shutil
        import tempfile

        from redis_server import REDIS_SERVER, _running

        self.dir = tempfile.mkdtemp(prefix=f"sentinel-{self.port}-")
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as fh:
            fh.write(
                f"port {self.port}\nbind 127.0.0.1\ndaemonize no\ndir {self.dir}\n"
                f"logfile {self.logfile}\n"
                f"sentinel monitor {self.service} 127.0.0.1 {self.primary_port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.service} 10000\n"
                f"sentinel parallel-syncs {self.service} 2\n"
            )
        self._proc = subprocess.Popen(
            [REDIS_SERVER, conf, "--sentinel"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _running.add(self)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                log = self._read_log()
                self._proc = None
                _running.discard(self)
                shutil.rmtree(self.dir, ignore_errors=True)
                raise RuntimeError(f"sentinel on port {self.port} exited at start:\n{log}")
            if self._ping():
                return
            time.sleep(0.02)
        raise RuntimeError(f"sentinel on port {self.port} did not answer PING")


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
            _wait("replicas in sync", self._replicas_synced)
            for sentinel in self.sentinels:
                sentinel.start()
            _wait("sentinels that see each other and both replicas", self._sentinels_ready)
        except BaseException:
            self.stop()
            raise
        return self

    def _replicas_synced(self) -> bool:
        for replica in self.replicas:
            if replica.info("replication").get("master_link_status") != "up":
                return False
        return True

    def _sentinels_ready(self) -> bool:
        for sentinel in self.sentinels:
            info = sentinel.cli("sentinel", "master", self.service).splitlines()
            fields = dict(zip(info[::2], info[1::2], strict=False))
            if int(fields.get("num-other-sentinels", 0)) < len(self.sentinels) - 1:
                return False
            if int(fields.get("num-slaves", 0)) < len(self.replicas):
                return False
        return True

    def current_primary_port(self) -> int:
        reply = self.sentinels[0].cli("sentinel", "get-master-addr-by-name", self.service)
        return int(reply.splitlines()[1])

    def node_for_port(self, port: int) -> RedisServer:
        return next(node for node in self.data_nodes if node.port == port)

    def stop(self) -> None:
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


__all__ = ["Cluster", "SentinelSet", "free_port"]
