"""The exceptions redoxide raises. The Rust core raises these same classes.

A server's error reply is a ``ResponseError`` whose ``code`` is the reply's first word
(``WRONGTYPE``, ``OOM``, ``MOVED``...); the codes that callers and routers act on have a
subclass of their own, so code decides by class, never by reading the message.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "AskError",
    "BusyError",
    "CacheError",
    "CacheTimeout",
    "ClusterDownError",
    "ConfigurationError",
    "ConnectionInterrupted",
    "CredentialProviderError",
    "CrossSlotError",
    "DataError",
    "EncodingError",
    "InternalError",
    "LoadingError",
    "LockError",
    "LockNotOwnedError",
    "MasterDownError",
    "MovedError",
    "NoPermError",
    "NoScriptError",
    "OutOfMemoryError",
    "ReadOnlyError",
    "RedirectError",
    "ResponseError",
    "ScriptingUnavailableError",
    "SerializationError",
    "TryAgainError",
    "WrongTypeError",
    "response_error",
]


class CacheError(Exception):
    """Base class of every redoxide error."""

    #: A get_many that failed part-way (a cluster node, a near-cache fill): the raw values of
    #: the keys that did answer, in the order asked, None for the others (a fail-open
    #: get_many returns those); None when nothing answered.
    partial_values: list[Any] | None = None
    #: A split call that failed part-way: the replies of the parts that ran, in the order of
    #: the parts (None where a part did not run); None when none did.
    partial_replies: list[Any] | None = None


class ConnectionInterrupted(CacheError, ConnectionError):
    """The server could not be reached, refused the credentials, or the connection broke."""


class CredentialProviderError(ConnectionInterrupted):
    """OPTIONS['CREDENTIAL_PROVIDER'] gave no credentials to connect with: it raised, returned
    something that is not credentials, or did not answer within SOCKET_CONNECT_TIMEOUT. The
    message names the option and what went wrong, never a value."""


class CacheTimeout(CacheError, TimeoutError):
    """The server did not answer within SOCKET_TIMEOUT."""


class ResponseError(CacheError):
    """The server answered with an error reply (e.g. WRONGTYPE, OOM).

    ``code`` is the reply's first word (``"ERR"`` when the reply has none of its own).
    """

    #: The code replies of this class carry (subclasses name theirs).
    CODE = "ERR"

    def __init__(self, message: str = "", code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.CODE

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.code))


class ReadOnlyError(ResponseError):
    """A write reached a replica (READONLY), e.g. a primary demoted by a failover."""

    CODE = "READONLY"


class RedirectError(ResponseError):
    """A cluster node serves another node's slot: MOVED or ASK to ``address``."""

    def __init__(
        self,
        message: str = "",
        code: str | None = None,
        slot: int = -1,
        address: str = "",
    ) -> None:
        super().__init__(message, code)
        #: The hash slot the command's key is in.
        self.slot = slot
        #: Where to send it: ``host:port``, or ``:port`` when the node does not know the host.
        self.address = address

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.code, self.slot, self.address))


class MovedError(RedirectError):
    """The slot has moved to another node for good (MOVED)."""

    CODE = "MOVED"


class AskError(RedirectError):
    """The slot is being migrated; ask the target node once, after ASKING (ASK)."""

    CODE = "ASK"


class TryAgainError(ResponseError):
    """A multi-key command met a slot mid-migration (TRYAGAIN)."""

    CODE = "TRYAGAIN"


class ClusterDownError(ResponseError):
    """The cluster cannot serve the slot now (CLUSTERDOWN)."""

    CODE = "CLUSTERDOWN"


class CrossSlotError(ResponseError):
    """The keys of one command are in different hash slots (CROSSSLOT)."""

    CODE = "CROSSSLOT"


class NoPermError(ResponseError):
    """The ACL user may not run this command or touch this key (NOPERM)."""

    CODE = "NOPERM"


class NoScriptError(ResponseError):
    """EVALSHA named a script the server does not have (NOSCRIPT)."""

    CODE = "NOSCRIPT"


class WrongTypeError(ResponseError):
    """The key holds another kind of value (WRONGTYPE)."""

    CODE = "WRONGTYPE"


class OutOfMemoryError(ResponseError):
    """The server is at maxmemory and refuses writes (OOM)."""

    CODE = "OOM"


class BusyError(ResponseError):
    """The server is busy running a script (BUSY)."""

    CODE = "BUSY"


class LoadingError(ResponseError):
    """The server is loading its dataset (LOADING)."""

    CODE = "LOADING"


class MasterDownError(ResponseError):
    """A replica has lost its primary and refuses reads (MASTERDOWN)."""

    CODE = "MASTERDOWN"


_BY_CODE: dict[str, type[ResponseError]] = {
    cls.CODE: cls
    for cls in (
        ReadOnlyError,
        MovedError,
        AskError,
        TryAgainError,
        ClusterDownError,
        CrossSlotError,
        NoPermError,
        NoScriptError,
        WrongTypeError,
        OutOfMemoryError,
        BusyError,
        LoadingError,
        MasterDownError,
    )
}


def response_error(
    code: str, message: str, slot: int | None = None, address: str | None = None
) -> ResponseError:
    """Return the exception for an error reply with this code (the Rust core's one factory)."""
    cls = _BY_CODE.get(code, ResponseError)
    if issubclass(cls, RedirectError):
        return cls(message, code, -1 if slot is None else slot, address or "")
    return cls(message, code)


class SerializationError(CacheError, ValueError):
    """A value stored in the cache could not be decoded."""


class EncodingError(CacheError, ValueError):
    """A value could not be stored faithfully with the configured SERIALIZER and COMPRESSOR:
    its bytes would read back as another value (raw digits read as an int), or a codec
    returned something other than bytes. Nothing was written. Like an unpicklable value, it
    is a programming error: raised under fail-open too."""


class DataError(CacheError, TypeError, ValueError):
    """An argument of a raw command (``get_redis_connection()``) that redis-py's encoder
    refuses (a bool, None, any type but bytes, str, int and float), or options it refuses
    together (``nx`` with ``xx``...); nothing is sent. A TypeError and a ValueError, so the
    clauses that caught the errors raised before it existed still do."""


class ConfigurationError(CacheError, ImproperlyConfigured):
    """A LOCATION or OPTIONS value is invalid."""


class ScriptingUnavailableError(NoPermError):
    """An operation needed a Lua script and the server runs none for this client: the ACL
    user lacks ``@scripting``, or the server has no Lua engine (Valkey 9.1 without its lua
    module), and the server has no script-free way (SET IFEQ, DELIFEQ or DELEX: Valkey 8.1 and
    9.0, Redis 8.4) to do it atomically. Nothing was changed. The message names the operation
    and what would make it work; the server's refusal is the ``__cause__``. A ``NoPermError``,
    so clauses that caught the refusal before still do."""

    CODE = "NOPERM"


class InternalError(CacheError):
    """A bug inside redoxide (a Rust panic); the interpreter keeps running."""


class LockError(CacheError):
    """A lock could not be acquired in time, or was released or extended while not held."""


class LockNotOwnedError(LockError):
    """The lock was held by this instance but has expired or now belongs to someone else."""
