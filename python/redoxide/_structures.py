"""django-redis' data-structure API on the cache: sets, hashes, sorted sets and lists (django-
cachex's), sync and async.

Each family has its file (_sets.py, _hashes.py, _zsets.py, _lists.py), what they share
(encoding members, decoding replies) is _members.py's, and this module composes them into the
one mixin RedisCache inherits. Every call is one command, one round trip; every method has a
native async twin.

Bytes are django-redis 7's, so either backend reads, finds and removes what the other wrote:
keys are cache keys (``KEY_PREFIX:VERSION:key``, or KEY_FUNCTION's); set members and hash
values go through the serializer and compressor, ints raw; sorted-set members are serialized
even when they are ints (as django-redis does); hash fields are sent as they are.

Multi-key commands (sdiff, sinter, sunion, their ``*store`` forms, smove, lmove) are sent as
one command. On a cluster their keys must share a hash slot, which a hash tag gives them
(``cache.sinter("{user:1}:tags", "{user:1}:likes")``); keys in different slots raise
``CrossSlotError``. Every other command goes to its key's node.
"""

from __future__ import annotations

from redoxide._hashes import HashesMixin
from redoxide._lists import ListsMixin
from redoxide._sets import SetsMixin
from redoxide._zsets import SortedSetsMixin

__all__ = ["StructuresMixin"]


class StructuresMixin(SetsMixin, HashesMixin, SortedSetsMixin, ListsMixin):
    """Sets, hashes and sorted sets, as django-redis has them, lists as django-cachex has
    them, plus async twins."""
