"""TLS on redoxide's own sockets: what only TLS can get wrong underneath the cache API.

The data connections (a blocking one per thread, the shared one, the async multiplexed one)
run a rustls session over the socket, read and written without blocking from whichever
thread has the turn. These tests drive the paths where a TLS session differs from a plain
socket: replies and requests spanning many TLS records, ciphertext that waits for room in
the socket, records that carry nothing for the cache (TLS 1.3 session tickets) on an idle
connection, a connection the server closes, and a server that stops answering.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from support.backend import build_cache, is_redoxide
from support.rotation import clients_of
from support.tls import OPENSSL, Certs, TLSServer, make_certs
from support.tls import tls_server as tls_server_of

pytestmark = [
    pytest.mark.skipif(not is_redoxide(), reason="redoxide's own connections"),
    pytest.mark.skipif(OPENSSL is None, reason="needs the openssl CLI"),
]

from redoxide.exceptions import CacheTimeout  # noqa: E402

PASSWORD = "tls-transport-Pw-81c4"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls-transport"))


@pytest.fixture(scope="module")
def server(certs: Certs) -> Iterator[TLSServer]:
    yield from tls_server_of(
        certs.server_cert, certs.server_key, certs.ca, "optional", password=PASSWORD
    )


_prefixes = iter(range(1_000_000))


def cache_of(server: TLSServer, certs: Certs, **options: Any) -> Any:
    options = {
        "PASSWORD": PASSWORD,
        "SSL_CA_CERTS": str(certs.ca),
        "SOCKET_CONNECT_TIMEOUT": 5.0,
        "SOCKET_TIMEOUT": 10.0,
        **options,
    }
    return build_cache(server.url(), {"OPTIONS": options, "KEY_PREFIX": f"x{next(_prefixes)}"})


def test_values_spanning_many_records_both_ways(server: TLSServer, certs: Certs) -> None:
    # A TLS record holds at most 16 KiB: these requests and replies take hundreds of them,
    # and the socket's buffers fill, so ciphertext waits for room and replies arrive in parts.
    cache = cache_of(server, certs)
    big = os.urandom(3 * 1024 * 1024)
    cache.set("big", big)
    assert cache.get("big") == big
    values = {f"k{i}": os.urandom(100_000) + bytes([i]) for i in range(60)}
    cache.set_many(values)
    assert cache.get_many(list(values)) == values

    async def in_flight() -> None:
        assert await cache.aget("big") == big
        # Many calls in flight at once: the writer task flushes what callers buffered.
        await asyncio.gather(*(cache.aset(f"a{k}", v) for k, v in values.items()))
        got = await asyncio.gather(*(cache.aget(f"a{k}") for k in values))
        assert got == list(values.values())
        assert await cache.aget_many([f"a{k}" for k in values]) == {
            f"a{k}": v for k, v in values.items()
        }

    asyncio.run(in_flight())


def test_idle_connections_are_kept_across_calls(server: TLSServer, certs: Certs) -> None:
    # After its handshake a TLS 1.3 server sends session tickets: bytes on an idle socket
    # that carry nothing for the cache. They must not make the connection look closed by the
    # server (each call would then reconnect).
    cache = cache_of(server, certs)
    cache.set("k", 1)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cache.aset("k", 1))
        cache.reset_stats()
        # (Earlier tests' connections may close meanwhile: only new ones count.)
        before = set(clients_of(server.server))
        for i in range(30):
            cache.set("k", i)  # a write: the socket is asked before it goes out
            assert cache.get("k") == i
            loop.run_until_complete(cache.aset("k", i))
            assert loop.run_until_complete(cache.aget("k")) == i
        totals = cache.stats()["totals"]
        assert totals["reconnects"] == 0, totals
        assert not set(clients_of(server.server)) - before
    finally:
        loop.close()


def test_connections_the_server_closed_are_replaced(server: TLSServer, certs: Certs) -> None:
    cache = cache_of(server, certs)
    cache.set("k", "v")
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(cache.aget("k")) == "v"
        for call in range(2):
            server.server.cli("CLIENT", "KILL", "TYPE", "normal")
            if call == 0:  # reads: sent again on a new connection
                assert cache.get("k") == "v"
                assert loop.run_until_complete(cache.aget("k")) == "v"
            else:  # writes: the closed connection is seen before they go out
                cache.set("k", "w")
                loop.run_until_complete(cache.aset("k2", "w"))
                assert cache.get_many(["k", "k2"]) == {"k": "w", "k2": "w"}
        assert cache.stats()["totals"]["reconnects"] >= 2
    finally:
        loop.close()


def test_one_shared_sync_connection_over_tls(server: TLSServer, certs: Certs) -> None:
    # SYNC_CONNECTIONS "shared": the threads write while one of them reads, on one session.
    cache = cache_of(server, certs, SYNC_CONNECTIONS="shared")
    cache.get("warm")
    before = set(clients_of(server.server))
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(150):
                value = (t, i, os.urandom(64 if i % 10 else 40_000))
                cache.set(f"t{t}", value)
                assert cache.get(f"t{t}") == value
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    # No connection was made for the threads: they all went through the shared one.
    assert not set(clients_of(server.server)) - before


def test_a_server_that_stops_answering_times_out_and_recovers(
    server: TLSServer, certs: Certs
) -> None:
    cache = cache_of(server, certs, SOCKET_TIMEOUT=1.0)
    cache.set("k", "v")
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(cache.aget("k")) == "v"
        server.server.pause()
        try:
            with pytest.raises(CacheTimeout):
                cache.get("k")
            with pytest.raises(CacheTimeout):
                loop.run_until_complete(cache.aget("k"))
        finally:
            server.server.resume()
        server.server.wait_answering()
        assert cache.get("k") == "v"
        assert loop.run_until_complete(cache.aget("k")) == "v"
    finally:
        loop.close()
