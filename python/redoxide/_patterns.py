"""keys, iter_keys and delete_pattern: glob patterns scoped to KEY_PREFIX and VERSION.

The server is walked with SCAN (never KEYS, which blocks it for the whole keyspace). The key
function is asked what it puts around a key (for Django's default, ``PREFIX:VERSION:``); the
user's pattern goes between those parts, escaped to match literally, and keys come back as the
user wrote them. A KEY_FUNCTION that does not keep the key as it is (one that hashes it, say)
cannot be searched by pattern: those calls raise ConfigurationError instead of matching
nothing.

clear() under CLEAR_PREFIX_ONLY deletes every name of the cache's shape, under every version:
the key function is asked where it puts the version and the key (``site:{version}:{key}`` for
Django's default and KEY_PREFIX "site"). SCAN's glob puts a ``*`` for each (``site:*:*``), and
each name it returns must also fullmatch the shape, the version a decimal int and the key
anything (``site:-?[0-9]+:.*``), before it is unlinked: ``site:lock`` and another cache's
``site:sessions:1:abc`` are not this cache's. A key function that hashes the key but keeps a
KEY_PREFIX part works (the key part is anything). shared_name() tells whether two shapes can
make one name (KEY_PREFIX "site" beside "site:1"), for the checks and cache_clear.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django.core.cache.backends.base import default_key_func

from redoxide._protocols import ClientLike, Topology, spans_primaries
from redoxide.exceptions import ConfigurationError

if TYPE_CHECKING:
    from redoxide.plans import Plan

__all__ = [
    "DEFAULT_ITERSIZE",
    "KEY",
    "VERSION",
    "NameMatcher",
    "PatternsMixin",
    "glob_escape",
    "key_layout",
    "name_matcher",
    "name_shape",
    "shared_name",
]

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

# Redis' glob metacharacters, escaped with a backslash so a prefix matches only itself.
_GLOB_SPECIAL = re.compile(r"([*?[\]\\])")


def glob_escape(text: str) -> str:
    """Return text with Redis glob metacharacters escaped, to match literally."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


# Keys the key function is probed with: distinct, of different lengths, plain characters.
_PROBES = ("redoxide-probe-a", "redoxide-probe-bb", "x")
# Stands for "any version" where the key function takes it as text.
_VERSION_MARK = "redoxideversionmark"


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


# -- the names a cache makes, every version (CLEAR_PREFIX_ONLY's clear(), checks) -------------


class _Slot(str):
    """A part of a name shape that varies: the version or the key."""

    __slots__ = ()


#: Where the version goes (a decimal int: Django's versions are ints, incr_version's too).
VERSION = _Slot("{version}")
#: Where the key (or whatever the key function makes of it, a hash say) goes.
KEY = _Slot("{key}")

Shape = tuple[str, ...]  # literal text, VERSION and KEY, in order

_INT = rb"-?[0-9]+"
# Keys the shape is found with: first and last characters all differ (so what every name
# shares stops where the key starts), many of them (so a hash shares no leading character).
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEF"
_SHAPE_KEYS = tuple(
    f"{first}{'-' * (i % 5)}:{i}{last}"
    for i, (first, last) in enumerate(zip(_LETTERS, _LETTERS[::-1], strict=True))
)
# The same with letters and digits only, for a key function that refuses other characters.
_PLAIN_SHAPE_KEYS = tuple(
    f"{first}{'x' * (i % 5)}{i}{last}"
    for i, (first, last) in enumerate(zip(_LETTERS, _LETTERS[::-1], strict=True))
)
# Two versions whose texts differ in their first and in their last digit, to find where a key
# function that formats the version as a number puts it.
_NUMERIC = (12345, 678906)
# Versions every found shape is checked against (beside the cache's own and _NUMERIC).
_CHECK_VERSIONS = (1, 2, 10, 0, -1, 987654321)


@dataclass(frozen=True)
class NameMatcher:
    """Every name a cache makes, under every version: ``glob`` for SCAN's MATCH on the server
    (each varying part a ``*``), and ``regex``, which each name SCAN returns must fullmatch
    (the version a decimal int, the key anything) before it is taken as the cache's."""

    shape: Shape
    glob: str
    regex: re.Pattern[bytes]

    def __call__(self, name: bytes | str) -> bool:
        """Return whether name is one the cache makes."""
        if isinstance(name, str):
            name = name.encode()
        return self.regex.fullmatch(name) is not None

    @property
    def literal(self) -> str:
        """The fixed text of every name (the shape's parts but the version and the key)."""
        return "".join(part for part in self.shape if not isinstance(part, _Slot))

    def example(self) -> str:
        """The shape in words: ``site:{version}:{key}``."""
        return "".join(self.shape)


def name_matcher(
    key_func: Callable[..., str], prefix: str, version: Any, *, refuse: bool = True
) -> NameMatcher | None:
    """The matcher of every name this cache makes (every version, every key); None when it
    cannot be told apart from others' names: no literal part holds KEY_PREFIX (a key function
    that hashes everything, say; with refuse False, any shape found is returned)."""
    shape = name_shape(key_func, prefix, version)
    if shape is None:
        return None
    literal = [part for part in shape if not isinstance(part, _Slot)]
    held = prefix and any(prefix in part for part in literal)
    if refuse and key_func is not default_key_func and not held:
        return None
    return _matcher(shape, version)


def _matcher(shape: Shape, version: Any) -> NameMatcher:
    own = str(version).encode()
    number = _INT if re.fullmatch(_INT, own) else _INT + b"|" + re.escape(own)
    regex = b"".join(
        b"(?:" + number + b")"
        if part is VERSION
        else b".*"
        if part is KEY
        else re.escape(part.encode())
        for part in shape
    )
    globs: list[str] = []
    for part in shape:
        if not isinstance(part, _Slot):
            globs.append(glob_escape(part))
        elif not globs or globs[-1] != "*":  # two slots side by side are one *
            globs.append("*")
    glob = "".join(globs)
    return NameMatcher(shape, glob, re.compile(regex, re.DOTALL))


def name_shape(key_func: Callable[..., str], prefix: str, version: Any) -> Shape | None:
    """Where the key function puts the version and the key: found with a text marker for the
    version, else by number, and checked against the names of several versions; None when no
    shape fits them all (or the key function fails)."""
    if key_func is default_key_func:
        return (f"{prefix}:", VERSION, ":", KEY)
    for find in (_marked_shape, _numeric_shape):
        shape = find(key_func, prefix)
        if shape is not None and _fits(shape, key_func, prefix, version):
            return shape
    return None


def _made(key_func: Callable[..., str], prefix: str, version: Any) -> list[str] | None:
    for keys in (_SHAPE_KEYS, _PLAIN_SHAPE_KEYS):
        try:
            made = [key_func(k, prefix, version) for k in keys]
        except Exception:
            continue  # a key function that validates keys: plain ones, then
        return made if all(isinstance(m, str) for m in made) else None
    return None


def _common_prefix(texts: list[str]) -> str:
    low, high = min(texts), max(texts)
    n = 0
    while n < len(low) and low[n] == high[n]:
        n += 1
    return low[:n]


def _around(made: list[str]) -> tuple[str, str]:
    """What every name shares before the key's part and after it."""
    head = _common_prefix(made)
    tail = _common_prefix([m[len(head) :][::-1] for m in made])[::-1]
    return head, tail


def _split(text: str, mark: str) -> Shape:
    parts: list[str] = []
    for i, piece in enumerate(text.split(mark)):
        if i:
            parts.append(VERSION)
        if piece:
            parts.append(piece)
    return tuple(parts)


def _marked_shape(key_func: Callable[..., str], prefix: str) -> Shape | None:
    made = _made(key_func, prefix, _VERSION_MARK)
    if made is None:
        return None
    head, tail = _around(made)
    if _VERSION_MARK not in head + tail:
        return None
    return (*_split(head, _VERSION_MARK), KEY, *_split(tail, _VERSION_MARK))


def _numeric_shape(key_func: Callable[..., str], prefix: str) -> Shape | None:
    one, two = (_made(key_func, prefix, v) for v in _NUMERIC)
    if one is None or two is None:
        return None
    parts: list[str] = []
    for side, (a, b) in enumerate(zip(_around(one), _around(two), strict=True)):
        if side:
            parts.append(KEY)
        if a == b:
            parts.extend([a] if a else [])
            continue
        before = _common_prefix([a, b])
        after = _common_prefix([a[len(before) :][::-1], b[len(before) :][::-1]])[::-1]
        if not all(re.fullmatch(r"-?[0-9]+", t[len(before) : len(t) - len(after)]) for t in (a, b)):
            return None
        parts.extend(p for p in (before, VERSION, after) if p)
    return tuple(parts)


def _fits(shape: Shape, key_func: Callable[..., str], prefix: str, version: Any) -> bool:
    """Whether the names of the cache's own version and of several others all fit the shape
    (a version the key function refuses is one the cache cannot write: skipped)."""
    matcher = _matcher(shape, version)
    for n, v in enumerate((version, *_NUMERIC, *_CHECK_VERSIONS)):
        made = _made(key_func, prefix, v)
        if made is None:
            if n == 0:
                return False
            continue
        if not all(matcher(name) for name in made):
            return False
    return True


def shared_name(one: NameMatcher, other: NameMatcher) -> str | None:
    """A name both shapes can make (the shortest), or None when no name is of both."""
    a, b = _atoms(one.shape), _atoms(other.shape)
    start = (0, 0)
    seen: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = [start]
    for i, j in queue:  # breadth first: the queue grows while it is read
        for x in _skips(a, i):
            for y in _skips(b, j):
                if x == len(a) and y == len(b):
                    return _path(seen, (i, j))
                if x == len(a) or y == len(b):
                    continue
                char = _both(a[x][0], b[y][0])
                if char is None:
                    continue
                step = (x + (a[x][1] != "*"), y + (b[y][1] != "*"))
                if step not in seen:
                    seen[step] = ((i, j), char)
                    queue.append(step)
    return None


# An atom: (what it takes: a character, "digit" or "any"; how often: "1", "?" or "*").
_Atom = tuple[str, str]


def _atoms(shape: Shape) -> list[_Atom]:
    atoms: list[_Atom] = []
    for part in shape:
        if part is VERSION:
            atoms += [("-", "?"), ("digit", "1"), ("digit", "*")]
        elif part is KEY:
            atoms.append(("any", "*"))
        else:
            atoms += [(c, "1") for c in part]
    return atoms


def _skips(atoms: list[_Atom], i: int) -> Iterator[int]:
    """Positions reachable from i without taking a character."""
    yield i
    while i < len(atoms) and atoms[i][1] != "1":
        i += 1
        yield i


def _both(x: str, y: str) -> str | None:
    """A character both atoms take, or None."""
    if x == "any" or x == y:
        return "1" if y == "digit" else "x" if y == "any" else y
    if y == "any":
        return _both(y, x)
    if x == "digit":
        return y if y in "0123456789" else None
    if y == "digit":
        return x if x in "0123456789" else None
    return None


def _path(seen: dict[tuple[int, int], Any], at: tuple[int, int]) -> str:
    chars: list[str] = []
    while seen[at] is not None:
        at, char = seen[at]
        chars.append(char)
    return "".join(reversed(chars))


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
        """Run one SCAN step on a node; return the next cursor (b"0" when done) and the keys."""
        scan = ("SCAN", cursor, "MATCH", match, "COUNT", count)
        reply = yield node.execute, (scan,)
        return reply[0], reply[1]

    def _scan_nodes(self) -> Plan[list[Any]]:
        """The nodes a scan visits: the server, or every primary of a cluster."""
        client = self._client
        if not (isinstance(client, Topology) and client.spans_primaries):
            return [client]
        # A cluster: every primary, from a recent slot table (awaited in async code).
        return (yield client.scan_nodes, ())  # type: ignore[no-any-return]

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
