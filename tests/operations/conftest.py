"""Fixtures of the operations tests (system checks, management commands): a project with the
redoxide app installed and the CACHES each test chooses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test.utils import override_settings
from support.operations import LOCMEM


@pytest.fixture
def project() -> Iterator[Callable[..., None]]:
    """Return use(caches, **settings): from then on the test runs in a project with "redoxide"
    in INSTALLED_APPS and these CACHES (a locmem "default" unless given)."""
    active: list[override_settings] = []

    def use(caches: dict[str, Any], **settings: Any) -> None:
        while active:
            active.pop().disable()
        override = override_settings(
            INSTALLED_APPS=["redoxide"], CACHES={"default": LOCMEM, **caches}, **settings
        )
        override.enable()
        active.append(override)

    yield use
    while active:
        active.pop().disable()


@pytest.fixture
def server_cache(redis_server: Any) -> dict[str, Any]:
    """Return the settings of a redoxide cache on the session's server, flushed first."""
    redis_server.flushall()
    return {"BACKEND": "redoxide.RedisCache", "LOCATION": redis_server.url}
