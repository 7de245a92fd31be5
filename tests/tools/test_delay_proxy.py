"""The full-stack benchmark's delay proxy (benchmarks/fullstack_proxy.py): the "network" its
delay figures rest on. It must forward every byte in order, never deliver sooner than its
delay each way, and close the server side when a client leaves."""

from __future__ import annotations

import socket
import threading
import time

from fullstack_proxy import DelayProxy
from support.servers import RedisServer, resp_command

DELAY_MS = 2.0  # the delay the `proxy` fixture (tools/conftest.py) adds each way


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the proxy closed the connection early"
        data += chunk
    return data


def test_large_values_and_pipelines_pass_intact_and_in_order(proxy: DelayProxy) -> None:
    value = bytes(range(256)) * 20_000  # 5 MB, every byte value
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(resp_command(b"SET", b"proxy:big", value))
        assert _read_exactly(sock, 5) == b"+OK\r\n"
        sock.sendall(resp_command(b"GET", b"proxy:big"))
        header = b"$%d\r\n" % len(value)
        assert _read_exactly(sock, len(header) + len(value) + 2) == header + value + b"\r\n"
        # 1,000 commands in one write: 1,000 replies, in order.
        sock.sendall(b"".join(resp_command(b"ECHO", b"%04d" % i) for i in range(1000)))
        replies = _read_exactly(sock, 1000 * len(b"$4\r\n0000\r\n"))
        assert replies == b"".join(b"$4\r\n%04d\r\n" % i for i in range(1000))


def test_no_reply_comes_back_sooner_than_the_delay_each_way(proxy: DelayProxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        for _ in range(20):
            started = time.monotonic()
            sock.sendall(resp_command(b"PING"))
            assert _read_exactly(sock, 7) == b"+PONG\r\n"
            assert time.monotonic() - started >= 2 * DELAY_MS / 1000


def test_connections_are_independent_and_a_client_leaving_closes_its_upstream(
    proxy: DelayProxy, proxied_server: RedisServer
) -> None:
    before = proxied_server.client_count()
    errors: list[BaseException] = []

    def echo(n: int) -> None:
        try:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
                for i in range(20):
                    word = b"c%d-%02d" % (n, i)
                    sock.sendall(resp_command(b"ECHO", word))
                    expected = b"$%d\r\n%s\r\n" % (len(word), word)
                    assert _read_exactly(sock, len(expected)) == expected
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=echo, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # Each client's upstream closes with it (connections of earlier tests' proxies may still
    # be closing at the start: at most as many as before, not 8 more).
    deadline = time.monotonic() + 5
    while proxied_server.client_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proxied_server.client_count() <= before
