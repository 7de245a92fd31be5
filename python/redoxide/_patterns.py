"""keys, iter_keys and delete_pattern: glob patterns scoped to KEY_PREFIX and VERSION.

The server is walked with SCAN (never KEYS, which blocks it for the whole keyspace). The user's
pattern goes through the key function like a key, with glob characters in the prefix escaped,
as django-redis does; keys come back as the user wrote them (prefix and version stripped).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from django.core.cache.backends.base import default_key_func

if TYPE_CHECKING:
    from redoxide.plans import Plan

__all__ = ["DEFAULT_ITERSIZE", "PatternsMixin"]

T = TypeVar("T")

#: SCAN's COUNT hint when itersize is not given. django-redis' default (redis-py's, 10) costs a
#: round trip per 10 hash slots. Deleting 100,000 keys (benchmarks/delete_pattern_bench.py,
#: median of 5): 100 -> 0.128 s, 1000 -> 0.107 s, 5000 -> 0.151 s; 1000 is fastest and keeps each
#: SCAN and UNLINK short enough not to stall other clients.
DEFAULT_ITERSIZE = 1000

# Keys per UNLINK: one command stays small however large itersize is.
_UNLINK_BATCH = 1000

# Redis' glob metacharacters, escaped with a backslash so a prefix matches only itself.
_GLOB_SPECIAL = re.compile(r"([*?[\]\\])")


def glob_escape(text: str) -> str:
    """Return text with Redis glob metacharacters escaped, to match literally."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


class PatternsMixin:
    """keys / iter_keys / delete_pattern and their async twins, for RedisCache."""

    if TYPE_CHECKING:
        key_prefix: str
        version: int
        key_func: Callable[..., str]
        _client: Any

        def _run(self, plan: Plan[T], fallback: Any = None) -> T: ...
        async def _arun(self, plan: Plan[T], fallback: Any = None) -> T: ...

    # -- shared logic ---------------------------------------------------------------------

    def _pattern(self, pattern: str, version: int | None, prefix: str | None = None) -> str:
        """Return the server-side glob for a user's pattern (prefix and version escaped)."""
        if prefix is None:
            prefix = self.key_prefix
        if version is None:
            version = self.version
        return self.key_func(pattern, glob_escape(prefix), glob_escape(str(version)))

    def _unmaker(self, version: int | None) -> Callable[[bytes], str]:
        """Return a function turning a server key back into the user's key."""
        if self.key_func is default_key_func:
            # Strip exactly what _key() added, so a prefix with ':' in it is handled too.
            start = len(f"{self.key_prefix}:{self.version if version is None else version}:")
            return lambda raw: raw.decode(errors="surrogateescape")[start:]

        def unmake(raw: bytes) -> str:
            # A custom KEY_FUNCTION has no inverse; do what django-redis' default does.
            key = raw.decode(errors="surrogateescape")
            parts = key.split(":", 2)
            return parts[2] if len(parts) == 3 else key

        return unmake

    @staticmethod
    def _itersize(itersize: int | None) -> int:
        if itersize is None:
            return DEFAULT_ITERSIZE
        if isinstance(itersize, bool) or not isinstance(itersize, int) or itersize < 1:
            raise ValueError(f"itersize must be a positive int, not {itersize!r}")
        return itersize

    def _scan_page(
        self, node: Any, match: str, cursor: bytes | int, count: int
    ) -> Plan[tuple[bytes, Any]]:
        """Run one SCAN step on a node; return the next cursor (b"0" when done) and the keys."""
        scan = ("SCAN", cursor, "MATCH", match, "COUNT", count)
        reply = yield node.execute, (scan,)
        return reply[0], reply[1]

    def _scan_nodes(self) -> Plan[list[Any]]:
        """The nodes a scan visits: the server, or every primary of a cluster."""
        if not hasattr(self._client, "scan_nodes"):
            return [self._client]
        # A cluster router: every primary, from a recent slot table (awaited in async code).
        return (yield self._client.scan_nodes, ())  # type: ignore[no-any-return]

    def _keys_plan(self, pattern: str, version: int | None) -> Plan[list[str]]:
        match, unmake = self._pattern(pattern, version), self._unmaker(version)
        seen: set[bytes] = set()  # SCAN may return a key twice (when the table is resized)
        for node in (yield from self._scan_nodes()):
            cursor: bytes | int = 0
            while True:
                cursor, found = yield from self._scan_page(node, match, cursor, DEFAULT_ITERSIZE)
                seen.update(found)
                if cursor == b"0":
                    break
        return [unmake(raw) for raw in seen]

    def _delete_pattern(
        self, pattern: str, version: int | None, prefix: str | None, itersize: int | None
    ) -> Plan[int]:
        match = self._pattern(pattern, version, prefix)
        return (yield from self._delete_matching(match, itersize))

    def _delete_matching(self, match: str, itersize: int | None = None) -> Plan[int]:
        """Unlink every key matching a server-side glob; return how many were removed."""
        count = self._itersize(itersize)
        if not hasattr(self._client, "scan_nodes"):
            return (yield from self._delete_matching_on(self._client, match, count))
        deleted = 0
        for node in (yield from self._scan_nodes()):
            deleted += yield from self._delete_matching_on(node, match, count)
        return deleted

    def _delete_matching_on(self, node: Any, match: str, count: int) -> Plan[int]:
        """Unlink what matches on one node: its SCAN pages, the UNLINKs through the client
        (a cluster client splits them by slot)."""
        scan = ("SCAN", 0, "MATCH", match, "COUNT", count)
        deleted = 0
        # Each round trip unlinks what the previous SCAN found and asks for the next page; the
        # UNLINK replies count keys actually removed, so a key SCAN returns twice counts once.
        if node is not self._client:
            return (yield from self._delete_matching_split(node, match, count))
        replies = [(yield node.execute, (scan,))]
        while True:
            cursor, found = replies[-1]
            deleted += sum(replies[:-1])
            commands: list[tuple[Any, ...]] = [
                ("UNLINK", *found[i : i + _UNLINK_BATCH])
                for i in range(0, len(found), _UNLINK_BATCH)
            ]
            if cursor == b"0":
                if commands:
                    deleted += sum((yield self._client.pipeline, (commands,)))
                return deleted
            commands.append(("SCAN", cursor, "MATCH", match, "COUNT", count))
            replies = yield self._client.pipeline, (commands,)

    def _delete_matching_split(self, node: Any, match: str, count: int) -> Plan[int]:
        """_delete_matching_on for a cluster node: SCAN on the node, UNLINK by slot."""
        deleted = 0
        cursor: bytes | int = 0
        while True:
            cursor, found = yield from self._scan_page(node, match, cursor, count)
            if found:
                unlinks = [
                    ("UNLINK", *found[i : i + _UNLINK_BATCH])
                    for i in range(0, len(found), _UNLINK_BATCH)
                ]
                deleted += sum((yield self._client.pipeline, (unlinks,)))
            if cursor == b"0":
                return deleted

    # -- the API ----------------------------------------------------------------------------

    def keys(self, pattern: str, version: int | None = None) -> list[str]:
        """Return the keys matching a glob pattern (all of them: prefer iter_keys)."""
        return self._run(self._keys_plan(pattern, version), [])

    async def akeys(self, pattern: str, version: int | None = None) -> list[str]:
        """Return the keys matching a glob pattern (all of them: prefer aiter_keys)."""
        return await self._arun(self._keys_plan(pattern, version), [])

    def iter_keys(
        self, pattern: str, itersize: int | None = None, *, version: int | None = None
    ) -> Iterator[str]:
        """Yield the keys matching a glob pattern, fetching itersize slots per round trip.

        A key present for the whole iteration is yielded at least once; SCAN may yield it twice.
        """
        match, count = self._pattern(pattern, version), self._itersize(itersize)
        unmake = self._unmaker(version)
        for node in self._run(self._scan_nodes(), []):
            cursor: bytes | int = 0
            while cursor != b"0":
                page = self._scan_page(node, match, cursor, count)
                cursor, found = self._run(page, (b"0", []))
                for raw in found:
                    yield unmake(raw)

    async def aiter_keys(
        self, pattern: str, itersize: int | None = None, *, version: int | None = None
    ) -> AsyncIterator[str]:
        """Yield the keys matching a glob pattern, like iter_keys, with awaits."""
        match, count = self._pattern(pattern, version), self._itersize(itersize)
        unmake = self._unmaker(version)
        for node in await self._arun(self._scan_nodes(), []):
            cursor: bytes | int = 0
            while cursor != b"0":
                page = self._scan_page(node, match, cursor, count)
                cursor, found = await self._arun(page, (b"0", []))
                for raw in found:
                    yield unmake(raw)

    def delete_pattern(
        self,
        pattern: str,
        version: int | None = None,
        prefix: str | None = None,
        *,
        itersize: int | None = None,
    ) -> int:
        """Delete the keys matching a glob pattern; return how many were deleted.

        Arguments are in django-redis' order; prefix replaces KEY_PREFIX for this call.
        """
        return self._run(self._delete_pattern(pattern, version, prefix, itersize), 0)

    async def adelete_pattern(
        self,
        pattern: str,
        version: int | None = None,
        prefix: str | None = None,
        *,
        itersize: int | None = None,
    ) -> int:
        """Delete the keys matching a glob pattern, like delete_pattern, with awaits."""
        return await self._arun(self._delete_pattern(pattern, version, prefix, itersize), 0)
