"""The Lua scripts redoxide runs on the server, in one place.

Each one makes a check and a change atomic where no single command does both on every
server; where the server has one (SET IFEQ, DELIFEQ, DELEX) or scripts do not run, _offers.py
says what replaces them.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "ACQUIRE",
    "COMPARE_AND_SET",
    "COMPARE_AND_SET_SHA",
    "EXTEND",
    "INCR",
    "INCR_SHA",
    "NOT_AN_INTEGER",
    "RELEASE",
]

#: The error code INCR answers with when the stored value is not a 64-bit integer.
NOT_AN_INTEGER = "NOTINT"

#: INCRBY only an existing key, so incr() of a missing key is an error, not 1. A value that is
#: not a 64-bit integer (or a sum past one) answers with the NOTINT code: the caller then adds in
#: Python and writes back with COMPARE_AND_SET, which stays atomic.
INCR = (
    "if redis.call('EXISTS', KEYS[1]) == 0 then return false end "
    "local n = redis.pcall('INCRBY', KEYS[1], ARGV[1]) "
    "if type(n) == 'table' and n.err then "
    f"return redis.error_reply('{NOT_AN_INTEGER} ' .. n.err) end return n"
)
#: INCR by its SHA1 (EVALSHA): the server neither receives nor hashes the body on every call.
INCR_SHA = hashlib.sha1(INCR.encode()).hexdigest()
#: Write ARGV[2] (keeping the TTL) only if the key still holds ARGV[1], or, with ARGV[3] == '1',
#: only if it is still missing (then with no expiry, as INCRBY creates a key). 1: written;
#: 0: changed meanwhile (read again and retry); -1: deleted meanwhile.
COMPARE_AND_SET = (
    "local now = redis.call('GET', KEYS[1]) "
    "if ARGV[3] == '1' then if now then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[2]) return 1 end "
    "if not now then return -1 end "
    "if now ~= ARGV[1] then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL') return 1"
)
COMPARE_AND_SET_SHA = hashlib.sha1(COMPARE_AND_SET.encode()).hexdigest()
#: Take a recompute lock only while the value is missing (-2) or has less than ARGV[3] ms left.
ACQUIRE = (
    "local left = redis.call('PTTL', KEYS[1]) "
    "if left == -2 or (left >= 0 and left < tonumber(ARGV[3])) then "
    "return redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) end return false"
)
#: Delete a lock only if it still holds our token (it may have expired and been retaken).
RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)
#: Set (ARGV[3] == '1') or add to (otherwise) a lock's TTL, only if it still holds our token.
EXTEND = (
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "local ttl = tonumber(ARGV[2]) "
    "if ARGV[3] ~= '1' then "
    "local left = redis.call('PTTL', KEYS[1]) "
    "if left < 0 then return 1 end "  # no expiry: nothing to add to
    "ttl = ttl + left end "
    "redis.call('PEXPIRE', KEYS[1], ttl) return 1"
)
