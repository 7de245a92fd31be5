"""redis-py's options in the LOCATION query, as django-redis and Django's builtin RedisCache
read them (redis.connection.parse_url): a CACHES entry moves to redoxide by its BACKEND line.

Each option redis-py takes is honoured (the OPTIONS setting of the same name), checked and
ignored (it tunes a pool or a retry redoxide does not have), or refused naming it (redoxide
cannot honour it, and ignoring it would change what was asked). A bad value, an unknown name,
a value that contradicts OPTIONS or another URL of the list: an ImproperlyConfigured error
naming the parameter, at the first call (and from `manage.py check`). Every cache here is
built by Django's cache handler from a CACHES entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import CacheHandler
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from support.backend import BACKEND, assert_startup_error, is_redoxide, raw_client
from support.netfakes import CountingProxy
from support.secrecy import SECRET
from support.servers import RedisServer, SentinelSet, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's errors and settings")

from redoxide.exceptions import CacheTimeout, ConfigurationError, ConnectionInterrupted  # noqa: E402

DOWN = f"redis://127.0.0.1:{free_port()}/0"


@contextlib.contextmanager
def cache_of(location: Any, **options: Any) -> Iterator[Any]:
    """The cache Django's handler builds from one CACHES entry, closed afterwards."""
    entry: dict[str, Any] = {"BACKEND": BACKEND, "LOCATION": location}
    if options:
        entry["OPTIONS"] = options
    handler = CacheHandler({"default": entry})
    try:
        yield handler["default"]
    finally:
        handler.close_all()


def assert_round_trip(cache: Any) -> None:
    cache.set("k", {"v": 1})
    assert cache.get("k") == {"v": 1}
    assert asyncio.run(cache.aget("k")) == {"v": 1}


# -- honoured ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_socket_timeout_in_the_query_bounds_each_call(redis_server: RedisServer, mode: str) -> None:
    """A reply held back by the proxy (never sent until released): the call ends at the
    URL's 1.5 s, and the error names it (the default is 2 s, so the text tells them apart;
    nothing here measures time)."""
    with (
        CountingProxy(redis_server.port) as proxy,
        cache_of(f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=1.5") as cache,
    ):
        assert cache._config.connection.socket_timeout == 1.5
        assert_round_trip(cache)  # the connections are up
        proxy.hold(b"held-key")
        with pytest.raises(CacheTimeout, match=r"\b1\.5s\b"):
            if mode == "sync":
                cache.get("held-key")
            else:
                asyncio.run(cache.aget("held-key"))
        proxy.release()
        assert_round_trip(cache)  # and the cache carries on


def test_connect_timeout_in_the_query_is_the_connect_timeout() -> None:
    with cache_of(f"{DOWN}?socket_connect_timeout=0.3&socket_timeout=0.7") as cache:
        assert cache._config.connection.connect_timeout == 0.3
        assert cache._config.connection.socket_timeout == 0.7
        with pytest.raises(ConnectionInterrupted):
            cache.get("k")


def test_db_and_credentials_in_the_query(auth_server: RedisServer) -> None:
    """?username= and ?password= as redis-py reads them (its docs show them on unix://)."""
    url = f"redis://127.0.0.1:{auth_server.port}/0?db=3&username=alice&password={SECRET}"
    client = raw_client(auth_server.port, db=3, password=SECRET)
    try:
        with cache_of(url) as cache:
            assert_round_trip(cache)
            assert SECRET not in repr(cache)
            users = {c["user"] for c in client.client_list() if c["db"] == "3"}
            assert "alice" in users, client.client_list()
        assert client.keys("*") == [b":1:k"]
    finally:
        client.close()


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, int]]:
    """A redis-server serving TLS with a self-signed certificate (as hosting platforms whose
    rediss:// URLs come with ?ssl_cert_reqs=none do), and its TLS port."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl CLI")
    d = tmp_path_factory.mktemp("selfsigned")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "2",
         "-subj", "/CN=self-signed", "-addext", "subjectAltName=DNS:elsewhere.example",
         "-addext", "basicConstraints=critical,CA:FALSE",
         "-addext", "extendedKeyUsage=serverAuth"],
        cwd=d, check=True, capture_output=True,
    )  # fmt: skip
    cert, key = Path(d, "cert.pem"), Path(d, "key.pem")
    tls_port = free_port()
    args = ("--tls-port", str(tls_port), "--tls-cert-file", str(cert),
            "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
            "--tls-auth-clients", "no")  # fmt: skip
    try:
        server = RedisServer(*args, password=SECRET).start()
    except RuntimeError as exc:
        if "TLS support" in str(exc):
            pytest.skip("this server binary is built without TLS support")
        raise
    try:
        yield server, tls_port
    finally:
        server.stop()


@pytest.mark.parametrize("reqs", ["none", "CERT_NONE"])
def test_rediss_url_with_ssl_cert_reqs_none(
    self_signed: tuple[RedisServer, int], reqs: str
) -> None:
    server, tls_port = self_signed
    url = f"rediss://:{SECRET}@127.0.0.1:{tls_port}"
    with cache_of(f"{url}?ssl_cert_reqs={reqs}") as cache:
        assert_round_trip(cache)
        assert server.cli("EXISTS", ":1:k") == "1"
    with cache_of(url) as verified, pytest.raises(ConnectionInterrupted):
        verified.get("k")  # the certificate is not trusted unless verification is off


def test_ssl_check_hostname_and_ca_in_the_query(self_signed: tuple[RedisServer, int]) -> None:
    """The certificate names another host: trusting it as a CA is not enough, unless
    ?ssl_check_hostname=false."""
    server, tls_port = self_signed
    ca = server.cli("CONFIG", "GET", "tls-cert-file").splitlines()[-1]
    url = f"rediss://:{SECRET}@127.0.0.1:{tls_port}/0?ssl_ca_certs={ca}"
    with cache_of(url) as named, pytest.raises(ConnectionInterrupted):
        named.get("k")
    with cache_of(f"{url}&ssl_check_hostname=false") as cache:
        assert_round_trip(cache)


# -- checked, then ignored ---------------------------------------------------------------------


def test_pool_and_retry_options_are_accepted(redis_server: RedisServer) -> None:
    """What django-redis users put in their URLs to tune redis-py's pool and retries: the
    switch keeps working (docs/options.md says what redoxide does instead)."""
    query = (
        "max_connections=50&retry_on_timeout=true&socket_keepalive=True&health_check_interval=30"
        "&socket_read_size=65536&timeout=20&retry_on_error=ConnectionError%2CTimeoutError"
        "&protocol=2&decode_responses=false&encoding=utf-8&ssl_validate_ocsp=no"
    )
    with cache_of(f"redis://127.0.0.1:{redis_server.port}/0?{query}") as cache:
        assert_round_trip(cache)


def test_builtin_backend_pool_options_are_accepted(redis_server: RedisServer) -> None:
    """Django's builtin backend hands its lower-case OPTIONS to redis-py's pool: the same
    names as in the query, as Python values."""
    options = {
        "health_check_interval": 30,
        "max_connections": 50,
        "retry_on_timeout": True,
        "socket_keepalive": True,
        "retry_on_error": [ConnectionError],
        "protocol": 2,
        "decode_responses": False,
    }
    with cache_of(f"redis://127.0.0.1:{redis_server.port}/0", **options) as cache:
        assert_round_trip(cache)


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("client_name", "web", "does not name its connections"),
        ("protocol", 3, "RESP2"),
        ("decode_responses", True, "bytes"),
        ("max_connections", "lots", "whole number"),
        ("health_check_interval", [30], "must be a number"),
    ],
)
def test_builtin_backend_pool_options_redoxide_cannot_honour(
    option: str, value: Any, reason: str
) -> None:
    assert_startup_error(DOWN, {option: value}, f"OPTIONS[{option!r}]", reason)


def test_django_redis_pool_kwargs_are_read_as_redis_py_reads_them(
    redis_server: RedisServer,
) -> None:
    """django-redis hands CONNECTION_POOL_KWARGS to redis-py's pool: a timeout there counted,
    and was silently dropped here; what cannot be honoured is refused as in the query."""
    pool = {"socket_timeout": 0.3, "max_connections": 50, "retry_on_timeout": True}
    with cache_of(f"redis://127.0.0.1:{redis_server.port}/0", CONNECTION_POOL_KWARGS=pool) as cache:
        assert_round_trip(cache)
        assert cache._config.connection.socket_timeout == 0.3
    assert_startup_error(
        DOWN, {"CONNECTION_POOL_KWARGS": {"client_name": "web"}}, "'client_name'", "name"
    )
    error = assert_startup_error(
        f"{DOWN}?socket_timeout=0.5",
        {"CONNECTION_POOL_KWARGS": {"socket_timeout": 0.3}},
        "CONNECTION_POOL_KWARGS",
        "?socket_timeout=",
        "contradicts",
    )
    assert "0.3" in str(error)


def test_a_pool_db_gives_way_to_the_url_path_as_in_redis_py(redis_server: RedisServer) -> None:
    """redis-py's ConnectionPool.from_url applies the URL's database over the pool's keywords,
    so under django-redis this cache's keys are in database 1, and so is what clear() (FLUSHDB)
    empties; database 0, named only by CONNECTION_POOL_KWARGS, is someone else's."""
    import redis

    url = f"redis://127.0.0.1:{redis_server.port}/1"
    pool = redis.ConnectionPool.from_url(url, db=0)
    assert pool.connection_kwargs["db"] == 1  # the reference behaviour
    other = raw_client(redis_server.port, db=0)
    try:
        other.set("not-the-cache", b"kept")
        with cache_of(url, CONNECTION_POOL_KWARGS={"db": 0}) as cache:
            cache.set("pool-db", 1)
            assert redis_server.cli("-n", "1", "EXISTS", ":1:pool-db") == "1"
            assert redis_server.cli("-n", "0", "EXISTS", ":1:pool-db") == "0"
            cache.clear()
            assert redis_server.cli("-n", "1", "EXISTS", ":1:pool-db") == "0"
        assert other.get("not-the-cache") == b"kept"
        # Without a database in the path, the pool's counts (redis-py too).
        with cache_of(url.removesuffix("/1"), CONNECTION_POOL_KWARGS={"db": 2}) as cache:
            cache.set("pool-db", 1)
        assert redis_server.cli("-n", "2", "EXISTS", ":1:pool-db") == "1"
        # OPTIONS keep their precedence: DB wins over the path, and the pool gives way.
        with cache_of(url, DB=3, CONNECTION_POOL_KWARGS={"db": 0}) as cache:
            cache.set("pool-db", 1)
        assert redis_server.cli("-n", "3", "EXISTS", ":1:pool-db") == "1"
    finally:
        other.close()


def test_a_pool_db_in_a_list_serves_the_urls_without_one(redis_server: RedisServer) -> None:
    """redis-py gives each URL of a list its own pool: the pool's db serves those without a
    database in their path. redoxide has one database for every server, so that db must be
    the one the others name."""
    base = f"redis://127.0.0.1:{redis_server.port}"
    with cache_of([f"{base}/01", base], CONNECTION_POOL_KWARGS={"db": 1}) as cache:
        cache.set("pool-list", 1)
        assert cache._config.servers.db == 1
    assert redis_server.cli("-n", "1", "EXISTS", ":1:pool-list") == "1"
    assert_startup_error(
        [f"{DOWN}", DOWN.removesuffix("/0")],
        {"CONNECTION_POOL_KWARGS": {"db": 1}},
        "OPTIONS['CONNECTION_POOL_KWARGS']['db']",
        "one database serves every server",
    )


def test_pool_credentials_give_way_to_the_user_information(auth_server: RedisServer) -> None:
    """As redis-py's from_url: the URL's user:password@ wins over the pool's keywords."""
    url = f"redis://alice:{SECRET}@127.0.0.1:{auth_server.port}/0"
    pool = {"username": "nobody", "password": "pw-wrong"}
    with cache_of(url, CONNECTION_POOL_KWARGS=pool) as cache:
        assert_round_trip(cache)
        assert cache._config.connection.username == "alice"


@pytest.mark.parametrize(
    "pool",
    [
        {"socket_timeout": None},
        {"socket_connect_timeout": None},
        {"db": None},
        {"username": None, "password": None},
    ],
)
def test_pool_values_of_none_are_not_given(redis_server: RedisServer, pool: dict[str, Any]) -> None:
    """None is redis-py's default for each of them: the setting is not given, and redoxide's
    own default holds (a None timeout never means waiting forever here)."""
    with cache_of(f"redis://127.0.0.1:{redis_server.port}/4", CONNECTION_POOL_KWARGS=pool) as cache:
        assert_round_trip(cache)
        assert cache._config.connection.socket_timeout == 2.0
        assert cache._config.connection.connect_timeout == 1.0
    assert redis_server.cli("-n", "4", "EXISTS", ":1:k") == "1"


def test_a_bad_pool_value_is_named_as_written() -> None:
    error = assert_startup_error(
        DOWN, {"CONNECTION_POOL_KWARGS": {"socket_timeout": "soon"}}, "must be a number"
    )
    assert "OPTIONS['CONNECTION_POOL_KWARGS']['socket_timeout']" in str(error), str(error)


@pytest.mark.parametrize(
    ("location", "options", "named"),
    [
        (DOWN, {"DB": "\u00b2"}, "OPTIONS['DB']"),
        (DOWN, {"db": "\u0663"}, "OPTIONS['db']"),
        (DOWN, {"CONNECTION_POOL_KWARGS": {"db": "\u00b2"}}, "'CONNECTION_POOL_KWARGS']['db']"),
        (DOWN.replace("/0", "/\u00b2"), {}, "the database"),
        (f"{DOWN}?db=\u00b2", {}, "?db="),
        (f"{DOWN}?max_connections=\u00b2", {}, "?max_connections="),
        (f"rediss://127.0.0.1:{free_port()}/0?ssl_min_version=\u00b2", {}, "?ssl_min_version="),
    ],
    ids=["DB", "db_arabic", "pool_db", "path", "query_db", "query_count", "tls_version"],
)
def test_a_number_written_in_other_digits_is_refused_naming_it(
    location: str, options: dict[str, Any], named: str
) -> None:
    """str.isdigit() takes "²" (and int() takes "٣"): a database or count written so is a
    configuration error naming where, not a bare ValueError or another database."""
    error = assert_startup_error(location, options, named)
    assert "invalid literal" not in str(error), str(error)


# -- refused -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        # redoxide cannot honour these, and ignoring them would change what was asked:
        ("client_name=web", "does not name its connections"),
        ("lib_name=mine", "does not name its connections"),
        ("protocol=3", "RESP2"),
        ("decode_responses=true", "bytes"),
        ("encoding=latin-1", "UTF-8"),
        ("legacy_responses=false", "classic shapes"),
        ("ssl_validate_ocsp=true", "OCSP"),
        ("ssl_ca_path=/etc/ssl/certs", "one PEM file"),
        ("ssl_password=x", "unencrypted"),
        ("ssl_ciphers=HIGH", "rustls"),
        ("ssl_min_version=772", "TLS 1.3"),
        # not redis-py's (or misspelt):
        ("nosuch=1", "not a parameter"),
        ("Socket_Timeout=1", "not a parameter"),
        ("socket_timout=1", "not a parameter"),
    ],
)
def test_a_parameter_redoxide_cannot_honour_is_refused_by_name(query: str, reason: str) -> None:
    name = query.partition("=")[0]
    assert_startup_error(f"{DOWN}?{query}", {}, f"?{name}=", reason)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("socket_timeout=soon", "must be a number of seconds, not 'soon'"),
        ("socket_timeout=0", "from 0.001 to 86400"),
        ("socket_timeout=inf", "from 0.001 to 86400"),
        ("socket_timeout=", "has no value"),
        ("socket_connect_timeout=-1", "from 0.001 to 86400"),
        ("db=-1", "whole number"),
        ("db=one", "whole number"),
        ("max_connections=lots", "whole number"),
        ("max_connections=0", "whole number from 1"),
        ("retry_on_timeout=maybe", "true or false"),
        ("health_check_interval=soon", "whole number"),
        ("protocol=resp9", "must be 2"),
        ("db=1&db=2", "twice"),
    ],
)
def test_a_bad_value_is_refused_naming_the_parameter(query: str, reason: str) -> None:
    name = query.partition("=")[0]
    assert_startup_error(f"{DOWN}?{query}", {}, f"?{name}=", reason)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("ssl_cert_reqs=sometimes", "must be"),
        ("ssl_check_hostname=perhaps", "true or false"),
        ("ssl_ca_certs=/nonexistent", "cannot read"),
    ],
)
def test_a_bad_tls_value_is_refused_naming_the_parameter(query: str, reason: str) -> None:
    name = query.partition("=")[0]
    assert_startup_error(f"rediss://127.0.0.1:{free_port()}/0?{query}", {}, f"?{name}=", reason)


def test_tls_parameters_need_a_tls_url() -> None:
    assert_startup_error(f"{DOWN}?ssl_cert_reqs=none", {}, "?ssl_cert_reqs=", "rediss://")


def test_a_fragment_is_refused() -> None:
    """redis-py ignores it; the core's URL parser would read #insecure as "verify nothing"."""
    assert_startup_error(f"rediss://127.0.0.1:{free_port()}/0#insecure", {}, "fragment")


def test_the_system_check_names_the_parameter() -> None:
    """What `manage.py check` reports (the redoxide app's check of CACHES)."""
    from redoxide.checks import check_configuration

    caches = {"default": {"BACKEND": BACKEND, "LOCATION": f"{DOWN}?client_name=web"}}
    with override_settings(CACHES=caches):
        [message] = check_configuration()
    assert message.id == "redoxide.E001"
    assert "?client_name=" in message.msg and "does not name its connections" in message.msg


# -- the query and OPTIONS ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "options"),
    [
        ("socket_timeout=0.5", {"SOCKET_TIMEOUT": 0.5}),
        ("socket_connect_timeout=0.5", {"socket_connect_timeout": 0.5}),
        ("db=4", {"DB": 4}),
        ("password=pw", {"PASSWORD": "pw"}),
    ],
)
def test_the_query_and_options_may_say_the_same(query: str, options: dict[str, Any]) -> None:
    with cache_of(f"{DOWN}?{query}", **options) as cache:
        assert cache._config is not None


@pytest.mark.parametrize(
    ("query", "options", "named"),
    [
        ("socket_timeout=0.5", {"SOCKET_TIMEOUT": 5}, "SOCKET_TIMEOUT"),
        ("socket_connect_timeout=0.5", {"socket_connect_timeout": 2}, "socket_connect_timeout"),
        ("db=4", {"DB": 5}, "DB"),
        ("password=pw-7e1", {"PASSWORD": "pw-9c4"}, "PASSWORD"),
        ("username=bob", {"USERNAME": "alice"}, "USERNAME"),
    ],
)
def test_the_query_and_options_may_not_contradict(
    query: str, options: dict[str, Any], named: str
) -> None:
    """redis-py lets the query win; redoxide's OPTIONS win over the URL's path: a silent
    choice would put keys in another database or wait another time than one of them says."""
    name = query.partition("=")[0]
    error = assert_startup_error(f"{DOWN}?{query}", options, named, f"?{name}=", "contradicts")
    assert "pw-" not in str(error)


def test_tls_query_and_options_may_not_contradict() -> None:
    location = f"rediss://127.0.0.1:{free_port()}/0?ssl_cert_reqs=none"
    assert_startup_error(
        location, {"SSL_CERT_REQS": "required"}, "SSL_CERT_REQS", "?ssl_cert_reqs="
    )
    with cache_of(location, SSL_CERT_REQS=None) as cache:
        assert cache._config.connection.tls_kwargs == {"tls_verify": False}


def test_the_query_and_the_user_information_may_not_contradict() -> None:
    error = assert_startup_error(
        f"redis://u:{SECRET}@127.0.0.1:{free_port()}/0?password=pw-7e1",
        {},
        "?password=",
        "before the host",
    )
    assert SECRET not in str(error) and "pw-7e1" not in str(error)


# -- every LOCATION form -----------------------------------------------------------------------


def test_a_list_of_urls_with_the_same_query(redis_server: RedisServer) -> None:
    """A primary and its replicas (here one server named twice): one value for all."""
    url = f"redis://127.0.0.1:{redis_server.port}/0?db=5&socket_timeout=0.4"
    for location in ([url, url], f"{url},{url}"):
        with cache_of(location) as cache:
            assert_round_trip(cache)
            assert cache._config.connection.socket_timeout == 0.4
    assert redis_server.cli("-n", "5", "EXISTS", ":1:k") == "1"


def test_a_list_of_urls_that_disagree_is_refused() -> None:
    first = f"{DOWN}?socket_timeout=0.4"
    for second in (DOWN, f"{DOWN}?socket_timeout=0.5", f"{DOWN}?db=1"):
        with (
            pytest.raises(ImproperlyConfigured, match="disagree") as info,
            cache_of([first, second]) as cache,
        ):
            cache.get("k")
        assert isinstance(info.value, ConfigurationError)


def test_unix_socket_with_query(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = str(tmp_path_factory.mktemp("sock") / "redis.sock")
    with RedisServer("--unixsocket", path, "--unixsocketperm", "700", password=SECRET) as server:
        with cache_of(f"unix://{path}?db=2&password={SECRET}&socket_timeout=0.5") as cache:
            assert_round_trip(cache)
            assert cache._config.connection.socket_timeout == 0.5
        assert server.cli("-n", "2", "EXISTS", ":1:k") == "1"


def test_sentinel_location_with_query(sentinel_set: SentinelSet) -> None:
    location = f"redis://{sentinel_set.service}/0?db=2&socket_timeout=0.6"
    options = {"SENTINELS": sentinel_set.sentinel_addresses}
    with cache_of(location, **options) as cache:
        assert_round_trip(cache)
        assert cache._config.connection.socket_timeout == 0.6
        assert cache._config.servers.db == 2


def test_cluster_seeds_with_query() -> None:
    seeds = [f"redis://127.0.0.1:{free_port()}?socket_timeout=0.6" for _ in range(2)]
    with cache_of(seeds, CLUSTER=True) as cache:
        assert cache._config.connection.socket_timeout == 0.6
        assert cache._config.servers.topology == "cluster"
    assert_startup_error(f"{seeds[0]}&db=1", {"CLUSTER": True}, "database 0")
