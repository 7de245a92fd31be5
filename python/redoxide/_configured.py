"""The redoxide caches of the project's settings.CACHES (for exporters and panels)."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils.module_loading import import_string

from redoxide.cache import RedisCache

__all__ = ["redoxide_caches"]


def redoxide_caches() -> Iterator[tuple[str, RedisCache]]:
    """Each cache in settings.CACHES whose backend is redoxide's (or a subclass), with its
    alias: this thread's (or async context's) instance, made if needed. Other backends are
    left alone, not even instantiated."""
    from django.conf import settings
    from django.core.cache import caches

    for alias, conf in getattr(settings, "CACHES", {}).items():
        try:
            backend = import_string(conf.get("BACKEND", ""))
        except ImportError:
            continue  # Django reports it when the cache is used
        if isinstance(backend, type) and issubclass(backend, RedisCache):
            cache = caches[alias]
            if isinstance(cache, RedisCache):
                yield alias, cache
