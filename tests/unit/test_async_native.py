"""Every async method of Django's BaseCache is implemented natively (no sync_to_async)."""

from __future__ import annotations

import inspect

import django
from django.core.cache.backends.base import BaseCache
from redoxide import RedisCache


def async_methods_of_basecache() -> list[str]:
    return sorted(
        name
        for name, member in inspect.getmembers(BaseCache)
        if name.startswith("a") and inspect.iscoroutinefunction(member)
    )


def test_basecache_has_async_methods_to_check() -> None:
    # Django >= 4.0 defines aget, aset, ..., aclose; an empty list would prove nothing.
    assert {"aget", "aset", "aget_many", "aclose"} <= set(async_methods_of_basecache())


def test_every_basecache_async_method_is_native() -> None:
    inherited = [
        name
        for name in async_methods_of_basecache()
        if getattr(RedisCache, name) is getattr(BaseCache, name)
    ]
    assert inherited == [], f"left to BaseCache (sync_to_async) on Django {django.__version__}"


def test_every_async_method_is_a_coroutine_function() -> None:
    for name in async_methods_of_basecache():
        assert inspect.iscoroutinefunction(getattr(RedisCache, name)), name
