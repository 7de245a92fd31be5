"""Django's cache API over the Rust core: keys, versions, timeouts, encoding, and errors.

Each operation is written once, as a generator that yields the commands it needs and receives
their replies; `_run` drives it synchronously and `_arun` drives it with awaits, so a sync method
and its async twin share every line of logic. The hottest calls (get, set and their twins) are
written out directly to spare them the generator.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import pickle
import re
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable
from typing import Any, TypeVar

from django.core.cache.backends.base import (
    DEFAULT_TIMEOUT,
    MEMCACHE_MAX_KEY_LENGTH,
    BaseCache,
    default_key_func,
)

from redoxide import _redoxide
from redoxide._expiry import ExpiryMixin
from redoxide._patterns import PatternsMixin, glob_escape
from redoxide._topology import make_client, slot_tag
from redoxide.compressors import IdentityCompressor, decompress_any
from redoxide.exceptions import (
    CacheTimeout,
    ConnectionInterrupted,
    ResponseError,
    SerializationError,
)
from redoxide.lock import LockMixin
from redoxide.options import Config, parse_config
from redoxide.serializers import PickleSerializer

__all__ = ["RedisCache", "ValkeyCache"]


T = TypeVar("T")
# A command for a driver: the Rust client method and its positional arguments.
Step = tuple[Callable[..., Any], tuple[Any, ...]]
Plan = Generator[Step, Any, T]

# Keys Django warns about (memcached-unsafe): control characters, space, DEL.
_UNSAFE_KEY = re.compile(r"[\x00-\x20\x7f]")
# The largest value Redis takes (proto-max-bulk-len, 512 MiB by default). A larger one is
# refused before it is sent: the server would read it all, then drop the connection.
MAX_VALUE_SIZE = 512 * 1024 * 1024
# The longest expiry, in ms, that Redis can add to its clock without overflowing.
_MAX_TTL_MS = 2**62

# INCRBY only an existing key, atomically, so incr() of a missing key is an error, not 1.
_INCR_SCRIPT = (
    "if redis.call('EXISTS', KEYS[1]) == 1 then "
    "return redis.call('INCRBY', KEYS[1], ARGV[1]) end return false"
)
# Take the recompute lock only while the value is missing (-2) or has less than ARGV[3] ms left.
_ACQUIRE_SCRIPT = (
    "local left = redis.call('PTTL', KEYS[1]) "
    "if left == -2 or (left >= 0 and left < tonumber(ARGV[3])) then "
    "return redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) end return false"
)
# Delete a lock only if it still holds our token (it may have expired and been retaken).
_RELEASE_SCRIPT = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)
# Move a value to a new version in one step, keeping its TTL.
_RENAME_SCRIPT = (
    "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end "
    "redis.call('RENAME', KEYS[1], KEYS[2]) return 1"
)


def _same_slot(key: str, suffix: str) -> str:
    """A companion key name for `key` that a cluster stores in the same hash slot."""
    if "{" not in key and "}" not in key:
        return "{" + key + "}" + suffix
    name = key + suffix
    slot = _redoxide.key_slot(key)
    if _redoxide.key_slot(name) == slot:
        return name  # the key's own {tag} decides
    # Braces that are no tag ("a}b", "x{", "{}x"): lead with a tag of the key's slot.
    return "{" + slot_tag(slot) + "}" + name


# One Rust client per configuration per process, shared by every backend instance
# (Django makes an instance per thread and per async context).
_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def _shared_client(config: Config) -> Any:
    """The process-wide client of a configuration: the Rust client for one server, else a
    router over one Rust client per node (see _topology.py)."""
    key = config.client_key
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = make_client(config)
                _clients[key] = client
    return client


# One completion bridge per event loop; the last one used is cached per thread.
_bridges: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _redoxide.Bridge] = (
    weakref.WeakKeyDictionary()
)
_local = threading.local()


def _bridge() -> _redoxide.Bridge:
    loop = asyncio.get_running_loop()
    last = getattr(_local, "last", None)
    if last is not None and last[0]() is loop:
        return last[1]  # type: ignore[no-any-return]
    bridge = _bridges.get(loop)
    if bridge is None:
        bridge = _redoxide.Bridge(loop)
        loop.add_reader(bridge.fileno(), bridge.drain)
        _bridges[loop] = bridge
    _local.last = (weakref.ref(loop), bridge)  # weak: a closed loop is not kept alive
    return bridge


def _forget_bridges() -> None:
    # A forked child must not share the parent's eventfds or loops, nor inherit a lock that
    # another thread of the parent held at fork().
    global _local, _clients_lock
    _bridges.clear()
    _local = threading.local()
    _clients_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_bridges)


def _too_large(key: Any, size: int) -> ValueError:
    return ValueError(
        f"the value for key {key!r} is {size:,} bytes once encoded, over the {MAX_VALUE_SIZE:,} "
        "bytes Redis accepts in one value (proto-max-bulk-len); nothing was written"
    )


def _pause(seconds: float, bridge: Any = None) -> Any:
    """A plan step that waits: time.sleep in sync code, asyncio.sleep in async code."""
    if bridge is None:
        time.sleep(seconds)
        return None
    return asyncio.sleep(seconds)


class RawClient:
    """Any Redis command through the cache's own connections (no key making, no encoding)."""

    __slots__ = ("_client",)

    def __init__(self, client: _redoxide.Client) -> None:
        self._client = client

    def execute(self, *args: str | bytes | int | float) -> Any:
        """Run one command and return its reply (bytes, int, list, None, True for OK)."""
        return self._client.execute(args)

    async def aexecute(self, *args: str | bytes | int | float) -> Any:
        """Run one command from async code."""
        return await self._client.execute(args, _bridge())

    def pipeline(self, *commands: tuple[str | bytes | int | float, ...]) -> list[Any]:
        """Run several commands in one round trip (not a transaction); return the replies."""
        return self._client.pipeline(commands)  # type: ignore[no-any-return]

    async def apipeline(self, *commands: tuple[str | bytes | int | float, ...]) -> list[Any]:
        """Run several commands in one round trip from async code."""
        return await self._client.pipeline(commands, _bridge())  # type: ignore[no-any-return]


class _Computed:
    """A fail-open result that is only worked out when needed (get_or_set's default)."""

    __slots__ = ("default",)

    def __init__(self, default: Any) -> None:
        self.default = default

    def __call__(self) -> Any:
        return self.default() if callable(self.default) else self.default


class RedisCache(ExpiryMixin, PatternsMixin, LockMixin, BaseCache):
    """A Django cache backend for Redis and Valkey with a Rust core and native async."""

    #: What IGNORE_EXCEPTIONS turns into a miss: the server being away or slow, and a stored
    #: value that cannot be decoded. Server error replies (WRONGTYPE, OOM, ...) always raise.
    _FAIL_OPEN_ERRORS: tuple[type[BaseException], ...] = (
        ConnectionInterrupted,
        CacheTimeout,
        SerializationError,
    )

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        # Parsed first: BaseCache reads OPTIONS too, and fails obscurely if it is not a dict.
        self._config = parse_config(server, params.get("OPTIONS"))
        super().__init__(params)
        self._client = _shared_client(self._config)
        self._serializer = self._config.serializer
        self._compressor = self._config.compressor
        self._fast_pickle = type(self._serializer) is PickleSerializer
        self._protocol = getattr(self._serializer, "protocol", pickle.HIGHEST_PROTOCOL)
        self._compress = type(self._compressor) is not IdentityCompressor
        self._fail_open = self._config.ignore_exceptions
        self._FAIL_OPEN_ERRORS = self._config.ignore_exception_classes
        self._logger = logging.getLogger(self._config.logger_name)

    def __repr__(self) -> str:
        servers = ", ".join(self._config.display_servers)
        return f"<{type(self).__name__} {servers}>"

    # -- keys, timeouts, values -----------------------------------------------------------

    def _key(self, key: Any, version: int | None) -> str:
        if version is None:
            version = self.version
        if self.key_func is default_key_func:
            made = f"{self.key_prefix}:{version}:{key}"
        else:
            made = self.key_func(key, self.key_prefix, version)
        if len(made) > MEMCACHE_MAX_KEY_LENGTH or _UNSAFE_KEY.search(made):
            self.validate_key(made)
        return made

    def _keys(self, keys: Iterable[Any], version: int | None) -> list[str]:
        """Make many keys at once (the per-key work of get_many and friends)."""
        if version is None:
            version = self.version
        if self.key_func is default_key_func:
            base = f"{self.key_prefix}:{version}:"
            made = [base + k if type(k) is str else f"{base}{k}" for k in keys]
        else:
            made = [self.key_func(k, self.key_prefix, version) for k in keys]
        for m in made:
            if len(m) > MEMCACHE_MAX_KEY_LENGTH or _UNSAFE_KEY.search(m):
                self.validate_key(m)
        return made

    def make_and_validate_key(self, key: Any, version: int | None = None) -> str:
        return self._key(key, version)

    def _ttl_ms(self, timeout: Any) -> int | None:
        """Return the expiry in ms: None never expires, 0 means expire now."""
        if timeout is DEFAULT_TIMEOUT:
            timeout = self.default_timeout
        if timeout is None:
            return None
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
        if not math.isfinite(timeout):
            raise ValueError(f"timeout must be finite, not {timeout!r}")
        if timeout <= 0:
            return 0
        ms = max(1, round(timeout * 1000))
        if ms > _MAX_TTL_MS:
            raise ValueError(
                f"timeout must be at most {_MAX_TTL_MS // 1000} seconds (or None for no expiry), "
                f"not {timeout!r}"
            )
        return ms

    def get_backend_timeout(self, timeout: Any = DEFAULT_TIMEOUT) -> float | None:
        """Return the timeout in seconds as the server will apply it (ms resolution)."""
        ms = self._ttl_ms(timeout)
        return None if ms is None else ms / 1000

    def _encode(self, value: Any, key: Any = None) -> bytes:
        # Ints (not bools) are stored as raw digits, as Django's builtin and django-redis do,
        # so INCR/DECR can work on them atomically on the server.
        if type(value) is int:
            return b"%d" % value
        if self._fast_pickle:
            data = pickle.dumps(value, self._protocol)
        else:
            data = self._serializer.dumps(value)
            if isinstance(data, str):
                data = data.encode()
        if self._compress and len(data) >= self._compressor.min_length:
            data = self._compressor.compress(data)
        if len(data) > MAX_VALUE_SIZE:
            raise _too_large(key, len(data))
        return data

    def _decode(self, data: bytes, key: Any) -> Any:
        try:
            if data[:1] != b"\x80":
                # Not a pickle (protocol >= 2): a raw int, compressed data, or another format.
                # (A failing int() is slow: it formats an error message from the data.)
                if data.isdigit() or (data[:1] == b"-" and data[1:].isdigit()):
                    return int(data)
                # Compressed by any known compressor (recognised by its magic bytes), whatever
                # COMPRESSOR is now: values written before a change, or by django-redis.
                data = decompress_any(data)
            if self._fast_pickle:
                return pickle.loads(data)
            return self._serializer.loads(data)
        except Exception as exc:
            raise SerializationError(
                f"cannot decode the value stored for key {key!r}: {type(exc).__name__}: {exc}"
            ) from exc

    def _encode_many(self, values: Iterable[Any], keys: Iterable[Any] = ()) -> list[bytes]:
        """Encode values; `keys`, in the same order, name a value that is too large."""
        named = itertools.chain(keys, itertools.repeat(None))
        if self._fast_pickle and not self._compress:
            dumps, protocol = pickle.dumps, self._protocol
            encoded = [b"%d" % v if type(v) is int else dumps(v, protocol) for v in values]
            if encoded and max(map(len, encoded)) > MAX_VALUE_SIZE:
                for data, key in zip(encoded, named, strict=False):
                    if len(data) > MAX_VALUE_SIZE:
                        raise _too_large(key, len(data))
            return encoded
        return [self._encode(v, k) for v, k in zip(values, named, strict=False)]

    def _decode_many(self, keys: list[Any], values: list[bytes | None]) -> dict[Any, Any]:
        if self._fast_pickle:
            loads = pickle.loads
            try:
                return {
                    k: loads(v) if v[:1] == b"\x80" else self._decode(v, k)
                    for k, v in zip(keys, values, strict=True)
                    if v is not None
                }
            except Exception:  # redone below, to name the key that failed
                pass
        return {k: self._decode(v, k) for k, v in zip(keys, values, strict=True) if v is not None}

    # -- drivers ----------------------------------------------------------------------------

    def _failed(self, exc: BaseException, fallback: Any) -> Any:
        """Re-raise `exc`, or under IGNORE_EXCEPTIONS log it and return the fallback."""
        if not (self._fail_open and isinstance(exc, self._FAIL_OPEN_ERRORS)):
            raise exc
        if self._config.log_ignored_exceptions:
            self._logger.error("redoxide: ignored %s: %s", type(exc).__name__, exc)
        return fallback() if isinstance(fallback, _Computed) else fallback

    def _run(self, plan: Plan[T], fallback: Any = None) -> T:
        """Drive a plan with blocking calls."""
        try:
            fn, args = next(plan)
            while True:
                try:
                    reply = fn(*args)
                except ResponseError as exc:
                    fn, args = plan.throw(exc)
                else:
                    fn, args = plan.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, fallback)  # type: ignore[no-any-return]

    async def _arun(self, plan: Plan[T], fallback: Any = None) -> T:
        """Drive a plan with awaits on this event loop's bridge."""
        bridge = _bridge()
        try:
            fn, args = next(plan)
            while True:
                try:
                    reply = await fn(*args, bridge)
                except ResponseError as exc:
                    fn, args = plan.throw(exc)
                else:
                    fn, args = plan.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
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
            return self._failed(exc, {})  # type: ignore[no-any-return]

    async def aget_many(self, keys: Iterable[Any], version: int | None = None) -> dict[Any, Any]:
        keys = list(keys)
        if not keys:
            return {}
        try:
            values = await self._client.mget(self._keys(keys, version), _bridge())
            return self._decode_many(keys, values)
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, {})  # type: ignore[no-any-return]

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

    def _delete(self, key: Any, version: int | None) -> Plan[bool]:
        return bool((yield self._client.execute, (("DEL", self._key(key, version)),)))

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
        else:
            yield self._client.set_many, (made, values, ttl)
        return []

    def _delete_many(self, keys: Iterable[Any], version: int | None) -> Plan[None]:
        made = self._keys(keys, version)
        if made:
            yield self._client.execute, (("DEL", *made),)

    def _incr(self, key: Any, delta: int, version: int | None) -> Plan[Any]:
        made = self._key(key, version)
        c = self._client
        try:
            value = yield c.execute, (("EVAL", _INCR_SCRIPT, 1, made, delta),)
        except ResponseError as exc:
            if "not an integer" not in str(exc) and "overflow" not in str(exc):
                raise
            # Not stored as a 64-bit raw int (a pickled number, a huge int, a float delta):
            # read, add, and write back keeping the TTL, as django-redis does.
            # Read from the primary (a router sends get() to replicas, which may lag).
            data = yield c.execute, (("GET", made),)
            if data is None:
                raise ValueError(f"Key '{key}' not found.") from None
            value = self._decode(data, key) + delta
            yield c.execute, (("SET", made, self._encode(value), "KEEPTTL"),)
            return value
        if value is None:
            raise ValueError(f"Key '{key}' not found.")
        return value

    def _incr_version(self, key: Any, delta: int, version: int | None) -> Plan[int]:
        if version is None:
            version = self.version
        old, new = self._key(key, version), self._key(key, version + delta)
        c = self._client
        try:
            moved = yield c.execute, (("EVAL", _RENAME_SCRIPT, 2, old, new),)
        except ResponseError as exc:
            if "CROSSSLOT" not in str(exc).upper():
                raise
            # A cluster keeps the two versions in different slots (unless the key has a
            # {hash tag}): copy and delete, keeping the TTL; not atomic, as on django-redis.
            data, left = yield c.pipeline, ((("GET", old), ("PTTL", old)),)
            moved = data is not None
            if moved:
                store: tuple[Any, ...] = ("SET", new, data) + (("PX", left) if left > 0 else ())
                yield c.pipeline, ((store, ("DEL", old)),)
        if not moved:
            raise ValueError(f"Key '{key}' not found.")
        return version + delta

    def _get_or_set(self, key: Any, default: Any, timeout: Any, version: int | None) -> Plan[Any]:
        if self._config.stampede_protection:
            return (yield from self._get_or_set_guarded(key, default, timeout, version))
        made = self._key(key, version)
        c = self._client
        data = yield c.get, (made,)
        if data is not None:
            return self._decode(data, key)
        if callable(default):
            default = default()
        encoded, ttl = self._encode(default, key), self._ttl_ms(timeout)
        if ttl == 0:
            return default  # expires at once: nothing to store
        set_cmd: tuple[Any, ...] = ("SET", made, encoded, "NX")
        if ttl is not None:
            set_cmd += ("PX", ttl)
        # Add and read back in one round trip: if another caller won the race, return theirs.
        _, data = yield c.pipeline, ((set_cmd, ("GET", made)),)
        return default if data is None else self._decode(data, key)

    def _get_or_set_guarded(
        self, key: Any, default: Any, timeout: Any, version: int | None
    ) -> Plan[Any]:
        """get_or_set with stampede protection (STAMPEDE_PROTECTION): while a value is in the
        last STAMPEDE_WINDOW of its life, one caller (holding a short lock) recomputes it and the
        others keep returning the current value; when it is missing, one caller computes and
        the others wait for its result (at most STAMPEDE_LOCK_TIMEOUT), so the function runs
        once per expiry, not once per caller. Plain get() readers see nothing different."""
        made, ttl = self._key(key, version), self._ttl_ms(timeout)
        c = self._client
        lock, token = _same_slot(made, ":redoxide-recompute"), secrets.token_hex(8)
        lock_ms = self._config.stampede_lock_ms
        data, left = yield c.pipeline, ((("GET", made), ("PTTL", made)),)
        if data is not None:
            value = self._decode(data, key)
            if ttl is None or not 0 < left < ttl * self._config.stampede_window:
                return value
            # Near expiry: recompute only if the value is still old when we take the lock.
            threshold = round(ttl * self._config.stampede_window)
            acquire = ("EVAL", _ACQUIRE_SCRIPT, 2, made, lock, token, lock_ms, threshold)
            if not (yield c.execute, (acquire,)):
                return value  # someone else is recomputing, or just did
        else:
            # Missing: take the lock only while the value is still missing.
            acquire = ("EVAL", _ACQUIRE_SCRIPT, 2, made, lock, token, lock_ms, 0)
            step, waited = 0.005, 0.0
            while not (yield c.execute, (acquire,)):
                data = yield c.get, (made,)
                if data is not None:
                    return self._decode(data, key)
                if waited >= lock_ms / 1000:
                    break  # the computing caller is stuck: compute ourselves, lock or not
                yield _pause, (step,)
                waited += step
                step = min(step * 2, 0.1)
        fresh = default() if callable(default) else default
        encoded = self._encode(fresh, key)
        if ttl == 0:
            store: tuple[Any, ...] = ("DEL", made)
        else:
            store = ("SET", made, encoded) + (() if ttl is None else ("PX", ttl))
        # Releasing checks the token, so a lock we no longer hold is left alone.
        yield c.pipeline, ((store, ("EVAL", _RELEASE_SCRIPT, 1, lock, token)),)
        return fresh

    def _clear(self) -> Plan[bool]:
        if self._config.clear_prefix_only:
            # Only this cache's keys, every version: for a database shared with other data.
            prefix = glob_escape(self.key_prefix)
            if self.key_func is default_key_func:
                match = f"{prefix}:*"
            else:
                match = self.key_func("*", prefix, "*")
            yield from self._delete_matching(match)
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

    def delete(self, key: Any, version: int | None = None) -> bool:
        return self._run(self._delete(key, version), False)

    async def adelete(self, key: Any, version: int | None = None) -> bool:
        return await self._arun(self._delete(key, version), False)

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

    def delete_many(self, keys: Iterable[Any], version: int | None = None) -> None:
        self._run(self._delete_many(keys, version))

    async def adelete_many(self, keys: Iterable[Any], version: int | None = None) -> None:
        await self._arun(self._delete_many(keys, version))

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> Any:
        return self._run(self._incr(key, delta, version))

    async def aincr(self, key: Any, delta: int = 1, version: int | None = None) -> Any:
        return await self._arun(self._incr(key, delta, version))

    def decr(self, key: Any, delta: int = 1, version: int | None = None) -> Any:
        return self._run(self._incr(key, -delta, version))

    async def adecr(self, key: Any, delta: int = 1, version: int | None = None) -> Any:
        return await self._arun(self._incr(key, -delta, version))

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
        plan = self._get_or_set(key, default, timeout, version)
        return self._run(plan, _Computed(default))

    async def aget_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> Any:
        plan = self._get_or_set(key, default, timeout, version)
        return await self._arun(plan, _Computed(default))

    def clear(self) -> bool:  # type: ignore[override]  # Django's builtin returns bool too
        return self._run(self._clear(), False)

    async def aclear(self) -> bool:  # type: ignore[override]
        return await self._arun(self._clear(), False)

    @property
    def client(self) -> RawClient:
        """Commands redoxide does not wrap, on the same connections: ``cache.client.execute(
        "HINCRBY", cache.make_key("h"), "f", 1)`` and ``await cache.client.aexecute(...)``."""
        return RawClient(self._client)

    def close(self, **kwargs: Any) -> None:
        """Do nothing: connections are shared by the whole process and outlive requests."""

    async def aclose(self, **kwargs: Any) -> None:
        """Do nothing, like close()."""


#: The same backend, for settings that read better with Valkey.
ValkeyCache = RedisCache
