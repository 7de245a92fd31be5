"""The parsed configuration's sections, and which process-wide client a configuration shares:
derived from its Servers and Connection sections, so every option that changes a connection
keeps two configurations apart, and options that do not (values, errors, behaviour) let them
share one."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from redoxide._sections import Behaviour, Config, Connection, ErrorPolicy, Servers, Values
from redoxide.options import parse_config
from redoxide.topology import shared_client
from redoxide.topology.nodes import node_client

URL = "redis://127.0.0.1:6390/0"

#: A value unlike the default for each field of the two sections that identify a client.
OTHER: dict[str, Any] = {
    "urls": ("redis://127.0.0.1:6391/0",),
    "db": 3,
    "topology": "replicas",
    "read_from_replicas": True,
    "service_name": "mymaster",
    "sentinels": (("127.0.0.1", 26379),),
    "sentinel_username": "watcher",
    "sentinel_password": "s3cret",
    "socket_timeout": 7.0,
    "connect_timeout": 4.0,
    "username": "app",
    "password": "hunter2",
    "credential_provider": object(),
    "tls": (("tls_verify", False),),
    "shared_sync": True,
}


def test_every_option_lands_in_its_section() -> None:
    config = parse_config(
        [URL, "redis://127.0.0.1:6391/0"],
        {
            "SOCKET_TIMEOUT": 3,
            "SOCKET_CONNECT_TIMEOUT": 0.5,
            "PASSWORD": "pw",
            "DB": 2,
            "SYNC_CONNECTIONS": "shared",
            "COMPRESSOR": "redoxide.compressors.ZlibCompressor",
            "IGNORE_EXCEPTIONS": True,
            "CLEAR_PREFIX_ONLY": True,
            "STAMPEDE_PROTECTION": True,
            "TRACING": True,
        },
    )
    assert config.servers.urls == (URL, "redis://127.0.0.1:6391/0")
    assert (config.servers.topology, config.servers.db) == ("replicas", 2)
    assert config.servers.read_from_replicas is True
    link = config.connection
    assert (link.socket_timeout, link.connect_timeout, link.password) == (3.0, 0.5, "pw")
    assert link.shared_sync is True
    assert type(config.values.compressor).__name__ == "ZlibCompressor"
    assert config.errors.ignore_exceptions is True
    assert config.behaviour.clear_prefix_only is True
    assert config.behaviour.stampede_protection is True
    assert config.behaviour.tracing is True


def test_the_sections_are_typed_frozen_dataclasses() -> None:
    config = parse_config(URL, {})
    for section, cls in [
        (config.servers, Servers),
        (config.connection, Connection),
        (config.values, Values),
        (config.errors, ErrorPolicy),
        (config.behaviour, Behaviour),
    ]:
        assert type(section) is cls
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, dataclasses.fields(cls)[0].name, None)


def test_the_client_key_is_both_identity_sections_whole() -> None:
    config = parse_config(URL, {})
    assert config.client_key == (config.servers, config.connection)
    assert set(OTHER) == {f.name for f in dataclasses.fields(Servers)} | {
        f.name for f in dataclasses.fields(Connection)
    }, "a field was added to a section that identifies a client: give it a value in OTHER"


@pytest.mark.parametrize("name", sorted(OTHER))
def test_each_connection_setting_changes_the_client_key(name: str) -> None:
    config = parse_config(URL, {})
    section = "servers" if name in {f.name for f in dataclasses.fields(Servers)} else "connection"
    changed = dataclasses.replace(
        config, **{section: dataclasses.replace(getattr(config, section), **{name: OTHER[name]})}
    )
    assert changed.client_key != config.client_key
    assert dataclasses.replace(config).client_key == config.client_key


def test_caches_differing_only_in_values_errors_or_behaviour_share_one_client() -> None:
    base = parse_config(URL, {})
    other = parse_config(
        URL,
        {
            "COMPRESSOR": "redoxide.compressors.ZlibCompressor",
            "IGNORE_EXCEPTIONS": True,
            "STAMPEDE_PROTECTION": True,
            "CLEAR_PREFIX_ONLY": True,
        },
    )
    assert other.client_key == base.client_key
    assert shared_client(other) is shared_client(base)
    apart = parse_config(URL, {"SYNC_CONNECTIONS": "shared"})
    assert shared_client(apart) is not shared_client(base)


def test_a_discovered_node_is_shared_only_by_equal_connection_sections() -> None:
    # What a router learns (a cluster node, a sentinel's primary) is made from the Connection
    # section alone: equal sections share it, and any difference there makes its own.
    base = parse_config(URL, {})
    same = parse_config(URL, {"IGNORE_EXCEPTIONS": True})
    assert node_client(same, "127.0.0.1", 6392) is node_client(base, "127.0.0.1", 6392)
    for options in ({"SOCKET_TIMEOUT": 9}, {"USERNAME": "u"}, {"SYNC_CONNECTIONS": "shared"}):
        assert node_client(parse_config(URL, options), "127.0.0.1", 6392) is not node_client(
            base, "127.0.0.1", 6392
        ), options
    assert node_client(base, "127.0.0.1", 6392, db=1) is not node_client(base, "127.0.0.1", 6392)


def test_config_takes_sections_only() -> None:
    with pytest.raises(TypeError):
        Config(servers=Servers(urls=(URL,)), socket_timeout=1.0)  # type: ignore[call-arg]
