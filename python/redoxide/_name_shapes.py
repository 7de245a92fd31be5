"""The names a cache makes, under every version: CLEAR_PREFIX_ONLY's clear() (through
redoxide._patterns), and the checks and cache_clear, which ask whether two caches' names can meet.

The key function is asked where it puts the version and the key (``site:{version}:{key}`` for
Django's default and KEY_PREFIX "site"). SCAN's glob puts a ``*`` for each (``site:*:*``), and
each name it returns must also fullmatch the shape, the version a decimal int and the key
anything (``site:-?[0-9]+:.*``), before it is unlinked: ``site:lock`` and another cache's
``site:sessions:1:abc`` are not this cache's. A key function that hashes the key but keeps a
KEY_PREFIX part works (the key part is anything). shared_name() tells whether two shapes can
make one name (KEY_PREFIX "site" beside "site:1").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.core.cache.backends.base import default_key_func

__all__ = [
    "KEY",
    "VERSION",
    "NameMatcher",
    "Shape",
    "glob_escape",
    "name_matcher",
    "name_shape",
    "shared_name",
]

# Redis' glob metacharacters, escaped with a backslash so a prefix matches only itself.
_GLOB_SPECIAL = re.compile(r"([*?[\]\\])")
# Stands for "any version" where the key function takes it as text.
_VERSION_MARK = "redoxideversionmark"


def glob_escape(text: str) -> str:
    """Return text with Redis glob metacharacters escaped, to match literally."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


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

    @property
    def versioned(self) -> bool:
        """Whether the names hold the version apart from the key. Without it (a key function
        that leaves the version out, or hashes it with the key), every name of the glob may be
        this cache's, whoever wrote it: ``site:lock`` is the name of its key ``lock``."""
        return VERSION in self.shape


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
