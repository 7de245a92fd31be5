"""keys, iter_keys and delete_pattern: glob patterns scoped to KEY_PREFIX and VERSION.

The server is walked with SCAN (never KEYS, which blocks it for the whole keyspace); a
cluster whose primaries all offer it (Valkey 9.1) with one CLUSTERSCAN cursor across them,
else with SCAN on each primary. The key
function is asked what it puts around a key (for Django's default, ``PREFIX:VERSION:``); the
user's pattern goes between those parts, escaped to match literally, and keys come back as the
user wrote them. A KEY_FUNCTION that does not keep the key as it is (one that hashes it, say)
cannot be searched by pattern: those calls raise ConfigurationError instead of matching
nothing.

clear() under CLEAR_PREFIX_ONLY deletes every name of the cache's shape, under every version
(redoxide._name_shapes says which names those are).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from django.core.cache.backends.base import default_key_func

from redoxide._name_shapes import glob_escape, name_matcher
from redoxide._offers import has, offer_refused
from redoxide._protocols import ClientLike, Topology, primaries, spans_primaries
from redoxide.exceptions import ConfigurationError, ResponseError

if TYPE_CHECKING:
    from redoxide.plans import Plan

__all__ = ["DEFAULT_ITERSIZE", "PatternsMixin", "glob_escape", "key_layout"]

T = TypeVar("T")

#: SCAN's COUNT hint when itersize is not given. django-redis' default (redis-py's, 10) costs a
#: round trip per 10 hash slots. Deleting 100,000 keys (benchmarks/delete_pattern_bench.py,
#: median of 5): 100 -> 0.128 s, 1000 -> 0.107 s, 5000 -> 0.151 s; 1000 is fastest and keeps each
#: SCAN and UNLINK short enough not to stall other clients.
DEFAULT_ITERSIZE = 1000

# Which names SCAN returned are to go (None: every one).
_Filter = Callable[[bytes], bool] | None

# Keys per UNLINK: one command stays small however large itersize is.
_UNLINK_BATCH = 1000

# Keys the key function is probed with: distinct, of different lengths, plain characters.
_PROBES = ("redoxide-probe-a", "redoxide-probe-bb", "x")


def key_layout(key_func: Callable[..., str], prefix: str, version: Any) -> tuple[str, str] | None:
    """What the key function puts before and after a key, for this prefix and version; None if
    its names do not keep the key as it is (a hash of it, a transformed key) or it fails."""
    if key_func is default_key_func:
        return f"{prefix}:{version}:", ""
    try:
        made = [key_func(k, prefix, version) for k in _PROBES]
    except Exception:
        return None
    if not all(isinstance(m, str) for m in made):
        return None
    first = made[0]
    start = first.find(_PROBES[0])
    while start >= 0:
        before, after = first[:start], first[start + len(_PROBES[0]) :]
        if all(m == before + k + after for m, k in zip(made, _PROBES, strict=True)):
            return before, after
        start = first.find(_PROBES[0], start + 1)
    return None


def _opaque(call: str, key_func: Callable[..., str]) -> ConfigurationError:
    name = getattr(key_func, "__qualname__", None) or repr(key_func)
    return ConfigurationError(
        f"redoxide: {call} needs the key in the names KEY_FUNCTION makes, and {name} does not "
        "keep it as it is (it hashes or changes it), so no pattern can match them; nothing "
        "was read or deleted"
    )


class PatternsMixin:
    """keys / iter_keys / delete_pattern and their async twins, for RedisCache."""

    if TYPE_CHECKING:
        key_prefix: str
        version: int
        key_func: Callable[..., str]
        _client: ClientLike

        def _run(self, plan: Plan[T], fallback: Any = None) -> T: ...
        async def _arun(self, plan: Plan[T], fallback: Any = None) -> T: ...

    # -- shared logic ---------------------------------------------------------------------

    def _layout(self, call: str, version: int | None, prefix: str | None = None) -> tuple[str, str]:
        """What this cache's names put around a key (see key_layout), or ConfigurationError."""
        layout = key_layout(
            self.key_func,
            self.key_prefix if prefix is None else prefix,
            self.version if version is None else version,
        )
        if layout is None:
            raise _opaque(call, self.key_func)
        return layout

    def _pattern(
        self, pattern: str, version: int | None, prefix: str | None = None, call: str = "keys()"
    ) -> str:
        """Return the server-side glob for a user's pattern (everything around it escaped)."""
        before, after = self._layout(call, version, prefix)
        return f"{glob_escape(before)}{pattern}{glob_escape(after)}"

    def _unmaker(self, version: int | None) -> Callable[[bytes], str]:
        """Return a function turning a server key back into the user's key."""
        before, after = self._layout("keys()", version)
        start, end = len(before), len(after)

        def unmake(raw: bytes) -> str:
            key = raw.decode(errors="surrogateescape")
            return key[start : len(key) - end]

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
        """Run one SCAN step on a node (a CLUSTERSCAN step when `node` is the whole cluster);
        return the next cursor (b"0" when done) and the keys."""
        name = "CLUSTERSCAN" if node is self._client and spans_primaries(node) else "SCAN"
        try:
            reply = yield node.execute, ((name, cursor, "MATCH", match, "COUNT", count),)
        except ResponseError as exc:
            # CLUSTERSCAN offered, but an ACL that lists commands by name does not allow it:
            # the primaries stop offering it, and this first page is the whole walk, one SCAN
            # of every primary. (A refusal past the first page, a redirect to a node not
            # upgraded yet, cannot carry its cursor over: it raises.)
            if name != "CLUSTERSCAN" or cursor not in (0, b"0") or not offer_refused(exc, name):
                raise
            for primary in primaries(self._client) or ():
                primary.refuse(name)
            found: list[Any] = []
            for each in (yield from self._scan_nodes()):  # the primaries, now
                step: bytes | int = 0
                while True:
                    step, keys = yield (
                        each.execute,
                        (("SCAN", step, "MATCH", match, "COUNT", count),),
                    )
                    found.extend(keys)
                    if step == b"0":
                        break
            return b"0", found
        return reply[0], reply[1]

    def _scan_nodes(self) -> Plan[list[Any]]:
        """The nodes a scan visits: the server; every primary of a cluster; or the cluster
        itself, walked by one CLUSTERSCAN cursor, when every primary offers it."""
        client = self._client
        if not (isinstance(client, Topology) and client.spans_primaries):
            return [client]
        if self._cluster_scans():
            return [client]
        # A cluster: every primary, from a recent slot table (awaited in async code).
        return (yield client.scan_nodes, ())  # type: ignore[no-any-return]

    def _cluster_scans(self) -> bool:
        """Whether this cluster's every primary offers CLUSTERSCAN (as its connections told).
        Its cursor is its key (the server says so): a {hash tag} naming the slot it goes on,
        so the router sends each step to that slot's node, which redirects if it moved."""
        nodes = primaries(self._client)
        return bool(nodes) and all(has(node, "CLUSTERSCAN") for node in nodes or ())

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

    def _delete_own(self) -> Plan[int]:
        """Unlink every name this cache makes, under every version, and no other (SCAN with
        the shape's glob, each name checked against its regex); return how many went."""
        matcher = name_matcher(self.key_func, self.key_prefix, self.version)
        if matcher is None:
            raise ConfigurationError(
                "redoxide: CLEAR_PREFIX_ONLY cannot tell this cache's keys from others': "
                "the names KEY_FUNCTION makes share no fixed part that holds KEY_PREFIX "
                f"{self.key_prefix!r} (it hashes them, or KEY_PREFIX is empty); nothing was "
                "deleted. Keep the prefix outside the hash, or give the cache a database "
                "of its own and clear() with FLUSHDB"
            )
        return (yield from self._delete_matching(matcher.glob, keep=matcher))

    def _delete_pattern(
        self, pattern: str, version: int | None, prefix: str | None, itersize: int | None
    ) -> Plan[int]:
        match = self._pattern(pattern, version, prefix, "delete_pattern()")
        return (yield from self._delete_matching(match, itersize))

    def _delete_matching(
        self, match: str, itersize: int | None = None, keep: _Filter = None
    ) -> Plan[int]:
        """Unlink every key matching a server-side glob (and keep, when given: a name SCAN
        returns is unlinked only if keep says it is wanted); return how many were removed."""
        count = self._itersize(itersize)
        if not spans_primaries(self._client):
            return (yield from self._delete_matching_on(self._client, match, count, keep))
        deleted = 0
        for node in (yield from self._scan_nodes()):
            if node is self._client:  # the cluster, walked by CLUSTERSCAN
                deleted += yield from self._delete_matching_split(node, match, count, keep)
            else:
                deleted += yield from self._delete_matching_on(node, match, count, keep)
        return deleted

    def _delete_matching_on(self, node: Any, match: str, count: int, keep: _Filter) -> Plan[int]:
        """Unlink what matches on one node: its SCAN pages, the UNLINKs through the client
        (a cluster client splits them by slot)."""
        scan = ("SCAN", 0, "MATCH", match, "COUNT", count)
        deleted = 0
        # Each round trip unlinks what the previous SCAN found and asks for the next page; the
        # UNLINK replies count keys actually removed, so a key SCAN returns twice counts once.
        if node is not self._client:
            return (yield from self._delete_matching_split(node, match, count, keep))
        replies = [(yield node.execute, (scan,))]
        while True:
            cursor, found = replies[-1]
            if keep is not None:
                found = [name for name in found if keep(name)]
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

    def _delete_matching_split(self, node: Any, match: str, count: int, keep: _Filter) -> Plan[int]:
        """_delete_matching_on for a cluster node: SCAN on the node, UNLINK by slot."""
        deleted = 0
        cursor: bytes | int = 0
        while True:
            cursor, found = yield from self._scan_page(node, match, cursor, count)
            if keep is not None:
                found = [name for name in found if keep(name)]
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
