"""TLS (rediss://) against real redis-servers with TLS on, with certificates made here.

The fixture makes, with the openssl CLI in a temporary directory: a CA, a server certificate
for 127.0.0.1 and localhost, a certificate from the same CA for another name only, a client
certificate, and an unrelated CA. Each server keeps its plain port for the fixture's own
PING/FLUSHALL and serves TLS on a second port.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from support.backend import build_cache, is_redoxide
from support.servers import Cluster
from support.tls import OPENSSL, Certs, TLSServer, make_certs, make_leaf, tls_capable
from support.tls import tls_server as tls_server_of

pytestmark = [
    pytest.mark.skipif(not is_redoxide(), reason="redoxide options"),
    pytest.mark.skipif(OPENSSL is None, reason="needs the openssl CLI"),
]

from redoxide.exceptions import CacheError, ConnectionInterrupted  # noqa: E402

PASSWORD = "tls-Pw-5e2b9c0d8a71"  # to search error messages for


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_server(certs: Certs) -> Iterator[TLSServer]:
    """TLS with a certificate for 127.0.0.1; client certificates optional."""
    yield from tls_server_of(
        certs.server_cert, certs.server_key, certs.ca, "optional", password=PASSWORD
    )


@pytest.fixture(scope="module")
def mtls_server(certs: Certs) -> Iterator[TLSServer]:
    """TLS that requires a client certificate from the CA."""
    yield from tls_server_of(
        certs.server_cert, certs.server_key, certs.ca, "yes", password=PASSWORD
    )


@pytest.fixture(scope="module")
def misnamed_server(certs: Certs) -> Iterator[TLSServer]:
    """TLS with a certificate from the CA that names another host only."""
    yield from tls_server_of(
        certs.misnamed_cert, certs.misnamed_key, certs.ca, "optional", password=PASSWORD
    )


def tls_cache(server: TLSServer, **options: Any) -> Any:
    options = {"PASSWORD": PASSWORD, "SOCKET_CONNECT_TIMEOUT": 2.0, **options}
    return build_cache(server.url(), {"OPTIONS": options, "KEY_PREFIX": fresh_prefix()})


_prefixes = iter(range(1_000_000))


def fresh_prefix() -> str:
    return f"t{next(_prefixes)}"


def assert_works(cache: Any) -> None:
    """Sync and async round trips over TLS."""
    cache.set("k", {"v": [1, 2]})
    assert cache.get("k") == {"v": [1, 2]}
    cache.set("n", 1)
    assert cache.incr("n") == 2

    async def twins() -> None:
        await cache.aset("a", "async value")
        assert await cache.aget("a") == "async value"
        assert await cache.aget_many(["k", "a"]) == {"k": {"v": [1, 2]}, "a": "async value"}

    asyncio.run(twins())


def assert_fails(cache: Any, expected: type[BaseException] = CacheError) -> list[BaseException]:
    """Sync and async calls both fail with `expected`; return the errors."""
    errors = []
    for call in (lambda: cache.get("k"), lambda: asyncio.run(cache.aget("k"))):
        with pytest.raises(expected) as info:
            call()
        errors.append(info.value)
    for error in errors:
        text = str(error) + repr(error) + "".join(traceback.format_exception(error))
        assert PASSWORD not in text, text
    return errors


def test_verified_connection_works(tls_server: TLSServer, certs: Certs) -> None:
    cache = tls_cache(tls_server, SSL_CA_CERTS=str(certs.ca))
    assert_works(cache)
    # The data really went over the TLS port: the plain port sees the same keys.
    assert tls_server.server.cli("EXISTS", cache.make_key("k")) == "1"


def test_near_cache_tracks_over_tls(tls_server: TLSServer, certs: Certs) -> None:
    """The tracking connection uses the cache's TLS settings (and password)."""
    import redis
    from support.near import after_stale_bound, near_options, stop_tracking, warm

    cache = tls_cache(tls_server, SSL_CA_CERTS=str(certs.ca), NEAR_CACHE=near_options())
    try:
        cache.set("cfg:a", 1)
        assert warm(cache, "cfg:a") == 1
        plain = redis.Redis(port=tls_server.server.port, password=PASSWORD)
        plain.set(cache.make_and_validate_key("cfg:a"), b"2")
        plain.close()
        after_stale_bound()
        assert cache.get("cfg:a") == 2
        assert cache.near_cache_stats()["invalidations"] >= 1
    finally:
        stop_tracking(cache)


def test_lower_case_and_pool_kwargs_spellings(tls_server: TLSServer, certs: Certs) -> None:
    assert_works(tls_cache(tls_server, ssl_ca_certs=certs.ca))  # a Path works too
    pool_kwargs = {"ssl_ca_certs": str(certs.ca), "ssl_cert_reqs": "required"}
    assert_works(tls_cache(tls_server, CONNECTION_POOL_KWARGS=pool_kwargs))


def test_ca_given_as_pem_data(tls_server: TLSServer, certs: Certs) -> None:
    assert_works(tls_cache(tls_server, SSL_CA_DATA=certs.ca.read_text()))


def test_unknown_ca_is_refused(tls_server: TLSServer, certs: Certs) -> None:
    errors = assert_fails(tls_cache(tls_server, SSL_CA_CERTS=str(certs.other_ca)))
    assert all(isinstance(e, ConnectionInterrupted) for e in errors)
    assert any("certificate" in str(e).lower() for e in errors), errors


def test_bundled_roots_do_not_trust_a_private_ca(tls_server: TLSServer) -> None:
    assert_fails(tls_cache(tls_server), ConnectionInterrupted)


def test_hostname_mismatch_is_refused_by_default(misnamed_server: TLSServer, certs: Certs) -> None:
    errors = assert_fails(tls_cache(misnamed_server, SSL_CA_CERTS=str(certs.ca)))
    assert any("name" in str(e).lower() for e in errors), errors


def test_hostname_check_can_be_turned_off(misnamed_server: TLSServer, certs: Certs) -> None:
    assert_works(tls_cache(misnamed_server, SSL_CA_CERTS=str(certs.ca), SSL_CHECK_HOSTNAME=False))
    # Without the hostname check the certificate must still come from a trusted CA.
    untrusted = tls_cache(
        misnamed_server, SSL_CA_CERTS=str(certs.other_ca), SSL_CHECK_HOSTNAME=False
    )
    assert_fails(untrusted, ConnectionInterrupted)


@pytest.mark.parametrize("reqs", ["none", None, "NONE"])
def test_verification_off_accepts_any_certificate(
    misnamed_server: TLSServer, certs: Certs, reqs: str | None
) -> None:
    # No CA given and a certificate for another name: only works with verification off.
    assert_works(tls_cache(misnamed_server, SSL_CERT_REQS=reqs))


def test_client_certificate_required_by_the_server(mtls_server: TLSServer, certs: Certs) -> None:
    with_cert = tls_cache(
        mtls_server,
        SSL_CA_CERTS=str(certs.ca),
        SSL_CERTFILE=str(certs.client_cert),
        SSL_KEYFILE=str(certs.client_key),
    )
    assert_works(with_cert)
    without = tls_cache(mtls_server, SSL_CA_CERTS=str(certs.ca))
    assert_fails(without, ConnectionInterrupted)


def test_password_in_rediss_url_never_shown(tls_server: TLSServer, certs: Certs) -> None:
    location = tls_server.url(auth=f"default:{PASSWORD}@")
    cache = build_cache(location, {"OPTIONS": {"SSL_CA_CERTS": str(certs.ca)}})
    assert_works(cache)
    assert PASSWORD not in repr(cache) + repr(cache._config)
    wrong = build_cache(location, {"OPTIONS": {"SSL_CA_CERTS": str(certs.other_ca)}})
    assert_fails(wrong)
    # The private key never shows in the configuration's repr.
    mtls = build_cache(
        location,
        {"OPTIONS": {"SSL_CERTFILE": str(certs.client_cert), "SSL_KEYFILE": str(certs.client_key)}},
    )
    assert b"PRIVATE KEY" not in repr(mtls._config).encode()
    assert "PRIVATE KEY" not in repr(vars(mtls))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"SSL_CA_CERTS": "/nonexistent/ca.pem"}, "SSL_CA_CERTS"),
        ({"SSL_CA_CERTS": 3}, "SSL_CA_CERTS"),
        ({"SSL_CERTFILE": "CERT"}, "SSL_CERTFILE"),
        ({"SSL_CERT_REQS": "sometimes"}, "SSL_CERT_REQS"),
        ({"SSL_CERT_REQS": True}, "SSL_CERT_REQS"),
        ({"SSL_CHECK_HOSTNAME": "no"}, "SSL_CHECK_HOSTNAME"),
        ({"SSL_CA_DATA": "not pem"}, "SSL_CA_DATA"),
        ({"ssl_ca_certs": "CA", "CONNECTION_POOL_KWARGS": {"ssl_ca_certs": "CA"}}, "ssl_ca_certs"),
    ],
)
def test_invalid_tls_options_are_rejected(
    certs: Certs, options: dict[str, Any], named: str
) -> None:
    options = {
        k: (str(certs.ca) if v == "CA" else str(certs.client_cert) if v == "CERT" else v)
        for k, v in options.items()
    }
    with pytest.raises(ImproperlyConfigured, match=named):
        build_cache("rediss://127.0.0.1:6379/0", {"OPTIONS": options}).get("k")


def test_tls_options_need_a_tls_location(certs: Certs) -> None:
    with pytest.raises(ImproperlyConfigured, match="rediss://"):
        build_cache("redis://127.0.0.1:6379/0", {"OPTIONS": {"SSL_CA_CERTS": str(certs.ca)}}).get(
            "k"
        )


def test_a_file_that_is_not_a_key_is_a_configuration_error(certs: Certs) -> None:
    options = {"SSL_CERTFILE": str(certs.client_cert), "SSL_KEYFILE": str(certs.client_cert)}
    with pytest.raises(ImproperlyConfigured, match=r"(?i)key"):
        build_cache("rediss://127.0.0.1:6379/0", {"OPTIONS": options}).get("k")


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"SSL_CA_CERTS.*cannot read"):
        build_cache("rediss://127.0.0.1:6379/0", {"OPTIONS": {"SSL_CA_CERTS": str(tmp_path)}}).get(
            "k"
        )


def test_cluster_over_tls(certs: Certs) -> None:
    # Every node serves TLS (cluster bus and replication too); the cache learns the nodes'
    # TLS ports from CLUSTER SLOTS and verifies each node's certificate with the CA.
    # The nodes authenticate each other on the cluster bus: a certificate for both ends.
    make_leaf(
        certs.dir,
        "node",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    tls_args = (
        "--tls-cert-file", str(certs.dir / "node.crt"),
        "--tls-key-file", str(certs.dir / "node.key"),
        "--tls-ca-cert-file", str(certs.ca),
        "--tls-auth-clients", "no",
    )  # fmt: skip
    with tls_capable():
        cluster = Cluster(tls_args=tls_args).start()
    try:
        cache = build_cache(
            [f"rediss://127.0.0.1:{cluster.tls_ports[0]}"],
            {"OPTIONS": {"CLUSTER": True, "SSL_CA_CERTS": str(certs.ca)}},
        )
        values = {f"k{i}": i for i in range(20)}
        cache.set_many(values)
        assert cache.get_many(list(values)) == values
        assert asyncio.run(cache.aget_many(list(values))) == values
        assert cache.incr("k1") == 2
        # The data is on the nodes, whichever port it went through.
        assert sum(int(node.cli("dbsize")) for node in cluster.primaries()) == 20
        unverified = build_cache(
            [f"rediss://127.0.0.1:{cluster.tls_ports[0]}"],
            {"OPTIONS": {"CLUSTER": True, "SSL_CA_CERTS": str(certs.other_ca)}},
        )
        with pytest.raises(CacheError):
            unverified.get("k1")

        # Replicas answer reads only on connections that said READONLY (else MOVED). Wait
        # until every shard's replica is known and has the data, then read through them.
        deadline = time.monotonic() + 20
        while not all(len(shard) > 3 for shard in cache.client.execute("CLUSTER", "SLOTS")):
            assert time.monotonic() < deadline, "the replicas never joined"
            time.sleep(0.05)
        replicas = [node for node in cluster.live_nodes() if cluster.role(node) == "slave"]
        while sum(int(node.cli("dbsize")) for node in replicas) < 20:
            assert time.monotonic() < deadline, "the replicas never caught up"
            time.sleep(0.05)

        def replica_gets() -> int:
            stats = [node.info("commandstats").get("cmdstat_get", "calls=0") for node in replicas]
            return sum(int(stat.split(",")[0].split("=")[1]) for stat in stats)

        from_replicas = build_cache(
            [f"rediss://127.0.0.1:{cluster.tls_ports[0]}"],
            {
                "OPTIONS": {
                    "CLUSTER": True,
                    "READ_FROM_REPLICAS": True,
                    "SSL_CA_CERTS": str(certs.ca),
                }
            },
        )
        from_replicas.get("k0")  # learns the slot table (through a seed)
        before = replica_gets()
        assert [from_replicas.get(f"k{i}") for i in range(5)] == [0, 2, 2, 3, 4]

        async def reads() -> list[Any]:
            return [await from_replicas.aget(f"k{i}") for i in range(5)]

        assert asyncio.run(reads()) == [0, 2, 2, 3, 4]
        assert replica_gets() - before == 10

    finally:
        cluster.stop()


def test_tls_calls_are_counted(tls_server: TLSServer, certs: Certs) -> None:
    # The counters of tests/observability, on TLS connections: bytes both ways are the
    # plaintext RESP bytes, as on plain connections.
    cache = tls_cache(tls_server, SSL_CA_CERTS=str(certs.ca))
    cache.reset_stats()
    assert_works(cache)
    totals = cache.stats()["totals"]
    assert (totals["calls"]["GET"], totals["calls"]["MGET"], totals["calls"]["SET"]) == (2, 1, 3)
    assert (totals["hits"], totals["misses"]) == (4, 0)
    assert totals["bytes_sent"] > 0 and totals["bytes_received"] > 0
    assert totals["connections"] >= 2  # this thread's and the async one


def test_rotating_credentials_over_tls(tls_server: TLSServer, certs: Certs) -> None:
    """CREDENTIAL_PROVIDER over TLS: a thread's connection re-authenticates in place (one AUTH
    round trip); the async connection is remade with the new credentials; a refused new
    connection asks the provider and tries again."""
    from redoxide._credentials import credentials_for
    from support.rotation import Holder, wait_until

    server = tls_server.server
    for user in ("tls-u1", "tls-u2"):
        server.cli("ACL", "SETUSER", user, "on", f">{PASSWORD}{user}", "~*", "+@all")
    holder = Holder()
    holder.answer = ("tls-u1", f"{PASSWORD}tls-u1")
    options = {
        "CREDENTIAL_PROVIDER": holder,
        "CREDENTIAL_REFRESH_SECONDS": 1,
        "SSL_CA_CERTS": str(certs.ca),
        "SOCKET_CONNECT_TIMEOUT": 5.0,
    }
    cache = build_cache(tls_server.url(), {"OPTIONS": options, "KEY_PREFIX": fresh_prefix()})
    cache.set("k", 1)

    def users() -> dict[str, str]:
        found = {}
        for line in server.cli("CLIENT", "LIST").splitlines():
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            if fields.get("user", "").startswith("tls-u"):
                found[fields["id"]] = fields["user"]
        return found

    (link,) = users()  # the sync connection of this thread, as tls-u1
    cell = credentials_for(cache._config.connection.credential_provider)
    generation = cell.generation
    holder.answer = ("tls-u2", f"{PASSWORD}tls-u2")
    wait_until(lambda: cell.generation > generation, what="the provider's next call")
    assert cache.get("k") == 1
    assert users()[link] == "tls-u2"  # the same connection, now tls-u2
    assert asyncio.run(cache.aget("k")) == 1
    assert sum(user == "tls-u2" for user in users().values()) == 2
    # Rotated where a process has not heard yet (refreshed only every 300 s): its new
    # connections are refused, ask the provider, and try again.
    slow = Holder()
    slow.answer = ("tls-u1", f"{PASSWORD}tls-u1")
    options = {**options, "CREDENTIAL_PROVIDER": slow, "CREDENTIAL_REFRESH_SECONDS": 300}
    other = build_cache(tls_server.url(), {"OPTIONS": options, "KEY_PREFIX": fresh_prefix()})
    other.set("k", 2)
    assert asyncio.run(other.aget("k")) == 2
    calls = slow.calls
    slow.answer = ("tls-u1", f"{PASSWORD}rotated")
    server.cli("ACL", "SETUSER", "tls-u1", "resetpass", f">{PASSWORD}rotated")
    server.cli("CLIENT", "KILL", "USER", "tls-u1")
    # The async connection first: its manager reconnects with the old password, is refused,
    # and the call goes again on a connection made with the new one.
    assert asyncio.run(other.aget("k")) == 2
    assert slow.calls > calls
    assert other.get("k") == 2
