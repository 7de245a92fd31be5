"""Distributed locks on the cache's server: cache.lock(name) and cache.alock(name).

A lock is one key holding a random token. Acquiring is ``SET name token NX PX timeout`` (one
round trip when uncontended); releasing and extending compare the token first (one round trip
each), so only the owner can release or extend, and a holder whose lock expired cannot release
the next owner's. Releasing is DELIFEQ (Valkey 9.0+) or DELEX IFEQ (Redis 8.4+) where the
server offers one, else a Lua script; setting the TTL is SET IFEQ (Valkey 8.1+, Redis 8.4+),
else a script; adding to it is a script, or where scripts do not run PTTL then SET IFEQ. With
neither scripts nor those commands, release and extend raise ScriptingUnavailableError.
(Valkey 8.1 without scripts, SET IFEQ alone: a release leaves an empty value that expires in
a millisecond, so ``locked()`` may say True for that millisecond; a SET NX takes it after.) The
API mirrors redis-py's ``Lock``, which is what django-redis' ``cache.lock()`` returns.

Locks never fail open: with IGNORE_EXCEPTIONS, a lock that reported itself acquired while the
server is away would break mutual exclusion, so connection errors always raise (as they do
with django-redis, whose lock I/O bypasses IGNORE_EXCEPTIONS too).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace, TracebackType
from typing import TYPE_CHECKING, Any

from redoxide import plans
from redoxide._bridges import bridge as _bridge
from redoxide._offers import (
    has,
    node_of,
    note_refused,
    offer_refused,
    refused,
    release_command,
    scripts_refused,
    scripts_unavailable,
)
from redoxide._scripts import EXTEND as _EXTEND_SCRIPT
from redoxide.exceptions import CacheError, LockError, LockNotOwnedError, ResponseError

if TYPE_CHECKING:
    from redoxide._protocols import ClientLike
    from redoxide.plans import Plan

__all__ = ["AsyncLock", "Lock", "LockError", "LockMixin", "LockNotOwnedError"]

# Releases of abandoned acquisitions still running (a task is kept only while referenced).
_RELEASING: set[asyncio.Task[None]] = set()


def _abandon_pauses() -> Iterator[float]:
    """When to try releasing an abandoned acquisition: at once, then every 0.25 s for about a
    minute (the server may be stalled, and the lost SET may be applied only when it resumes,
    even after a first release found nothing), stopping at the first release that deletes."""
    yield 0.0
    for _ in range(240):
        yield 0.25


def _seconds_to_ms(seconds: float, what: str) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {seconds!r}")
    if not 0 < seconds < float("inf"):
        raise ValueError(f"{what} must be a positive number of seconds, not {seconds!r}")
    return max(1, round(seconds * 1000))


class _LockState:
    """What Lock and AsyncLock share: the commands they send and how replies are read."""

    def __init__(
        self,
        client: ClientLike,
        name: str,
        timeout: float | None,
        sleep: float,
        blocking: bool,
        blocking_timeout: float | None,
        thread_local: bool,
    ) -> None:
        self._client = client
        self.name = name
        self.timeout = timeout
        self._ttl_ms = None if timeout is None else _seconds_to_ms(timeout, "timeout")
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        # Thread-local by default, like redis-py: a thread that shares the instance but did
        # not acquire it cannot release another thread's hold on it.
        self._local: Any = threading.local() if thread_local else SimpleNamespace()
        self._local.token = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    @property
    def _token(self) -> bytes | None:
        return getattr(self._local, "token", None)

    @_token.setter
    def _token(self, token: bytes | None) -> None:
        self._local.token = token

    def _attempts(
        self, sleep: float | None, blocking: bool | None, blocking_timeout: float | None
    ) -> Iterator[float]:
        """Yield how long to wait before each acquisition attempt (0 before the first)."""
        sleep = self.sleep if sleep is None else sleep
        blocking = self.blocking if blocking is None else blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        deadline = None if blocking_timeout is None else time.monotonic() + blocking_timeout
        yield 0.0
        if not blocking:
            return
        while True:
            delay = sleep
            if deadline is not None:
                delay = min(delay, deadline - time.monotonic())
                if delay <= 0:
                    return
            yield delay

    def _acquire_command(self, token: bytes) -> tuple[Any, ...]:
        if self._ttl_ms is None:
            return ("SET", self.name, token, "NX")
        return ("SET", self.name, token, "NX", "PX", self._ttl_ms)

    def _held_token(self, action: str) -> bytes:
        token = self._token
        if token is None:
            raise LockError(f"cannot {action} lock {self.name!r}: it is not held")
        return token

    def _release_plan(self) -> Plan[None]:
        token = self._held_token("release")
        c = self._client
        node = node_of(c, self.name)
        command = release_command(node, self.name, token)
        if command is None:
            raise scripts_unavailable(f"releasing lock {self.name!r}")
        scripts = True
        while True:
            try:
                reply = yield c.execute, (command,)
                break
            except ResponseError as exc:
                # Each refusal takes one way out (DELIFEQ / DELEX, then the script), so this
                # ends: with a reply, or the error of the last way there was.
                if command[0] == "EVAL" and refused(exc):
                    yield from note_refused(node)
                    scripts = False
                elif (
                    command[0] in ("DELIFEQ", "DELEX")
                    and node is not None
                    and offer_refused(exc, command[0])
                ):
                    # Offered, but an ACL that lists commands by name does not allow it.
                    node.refuse(command[0])
                else:
                    raise
                command = release_command(node, self.name, token, scripts=scripts)
                if command is None:
                    raise scripts_unavailable(f"releasing lock {self.name!r}", exc) from exc
        self._released(reply)

    def _released(self, reply: Any) -> None:
        self._token = None
        if not reply:
            raise LockNotOwnedError(
                f"cannot release lock {self.name!r}: it expired or is now held by someone else"
            )

    def _extend_plan(self, additional_time: float, replace_ttl: bool) -> Plan[bool]:
        token = self._held_token("extend")
        if self.timeout is None:
            raise LockError(f"cannot extend lock {self.name!r}: it has no timeout")
        ms = _seconds_to_ms(additional_time, "additional_time")
        c, name = self._client, self.name
        node = node_of(c, name)
        ifeq = has(node, "SET IFEQ")
        if ifeq and replace_ttl:
            # Rewrites the token it compared, with the new TTL: one command, no script.
            return self._extended(
                (yield c.execute, (("SET", name, token, "IFEQ", token, "PX", ms),))
            )
        if not scripts_refused(node):
            script = ("EVAL", _EXTEND_SCRIPT, 1, name, token, ms, "1" if replace_ttl else "0")
            try:
                return self._extended((yield c.execute, (script,)))
            except ResponseError as exc:
                if not refused(exc):
                    raise
                yield from note_refused(node)
                ifeq = has(node, "SET IFEQ")  # learnt meanwhile if it was not yet
                if not ifeq:
                    raise scripts_unavailable(f"extending lock {name!r}", exc) from exc
        elif not ifeq:
            raise scripts_unavailable(f"extending lock {name!r}")
        if replace_ttl:
            return self._extended(
                (yield c.execute, (("SET", name, token, "IFEQ", token, "PX", ms),))
            )
        # No script: what is left, plus `ms`, set only while the token is still ours (a TTL
        # read one round trip earlier: at most that much longer than the script's).
        left = yield c.execute, (("PTTL", name),)
        expiry: tuple[Any, ...] = ("KEEPTTL",) if left == -1 else ("PX", max(left, 0) + ms)
        return self._extended((yield c.execute, (("SET", name, token, "IFEQ", token, *expiry),)))

    def _extended(self, reply: Any) -> bool:
        if not reply:
            raise LockNotOwnedError(
                f"cannot extend lock {self.name!r}: it expired or is now held by someone else"
            )
        return True

    def _release_abandoned(self, token: bytes) -> Plan[None]:
        """An acquire whose reply was lost (a timeout, a broken connection, an interrupt) may
        have taken the lock, and nobody knows its token: release it if it holds that token,
        retried while the server is away (see _abandon_pauses), so that a lock without a
        timeout is not held for ever by nobody."""
        node = node_of(self._client, self.name)
        command = release_command(node, self.name, token)
        if command is None:
            return  # nothing releases it here: its own timeout will
        for pause in _abandon_pauses():
            if pause:
                yield plans.pause, (pause,)
            try:
                if (yield self._client.execute, (command,)):
                    return
            except ResponseError as exc:
                if command[0] == "EVAL" and refused(exc):
                    yield from note_refused(node)
                    command = release_command(node, self.name, token, scripts=False)
                    if command is None:
                        return  # nothing releases it here: its own timeout will
                continue
            except CacheError:  # the server is still away: try again later
                continue

    def _owned(self, stored: bytes | None) -> bool:
        return stored is not None and stored == self._token

    def _not_acquired(self) -> LockError:
        return LockError(f"could not acquire lock {self.name!r} within the time allowed")


class Lock(_LockState):
    """A distributed lock, used like threading.Lock (and redis-py's Lock)."""

    def acquire(
        self,
        sleep: float | None = None,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
    ) -> bool:
        """Take the lock; return False if it stayed taken (non-blocking or out of time)."""
        token = uuid.uuid4().hex.encode()
        command = self._acquire_command(token)
        for delay in self._attempts(sleep, blocking, blocking_timeout):
            if delay:
                time.sleep(delay)
            try:
                taken = self._client.execute(command)
            except ResponseError:
                raise  # the server refused it: nothing was taken
            except BaseException:
                self._abandon(token)
                raise
            if taken:
                self._token = token
                return True
        return False

    def _abandon(self, token: bytes) -> None:
        """See _release_abandoned; in a daemon thread, so the caller's error is not delayed."""
        plan = self._release_abandoned(token)
        threading.Thread(
            target=plans.run, args=(plan,), name="redoxide-lock-release", daemon=True
        ).start()

    def release(self) -> None:
        """Release the lock; raise LockError if this instance does not hold it anymore."""
        plans.run(self._release_plan())

    def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        """Add additional_time seconds to the lock's TTL (or set the TTL to it)."""
        return plans.run(self._extend_plan(additional_time, replace_ttl))

    def reacquire(self) -> bool:
        """Reset the lock's TTL to its timeout."""
        return self.extend(self.timeout or 0, replace_ttl=True)

    def locked(self) -> bool:
        """Return True if anyone holds the lock."""
        return bool(self._client.execute(("EXISTS", self.name)))

    def owned(self) -> bool:
        """Return True if this instance (in this thread) holds the lock."""
        return self._owned(self._client.execute(("GET", self.name)))

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise self._not_acquired()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


class AsyncLock(_LockState):
    """The same lock for asyncio: every method is a coroutine and waits with asyncio.sleep."""

    async def acquire(
        self,
        sleep: float | None = None,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
    ) -> bool:
        """Take the lock; return False if it stayed taken (non-blocking or out of time)."""
        token = uuid.uuid4().hex.encode()
        command = self._acquire_command(token)
        for delay in self._attempts(sleep, blocking, blocking_timeout):
            if delay:
                await asyncio.sleep(delay)
            try:
                taken = await self._client.execute(command, _bridge())
            except ResponseError:
                raise  # the server refused it: nothing was taken
            except BaseException:
                self._abandon(token)
                raise
            if taken:
                self._token = token
                return True
        return False

    def _abandon(self, token: bytes) -> None:
        """See _release_abandoned; as a task of its own, which the caller's cancellation does
        not reach."""
        try:
            task = asyncio.get_running_loop().create_task(
                plans.arun(self._release_abandoned(token), _bridge())
            )
        except RuntimeError:  # the loop is closing: the lock's own timeout is all that is left
            return
        _RELEASING.add(task)
        task.add_done_callback(_RELEASING.discard)

    async def release(self) -> None:
        """Release the lock; raise LockError if this instance does not hold it anymore."""
        await plans.arun(self._release_plan(), _bridge())

    async def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        """Add additional_time seconds to the lock's TTL (or set the TTL to it)."""
        return await plans.arun(self._extend_plan(additional_time, replace_ttl), _bridge())

    async def reacquire(self) -> bool:
        """Reset the lock's TTL to its timeout."""
        return await self.extend(self.timeout or 0, replace_ttl=True)

    async def locked(self) -> bool:
        """Return True if anyone holds the lock."""
        return bool(await self._client.execute(("EXISTS", self.name), _bridge()))

    async def owned(self) -> bool:
        """Return True if this instance (in this thread) holds the lock."""
        return self._owned(await self._client.execute(("GET", self.name), _bridge()))

    async def __aenter__(self) -> AsyncLock:
        if not await self.acquire():
            raise self._not_acquired()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.release()


class LockMixin:
    """cache.lock() and cache.alock(), for RedisCache."""

    if TYPE_CHECKING:  # provided by RedisCache
        _client: ClientLike

        def _key(self, key: Any, version: int | None) -> str: ...

    def lock(
        self,
        key: Any,
        version: int | None = None,
        timeout: float | None = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        thread_local: bool = True,
    ) -> Lock:
        """Return a lock on key (made with the cache's KEY_PREFIX, VERSION and KEY_FUNCTION).

        timeout is the lock's lifetime in seconds (None: until released); sleep is the wait
        between attempts while blocking; blocking_timeout bounds the whole wait (None: no
        bound). Arguments as django-redis' cache.lock().
        """
        return Lock(
            self._client,
            self._key(key, version),
            timeout,
            sleep,
            blocking,
            blocking_timeout,
            thread_local,
        )

    def alock(
        self,
        key: Any,
        version: int | None = None,
        timeout: float | None = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        thread_local: bool = True,
    ) -> AsyncLock:
        """Return an asyncio lock on key; the arguments are those of lock()."""
        return AsyncLock(
            self._client,
            self._key(key, version),
            timeout,
            sleep,
            blocking,
            blocking_timeout,
            thread_local,
        )
