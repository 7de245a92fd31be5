"""OPTIONS["NEAR_CACHE"]: off by default, its limits validated, ImproperlyConfigured naming
the option for anything wrong; which server keys its PREFIXES select."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from redoxide.near import tracked_prefixes
from redoxide.options import parse_config

URL = "redis://127.0.0.1:6379/0"


def test_off_by_default_and_when_none() -> None:
    assert parse_config(URL, {}).near_cache is None
    assert parse_config(URL, {"NEAR_CACHE": None}).near_cache is None


def test_defaults_and_given_limits() -> None:
    near = parse_config(URL, {"NEAR_CACHE": {"PREFIXES": ["config:"]}}).near_cache
    assert near is not None
    assert near.prefixes == ("config:",)
    assert (near.max_bytes, near.max_value_bytes, near.max_ttl, near.max_stale_ms) == (
        32 * 2**20,
        64 * 1024,
        60.0,
        500,
    )
    given = {"PREFIXES": ("a:", "b:"), "MAX_BYTES": 2**20, "MAX_VALUE_BYTES": 1000,
             "MAX_TTL": 5, "MAX_STALE_MS": 100}  # fmt: skip
    near = parse_config(URL, {"near_cache": given}).near_cache
    assert near is not None
    assert (
        near.prefixes,
        near.max_bytes,
        near.max_value_bytes,
        near.max_ttl,
        near.max_stale_ms,
    ) == (
        ("a:", "b:"),
        2**20,
        1000,
        5.0,
        100,
    )


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("config:", "NEAR_CACHE"),
        ({}, "NEAR_CACHE"),
        ({"PREFIXES": []}, "NEAR_CACHE.PREFIXES"),
        ({"PREFIXES": "config:"}, "NEAR_CACHE.PREFIXES"),
        ({"PREFIXES": [1]}, "NEAR_CACHE.PREFIXES"),
        ({"PREFIXES": ["a"], "MAX_BYTES": 10}, "NEAR_CACHE.MAX_BYTES"),
        ({"PREFIXES": ["a"], "MAX_BYTES": True}, "NEAR_CACHE.MAX_BYTES"),
        ({"PREFIXES": ["a"], "MAX_VALUE_BYTES": 0}, "NEAR_CACHE.MAX_VALUE_BYTES"),
        (
            {"PREFIXES": ["a"], "MAX_BYTES": 8192, "MAX_VALUE_BYTES": 9000},
            "NEAR_CACHE.MAX_VALUE_BYTES",
        ),
        ({"PREFIXES": ["a"], "MAX_TTL": 0}, "NEAR_CACHE.MAX_TTL"),
        ({"PREFIXES": ["a"], "MAX_TTL": float("inf")}, "NEAR_CACHE.MAX_TTL"),
        ({"PREFIXES": ["a"], "MAX_STALE_MS": 1}, "NEAR_CACHE.MAX_STALE_MS"),
        ({"PREFIXES": ["a"], "MAX_STALE_MS": 0.5}, "NEAR_CACHE.MAX_STALE_MS"),
        ({"PREFIXES": ["a"], "MAX_SIZE": 1}, "NEAR_CACHE"),
        ({"ADMIT_AFTER_READS": 0}, "NEAR_CACHE.ADMIT_AFTER_READS"),
        ({"ADMIT_AFTER_READS": 65}, "NEAR_CACHE.ADMIT_AFTER_READS"),
        ({"ADMIT_AFTER_READS": True}, "NEAR_CACHE.ADMIT_AFTER_READS"),
        ({"ADMIT_AFTER_READS": "3"}, "NEAR_CACHE.ADMIT_AFTER_READS"),
        ({"ADMIT_AFTER_READS": 2, "PREFIXES": []}, "NEAR_CACHE.PREFIXES"),
        ({"MAX_BYTES": 2**20}, "NEAR_CACHE"),
    ],
)
def test_invalid_settings_name_the_option(value: Any, named: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=f"OPTIONS\\['{named}'\\]"):
        parse_config(URL, {"NEAR_CACHE": value})


def test_prefixes_apply_after_key_prefix_and_version() -> None:
    near = parse_config(URL, {"NEAR_CACHE": {"PREFIXES": ["config:"]}}).near_cache
    assert near is not None
    assert tracked_prefixes(near, "site", 3, True) == ("site:3:config:",)
    # A custom KEY_FUNCTION: the prefixes are matched against the server key as stored.
    assert tracked_prefixes(near, "site", 3, False) == ("config:",)


def test_admission_by_use_keeps_every_key_unless_prefixes_narrow_it() -> None:
    near = parse_config(URL, {"NEAR_CACHE": {"ADMIT_AFTER_READS": 3}}).near_cache
    assert near is not None
    assert (near.admit_after, near.prefixes) == (3, ("",))
    assert tracked_prefixes(near, "site", 1, True) == ("site:1:",)
    narrowed = {"ADMIT_AFTER_READS": 1, "PREFIXES": ["page:"]}
    near = parse_config(URL, {"NEAR_CACHE": narrowed}).near_cache
    assert near is not None
    assert (near.admit_after, near.prefixes) == (1, ("page:",))
    # Without it, every key under the prefixes is kept from its first read.
    near = parse_config(URL, {"NEAR_CACHE": {"PREFIXES": ["a:"]}}).near_cache
    assert near is not None and near.admit_after is None
