"""The error policy's options (EXCEPTION_HANDLER, LOG_IGNORED_EXCEPTIONS_LEVEL and their
django-redis settings) and django-redis' CONNECTION_FACTORY, parsed for ``options``."""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string

from redoxide.exceptions import ConfigurationError

__all__ = ["error_policy", "refuse_foreign_factory"]

# django-redis' own connection factories: what they choose (plain or Sentinel connections),
# redoxide reads from LOCATION and SENTINELS. A factory of the user's own is refused: it would
# do something redoxide cannot.
_ACCEPTED_FACTORIES = frozenset(
    {"django_redis.pool.ConnectionFactory", "django_redis.pool.SentinelConnectionFactory"}
)


def _fail(option: str, message: str) -> ConfigurationError:
    return ConfigurationError(f"redoxide: OPTIONS[{option!r}] {message}")


def _setting(settings: Any, name: str, default: Any) -> Any:
    """A project-wide setting, or its default when Django settings are not configured."""
    return getattr(settings, name, default) if settings.configured else default


_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "WARN": 30, "ERROR": 40, "CRITICAL": 50}


def error_policy(
    settings: Any, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]
) -> None:
    """EXCEPTION_HANDLER (OPTIONS, else DJANGO_REDIS_EXCEPTION_HANDLER): a callable or its
    dotted path; LOG_IGNORED_EXCEPTIONS_LEVEL: a logging level, by name or number."""
    if "exception_handler" in opts:
        where, handler = f"OPTIONS[{names['exception_handler']!r}]", opts["exception_handler"]
    else:
        where = "DJANGO_REDIS_EXCEPTION_HANDLER"
        handler = _setting(settings, "DJANGO_REDIS_EXCEPTION_HANDLER", None)
    if isinstance(handler, str):
        try:
            handler = import_string(handler)
        except ImportError as exc:
            raise ConfigurationError(f"redoxide: {where} cannot import {handler!r}: {exc}") from exc
    if handler is not None and not callable(handler):
        raise ConfigurationError(
            f"redoxide: {where} must be a callable (cache, exception) or its dotted path, "
            f"not {handler!r}"
        )
    kwargs["exception_handler"] = handler
    if "ignored_log_level" in opts:
        level = opts["ignored_log_level"]
        if isinstance(level, str) and level.upper() in _LEVELS:
            level = _LEVELS[level.upper()]
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 50:
            raise _fail(
                names["ignored_log_level"],
                f"must be a logging level (DEBUG, INFO, WARNING, ERROR, CRITICAL or 0-50), "
                f"not {opts['ignored_log_level']!r}",
            )
        kwargs["ignored_log_level"] = level


def _dotted(value: Any) -> Any:
    return f"{value.__module__}.{value.__qualname__}" if isinstance(value, type) else value


def refuse_foreign_factory(opts: dict[str, Any], names: dict[str, str]) -> None:
    """OPTIONS["CONNECTION_FACTORY"] / DJANGO_REDIS_CONNECTION_FACTORY: django-redis' own are
    accepted and ignored, any other refused by name."""
    from django.conf import settings

    if "connection_factory" in opts:
        where, factory = f"OPTIONS[{names['connection_factory']!r}]", opts["connection_factory"]
    else:
        where = "DJANGO_REDIS_CONNECTION_FACTORY"
        factory = _setting(settings, "DJANGO_REDIS_CONNECTION_FACTORY", None)
    if factory is not None and _dotted(factory) not in _ACCEPTED_FACTORIES:
        raise ConfigurationError(
            f"redoxide: {where} {factory!r} is not supported: redoxide makes its own "
            "connections (django_redis.pool.ConnectionFactory and SentinelConnectionFactory "
            "are accepted and ignored; Sentinel comes from OPTIONS['SENTINELS'])"
        )
