"""Values over Redis' 512 MB limit are refused before anything is sent, on every write path,
even under fail-open; a value of exactly the limit is accepted.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest
from support.backend import build_cache, is_redoxide, raw_client
from support.dispatch import Ops
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's input checks")


def stored_keys(server: RedisServer) -> list[bytes]:
    return sorted(raw_client(server.port).keys("*"))


def dbsize(server: RedisServer) -> int:
    return int(server.cli("DBSIZE"))


LIMIT = 512 * 1024 * 1024


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """Lower redoxide's value size limit to 1,000 bytes, to test every write path cheaply."""
    import redoxide._values

    assert redoxide._values.MAX_VALUE_SIZE == LIMIT  # the real limit is Redis' default
    monkeypatch.setattr(redoxide._values, "MAX_VALUE_SIZE", 1000)
    return 1000


def test_value_over_512_mb_is_refused_before_sending(fresh_redis_server: RedisServer) -> None:
    """A 513 MiB value: ValueError naming the key and the limit, raised before sending (the
    server receives no bytes of it, the connections are untouched), even under fail-open;
    nothing is written. (Without the check, redis-server reads all 513 MiB, then drops the
    connection: seconds later, a ConnectionInterrupted that fail-open turns into a silent
    miss.)"""
    server = fresh_redis_server
    cache = build_cache(server.url, {"OPTIONS": {"IGNORE_EXCEPTIONS": True}})
    cache.set("existing", "old")
    conn_ids = (
        cache.client.execute("CLIENT", "ID"),
        asyncio.run(cache.client.aexecute("CLIENT", "ID")),
    )
    huge = b"\0" * (LIMIT + 1024 * 1024)
    writes: list[tuple[str, Callable[[], object]]] = [
        ("set", lambda: cache.set("huge", huge)),
        ("aset", lambda: asyncio.run(cache.aset("huge", huge))),
        ("set_many", lambda: cache.set_many({"small": 1, "huge": huge})),
    ]
    for name, write in writes:
        received = int(server.info("stats")["total_net_input_bytes"])
        with pytest.raises(ValueError, match=r"'huge'.*536,870,912 bytes") as info:
            write()
        assert "nothing was written" in str(info.value)
        received = int(server.info("stats")["total_net_input_bytes"]) - received
        assert received < 1024 * 1024, f"{name}: the server received {received:,} bytes"
    huge = b""  # free it
    assert stored_keys(server) == [b":1:existing"]
    assert conn_ids == (
        cache.client.execute("CLIENT", "ID"),
        asyncio.run(cache.client.aexecute("CLIENT", "ID")),
    )
    assert cache.get("existing") == "old"


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"COMPRESSOR": "redoxide.compressors.ZlibCompressor"},
        {"SERIALIZER": "redoxide.serializers.JSONSerializer"},
    ],
    ids=["pickle", "compressed", "json"],
)
def test_value_size_limit_covers_every_write(
    make_cache: Callable[..., Any],
    redis_server: RedisServer,
    small_limit: int,
    mode: str,
    options: dict[str, Any],
) -> None:
    """Every write path checks the encoded size (after compression), names the key, and
    writes nothing, not even the other keys of a set_many."""
    ops = Ops(make_cache(**options), mode)
    big = os.urandom(small_limit).hex()  # random: compression cannot shrink it under
    fits = "x" * (small_limit // 2)
    writes: list[Callable[[], object]] = [
        lambda: ops.set("big", big),
        lambda: ops.set("big", big, nx=True),
        lambda: ops.add("big", big),
        lambda: ops.set_many({"a": fits, "big": big, "c": 3}),
        lambda: ops.get_or_set("big", big),
        lambda: ops.get_or_set("big", lambda: big),
    ]
    for write in writes:
        with pytest.raises(ValueError, match=r"'big'.*over the 1,000 bytes"):
            write()
    assert dbsize(redis_server) == 0
    ops.set_many({"a": fits, "c": 3})
    assert ops.get_many(["a", "c"]) == {"a": fits, "c": 3}


def test_value_of_exactly_the_limit_is_accepted(
    make_cache: Callable[..., Any], small_limit: int, mode: str
) -> None:
    import pickle

    ops = Ops(make_cache(), mode)
    overhead = len(pickle.dumps(b"x" * 500, pickle.HIGHEST_PROTOCOL)) - 500
    payload = b"x" * (small_limit - overhead)
    assert len(pickle.dumps(payload, pickle.HIGHEST_PROTOCOL)) == small_limit
    ops.set("edge", payload)
    ops.set_many({"edge2": payload})
    assert ops.get_many(["edge", "edge2"]) == {"edge": payload, "edge2": payload}
    with pytest.raises(ValueError):
        ops.set("over", payload + b"x")
