"""get_or_set as a plan, with and without stampede protection (a mixin for RedisCache)."""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import TYPE_CHECKING, Any

from redoxide import _scripts, plans
from redoxide._offers import (
    node_of,
    note_refused,
    offer_refused,
    refused,
    release_command,
    scripts_refused,
)
from redoxide.exceptions import CacheError, ResponseError, SerializationError
from redoxide.topology.commands import same_slot

if TYPE_CHECKING:
    from collections.abc import Callable

    from redoxide._protocols import ClientLike
    from redoxide._sections import Config
    from redoxide.plans import Plan

__all__ = ["RecomputeMixin"]


class RecomputeMixin:
    """The plan of get_or_set and aget_or_set."""

    #: Set once a script was refused to this instance (see CountersMixin).
    _scripts_refused_seen = False

    if TYPE_CHECKING:  # what RedisCache provides
        _client: ClientLike
        _config: Config
        _failed: Callable[[BaseException, Any], Any]

        def _key(self, key: Any, version: int | None) -> str: ...
        def _encode(self, value: Any, key: Any = None) -> bytes: ...
        def _decode(self, data: bytes, key: Any) -> Any: ...
        def _ttl_ms(self, timeout: Any) -> int | None: ...

    def _get_or_set(self, key: Any, default: Any, timeout: Any, version: int | None) -> Plan[Any]:
        if self._config.behaviour.stampede_protection:
            return (yield from self._get_or_set_guarded(key, default, timeout, version))
        made = self._key(key, version)
        c = self._client
        data = yield c.get, (made,)
        corrupt = False
        if data is not None:
            try:
                return self._decode(data, key)
            except SerializationError as exc:
                # Raises unless fail-open covers it; then the value is replaced, not kept to
                # make every later call compute again.
                self._failed(exc, None)
                corrupt = True
        if callable(default):
            default = default()
        encoded, ttl = self._encode(default, key), self._ttl_ms(timeout)
        if ttl == 0:
            return default  # expires at once: nothing to store
        set_cmd: tuple[Any, ...] = ("SET", made, encoded) + (() if corrupt else ("NX",))
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
        lock, token = same_slot(made, ":redoxide-recompute"), secrets.token_hex(8)
        lock_ms = self._config.behaviour.stampede_lock_ms
        data, left = yield c.pipeline, ((("GET", made), ("PTTL", made)),)
        if data is not None:
            try:
                value = self._decode(data, key)
            except SerializationError as exc:
                self._failed(exc, None)  # raises unless fail-open covers it
                # Fail-open: replace the undecodable value, without waiting for a lock.
                fresh = default() if callable(default) else default
                encoded = self._encode(fresh, key)
                if ttl != 0:
                    yield (
                        c.execute,
                        (("SET", made, encoded) + (() if ttl is None else ("PX", ttl)),),
                    )
                return fresh
            if ttl is None or not 0 < left < ttl * self._config.behaviour.stampede_window:
                return value
            # Near expiry: recompute only if the value is still old when we take the lock.
            threshold = round(ttl * self._config.behaviour.stampede_window)
            if not (yield from self._take_recompute_lock(made, lock, token, lock_ms, threshold)):
                return value  # someone else is recomputing, or just did
        else:
            # Missing: take the lock only while the value is still missing.
            # The wait counts its round trips too, not only its pauses.
            step, give_up = 0.005, time.monotonic() + lock_ms / 1000
            while not (yield from self._take_recompute_lock(made, lock, token, lock_ms, 0)):
                data = yield c.get, (made,)
                if data is not None:
                    return self._decode(data, key)
                left = give_up - time.monotonic()
                if left <= 0:
                    break  # the computing caller is stuck: compute ourselves, lock or not
                yield plans.pause, (min(step, left),)
                step = min(step * 2, 0.1)
        try:
            fresh = default() if callable(default) else default
            encoded = self._encode(fresh, key)
        except BaseException:
            # The computation failed (the database is down, the value cannot be pickled): let
            # the next caller try at once instead of waiting out the lock. Token-checked, so a
            # lock we never took or no longer hold is left alone.
            release = self._recompute_release(made, lock, token)
            if release is not None:
                with contextlib.suppress(CacheError):  # the caller's error is the one to see
                    yield c.execute, (release,)
            raise
        if ttl == 0:
            store: tuple[Any, ...] = ("DEL", made)
        else:
            store = ("SET", made, encoded) + (() if ttl is None else ("PX", ttl))
        # Releasing checks the token, so a lock we no longer hold is left alone.
        release = self._recompute_release(made, lock, token)
        if release is None:
            yield c.execute, (store,)
            return fresh
        try:
            yield c.pipeline, ((store, release),)
        except ResponseError as exc:
            # The store came first and the error is the release's: scripts refused here, or
            # an offered DELIFEQ / DELEX that an ACL listing commands by name does not allow.
            yield from self._release_refused(made, lock, token, release, exc)
        return fresh

    def _release_refused(
        self, made: str, lock: str, token: str, release: tuple[Any, ...], exc: ResponseError
    ) -> Plan[None]:
        """After `release` of the recompute lock failed with `exc`: note a refusal (raise
        anything else) and give the lock back the next way, or leave it to its short
        timeout."""
        node = node_of(self._client, made)
        if release[0] == "EVAL" and refused(exc):
            yield from note_refused(node)
            self._scripts_refused_seen = True
            return
        if (
            release[0] not in ("DELIFEQ", "DELEX")
            or node is None
            or not offer_refused(exc, release[0])
        ):
            raise exc
        node.refuse(release[0])
        again = self._recompute_release(made, lock, token)
        if again is not None:
            with contextlib.suppress(CacheError):
                yield self._client.execute, (again,)

    def _take_recompute_lock(
        self, made: str, lock: str, token: str, lock_ms: int, threshold: int
    ) -> Plan[bool]:
        """Take the recompute lock only while the value is missing or has less than
        `threshold` ms left: one script, or where scripts do not run, the lock and the value's
        TTL in one round trip, the lock given back at once if the value turned out fresh (a
        fresh value found just after the lock was taken is read as fresh, as the script
        would, one step later)."""
        c = self._client
        scripts = not (self._scripts_refused_seen and scripts_refused(node_of(c, made)))
        if scripts:
            acquire = ("EVAL", _scripts.ACQUIRE, 2, made, lock, token, lock_ms, threshold)
            try:
                return bool((yield c.execute, (acquire,)))
            except ResponseError as exc:
                if not refused(exc):
                    raise
                yield from note_refused(node_of(c, made))
                self._scripts_refused_seen = True
        taken, left = yield (
            c.pipeline,
            ((("SET", lock, token, "NX", "PX", lock_ms), ("PTTL", made)),),
        )
        if not taken:
            return False
        if left == -2 or 0 <= left < threshold:
            return True
        release = self._recompute_release(made, lock, token, scripts=False)
        if release is not None:
            try:
                yield c.execute, (release,)
            except ResponseError as exc:
                yield from self._release_refused(made, lock, token, release, exc)
        return False

    def _recompute_release(
        self, made: str, lock: str, token: str, *, scripts: bool = True
    ) -> tuple[Any, ...] | None:
        """The command that gives the recompute lock back only while it holds `token` (see
        release_command; no script where this instance saw them refused), or None where
        there is none: then the lock's own short timeout gives it back."""
        scripts = scripts and not self._scripts_refused_seen
        return release_command(node_of(self._client, made), lock, token, scripts=scripts)
