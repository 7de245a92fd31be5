//! What redoxide knows about each command, in one table: what it does to the data (the near
//! cache forgets or flushes by it, a dropped connection replays by it), where its keys are and
//! how a cluster routes it (python/redoxide/topology/commands.py reads both from here through
//! `command_facts`), and its stats family (a row is a family; a command without one is
//! counted as OTHER).
//!
//! A command missing here still works: it is routed by its second word, counted as OTHER, and
//! the near cache treats it as a write to every tracked key among its arguments.
//! tests/unit/test_command_facts.py holds every row against the server's own COMMAND INFO, and
//! tests/observability/test_stats.py fails on any command a cache method, a lock or the raw
//! client sends that has no row.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What a command does to the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Changes no key: the near cache keeps what it holds, and a request that met a dropped
    /// connection may be sent again.
    Read,
    /// May change the keys among its arguments.
    Write,
    /// Empties the database.
    Flush,
    /// Concerns the connection, a transaction or the server, never a key's value.
    Control,
}

/// Where a command's keys are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// None.
    Zero,
    /// The second word.
    First,
    /// The second and third words (a source and a destination).
    Two,
    /// Every word after the name.
    All,
    /// Every other word after the name (key, value, key, value...).
    Pairs,
    /// The third word (after a subcommand).
    Third,
    /// After the count of keys in the third word (the scripts).
    Counted,
    /// After the word STREAMS.
    Streams,
    /// Every other word after the count in the second word (MSETEX: count, key, value...).
    CountedPairs,
}

/// How a cluster runs a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// On the node of its first key's slot (a keyless one on any node).
    Slot,
    /// Split per key, each on its own slot's node; the integer replies summed.
    EachKeySummed,
    /// Split by slot; the replies put back in the keys' order.
    EachKeyInOrder,
    /// On every primary; the integer replies summed.
    EveryPrimarySummed,
    /// On every primary; the list replies joined.
    EveryPrimaryJoined,
    /// On every primary; the first reply stands for all.
    EveryPrimary,
}

/// One command's row.
#[derive(Debug)]
pub struct Facts {
    /// The name, upper case.
    pub name: &'static str,
    pub effect: Effect,
    pub keys: Keys,
    pub route: Route,
}

impl Facts {
    /// Whether a request of this command alone may be sent again after it met a connection
    /// closed under it: reads only.
    pub fn replayable(&self) -> bool {
        self.effect == Effect::Read
    }
}

use Effect::{Control, Flush, Read, Write};
use Keys::{All, Counted, CountedPairs, First, Pairs, Streams, Third, Two, Zero};
use Route::{
    EachKeyInOrder, EachKeySummed, EveryPrimary, EveryPrimaryJoined, EveryPrimarySummed, Slot,
};

const fn row(name: &'static str, effect: Effect, keys: Keys) -> Facts {
    Facts { name, effect, keys, route: Slot }
}

const fn routed(name: &'static str, effect: Effect, keys: Keys, route: Route) -> Facts {
    Facts { name, effect, keys, route }
}

/// Every command redoxide sends, and those a raw client's user commonly does; sorted by name
/// (binary search; a unit test below checks the order).
#[rustfmt::skip]
pub const TABLE: &[Facts] = &[
    row("ACL", Control, Zero),
    row("APPEND", Write, First),
    row("ASKING", Control, Zero),
    row("AUTH", Control, Zero),
    row("BGSAVE", Control, Zero),
    row("CLIENT", Control, Zero),
    row("CLUSTER", Control, Zero),
    row("CLUSTERSCAN", Read, First),
    row("COMMAND", Read, Zero),
    row("CONFIG", Control, Zero),
    row("COPY", Write, Two),
    routed("DBSIZE", Read, Zero, EveryPrimarySummed),
    row("DEBUG", Control, Zero),
    row("DECR", Write, First),
    row("DECRBY", Write, First),
    routed("DEL", Write, All, EachKeySummed),
    row("DELEX", Write, First),
    row("DELIFEQ", Write, First),
    row("DISCARD", Control, Zero),
    row("DUMP", Read, First),
    row("ECHO", Read, Zero),
    row("EVAL", Write, Counted),
    row("EVALSHA", Write, Counted),
    row("EVALSHA_RO", Read, Counted),
    row("EVAL_RO", Read, Counted),
    row("EXEC", Control, Zero),
    routed("EXISTS", Read, All, EachKeySummed),
    row("EXPIRE", Write, First),
    row("EXPIREAT", Write, First),
    row("EXPIRETIME", Read, First),
    row("FCALL", Write, Counted),
    row("FCALL_RO", Read, Counted),
    routed("FLUSHALL", Flush, Zero, EveryPrimary),
    routed("FLUSHDB", Flush, Zero, EveryPrimary),
    routed("FUNCTION", Control, Zero, EveryPrimary),
    row("GET", Read, First),
    row("GETDEL", Write, First),
    row("GETEX", Write, First),
    row("GETRANGE", Read, First),
    row("GETSET", Write, First),
    row("HDEL", Write, First),
    row("HELLO", Control, Zero),
    row("HEXISTS", Read, First),
    row("HGET", Read, First),
    row("HGETALL", Read, First),
    row("HINCRBY", Write, First),
    row("HINCRBYFLOAT", Write, First),
    row("HKEYS", Read, First),
    row("HLEN", Read, First),
    row("HMGET", Read, First),
    row("HMSET", Write, First),
    row("HSCAN", Read, First),
    row("HSET", Write, First),
    row("HSETNX", Write, First),
    row("HSTRLEN", Read, First),
    row("HVALS", Read, First),
    row("INCR", Write, First),
    row("INCRBY", Write, First),
    row("INCRBYFLOAT", Write, First),
    row("INFO", Read, Zero),
    routed("KEYS", Read, Zero, EveryPrimaryJoined),
    row("LASTSAVE", Read, Zero),
    row("LATENCY", Control, Zero),
    row("LINDEX", Read, First),
    row("LINSERT", Write, First),
    row("LLEN", Read, First),
    row("LMOVE", Write, Two),
    row("LPOP", Write, First),
    row("LPOS", Read, First),
    row("LPUSH", Write, First),
    row("LPUSHX", Write, First),
    row("LRANGE", Read, First),
    row("LREM", Write, First),
    row("LSET", Write, First),
    row("LTRIM", Write, First),
    row("MEMORY", Read, Third),
    routed("MGET", Read, All, EachKeyInOrder),
    row("MODULE", Control, Zero),
    row("MSET", Write, Pairs),
    row("MSETEX", Write, CountedPairs),
    row("MSETNX", Write, Pairs),
    row("MULTI", Control, Zero),
    row("OBJECT", Read, Third),
    row("PERSIST", Write, First),
    row("PEXPIRE", Write, First),
    row("PEXPIREAT", Write, First),
    row("PEXPIRETIME", Read, First),
    row("PING", Read, Zero),
    row("PSETEX", Write, First),
    row("PTTL", Read, First),
    row("PUBLISH", Control, Zero),
    row("RANDOMKEY", Read, Zero),
    row("READONLY", Control, Zero),
    row("READWRITE", Control, Zero),
    row("RENAME", Write, Two),
    row("RENAMENX", Write, Two),
    row("RESTORE", Write, First),
    row("ROLE", Read, Zero),
    row("RPOP", Write, First),
    row("RPOPLPUSH", Write, Two),
    row("RPUSH", Write, First),
    row("RPUSHX", Write, First),
    row("SADD", Write, First),
    row("SAVE", Control, Zero),
    row("SCAN", Read, Zero),
    row("SCARD", Read, First),
    routed("SCRIPT", Control, Zero, EveryPrimary),
    row("SDIFF", Read, All),
    row("SDIFFSTORE", Write, All),
    row("SELECT", Control, Zero),
    row("SENTINEL", Control, Zero),
    row("SET", Write, First),
    row("SETEX", Write, First),
    row("SETNX", Write, First),
    row("SETRANGE", Write, First),
    row("SINTER", Read, All),
    row("SINTERSTORE", Write, All),
    row("SISMEMBER", Read, First),
    row("SLOWLOG", Control, Zero),
    row("SMEMBERS", Read, First),
    row("SMISMEMBER", Read, First),
    row("SMOVE", Write, Two),
    row("SPOP", Write, First),
    row("SRANDMEMBER", Read, First),
    row("SREM", Write, First),
    row("SSCAN", Read, First),
    row("STRLEN", Read, First),
    row("SUNION", Read, All),
    row("SUNIONSTORE", Write, All),
    row("SWAPDB", Flush, Zero),
    row("TIME", Read, Zero),
    routed("TOUCH", Read, All, EachKeySummed),
    row("TTL", Read, First),
    row("TYPE", Read, First),
    routed("UNLINK", Write, All, EachKeySummed),
    row("UNWATCH", Control, Zero),
    row("WAIT", Control, Zero),
    row("WATCH", Control, All),
    row("XINFO", Read, Third),
    row("XREAD", Read, Streams),
    row("XREADGROUP", Write, Streams),
    row("ZADD", Write, First),
    row("ZCARD", Read, First),
    row("ZCOUNT", Read, First),
    row("ZINCRBY", Write, First),
    row("ZMSCORE", Read, First),
    row("ZPOPMAX", Write, First),
    row("ZPOPMIN", Write, First),
    row("ZRANGE", Read, First),
    row("ZRANGEBYLEX", Read, First),
    row("ZRANGEBYSCORE", Read, First),
    row("ZRANK", Read, First),
    row("ZREM", Write, First),
    row("ZREMRANGEBYRANK", Write, First),
    row("ZREMRANGEBYSCORE", Write, First),
    row("ZREVRANGE", Read, First),
    row("ZREVRANGEBYSCORE", Read, First),
    row("ZREVRANK", Read, First),
    row("ZSCAN", Read, First),
    row("ZSCORE", Read, First),
];

/// The row of a command name in any case, as its position in `TABLE`.
pub fn position(name: &[u8]) -> Option<usize> {
    // The hot commands, as redoxide spells them, without the search.
    match name {
        b"GET" => return Some(GET),
        b"SET" => return Some(SET),
        b"MGET" => return Some(MGET),
        b"DEL" => return Some(DEL),
        b"EXISTS" => return Some(EXISTS),
        b"EVALSHA" => return Some(EVALSHA),
        b"PTTL" => return Some(PTTL),
        b"MSET" => return Some(MSET),
        _ => {}
    }
    TABLE
        .binary_search_by(|probe| {
            probe.name.as_bytes().iter().copied().cmp(name.iter().map(u8::to_ascii_uppercase))
        })
        .ok()
}

const GET: usize = position_of("GET");
const SET: usize = position_of("SET");
const MGET: usize = position_of("MGET");
const DEL: usize = position_of("DEL");
const EXISTS: usize = position_of("EXISTS");
const EVALSHA: usize = position_of("EVALSHA");
const PTTL: usize = position_of("PTTL");
const MSET: usize = position_of("MSET");
// Each of them has a row.
const _: () = assert!(
    GET < TABLE.len()
        && SET < TABLE.len()
        && MGET < TABLE.len()
        && DEL < TABLE.len()
        && EXISTS < TABLE.len()
        && EVALSHA < TABLE.len()
        && PTTL < TABLE.len()
        && MSET < TABLE.len()
);

/// The row of a command name in any case.
pub fn facts(name: &[u8]) -> Option<&'static Facts> {
    position(name).map(|at| &TABLE[at])
}

/// A row's position, worked out at compile time (`TABLE.len()` for a name without one).
pub const fn position_of(name: &str) -> usize {
    let mut i = 0;
    while i < TABLE.len() {
        let (a, b) = (TABLE[i].name.as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i;
            }
        }
        i += 1;
    }
    TABLE.len()
}

fn effect_name(effect: Effect) -> &'static str {
    match effect {
        Read => "read",
        Write => "write",
        Flush => "flush",
        Control => "control",
    }
}

fn keys_name(keys: Keys) -> &'static str {
    match keys {
        Zero => "none",
        First => "first",
        Two => "two",
        All => "all",
        Pairs => "pairs",
        Third => "third",
        Counted => "counted",
        Streams => "streams",
        CountedPairs => "counted_pairs",
    }
}

fn route_name(route: Route) -> &'static str {
    match route {
        Slot => "slot",
        EachKeySummed => "each_key_summed",
        EachKeyInOrder => "each_key_in_order",
        EveryPrimarySummed => "every_primary_summed",
        EveryPrimaryJoined => "every_primary_joined",
        EveryPrimary => "every_primary",
    }
}

/// The table for Python: {name: (effect, keys, route)}, each a lower-case word.
#[pyfunction]
pub fn command_facts(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for facts in TABLE {
        let row = (effect_name(facts.effect), keys_name(facts.keys), route_name(facts.route));
        out.set_item(facts.name, row)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_without_repeats_and_upper_case() {
        for pair in TABLE.windows(2) {
            assert!(pair[0].name < pair[1].name, "{} before {}", pair[0].name, pair[1].name);
        }
        for facts in TABLE {
            assert_eq!(facts.name, facts.name.to_ascii_uppercase());
        }
    }

    #[test]
    fn a_name_is_found_in_any_case_and_a_prefix_is_not() {
        assert_eq!(facts(b"get").map(|f| f.name), Some("GET"));
        for hot in ["GET", "SET", "MGET", "DEL", "EXISTS", "EVALSHA", "PTTL", "MSET"] {
            assert_eq!(facts(hot.as_bytes()).map(|f| f.name), Some(hot));
            assert_eq!(facts(hot.to_lowercase().as_bytes()).map(|f| f.name), Some(hot));
        }
        assert_eq!(facts(b"MGet").map(|f| f.effect), Some(Read));
        assert!(facts(b"GE").is_none());
        assert!(facts(b"GETX").is_none());
        assert_eq!(position_of("ZSCORE"), TABLE.len() - 1);
        assert_eq!(position_of("NOPE"), TABLE.len());
    }

    #[test]
    fn keyless_rows_route_by_slot_or_every_primary_and_split_rows_name_every_key() {
        for facts in TABLE {
            match facts.route {
                EachKeySummed | EachKeyInOrder => assert_eq!(facts.keys, All, "{}", facts.name),
                EveryPrimary | EveryPrimarySummed | EveryPrimaryJoined => {
                    assert_eq!(facts.keys, Zero, "{}", facts.name)
                }
                Slot => {}
            }
        }
    }
}
