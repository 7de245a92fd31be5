"""The exceptions redoxide raises. The Rust core raises these same classes."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "CacheError",
    "CacheTimeout",
    "ConfigurationError",
    "ConnectionInterrupted",
    "InternalError",
    "LockError",
    "LockNotOwnedError",
    "ResponseError",
    "SerializationError",
]


class CacheError(Exception):
    """Base class of every redoxide error."""


class ConnectionInterrupted(CacheError, ConnectionError):
    """The server could not be reached, refused the credentials, or the connection broke."""


class CacheTimeout(CacheError, TimeoutError):
    """The server did not answer within SOCKET_TIMEOUT."""


class ResponseError(CacheError):
    """The server answered with an error reply (e.g. WRONGTYPE, OOM)."""


class SerializationError(CacheError, ValueError):
    """A value stored in the cache could not be decoded."""


class ConfigurationError(CacheError, ImproperlyConfigured):
    """A LOCATION or OPTIONS value is invalid."""


class InternalError(CacheError):
    """A bug inside redoxide (a Rust panic); the interpreter keeps running."""


class LockError(CacheError):
    """A lock could not be acquired in time, or was released or extended while not held."""


class LockNotOwnedError(LockError):
    """The lock was held by this instance but has expired or now belongs to someone else."""
