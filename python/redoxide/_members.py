"""Encoding and decoding shared by the set, hash and sorted-set mixins (see _structures.py).

Set members and hash values go through the cache's serializer and compressor, ints raw, as
django-redis does; sorted-set members are serialized even when they are ints (django-redis
again); hash fields are sent as they are. A member is looked up by its bytes, so they are
django-redis 7's and either backend finds what the other added. (One exception: redoxide's
JSONSerializer writes compact UTF-8 JSON where django-redis writes json.dumps' ASCII, so under
JSON a non-ASCII string or a list is a different member; values read back either way.)
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from redoxide.exceptions import SerializationError

if TYPE_CHECKING:
    from redoxide._protocols import ClientLike
    from redoxide.compressors import BaseCompressor
    from redoxide.plans import Plan
    from redoxide.serializers import Serializer

__all__ = ["StructuresBase", "as_field", "cast_score"]

T = TypeVar("T")

# django-redis pickles with pickle.DEFAULT_PROTOCOL, redoxide's values use the highest. A value
# reads back whatever its protocol, but a member is looked up by its bytes (SISMEMBER, SREM,
# ZSCORE...), so members are pickled with django-redis' default unless PICKLE_VERSION chose
# another protocol than the highest.
_MEMBER_PROTOCOL = pickle.DEFAULT_PROTOCOL


def cast_score(cast: Callable[[Any], T], score: Any) -> T:
    """Apply a score_cast_func to a score as redis-py does (int() of b"1.5" falls back to 1)."""
    try:
        return cast(score)
    except (TypeError, ValueError):
        return cast(float(score))


def as_field(field: Any) -> Any:
    """A hash field as redis-py sends it (a float as its repr; str, bytes and ints as they are)."""
    return repr(field) if type(field) is float else field


class StructuresBase:
    """Member encoding and decoding shared by the set, hash and sorted-set mixins."""

    if TYPE_CHECKING:  # what RedisCache provides
        _client: ClientLike
        _serializer: Serializer
        _compressor: BaseCompressor
        _fast_pickle: bool
        _protocol: int
        _compress: bool
        _compress_min: int
        _check_encoded: bool
        _failed: Callable[[BaseException, Any], Any]

        def _key(self, key: Any, version: int | None) -> str: ...
        def _keys(self, keys: Iterable[Any], version: int | None) -> list[str]: ...
        def _encode(self, value: Any, key: Any = None) -> bytes: ...
        def _decode(self, data: bytes, key: Any) -> Any: ...
        def _stored_custom(self, value: Any, dumped: Any, key: Any) -> bytes: ...
        def _run(self, plan: Plan[T], fallback: Any = None) -> T: ...
        async def _arun(self, plan: Plan[T], fallback: Any = None) -> T: ...

    def _member(self, value: Any, raw_int: bool = True) -> bytes:
        """Encode a set or sorted-set member as django-redis does (raw_int=False: serialize
        ints too, as its sorted sets do)."""
        if raw_int and type(value) is int:
            return b"%d" % value
        if self._fast_pickle:
            protocol = self._protocol
            data = pickle.dumps(
                value, _MEMBER_PROTOCOL if protocol == pickle.HIGHEST_PROTOCOL else protocol
            )
        else:
            data = self._serializer.dumps(value)
            if self._check_encoded:  # a user's codec: stored so that it reads back as itself
                return self._stored_custom(value, data, None)
        if self._compress:
            if self._check_encoded:  # a user's compressor
                return self._stored_custom(value, data, None)
            if len(data) >= self._compress_min:
                data = self._compressor.compress(data)
        return data

    def _decode_set(self, replies: Iterable[bytes], key: Any) -> set[Any]:
        try:
            return {self._decode(raw, key) for raw in replies}
        except SerializationError:
            return set(self._decode_each(replies, key))

    def _decode_list(self, replies: Iterable[bytes], key: Any) -> list[Any]:
        try:
            return [self._decode(raw, key) for raw in replies]
        except SerializationError:
            return list(self._decode_each(replies, key))

    def _decode_each(self, replies: Iterable[bytes], key: Any) -> Iterator[Any]:
        """Decode members one by one: under fail-open an undecodable one is left out (counted
        and logged) and the others are returned; otherwise it raises, naming the key."""
        for raw in replies:
            try:
                yield self._decode(raw, key)
            except SerializationError as exc:
                self._failed(exc, None)

    def _decode_scored(
        self, reply: list[bytes], key: Any, cast: Callable[[Any], Any] = float
    ) -> list[tuple[Any, Any]]:
        """Pair a flat member, score, member, score... reply into (member, score) tuples (an
        undecodable member is left out under fail-open, as in _decode_each)."""
        pairs = iter(reply)
        scored = []
        for m, s in zip(pairs, pairs, strict=True):
            try:
                member = self._decode(m, key)
            except SerializationError as exc:
                self._failed(exc, None)
                continue
            scored.append((member, float(s) if cast is float else cast_score(cast, s)))
        return scored
