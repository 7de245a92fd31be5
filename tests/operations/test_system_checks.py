"""System checks (the app "redoxide" installed): every redoxide cache's settings judged as
construction judges them, with stable ids; the deployment warnings of ``check --deploy``; the
connectivity check, which runs only when its tag is asked, against servers up and down."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from redoxide.checks import check_configuration, check_deployment, connectivity_asked
from support.backend import build_cache, is_redoxide
from support.operations import run
from support.servers import (
    Cluster,
    RedisServer,
    SentinelSet,
    expected_offers,
    free_port,
    server_binary,
)
from support.topology import commandstat

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's app")

Use = Callable[..., None]


def redoxide(location: Any, **options: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"BACKEND": "redoxide.RedisCache", "LOCATION": location}
    if options:
        entry["OPTIONS"] = options
    return entry


def ids(messages: list[Any]) -> list[str]:
    return sorted(message.id for message in messages)


def dead_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


# -- configuration ---------------------------------------------------------------------------

# (LOCATION, OPTIONS, the id, a word the message must hold)
BAD = [
    ("127.0.0.1:6379", None, "redoxide.E001", "host:port:db"),
    ("http://127.0.0.1:6379/0", None, "redoxide.E001", "schemes"),
    ("redis://127.0.0.1:6379/0?timout=3", None, "redoxide.E001", "?timout="),
    ("redis://127.0.0.1:6379/0", {"SOKET_TIMEOUT": 1}, "redoxide.E002", "SOKET_TIMEOUT"),
    ("redis://127.0.0.1:6379/0", "not a dict", "redoxide.E002", "OPTIONS must be a dict"),
    (
        "redis://127.0.0.1:6379/0",
        {"SOCKET_TIMEOUT": 1, "socket_timeout": 2},
        "redoxide.E002",
        "both",
    ),
    ("redis://127.0.0.1:6379/0", {"SOCKET_TIMEOUT": "x"}, "redoxide.E003", "SOCKET_TIMEOUT"),
    ("redis://127.0.0.1:6379/0", {"CLUSTER": True, "DB": 2}, "redoxide.E003", "CLUSTER"),
    ("redis://127.0.0.1:6379/0", {"SSL_CERT_REQS": "none"}, "redoxide.E003", "rediss://"),
    ("redis://127.0.0.1:6379/0", {"COMPRESSOR": "no.such.Thing"}, "redoxide.E003", "COMPRESSOR"),
]


@pytest.mark.parametrize(("location", "options", "code", "word"), BAD)
def test_a_check_reports_what_construction_refuses_with_a_stable_id(
    project: Use, location: str, options: Any, code: str, word: str
) -> None:
    entry: dict[str, Any] = {"BACKEND": "redoxide.RedisCache", "LOCATION": location}
    if options is not None:
        entry["OPTIONS"] = options
    project({"bad": entry})
    with pytest.raises(ImproperlyConfigured) as refused:
        build_cache(location, {"OPTIONS": options} if options is not None else {}).get("k")
    [message] = check_configuration()
    assert message.id == code
    assert word in message.msg
    # The same words as the exception, with the alias in front.
    assert message.msg == f"CACHES['bad']: {str(refused.value).removeprefix('redoxide: ')}"


def test_check_command_exits_non_zero_naming_each_bad_cache(project: Use) -> None:
    project(
        {
            "one": redoxide("redis://127.0.0.1:6379/0", SOCKET_TIMEOUT=-1),
            "two": redoxide("redis://127.0.0.1:6379/0", NOPE=1),
            "fine": redoxide("redis://127.0.0.1:6379/1"),
        }
    )
    outcome = run("check", tags=["redoxide"])
    assert outcome.code == 1
    assert "(redoxide.E003) CACHES['one']" in outcome.err
    assert "(redoxide.E002) CACHES['two']" in outcome.err
    assert "'fine'" not in outcome.err


def test_a_key_function_or_backend_that_does_not_import_is_e004(project: Use) -> None:
    project(
        {
            "keyfunc": {**redoxide("redis://127.0.0.1:6379/0"), "KEY_FUNCTION": "no.such.func"},
            "backend": {"BACKEND": "redoxide.NoSuchCache", "LOCATION": "redis://127.0.0.1/0"},
        }
    )
    messages = check_configuration()
    assert ids(messages) == ["redoxide.E004", "redoxide.E004"]
    assert {m.msg.split(":")[0] for m in messages} == {"CACHES['keyfunc']", "CACHES['backend']"}


def test_valid_caches_and_other_backends_pass(project: Use) -> None:
    project(
        {
            "default": redoxide("redis://127.0.0.1:6379/0", SOCKET_TIMEOUT=0.5),
            "valkey": {"BACKEND": "redoxide.ValkeyCache", "LOCATION": "valkey://127.0.0.1/1"},
            # Not ours: options redoxide would refuse are not its business.
            "other": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": "redis://127.0.0.1:6379/2",
                "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"},
            },
        }
    )
    assert check_configuration() == []
    outcome = run("check", tags=["redoxide"])
    assert outcome.code == 0
    assert "no issues" in outcome.out


def test_importing_the_package_and_the_app_reads_no_settings() -> None:
    # Without DJANGO_SETTINGS_MODULE, touching settings raises ImproperlyConfigured.
    code = (
        "import redoxide, redoxide.apps, redoxide.checks, redoxide.management.base\n"
        "import redoxide.management.commands.cache_clear\n"
        "from django.conf import settings\n"
        "assert not settings.configured\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr


# -- deployment --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        ({}, True),
        ({"PASSWORD": "s3cret"}, False),
        ({"SERIALIZER": "redoxide.serializers.JSONSerializer"}, False),
        ({"SIGN_VALUES": True}, False),
    ],
)
def test_deploy_warns_about_pickle_on_a_server_without_password_or_tls(
    project: Use, options: dict[str, Any], warned: bool
) -> None:
    project({"default": redoxide("redis://127.0.0.1:6379/0", **options)})
    assert ("redoxide.W001" in ids(check_deployment())) is warned


def test_deploy_does_not_warn_about_pickle_over_tls(project: Use) -> None:
    project({"default": redoxide("rediss://cache.example.com:6380/0")})
    assert ids(check_deployment()) == []


def test_deploy_warns_when_tls_certificates_or_host_names_are_not_checked(project: Use) -> None:
    project(
        {
            "default": redoxide("rediss://:pw@cache.example.com/0", SSL_CERT_REQS="none"),
            "names": redoxide("rediss://:pw@cache.example.com/1", SSL_CHECK_HOSTNAME=False),
        }
    )
    messages = check_deployment()
    assert ids(messages) == ["redoxide.W002", "redoxide.W003"]
    assert "CACHES['default']" in next(m.msg for m in messages if m.id == "redoxide.W002")


def test_deploy_warns_about_fail_open_without_logging(project: Use) -> None:
    url = "redis://:pw@127.0.0.1:6379/0"
    project({"default": redoxide(url, IGNORE_EXCEPTIONS=True)})
    assert ids(check_deployment()) == ["redoxide.W004"]
    project({"default": redoxide(url, IGNORE_EXCEPTIONS=True, LOG_IGNORED_EXCEPTIONS=True)})
    assert ids(check_deployment()) == []
    # An exception handler decides about each ignored error (and logs as it likes).
    handler = "logging.captureWarnings"  # any importable callable
    project({"default": redoxide(url, IGNORE_EXCEPTIONS=True, EXCEPTION_HANDLER=handler)})
    assert ids(check_deployment()) == []


def test_deploy_warns_when_clear_would_flush_a_database_other_caches_use(project: Use) -> None:
    project(
        {
            "default": redoxide("redis://:pw@127.0.0.1:6379/0"),
            "sessions": {
                **redoxide("redis://:pw@127.0.0.1:6379?db=0", CLEAR_PREFIX_ONLY=True),
                "KEY_PREFIX": "sessions",
            },
            "legacy": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": "redis://127.0.0.1:6379/0",
            },
            "elsewhere": redoxide("redis://:pw@127.0.0.1:6379/1"),
        }
    )
    [warning] = check_deployment()
    assert warning.id == "redoxide.W005"
    # Only the cache whose clear() flushes is warned about; it names who else is there.
    assert warning.msg.startswith("CACHES['default']: shares its database with")
    assert "CACHES['legacy']" in warning.msg and "CACHES['sessions']" in warning.msg
    assert "elsewhere" not in warning.msg


def prefixed(prefix: str, location: str = "redis://:pw@127.0.0.1:6379/0", **options: Any) -> Any:
    return {**redoxide(location, **options), "KEY_PREFIX": prefix}


def test_deploy_warns_when_clear_prefix_only_would_delete_another_caches_keys(
    project: Use,
) -> None:
    project(
        {
            # "site:1:1:k" is "site:1"'s key "k" and a name of "site"'s shape (its key "1:k").
            "site": prefixed("site", CLEAR_PREFIX_ONLY=True),
            "nested": prefixed("site:1"),
            "elsewhere": prefixed("site:2", "redis://:pw@127.0.0.1:6379/1"),
        }
    )
    warnings = [m for m in check_deployment() if m.id == "redoxide.W006"]
    assert [w.msg.split(":")[0] for w in warnings] == ["CACHES['site']", "CACHES['nested']"]
    site, nested = (w.msg for w in warnings)
    assert "clear() (CLEAR_PREFIX_ONLY) deletes CACHES['nested']'s keys" in site
    assert "'site:1:1:'" in site and "elsewhere" not in site
    # "site:1" clears nothing but its own shape, yet its delete_pattern() can take "site"'s.
    assert "CACHES['site']" in nested and "delete_pattern()" in nested

    outcome = run("check", "--deploy", tags=["redoxide"], fail_level="WARNING")
    assert outcome.code == 1 and "redoxide.W006" in outcome.err


SHOP = {**prefixed("shop", CLEAR_PREFIX_ONLY=True), "KEY_FUNCTION": f"{__name__}.version_first"}


@pytest.mark.parametrize(
    ("mine", "theirs", "nested"),
    [
        (prefixed("site", CLEAR_PREFIX_ONLY=True), prefixed("site:sessions"), prefixed("site:1")),
        (prefixed("site", CLEAR_PREFIX_ONLY=True), prefixed("sites"), prefixed("site:-2")),
        # A version-first KEY_FUNCTION beside Django's layout: "*:shop:*" no longer.
        (SHOP, prefixed("site"), {**SHOP, "KEY_PREFIX": "shop:x"}),
        # django-redis' names under another KEY_PREFIX.
        (
            prefixed("site", CLEAR_PREFIX_ONLY=True),
            {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": "redis://127.0.0.1:6379/0",
                "KEY_PREFIX": "site:legacy",
            },
            {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": "redis://127.0.0.1:6379/0",
                "KEY_PREFIX": "site:7",
            },
        ),
    ],
)
def test_deploy_names_only_the_caches_whose_names_clear_would_take(
    project: Use, mine: dict[str, Any], theirs: dict[str, Any], nested: dict[str, Any]
) -> None:
    project({"mine": mine, "theirs": theirs, "nested": nested})
    warned = [m.msg for m in check_deployment() if m.id == "redoxide.W006"]
    about_mine = [msg for msg in warned if msg.startswith("CACHES['mine']")]
    assert len(about_mine) == 1 and "CACHES['nested']" in about_mine[0]
    assert not any("CACHES['theirs']" in msg for msg in warned)


def test_deploy_warns_when_a_cache_of_the_same_names_is_beside_one_that_clears_its_own(
    project: Use,
) -> None:
    project(
        {
            "mine": prefixed("app", CLEAR_PREFIX_ONLY=True),
            "legacy": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": "redis://127.0.0.1:6379",
                "KEY_PREFIX": "app",
            },
        }
    )
    [warning] = [m for m in check_deployment() if m.id == "redoxide.W006"]
    assert warning.msg.startswith("CACHES['mine']: its clear() (CLEAR_PREFIX_ONLY) deletes ")
    assert "CACHES['legacy']" in warning.msg


def version_first(key: Any, key_prefix: str, version: Any) -> str:
    return f"{version}:{key_prefix}:{key}"


def versionless(key: Any, key_prefix: str, version: Any) -> str:
    return f"{key_prefix}:{key}"


def hashed_with_version(key: Any, key_prefix: str, version: Any) -> str:
    return f"{key_prefix}:{hashlib.sha1(f'{version}:{key}'.encode()).hexdigest()}"


@pytest.mark.parametrize("key_function", [versionless, hashed_with_version])
def test_deploy_warns_when_clear_prefix_only_cannot_tell_its_names_from_anothers(
    project: Use, key_function: Any
) -> None:
    # Names with no version apart from the key: "site:lock" may be this cache's key "lock".
    function = f"{__name__}.{key_function.__name__}"
    project(
        {
            "site": {**prefixed("site", CLEAR_PREFIX_ONLY=True), "KEY_FUNCTION": function},
            "kept": {**prefixed("kept"), "KEY_FUNCTION": function},  # clear() flushes: no W008
            "layout": prefixed("shop", "redis://:pw@127.0.0.1:6379/1", CLEAR_PREFIX_ONLY=True),
        }
    )
    [warning] = [m for m in check_deployment() if m.id == "redoxide.W008"]
    assert warning.msg.startswith("CACHES['site']: its clear() (CLEAR_PREFIX_ONLY) deletes ")
    assert "'site:*'" in warning.msg

    outcome = run("check", "--deploy", tags=["redoxide"], fail_level="WARNING")
    assert outcome.code == 1 and "redoxide.W008" in outcome.err


def test_deployment_warnings_need_deploy(project: Use) -> None:
    project({"default": redoxide("redis://127.0.0.1:6379/0", IGNORE_EXCEPTIONS=True)})
    assert run("check", tags=["redoxide"]).err == ""
    outcome = run("check", "--deploy", tags=["redoxide"], fail_level="WARNING")
    assert outcome.code == 1
    assert "redoxide.W001" in outcome.err and "redoxide.W004" in outcome.err


# -- connectivity ------------------------------------------------------------------------------


def test_connectivity_is_checked_only_when_its_tag_is_asked(project: Use) -> None:
    project({"default": redoxide(dead_url(), SOCKET_CONNECT_TIMEOUT=0.2)})
    assert run("check").code == 0
    outcome = run("check", tags=["redoxide_connectivity"])
    assert outcome.code == 1
    assert "(redoxide.E010) CACHES['default']: primary 127.0.0.1:" in outcome.err
    assert "ConnectionInterrupted" in outcome.err


def test_connectivity_passes_and_pings_a_server_that_is_up(
    project: Use, redis_server: RedisServer
) -> None:
    project({"default": redoxide(redis_server.url)})
    before = commandstat(redis_server, "ping")
    outcome = run("check", tags=["redoxide_connectivity"])
    assert outcome.code == 0 and "no issues" in outcome.out
    assert commandstat(redis_server, "ping") == before + 1


def test_a_stalled_server_fails_the_check_within_its_timeout(
    project: Use, fresh_redis_server: RedisServer
) -> None:
    project({"default": redoxide(fresh_redis_server.url, SOCKET_TIMEOUT=0.2)})
    fresh_redis_server.pause()
    try:
        outcome = run("check", tags=["redoxide_connectivity"])
    finally:
        fresh_redis_server.resume()
    assert outcome.code == 1
    assert "redoxide.E010" in outcome.err and "CacheTimeout" in outcome.err


def test_connectivity_pings_every_node_of_a_cluster(project: Use, cluster: Cluster) -> None:
    project({"default": redoxide(cluster.urls[:1], CLUSTER=True)})
    # Primaries PING their replicas every repl-ping-replica-period: hold that off meanwhile.
    for node in cluster.nodes:
        node.cli("config", "set", "repl-ping-replica-period", "3600")
    try:
        before = {node.port: commandstat(node, "ping") for node in cluster.nodes}
        assert run("check", tags=["redoxide_connectivity"]).code == 0
        after = {node.port: commandstat(node, "ping") for node in cluster.nodes}
    finally:
        for node in cluster.nodes:
            node.cli("config", "set", "repl-ping-replica-period", "10")
    assert all(after[port] == before[port] + 1 for port in before), (before, after)


def test_connectivity_passes_on_sentinel_and_reports_the_sentinel_that_is_down(
    project: Use, sentinel_set: SentinelSet
) -> None:
    location = f"redis://{sentinel_set.service}/0"
    addresses = sentinel_set.sentinel_addresses
    project({"default": redoxide(location, SENTINELS=addresses)})
    assert run("check", tags=["redoxide_connectivity"]).code == 0
    dead = ("127.0.0.1", free_port())
    project({"default": redoxide(location, SENTINELS=[*addresses, dead])})
    outcome = run("check", tags=["redoxide_connectivity"])
    assert outcome.code == 1
    assert outcome.err.count("redoxide.E010") == 1
    assert f"sentinel 127.0.0.1:{dead[1]} did not answer" in outcome.err


def test_sentinels_that_do_not_answer_are_each_reported(project: Use) -> None:
    sentinels = [("127.0.0.1", free_port()), ("127.0.0.1", free_port())]
    project({"default": redoxide("redis://mymaster/0", SENTINELS=sentinels)})
    outcome = run("check", tags=["redoxide_connectivity"])
    assert outcome.code == 1
    assert outcome.err.count("(redoxide.E010) CACHES['default']: sentinel") == 2
    assert "(redoxide.E011) CACHES['default']: no sentinel named the primary" in outcome.err


def test_the_app_registers_its_tags(project: Use) -> None:
    project({})
    tags = run("check", list_tags=True).out.split()
    assert "redoxide" in tags and "redoxide_connectivity" in tags


def test_programs_ask_for_the_connectivity_check_with_a_context_manager(project: Use) -> None:
    project({"default": redoxide(dead_url(), SOCKET_CONNECT_TIMEOUT=0.2)})
    assert run_checks(tags=["redoxide_connectivity"]) == []
    with connectivity_asked():
        assert ids(run_checks(tags=["redoxide_connectivity"])) == ["redoxide.E010"]
    assert run_checks(tags=["redoxide_connectivity"]) == []


def hashed_everything(key: Any, key_prefix: str, version: Any) -> str:
    import hashlib

    return hashlib.sha1(f"{key_prefix}:{version}:{key}".encode()).hexdigest()


def int_version(key: Any, key_prefix: str, version: Any) -> str:
    return "%s/v%04d/%s" % (key_prefix, version, key)  # noqa: UP031


def test_a_key_functions_shape_is_learnt_for_e005_and_w006(project: Use) -> None:
    here = __name__
    project(
        {
            # No name says whose it is: clear() refuses (E005), nothing to compare (no W006).
            "opaque": {
                **prefixed("o", CLEAR_PREFIX_ONLY=True),
                "KEY_FUNCTION": f"{here}.hashed_everything",
            },
            # The version formatted as an int: learnt by number, "shop/v{version}/{key}".
            "shop": {
                **prefixed("shop", CLEAR_PREFIX_ONLY=True),
                "KEY_FUNCTION": f"{here}.int_version",
            },
            "lookalike": {**prefixed("shop/v1"), "KEY_FUNCTION": f"{here}.int_version"},
        }
    )
    [error] = check_configuration()
    assert error.id == "redoxide.E005" and error.msg.startswith("CACHES['opaque']")
    warned = [m.msg for m in check_deployment() if m.id == "redoxide.W006"]
    about_shop = [msg for msg in warned if msg.startswith("CACHES['shop']")]
    assert len(about_shop) == 1 and "CACHES['lookalike']" in about_shop[0]
    assert "shop/v{version}/{key}" in about_shop[0]
    assert not any(msg.startswith("CACHES['opaque']") for msg in warned)


@pytest.mark.parametrize(
    ("binary_name", "follows"),
    [
        ("valkey", "every feature works without scripts"),
        ("redis", "incr, decr, a lock's release and extend"),
    ],
)
def test_connectivity_says_when_the_user_cannot_run_scripts_and_what_follows(
    project: Use, binary_name: str, follows: str
) -> None:
    binary = server_binary(binary_name)
    if binary is None:
        pytest.skip(f"no {binary_name} server binary installed")
    if binary_name == "redis" and "SET IFEQ" in expected_offers(binary):
        follows = "every feature works without scripts"  # Redis 8.4+
    with RedisServer(binary=binary) as server:
        project({"default": redoxide(server.url)})
        assert "redoxide.W009" not in run("check", tags=["redoxide_connectivity"]).err
        server.cli("ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-@scripting")
        project({"default": redoxide(f"redis://app:pw@127.0.0.1:{server.port}/0")})
        outcome = run("check", tags=["redoxide_connectivity"], fail_level="WARNING")
        assert outcome.code == 1
        assert "(redoxide.W009) CACHES['default']: primary 127.0.0.1:" in outcome.err
        assert "runs no Lua script for the configured user (" in outcome.err
        assert "NOPERM" in outcome.err and "no permissions to run the 'eval' command" in outcome.err
        assert follows in outcome.err and "+@scripting" in outcome.err
