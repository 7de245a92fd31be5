"""Topologies are kinds behind one registry (redoxide.topology.kinds): a configuration gets the
kind that claims it, each kind answers for itself, and no module outside the kinds compares
topology names."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from redoxide.options import parse_config
from redoxide.topology.kinds import KINDS, Kind, kind_of

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "redoxide"

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "standalone": ("redis://127.0.0.1:6379/2", {}),
    "replicas": ("redis://127.0.0.1:6379,redis://127.0.0.1:6380", {}),
    "sentinel": ("redis://mymaster/3", {"SENTINELS": [("127.0.0.1", 26379)]}),
    "cluster": ("redis://127.0.0.1:7000", {"CLUSTER": True}),
}


def test_the_registry_has_each_kind_once_standalone_last() -> None:
    names = [kind.name for kind in KINDS]
    assert sorted(names) == sorted(CONFIGS)
    assert names[-1] == "standalone", "standalone claims anything: it is asked last"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_configuration_gets_the_kind_that_claims_it(name: str) -> None:
    location, options = CONFIGS[name]
    config = parse_config(location, options)
    kind = kind_of(config)
    assert kind.name == config.servers.topology == name
    assert type(kind).build is not Kind.build
    assert type(kind).survey is not Kind.survey
    assert kind.flushed(config)
    assert kind.databases(config)


def test_what_each_kind_says_clear_empties_and_where_its_keys_live() -> None:
    said = {}
    for name, (location, options) in CONFIGS.items():
        config = parse_config(location, options)
        said[name] = (kind_of(config).flushed(config), kind_of(config).databases(config))
    assert said["standalone"] == (
        "database 2 of redis://127.0.0.1:6379/2",
        {("127.0.0.1", 6379, 2)},
    )
    assert said["sentinel"] == (
        "database 3 of the primary of 'mymaster'",
        {("sentinel", "mymaster", "127.0.0.1", 26379, 3)},
    )
    assert said["cluster"] == ("every primary of the cluster", {("cluster", "127.0.0.1", 7000)})
    assert said["replicas"][1] == {("127.0.0.1", 6379, 0), ("127.0.0.1", 6380, 0)}
    assert [kind.names_server for kind in KINDS if not kind.names_server] == [False]


def test_no_module_outside_the_kinds_compares_topology_names() -> None:
    found = []
    for path in PACKAGE.rglob("*.py"):
        if "kinds" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            named = any(
                isinstance(side, ast.Attribute) and side.attr == "topology" for side in sides
            )
            literal = any(
                (isinstance(side, ast.Constant) and isinstance(side.value, str))
                or isinstance(side, (ast.Tuple, ast.Set, ast.List))
                for side in sides
            )
            if named and literal:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []
