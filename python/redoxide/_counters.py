"""incr / decr and the version moves, as plans (a mixin for RedisCache).

incr is one INCRBY, inside a script that refuses a missing key (Django's contract). A value
INCRBY cannot add to (a pickled number, an int past 64 bits, a float delta) is added in Python
and written back with a compare-and-set (SET IFEQ where the server offers it, else a script),
retried while other writers get in first, so no increment is ever lost. Where scripts do not
run (an ACL user without @scripting, no Lua engine), every incr takes that compare-and-set
path: atomic all the same, one round trip more; without SET IFEQ either, it raises
ScriptingUnavailableError. incr_version is one RENAME (no script).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from redoxide import _scripts
from redoxide._bridges import bridge as _bridge
from redoxide._offers import (
    conditional_delete,
    has,
    node_of,
    note_refused,
    offer_refused,
    refused,
    scripts_refused,
    scripts_unavailable,
)
from redoxide.exceptions import CacheTimeout, CrossSlotError, NoScriptError, ResponseError

if TYPE_CHECKING:
    from redoxide._protocols import ClientLike
    from redoxide._sections import Config
    from redoxide.plans import Plan

__all__ = ["CountersMixin"]


class CountersMixin:
    """incr and decr written out, and the plans of incr, decr, incr_version and
    decr_version."""

    #: Set once a script was refused to this instance: from then on incr asks the key's node
    #: whether scripts run there before sending one (not asked before: incr is on the request
    #: path).
    _scripts_refused_seen = False

    if TYPE_CHECKING:  # what RedisCache provides
        _client: ClientLike
        _config: Config
        version: int

        _FAIL_OPEN_ERRORS: tuple[type[BaseException], ...]

        def _key(self, key: Any, version: int | None) -> str: ...
        def _encode(self, value: Any, key: Any = None) -> bytes: ...
        def _decode(self, data: bytes, key: Any) -> Any: ...
        def _failed(self, exc: BaseException, fallback: Any) -> Any: ...
        def _run(self, plan: Plan[Any], fallback: Any = None) -> Any: ...
        async def _arun(self, plan: Plan[Any], fallback: Any = None) -> Any: ...

    # -- incr and decr written out (the request path): one EVALSHA, awaited directly ------------

    def _count(self, key: Any, delta: Any, version: int | None, create: bool) -> Any:
        """incr and decr: the script's EVALSHA sent directly; an error reply (which changed
        nothing) continues as the plan does, and so does everything but the plain case."""
        if create or self._scripts_refused_seen:
            return self._run(self._incr(key, delta, version, create))
        made = self._key(key, version)
        try:
            value = self._client.execute(("EVALSHA", _scripts.INCR_SHA, 1, made, delta))
        except ResponseError as exc:
            return self._run(self._incr_refused(key, made, delta, False, exc))
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, None)
        if value is None:
            raise ValueError(f"Key '{key}' not found.")
        return value

    async def _acount(self, key: Any, delta: Any, version: int | None, create: bool) -> Any:
        """aincr and adecr, as _count."""
        if create or self._scripts_refused_seen:
            return await self._arun(self._incr(key, delta, version, create))
        made = self._key(key, version)
        try:
            value = await self._client.execute(
                ("EVALSHA", _scripts.INCR_SHA, 1, made, delta), _bridge()
            )
        except ResponseError as exc:
            return await self._arun(self._incr_refused(key, made, delta, False, exc))
        except self._FAIL_OPEN_ERRORS as exc:
            return self._failed(exc, None)
        if value is None:
            raise ValueError(f"Key '{key}' not found.")
        return value

    # -- plans ----------------------------------------------------------------------------------

    def _incr(self, key: Any, delta: int, version: int | None, create: bool = False) -> Plan[Any]:
        made = self._key(key, version)
        c = self._client
        # ignore_key_check (create): plain INCRBY, which starts a missing key at 0 with no
        # expiry, as django-redis does. It answers ERR (no code of its own) where the script
        # answers NOTINT.
        if create:
            command: tuple[Any, ...] = ("INCRBY", made, delta)
        else:
            if self._scripts_refused_seen and scripts_refused(node_of(c, made)):
                return (yield from self._incr_checked(key, made, delta, create))
            command = ("EVALSHA", _scripts.INCR_SHA, 1, made, delta)
        # The script's EVALSHA is written out here rather than through _eval: incr is on the
        # request path, and the delegation costs ~1,600 instructions a call (callgrind).
        try:
            value = yield c.execute, (command,)
        except ResponseError as exc:
            return (yield from self._incr_refused(key, made, delta, create, exc))
        if value is None:
            raise ValueError(f"Key '{key}' not found.")
        return value

    def _incr_refused(
        self, key: Any, made: str, delta: Any, create: bool, exc: ResponseError
    ) -> Plan[Any]:
        """incr after its first command was answered with an error (which changed nothing):
        the script unknown to the server, scripts refused, or a value INCRBY cannot add to.
        (The cache's written-out incr and decr continue here too.)"""
        c = self._client
        if isinstance(exc, NoScriptError):
            # The server has not seen the script yet (or flushed it): send it whole once.
            try:
                value = yield c.execute, (("EVAL", _scripts.INCR, 1, made, delta),)
            except ResponseError as again:
                exc = again
            else:
                if value is None:
                    raise ValueError(f"Key '{key}' not found.")
                return value
        if not create and refused(exc):
            # No scripts here: the compare-and-set path, atomic without one.
            yield from note_refused(node_of(c, made))
            self._scripts_refused_seen = True
            return (yield from self._incr_checked(key, made, delta, create))
        if exc.code != ("ERR" if create else _scripts.NOT_AN_INTEGER):
            raise exc
        # Not stored as a 64-bit raw int (a pickled number, a huge int, a float delta, a sum
        # past 2**63-1): add in Python and write back only if nobody wrote meanwhile.
        return (yield from self._incr_checked(key, made, delta, create))

    def _incr_checked(self, key: Any, made: str, delta: Any, create: bool) -> Plan[Any]:
        """incr by read, add and compare-and-set (keeping the TTL), retried while other writers
        change the value in between: atomic like INCRBY, so no increment is ever lost. Gives up
        with CacheTimeout if writers keep winning for longer than SOCKET_TIMEOUT."""
        c = self._client
        deadline = time.monotonic() + self._config.connection.socket_timeout
        attempts = 0
        while True:
            # From the primary (a router sends get() to replicas, which may lag).
            data = yield c.execute, (("GET", made),)
            if data is None and not create:
                raise ValueError(f"Key '{key}' not found.")
            value = (0 if data is None else self._decode(data, key)) + delta
            written = yield from self._compare_and_set(key, made, data, self._encode(value, key))
            if written == 1:
                return value
            if written == -1 and not create:
                raise ValueError(f"Key '{key}' not found.")
            attempts += 1
            if time.monotonic() >= deadline:
                raise CacheTimeout(
                    f"incr of key {key!r} lost to concurrent writers {attempts} times in "
                    f"{self._config.connection.socket_timeout} s (SOCKET_TIMEOUT); "
                    "nothing was written"
                )

    def _compare_and_set(self, key: Any, made: str, old: bytes | None, new: bytes) -> Plan[int]:
        """Write `new` (keeping the TTL) only while `made` still holds `old`, or (`old` None)
        only while it is still missing: 1 written, 0 changed meanwhile, -1 deleted meanwhile
        (SET IFEQ cannot tell 0 from -1: the caller's next read does)."""
        c = self._client
        node = node_of(c, made)
        if not has(node, "SET IFEQ"):
            try:
                written: int = yield from self._eval(
                    _scripts.COMPARE_AND_SET,
                    _scripts.COMPARE_AND_SET_SHA,
                    (made,),
                    (b"" if old is None else old, new, int(old is None)),
                )
                return written
            except ResponseError as exc:
                if not refused(exc):
                    raise
                yield from note_refused(node)
                if not has(node, "SET IFEQ"):  # learnt meanwhile, if it was not
                    raise scripts_unavailable(f"incr of key {key!r}", exc) from exc
        if old is None:
            command: tuple[Any, ...] = ("SET", made, new, "NX")
        else:
            command = ("SET", made, new, "IFEQ", old, "KEEPTTL")
        return 1 if (yield c.execute, (command,)) else 0

    def _eval(
        self, script: str, sha: str, keys: tuple[Any, ...], args: tuple[Any, ...]
    ) -> Plan[Any]:
        """Run a script by its SHA1 (the server neither receives nor hashes the body each
        time), sending it whole once if the server does not know it yet (or flushed it)."""
        c = self._client
        try:
            return (yield c.execute, (("EVALSHA", sha, len(keys), *keys, *args),))
        except NoScriptError:
            return (yield c.execute, (("EVAL", script, len(keys), *keys, *args),))

    def _incr_version(self, key: Any, delta: int, version: int | None) -> Plan[int]:
        if version is None:
            version = self.version
        old, new = self._key(key, version), self._key(key, version + delta)
        c = self._client
        try:
            # RENAME moves the value and its TTL in one step, and refuses a missing key.
            yield c.execute, (("RENAME", old, new),)
            moved = True
        except CrossSlotError:
            # A cluster keeps the two versions in different slots (unless the key has a
            # {hash tag}): no command sees both, so the move is a copy and a delete.
            moved = yield from self._move_across_slots(key, old, new)
        except ResponseError as exc:
            if exc.code != "ERR" or "no such key" not in str(exc).lower():
                raise
            moved = False
        if not moved:
            raise ValueError(f"Key '{key}' not found.")
        return version + delta

    def _move_across_slots(self, key: Any, old: str, new: str) -> Plan[bool]:
        """Copy `old` to `new` keeping its TTL, then delete `old` only if it still holds what
        was copied (else copy again): the value is never lost, by a failed copy or a write to
        `old` in between. Gives up with CacheTimeout past SOCKET_TIMEOUT of such writes.
        Where that delete needs a script, a trivial one rides with the first read: if scripts
        are refused, ScriptingUnavailableError before anything is copied."""
        c = self._client
        what = f"incr_version of key {key!r} across cluster slots"
        deadline = time.monotonic() + self._config.connection.socket_timeout
        refusal: ResponseError | None = None
        while True:
            node = node_of(c, old)
            probe = conditional_delete(node, old, b"") is None
            if probe and (refusal is not None or scripts_refused(node)):
                raise scripts_unavailable(what, refusal)
            reads: list[tuple[Any, ...]] = [("GET", old), ("PTTL", old)]
            if probe:
                reads.append(("EVAL", "return 1", 1, old))
            try:
                data, left, *_ = yield c.pipeline, (reads,)
            except ResponseError as exc:
                if not (probe and refused(exc)) or refusal is not None:
                    raise
                refusal = exc
                yield from note_refused(node)  # then a conditional delete, if learnt, or raise
                continue
            if data is None:
                return False
            store: tuple[Any, ...] = ("SET", new, data) + (("PX", left) if left > 0 else ())
            yield c.execute, (store,)  # acknowledged before the old one goes
            # DEL only while the key holds exactly `data`.
            if (yield from self._delete_if_holds(what, old, data)):
                return True
            if time.monotonic() >= deadline:
                raise CacheTimeout(
                    f"incr_version of key {key!r}: its value kept changing while it was "
                    f"copied for {self._config.connection.socket_timeout} s (SOCKET_TIMEOUT)"
                )

    def _delete_if_holds(self, what: str, name: str, value: bytes) -> Plan[bool]:
        """Delete `name` only while it holds `value`: DELIFEQ / DELEX where the node offers one,
        else the release script (ScriptingUnavailableError, naming `what`, where that is
        refused)."""
        c = self._client
        node = node_of(c, name)
        command = conditional_delete(node, name, value)
        if command is not None:
            try:
                return bool((yield c.execute, (command,)))
            except ResponseError as exc:
                # Offered, but an ACL that lists commands by name does not allow it: the
                # script from now on.
                if node is None or not offer_refused(exc, command[0]):
                    raise
                node.refuse(command[0])
        try:
            return bool((yield c.execute, (("EVAL", _scripts.RELEASE, 1, name, value),)))
        except ResponseError as exc:
            if not refused(exc):
                raise
            yield from note_refused(node)
            command = conditional_delete(node, name, value)  # learnt meanwhile, if it was not
            if command is None:
                raise scripts_unavailable(what, exc) from exc
            return bool((yield c.execute, (command,)))
