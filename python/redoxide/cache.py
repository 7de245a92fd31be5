"""Django's cache API over the Rust core: the backend users put in CACHES.

Each operation is written once, as a plan (see redoxide.plans) that yields the commands it
needs and receives their replies; ``_run`` drives it with blocking calls and ``_arun`` with
awaits, so a sync method and its async twin share every line of logic. The hottest calls (get,
set, get_many and their twins) are written out directly to spare them the generator. Keys,
timeouts and values are _values.py's; where commands go is topology/'s.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from typing import Any, TypeVar

from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache, default_key_func
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from redoxide import _stats, plans, tracing
from redoxide._bridges import bridge as _bridge
from redoxide._counters import CountersMixin
from redoxide._expiry import ExpiryMixin
from redoxide._offers import node_of, offer_refused
from redoxide._patterns import PatternsMixin
from redoxide._protocols import ClientLike
from redoxide._recompute import RecomputeMixin
from redoxide._structures import StructuresMixin
from redoxide._unusable import make_unusable
from redoxide._values import ValuesMixin
from redoxide.compressors import BUILTIN_COMPRESSORS, BaseCompressor, IdentityCompressor
from redoxide.connection import RawClient
from redoxide.exceptions import CacheError, ResponseError
from redoxide.lock import LockMixin
from redoxide.near import NearClient, near_client
from redoxide.options import parse_config
from redoxide.plans import Computed, FailOpen, Plan
from redoxide.serializers import (
    JSONSerializer,
    MsgPackSerializer,
    PickleSerializer,
    fast_decoding,
)
from redoxide.signing import SignedSerializer
from redoxide.topology import shared_client

__all__ = ["RawClient", "RedisCache", "ValkeyCache"]

T = TypeVar("T")

#: redoxide's own serializers (exact classes): none writes bytes that start like compressed
#: data, so a read may recognise compressed values by their magic bytes.
_BUILTIN_SERIALIZERS = frozenset(
    {PickleSerializer, JSONSerializer, MsgPackSerializer, SignedSerializer}
)


# The state of a backend made from given (LOCATION, params), with a copy of the params it came
# from: a construction with equal ones copies it (about 2 us) instead of parsing and
# validating everything again (about 40 us).
_states: dict[tuple[Any, ...], tuple[Any, dict[str, Any]]] = {}
_MAX_STATES = 64


def _state_key(server: Any, params: dict[str, Any]) -> tuple[Any, ...]:
    where = tuple(server) if isinstance(server, list) else server
    return (where, id(params.get("OPTIONS")), params.get("KEY_PREFIX"), params.get("VERSION"))


def _snapshot(value: Any) -> Any:
    """A copy of the containers in params (the objects in them are kept, to compare equal)."""
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_snapshot(v) for v in value)
    return value


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    # A configuration also reads django-redis' project-wide defaults, and signed values are
    # keyed from the project's secrets: forget every state made under the old values.
    if setting.startswith("DJANGO_REDIS_") or setting.startswith("SECRET_KEY"):
        _states.clear()


setting_changed.connect(_settings_changed)


class RedisCache(
    ValuesMixin,
    CountersMixin,
    RecomputeMixin,
    ExpiryMixin,
    PatternsMixin,
    StructuresMixin,
    LockMixin,
    BaseCache,
):
    """A Django cache backend for Redis and Valkey with a Rust core and native async."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        # Django builds a backend per thread and per request context (under ASGI, one per
        # request): the state that follows from the settings is worked out once and copied.
        key = _state_key(server, params)
        known = _states.get(key)
        if known is not None and known[0] == params:
            self.__dict__.update(known[1])
            if self._config.behaviour.tracing:
                tracing.adopt(self)
            return
        try:
            self._setup(server, params)
        except (ImproperlyConfigured, ImportError) as exc:
            # Django's own cache checks build every cache in CACHES before redoxide's checks
            # can report: a bad setting must not crash `manage.py check`. The cache is built
            # unusable instead: its checks report the setting (E001-E005), and every call
            # raises ConfigurationError naming it.
            make_unusable(self, exc)
            return
        if len(_states) >= _MAX_STATES:
            _states.clear()  # params that keep changing (tests): no unbounded growth
        _states[key] = (_snapshot(params), dict(self.__dict__))

    def _setup(self, server: Any, params: dict[str, Any]) -> None:
        # Parsed first: BaseCache reads OPTIONS too, and fails obscurely if it is not a dict.
        self._config = config = parse_config(server, params.get("OPTIONS"))
        super().__init__(params)
        self._client: ClientLike = shared_client(config)
        if config.near_cache is not None:
            self._client = near_client(
                self._client,
                config.near_cache,
                self.key_prefix,
                self.version,
                self.key_func is default_key_func,
                config.client_key,
                config.errors.logger_name,
                key_func=self.key_func,
            )
        self._serializer = config.values.serializer
        self._compressor = config.values.compressor
        self._fast_pickle = type(self._serializer) is PickleSerializer
        self._fast_loads, self._fast_heads = fast_decoding(self._serializer)
        self._protocol = getattr(self._serializer, "protocol", pickle.HIGHEST_PROTOCOL)
        self._compress = type(self._compressor) is not IdentityCompressor
        # COMPRESS_MIN_LENGTH, else the compressor's own min_length (_value_options.value_codec).
        self._compress_min = config.values.compress_min_length
        #: Every codec is redoxide's: reads may recognise compressed data by its magic bytes.
        self._known_codecs = (
            type(self._compressor) in BUILTIN_COMPRESSORS
            and type(self._serializer) in _BUILTIN_SERIALIZERS
        )
        #: A user's codec: a write stores what reads back as the value (_stored_custom).
        self._check_encoded = not self._known_codecs
        #: The compressor says which data it wrote (is_compressed); else its decompress() does.
        self._compressor_claims = (
            getattr(type(self._compressor), "is_compressed", BaseCompressor.is_compressed)
            is not BaseCompressor.is_compressed
        )
        if type(self._compressor) not in BUILTIN_COMPRESSORS:
            # Its output may start like the serializer's own: no read skips the compressor.
            self._fast_heads = frozenset()
        self._fast_head_bytes = b"".join(sorted(self._fast_heads))
        fail_open = FailOpen(
            config.errors.ignore_exceptions,
            config.errors.ignore_exception_classes,
            config.errors.log_ignored_exceptions,
            config.errors.logger_name,
            config.errors.exception_handler,
            config.errors.ignored_log_level,
        )
        #: Caught around every call; re-raised by _failed unless fail-open covers them.
        self._FAIL_OPEN_ERRORS = fail_open.errors
        self._fail_open = fail_open
        if config.behaviour.tracing:
            tracing.adopt(self)

    def _failed(self, exc: BaseException, fallback: Any) -> Any:
        """An error caught around a call: re-raised, or under fail-open the fallback (the
        exception handler, if any, gets this cache and the error first)."""
        return self._fail_open.failed(exc, fallback, self)

    def __repr__(self) -> str:
        servers = ", ".join(self._config.servers.display)
        return f"<{type(self).__name__} {servers}>"

    # -- drivers ----------------------------------------------------------------------------

    def _run(self, plan: Plan[T], fallback: Any = None) -> T:
        """Drive a plan with blocking calls (fail-open applied)."""
        try:
            return plans.run(plan)
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, fallback)  # type: ignore[no-any-return]

    async def _arun(self, plan: Plan[T], fallback: Any = None) -> T:
        """Drive a plan with awaits on this event loop's bridge (fail-open applied)."""
        try:
            return await plans.arun(plan, _bridge())
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, fallback)  # type: ignore[no-any-return]

    # -- the hot path, written out ------------------------------------------------------------

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        made = self._key(key, version)
        try:
            data = self._client.get(made)
            return default if data is None else self._decode(data, key)
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, default)

    async def aget(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        made = self._key(key, version)
        try:
            data = await self._client.get(made, _bridge())
            return default if data is None else self._decode(data, key)
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, default)

    def set(  # type: ignore[override]  # nx/xx return a bool, as in django-redis
        self,
        key: Any,
        value: Any,
        timeout: Any = DEFAULT_TIMEOUT,
        version: int | None = None,
        *,
        nx: bool = False,
        xx: bool = False,
    ) -> bool | None:
        """Store a value. With nx (only if absent) or xx (only if present), return whether it
        was stored, as django-redis does; otherwise return None, as Django does."""
        if nx or xx:
            return self._run(self._set_if(key, value, timeout, version, nx), False)
        made, data, ttl = self._key(key, version), self._encode(value, key), self._ttl_ms(timeout)
        try:
            if ttl == 0:
                self._client.execute(("DEL", made))
            else:
                self._client.set(made, data, ttl)
        except self._FAIL_OPEN_ERRORS as exc:
            self._failed(exc, None)
        return None

    async def aset(  # type: ignore[override]
        self,
        key: Any,
        value: Any,
        timeout: Any = DEFAULT_TIMEOUT,
        version: int | None = None,
        *,
        nx: bool = False,
        xx: bool = False,
    ) -> bool | None:
        if nx or xx:
            return await self._arun(self._set_if(key, value, timeout, version, nx), False)
        made, data, ttl = self._key(key, version), self._encode(value, key), self._ttl_ms(timeout)
        try:
            if ttl == 0:
                await self._client.execute(("DEL", made), _bridge())
            else:
                await self._client.set(made, data, ttl, False, False, _bridge())
        except self._FAIL_OPEN_ERRORS as exc:
            self._failed(exc, None)
        return None

    def _set_if(
        self, key: Any, value: Any, timeout: Any, version: int | None, nx: bool
    ) -> Plan[bool]:
        """SET NX (nx) or SET XX (not nx): return whether the value was stored."""
        made, data, ttl = self._key(key, version), self._encode(value, key), self._ttl_ms(timeout)
        if ttl == 0:
            # Expires at once: report what it would have done, leave nothing behind.
            exists = yield self._client.execute, (("EXISTS", made),)
            if not nx and exists:
                yield self._client.execute, (("DEL", made),)
            return bool(exists) != nx
        return bool((yield self._client.set, (made, data, ttl, nx, not nx)))

    def get_many(self, keys: Iterable[Any], version: int | None = None) -> dict[Any, Any]:
        keys = list(keys)
        if not keys:
            return {}
        try:
            return self._decode_many(keys, self._client.mget(self._keys(keys, version)))
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed_many(exc, keys)

    async def aget_many(self, keys: Iterable[Any], version: int | None = None) -> dict[Any, Any]:
        keys = list(keys)
        if not keys:
            return {}
        try:
            values = await self._client.mget(self._keys(keys, version), _bridge())
            return self._decode_many(keys, values)
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed_many(exc, keys)

    def delete(self, key: Any, version: int | None = None) -> bool:
        made = self._key(key, version)
        try:
            return bool(self._client.execute(("DEL", made)))
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, False)  # type: ignore[no-any-return]

    async def adelete(self, key: Any, version: int | None = None) -> bool:
        made = self._key(key, version)
        try:
            return bool(await self._client.execute(("DEL", made), _bridge()))
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, False)  # type: ignore[no-any-return]

    def _failed_many(self, exc: BaseException, keys: list[Any]) -> dict[Any, Any]:
        """get_many's fail-open: re-raise unless it covers `exc`; else what did answer (a
        cluster's healthy nodes, when one node failed), or nothing."""
        self._failed(exc, None)
        partial = exc.partial_values if isinstance(exc, CacheError) else None
        return {} if partial is None else self._decode_many(keys, partial)

    # -- plans ---------------------------------------------------------------------------------

    def _add(self, key: Any, value: Any, timeout: Any, version: int | None) -> Plan[bool]:
        made, data, ttl = self._key(key, version), self._encode(value, key), self._ttl_ms(timeout)
        c = self._client
        if ttl == 0:
            # Expire-now add: report whether it would have been added, and store nothing (a
            # SET then DEL could leave the value behind if cancelled in between).
            return not (yield c.execute, (("EXISTS", made),))
        return bool((yield c.set, (made, data, ttl, True, False)))

    def _touch(self, key: Any, timeout: Any, version: int | None) -> Plan[bool]:
        made, ttl = self._key(key, version), self._ttl_ms(timeout)
        c = self._client
        if ttl is None:
            _, exists = yield c.pipeline, ((("PERSIST", made), ("EXISTS", made)),)
            return bool(exists)
        if ttl == 0:
            return bool((yield c.execute, (("DEL", made),)))
        return bool((yield c.execute, (("PEXPIRE", made, ttl),)))

    def _has_key(self, key: Any, version: int | None) -> Plan[bool]:
        return bool((yield self._client.execute, (("EXISTS", self._key(key, version)),)))

    def _set_many(self, data: dict[Any, Any], timeout: Any, version: int | None) -> Plan[list[Any]]:
        if not data:
            return []
        made = self._keys(data, version)
        values = self._encode_many(data.values(), data)
        ttl = self._ttl_ms(timeout)
        if ttl == 0:
            yield self._client.execute, (("DEL", *made),)
            return []
        try:
            yield self._client.set_many, (made, values, ttl)
        except ResponseError as exc:
            if not offer_refused(exc, "MSETEX"):
                raise
            # An ACL that lists commands by name, or a node not upgraded yet: its keys' nodes
            # stop offering MSETEX (while the same server answers), and one SET PX each
            # stores them all (those already stored again, with the same values).
            for node in {node_of(self._client, key) for key in made} - {None}:
                node.refuse("MSETEX")  # type: ignore[union-attr]
            yield self._client.set_many, (made, values, ttl)
        return []

    def _delete_many(self, keys: Iterable[Any], version: int | None) -> Plan[int | None]:
        made = self._keys(keys, version)
        if not made:
            return None  # Django's contract: delete_many([]) returns None
        # django-redis returns DEL's count; Django ignores what delete_many returns.
        return int((yield self._client.execute, (("DEL", *made),)))

    def _clear(self) -> Plan[bool]:
        if self._config.behaviour.clear_prefix_only:
            # Only this cache's names, every version (not another cache's whose KEY_PREFIX
            # starts like this one's): for a database shared with other data.
            yield from self._delete_own()
            return True
        return bool((yield self._client.execute, (("FLUSHDB",),)))

    # -- the rest of the API: each sync method and its async twin run the same plan -------------

    def add(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        return self._run(self._add(key, value, timeout, version), False)

    async def aadd(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        return await self._arun(self._add(key, value, timeout, version), False)

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        return self._run(self._touch(key, timeout, version), False)

    async def atouch(
        self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        return await self._arun(self._touch(key, timeout, version), False)

    def has_key(self, key: Any, version: int | None = None) -> bool:
        return self._run(self._has_key(key, version), False)

    async def ahas_key(self, key: Any, version: int | None = None) -> bool:
        return await self._arun(self._has_key(key, version), False)

    def set_many(
        self, data: dict[Any, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[Any]:
        return self._run(self._set_many(data, timeout, version), list(data))

    async def aset_many(
        self, data: dict[Any, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[Any]:
        return await self._arun(self._set_many(data, timeout, version), list(data))

    def delete_many(  # type: ignore[override]  # the count, as django-redis returns
        self, keys: Iterable[Any], version: int | None = None
    ) -> int | None:
        """Delete keys; return how many existed, as django-redis does (None for no keys, as
        Django does)."""
        return self._run(self._delete_many(keys, version))

    async def adelete_many(  # type: ignore[override]
        self, keys: Iterable[Any], version: int | None = None
    ) -> int | None:
        return await self._arun(self._delete_many(keys, version))

    def incr(
        self,
        key: Any,
        delta: int = 1,
        version: int | None = None,
        *,
        ignore_key_check: bool = False,
    ) -> Any:
        """Add delta to a stored number and return the result. A missing key raises
        ValueError, or with ignore_key_check (django-redis') is created holding delta."""
        return self._count(key, delta, version, ignore_key_check)

    async def aincr(
        self,
        key: Any,
        delta: int = 1,
        version: int | None = None,
        *,
        ignore_key_check: bool = False,
    ) -> Any:
        return await self._acount(key, delta, version, ignore_key_check)

    def decr(
        self,
        key: Any,
        delta: int = 1,
        version: int | None = None,
        *,
        ignore_key_check: bool = False,
    ) -> Any:
        """Subtract delta, like incr (ignore_key_check creates a missing key at -delta)."""
        return self._count(key, -delta, version, ignore_key_check)

    async def adecr(
        self,
        key: Any,
        delta: int = 1,
        version: int | None = None,
        *,
        ignore_key_check: bool = False,
    ) -> Any:
        return await self._acount(key, -delta, version, ignore_key_check)

    def incr_version(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        return self._run(self._incr_version(key, delta, version))

    async def aincr_version(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        return await self._arun(self._incr_version(key, delta, version))

    def decr_version(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        return self._run(self._incr_version(key, -delta, version))

    async def adecr_version(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        return await self._arun(self._incr_version(key, -delta, version))

    def get_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> Any:
        computed = Computed(default)
        plan = self._get_or_set(key, computed, timeout, version)
        return self._run(plan, computed)

    async def aget_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> Any:
        computed = Computed(default)
        plan = self._get_or_set(key, computed, timeout, version)
        return await self._arun(plan, computed)

    def clear(self) -> bool:  # type: ignore[override]  # Django's builtin returns bool too
        return self._run(self._clear(), False)

    async def aclear(self) -> bool:  # type: ignore[override]
        return await self._arun(self._clear(), False)

    @property
    def client(self) -> RawClient:
        """Commands redoxide does not wrap, on the same connections: ``cache.client.execute(
        "HINCRBY", cache.make_key("h"), "f", 1)`` and ``await cache.client.aexecute(...)``."""
        return RawClient(self)

    def stats(self) -> dict[str, Any]:
        """Return what this cache's servers were asked and answered, as a plain dict: calls,
        errors, hits, misses, bytes, connections, latencies, per node and in total (the
        shape is described in redoxide._stats)."""
        return _stats.collect(self)

    def reset_stats(self) -> None:
        """Zero the counters stats() returns (open connections are a gauge and stay)."""
        _stats.reset(self)

    def near_cache_stats(self) -> dict[str, Any] | None:
        """The near cache's counters (hits, misses, installs, fills dropped by a race,
        invalidations, flushes by reason, evictions, bytes, entries, gate trips), or None
        when OPTIONS["NEAR_CACHE"] is not set."""
        client = self._client
        return client.stats() if isinstance(client, NearClient) else None

    def close(self, **kwargs: Any) -> None:
        """Do nothing: connections are shared by the whole process and outlive requests."""

    async def aclose(self, **kwargs: Any) -> None:
        """Do nothing, like close()."""


#: The same backend, for settings that read better with Valkey.
ValkeyCache = RedisCache
