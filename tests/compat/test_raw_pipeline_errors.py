"""get_redis_connection()'s ``pipeline().execute(raise_on_error=False)`` on every setup a site
configures in CACHES: one server, one with TRACING, one with NEAR_CACHE, a primary with read
replicas, Sentinel and a cluster. Each runs the same pipeline redis-py runs on the node that
holds the keys (all under one hash tag, so one slot), and must answer as redis-py does there:
the same replies, error replies in their places of the same classes and messages, the same
keys left behind.

A transaction runs on one node, and an error reply inside EXEC's comes back in its command's
place, as redis-py returns it (the other commands ran).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.cache import caches
from django.test import override_settings
from redoxide import exceptions, get_redis_connection
from redoxide._protocols import owner
from redoxide.exceptions import ResponseError
from support.backend import is_redoxide
from support.near import near_options, stop_tracking

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="django-redis' API on redoxide")

SETUPS = ["one server", "tracing", "near cache", "replicas", "sentinel", "cluster"]
TAG = "{rx-pipeline-errors}"  # every key in one slot: a cluster runs them on one node
T, H, Z, B = (f"{TAG}{name}" for name in "thzb")


@dataclass
class Setup:
    name: str
    conn: Any  # get_redis_connection() of CACHES["default"]
    redis: Any  # redis-py on the node that holds the keys

    def clear(self) -> None:
        self.redis.delete(T, H, Z, B)

    def state(self) -> dict[str, Any]:
        return {key: self.redis.dump(key) for key in (T, H, Z, B)}


def location(name: str, request: pytest.FixtureRequest) -> tuple[Any, dict[str, Any]]:
    """LOCATION and OPTIONS of a cache on the setup's servers (started by the fixtures)."""
    if name == "one server":
        return request.getfixturevalue("redis_server").url, {}
    if name == "tracing":
        return request.getfixturevalue("redis_server").url, {"TRACING": True}
    if name == "near cache":  # a server of its own: the tracking connection, the marker key
        return request.getfixturevalue("fresh_redis_server").url, {"NEAR_CACHE": near_options()}
    if name == "replicas":
        primary, replicas = request.getfixturevalue("replica_set")
        return [primary.url] + [r.url for r in replicas], {"READ_FROM_REPLICAS": True}
    if name == "sentinel":
        running = request.getfixturevalue("sentinel_set")
        location = f"redis://{running.service}/0"
        return location, {"SENTINELS": running.sentinel_addresses, "READ_FROM_REPLICAS": True}
    if name == "cluster":
        return request.getfixturevalue("cluster").urls[:2], {"CLUSTER": True}
    raise ValueError(name)


@pytest.fixture(params=SETUPS)
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    """CACHES["default"] on the setup; yield its raw connection and redis-py on the node that
    holds the keys (found through the cache's own routing)."""
    import redis

    where, options = location(request.param, request)
    default = {"BACKEND": "redoxide.RedisCache", "LOCATION": where, "OPTIONS": options}
    with override_settings(CACHES={"default": {**default, "KEY_PREFIX": "rx-pipe"}}):
        cache = caches["default"]
        conn = get_redis_connection()
        conn.delete(T, H, Z, B)  # routed: the node is known from here on
        node = owner(cache._client, T)
        assert node is not None
        host, port = node.address.rsplit(":", 1)
        client = redis.Redis(host=host, port=int(port))
        try:
            yield Setup(request.param, conn, client)
        finally:
            client.delete(T, H, Z, B)
            client.close()
            if request.param == "near cache":
                stop_tracking(cache)
            cache.close()


def queue_with_errors(pipe: Any) -> Any:
    """Commands of which two fail on the server (INCR of text, LPUSH on a string)."""
    pipe.set(T, "text").incr(T).get(T).lpush(T, "x").hset(H, "f", 1)
    return pipe.zadd(Z, {"m": 1}, incr=True).mget([]).hgetall(H).getdel(T)


def execute(pipe: Any, mode: str, **kwargs: Any) -> list[Any]:
    if mode == "async":
        return asyncio.run(pipe.aexecute(**kwargs))
    return pipe.execute(**kwargs)


def same_error(mine: Any, their: BaseException) -> bool:
    """redoxide's error of redis-py's class (by name; WrongTypeError is a ResponseError) and
    with redis-py's message."""
    ours = getattr(exceptions, type(their).__name__, None)
    return ours is not None and isinstance(mine, ours) and str(their) in str(mine)


def same_replies(ours: list[Any], theirs: list[Any]) -> bool:
    """Equal replies, and an error reply where redis-py has one, of its class and message."""
    if len(ours) != len(theirs):
        return False
    for mine, their in zip(ours, theirs, strict=True):
        if isinstance(their, BaseException):
            if not same_error(mine, their):
                return False
        elif mine != their:
            return False
    return True


def refuses_transactions(setup: Setup) -> bool:
    """A cluster refuses a transaction (pipeline() raises, naming transaction=False)."""
    if setup.name != "cluster":
        return False
    with pytest.raises(NotImplementedError, match="transaction=False"):
        setup.conn.pipeline()
    return True


def test_pipeline_raise_on_error_false_returns_errors_in_place(setup: Setup, mode: str) -> None:
    theirs = queue_with_errors(setup.redis.pipeline(transaction=False)).execute(
        raise_on_error=False
    )
    left = setup.state()
    setup.clear()
    pipe = queue_with_errors(setup.conn.pipeline(transaction=False))
    ours = execute(pipe, mode, raise_on_error=False)
    assert same_replies(ours, theirs), (ours, theirs)
    assert setup.state() == left
    assert len(pipe) == 0
    # Without it the first error raises, once every command has run.
    setup.clear()
    with pytest.raises(ResponseError, match="not an integer"):
        execute(queue_with_errors(setup.conn.pipeline(transaction=False)), mode)
    assert setup.state() == left


def test_transaction_raise_on_error_false_without_errors(setup: Setup, mode: str) -> None:
    if refuses_transactions(setup):
        return
    theirs = setup.redis.pipeline().set(T, 1).incr(T).mget([]).mget(T, B).execute()
    setup.clear()
    pipe = setup.conn.pipeline().set(T, 1).incr(T).mget([]).mget(T, B)
    assert execute(pipe, mode, raise_on_error=False) == theirs == [True, 2, [], [b"2", None]]


def test_transaction_raise_on_error_false_returns_errors_in_place(setup: Setup, mode: str) -> None:
    if refuses_transactions(setup):
        return
    theirs = queue_with_errors(setup.redis.pipeline()).execute(raise_on_error=False)
    left = setup.state()
    setup.clear()
    ours = execute(queue_with_errors(setup.conn.pipeline()), mode, raise_on_error=False)
    assert any(isinstance(reply, ResponseError) for reply in ours), ours
    assert same_replies(ours, theirs), (ours, theirs)
    assert setup.state() == left


def test_transaction_queuing_error_raises_even_with_raise_on_error_false(
    setup: Setup, mode: str
) -> None:
    # A command the server refuses to queue aborts the whole transaction: redis-py raises it
    # whatever raise_on_error says, and nothing runs.
    import redis

    if refuses_transactions(setup):
        return
    with pytest.raises(redis.exceptions.ResponseError, match="wrong number of arguments"):
        setup.redis.pipeline().set(T, 1).execute_command("INCR").execute(raise_on_error=False)
    pipe = setup.conn.pipeline().set(T, 1).execute_command("INCR")
    with pytest.raises(ResponseError, match="wrong number of arguments"):
        execute(pipe, mode, raise_on_error=False)
    assert len(pipe) == 0
    assert setup.redis.get(T) is None
