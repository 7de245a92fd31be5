"""The parsed configuration of one cache, in typed sections (options.py parses into them).

Which process-wide client a cache shares is derived from two sections, never listed by hand:
``Servers`` (where, and how a router finds them) and ``Connection`` (how every connection is
made and authenticated). An option that changes a connection belongs in ``Connection``, and
is then part of that identity with nothing else to change; the code that makes a connection
(topology/nodes.py ``new_client``) reads only those two sections.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redoxide._credentials import CredentialProvider
from redoxide._location import redact
from redoxide._near_options import NearCacheConfig
from redoxide.compressors import BaseCompressor, IdentityCompressor
from redoxide.plans import FAIL_OPEN_ERRORS
from redoxide.serializers import PickleSerializer, Serializer
from redoxide.signing import SignedSerializer

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_SOCKET_TIMEOUT",
    "Behaviour",
    "Config",
    "Connection",
    "ErrorPolicy",
    "Servers",
    "Values",
]

DEFAULT_SOCKET_TIMEOUT = 2.0
DEFAULT_CONNECT_TIMEOUT = 1.0


@dataclass(frozen=True)
class Servers:
    """Which servers hold the cache, and how a router finds them."""

    #: LOCATION's URLs, in order (the first is the primary of a replicas list).
    urls: tuple[str, ...] = field(repr=False)
    db: int | None = None
    #: standalone (one server), replicas (LOCATION list), sentinel or cluster.
    topology: str = "standalone"
    #: Send get / get_many to replicas (default: yes with a LOCATION list, no otherwise).
    read_from_replicas: bool = False
    #: Sentinel: the monitored service name and the sentinels' (host, port) addresses.
    service_name: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)

    @property
    def display(self) -> tuple[str, ...]:
        """The server URLs with passwords hidden."""
        return tuple(redact(s) for s in self.urls)


@dataclass(frozen=True)
class Connection:
    """How every connection to a server (data node, replica, discovered node) is made and
    authenticated: each field here is part of which client a configuration shares."""

    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: Credentials that change (CREDENTIAL_PROVIDER), instead of a password.
    credential_provider: CredentialProvider | None = None
    #: TLS settings passed to every Rust client, as sorted (name, value) pairs.
    tls: tuple[tuple[str, Any], ...] = field(default=(), repr=False)  # holds the client key
    #: Sync calls share one connection per server per process (SYNC_CONNECTIONS "shared")
    #: instead of one connection per thread ("per-thread", the default).
    shared_sync: bool = False

    @property
    def tls_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the Rust Client's TLS settings."""
        return dict(self.tls)


@dataclass(frozen=True)
class Values:
    """How values become bytes and back."""

    serializer: Serializer = field(default_factory=PickleSerializer)
    compressor: BaseCompressor = field(default_factory=IdentityCompressor)
    #: Serialized values shorter than this are stored uncompressed, whatever the compressor:
    #: COMPRESS_MIN_LENGTH, else the compressor's own min_length, else 0 (it decides).
    compress_min_length: int = 0

    @property
    def signed(self) -> bool:
        """Values are signed (SIGN_VALUES): the key comes from the project's secrets."""
        return isinstance(self.serializer, SignedSerializer)


@dataclass(frozen=True)
class ErrorPolicy:
    """What a failing call does: raise, or (fail-open) log or hand over and read as a miss."""

    ignore_exceptions: bool = False
    log_ignored_exceptions: bool = False
    #: What fail-open turns into a miss (never server error replies).
    ignore_exception_classes: tuple[type[BaseException], ...] = FAIL_OPEN_ERRORS
    logger_name: str = "redoxide"
    #: Called as handler(cache, exception) for each error fail-open would ignore, instead of
    #: the log; it may re-raise (EXCEPTION_HANDLER, DJANGO_REDIS_EXCEPTION_HANDLER).
    exception_handler: Callable[[Any, BaseException], Any] | None = None
    #: The level ignored errors are logged at (LOG_IGNORED_EXCEPTIONS_LEVEL).
    ignored_log_level: int = logging.ERROR


@dataclass(frozen=True)
class Behaviour:
    """What some calls do beyond Django's contract: clear(), get_or_set, tracing."""

    #: clear() deletes only this cache's keys (SCAN + UNLINK) instead of FLUSHDB.
    clear_prefix_only: bool = False
    #: get_or_set: one caller recomputes (see RedisCache._get_or_set_guarded).
    stampede_protection: bool = False
    #: The last fraction of a value's life during which it is recomputed early.
    stampede_window: float = 0.1
    #: How long one recomputation may hold the others back, in ms.
    stampede_lock_ms: int = 5000
    #: An OpenTelemetry client span per cache call (TRACING), with the key (TRACING_KEYS).
    tracing: bool = False
    tracing_keys: bool = False


@dataclass(frozen=True)
class Config:
    """A parsed cache configuration."""

    servers: Servers
    connection: Connection = field(default_factory=Connection)
    values: Values = field(default_factory=Values)
    errors: ErrorPolicy = field(default_factory=ErrorPolicy)
    behaviour: Behaviour = field(default_factory=Behaviour)
    #: Hot keys kept in process memory, coherent through client tracking (NEAR_CACHE).
    near_cache: NearCacheConfig | None = None

    @property
    def client_key(self) -> tuple[Servers, Connection]:
        """Configurations with equal keys share one process-wide client: every field of the
        two sections counts, so a new connection option cannot be left out of it."""
        return (self.servers, self.connection)
