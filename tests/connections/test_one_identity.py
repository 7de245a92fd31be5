"""Every socket owner presents one identity and follows a credential rotation, plain and TLS.

Owners: the per-thread blocking connection (sync calls by default), the shared blocking one
(SYNC_CONNECTIONS "shared"), the async multiplexed one, and the near cache's tracking
connection. Against a server of its own with ACL users u1 and u2 and no default user, each
owner's connections, found in CLIENT LIST as the ones its first calls made, must show the same
user, database and library name (CLIENT SETINFO lib-name and lib-ver); once the credential
provider answers u2, the same connections (the same client ids) must show u2, still in the same
database. A behaviour written once per owner drifts; this test is what says it did."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redoxide
from redoxide._credentials import credentials_for
from support.backend import build_cache, is_redoxide
from support.rotation import Holder, answer_next, clients_of, wait_until
from support.secrecy import SECRET
from support.servers import REDIS_SERVER, RedisServer, binary_version
from support.tls import OPENSSL, TLSServer, make_certs, tls_server

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's own connections")

PW1 = "One-" + secrets.token_hex(8)
PW2 = "Two-" + secrets.token_hex(8)
DB = 3
OWNERS = ("sync-per-thread", "sync-shared", "async", "tracking")
# CLIENT SETINFO came with Redis 7.2 (Valkey has it from its first release, 7.2): before it the
# server refuses it inside the handshake and shows no library name.
LIB_NAME = "redoxide" if binary_version(REDIS_SERVER) >= (7, 2, 0) else None
LIB_VER = redoxide.__version__ if LIB_NAME else None


class Node:
    """A server of this test's own and the URL a cache reaches it by (plain or TLS)."""

    def __init__(self, server: RedisServer, url: str, tls_options: dict[str, Any]) -> None:
        self.server = server
        self.url = url
        self.tls_options = tls_options


@pytest.fixture(params=["plain", "tls"])
def node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Node]:
    if request.param == "plain":
        with RedisServer(password=SECRET) as server:
            yield with_users(Node(server, f"redis://127.0.0.1:{server.port}/{DB}", {}))
        return
    if OPENSSL is None:
        pytest.skip("needs the openssl CLI")
    certs = make_certs(tmp_path_factory.mktemp("tls"))
    made = tls_server(certs.server_cert, certs.server_key, certs.ca, "no", password=SECRET)
    served: TLSServer = next(made)
    try:
        url = f"rediss://127.0.0.1:{served.tls_port}/{DB}"
        yield with_users(Node(served.server, url, {"SSL_CA_CERTS": str(certs.ca)}))
    finally:
        made.close()


def with_users(node: Node) -> Node:
    for user, password in (("u1", PW1), ("u2", PW2)):
        node.server.cli("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all")
    return node


def owner_cache(node: Node, owner: str, holder: Holder) -> Any:
    options: dict[str, Any] = {
        "CREDENTIAL_PROVIDER": holder,
        "CREDENTIAL_REFRESH_SECONDS": 1,
        "SOCKET_CONNECT_TIMEOUT": 5,
        **node.tls_options,
    }
    if owner == "sync-shared":
        options["SYNC_CONNECTIONS"] = "shared"
    if owner == "tracking":
        options["NEAR_CACHE"] = {"PREFIXES": [""], "MAX_STALE_MS": 60_000}
    return build_cache(node.url, {"OPTIONS": options})


def driver(cache: Any, owner: str) -> Callable[[], None]:
    """A call that goes through the owner's connections."""
    if owner == "async":

        async def both() -> None:
            await cache.aset("k", 1)
            assert await cache.aget("k") == 1

        return lambda: asyncio.run(both())

    def sync() -> None:
        cache.set("k", 1)
        assert cache.get("k") == 1

    return sync


def owned(node: Node, owner: str, before: set[int]) -> dict[int, dict[str, str]]:
    """The owner's connections: those made since `before` (the tracking connection alone for
    "tracking", whose reads also make a sync connection)."""
    made = {cid: f for cid, f in clients_of(node.server).items() if cid not in before}
    if owner == "tracking":
        made = {cid: f for cid, f in made.items() if "t" in f.get("flags", "")}
    return made


@pytest.mark.parametrize("owner", OWNERS)
def test_every_owner_presents_one_identity_and_follows_a_rotation(node: Node, owner: str) -> None:
    holder = Holder()
    holder.answer = ("u1", PW1)
    cache = owner_cache(node, owner, holder)
    cell = credentials_for(cache._config.connection.credential_provider)
    before = set(clients_of(node.server))
    call = driver(cache, owner)
    call()
    if owner == "tracking":
        wait_until(lambda: bool(owned(node, owner, before)), what="the tracking connection")
    first = owned(node, owner, before)
    assert first, f"no connection of {owner} seen"
    for fields in first.values():
        assert fields["user"] == "u1", fields
        assert fields["db"] == str(DB), fields
        assert (fields.get("lib-name") or None) == LIB_NAME, fields
        assert (fields.get("lib-ver") or None) == LIB_VER, fields

    answer_next(holder, cell, ("u2", PW2))
    # The tracking connection is keyed on its user, not its id: a probe that times out on a
    # loaded host remakes it, as it should.
    by_user = owner == "tracking"

    def rotated() -> bool:
        call()
        now = owned(node, owner, before)
        if by_user:
            return bool(now) and all(f["user"] == "u2" for f in now.values())
        return all(now.get(cid, {}).get("user") == "u2" for cid in first)

    wait_until(rotated, what=f"{owner}'s connections to be u2")
    now = owned(node, owner, before)
    if not by_user:  # the same connections, re-authenticated in place (TLS too)
        assert set(first) <= set(now)
    for fields in now.values():
        assert fields["user"] == "u2", fields
        assert fields["db"] == str(DB), fields
        assert (fields.get("lib-name") or None) == LIB_NAME, fields
