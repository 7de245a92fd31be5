//! What one server offers beyond the commands every supported server has: learned on each
//! new connection (HELLO's server, version and modules, and `COMMAND INFO` of the commands
//! whose names differ between servers), kept with the node's client, renewed by every
//! reconnect (a failover's new primary is a new connection too).
//!
//! Until a connection has told, nothing new is offered and scripting is taken as present:
//! today's paths, which every server runs.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use redis::Value;

/// `MSETEX numkeys key value ... PX ms` (Valkey 9.1, Redis 8.4).
pub const MSETEX: u32 = 1;
/// `SET key value IFEQ old` (Valkey 8.1, Redis 8.4).
pub const SET_IFEQ: u32 = 1 << 1;
/// `DELIFEQ key value` (Valkey 9.0).
pub const DELIFEQ: u32 = 1 << 2;
/// `DELEX key IFEQ value` (Redis 8.4).
pub const DELEX: u32 = 1 << 3;
/// `CLUSTERSCAN` (Valkey 9.1).
pub const CLUSTERSCAN: u32 = 1 << 4;
/// A Lua engine is loaded (Valkey 9.1 has it as a module, which may be absent).
pub const LUA: u32 = 1 << 5;
/// A connection told (the other bits mean something).
const KNOWN: u32 = 1 << 31;

/// The commands probed by name with `COMMAND INFO`, in this order, and the bit each sets.
pub const PROBED: [(&str, u32); 4] =
    [("MSETEX", MSETEX), ("DELIFEQ", DELIFEQ), ("DELEX", DELEX), ("CLUSTERSCAN", CLUSTERSCAN)];

/// Every bit with its name, as `cache_ping` and the survey show them.
pub const NAMES: [(u32, &str); 6] = [
    (MSETEX, "MSETEX"),
    (SET_IFEQ, "SET IFEQ"),
    (DELIFEQ, "DELIFEQ"),
    (DELEX, "DELEX"),
    (CLUSTERSCAN, "CLUSTERSCAN"),
    (LUA, "Lua"),
];

/// The names of `bits`, in `NAMES`' order.
pub fn names(bits: u32) -> Vec<&'static str> {
    NAMES.iter().filter(|(bit, _)| bits & bit != 0).map(|(_, name)| *name).collect()
}

/// What a server said of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Server {
    /// "redis", "valkey", or what another server calls itself.
    pub name: String,
    pub version: String,
    pub modules: Vec<String>,
}

/// One node's offers: read lock-free on the request path (`bits`), described for people.
#[derive(Debug, Default)]
pub struct Offers {
    bits: AtomicU32,
    server: Mutex<Option<Server>>,
    /// A script was refused (an ACL user without `@scripting`, no Lua engine): script-free
    /// paths from then on, until a new connection learns again.
    scripts_refused: AtomicBool,
    /// Offered commands the server then refused (an ACL that lists commands by name, written
    /// before they existed): taken out of `bits` while the same server answers.
    refused: AtomicU32,
}

impl Offers {
    /// Whether every bit of `bit` is offered (false until a connection told).
    #[inline]
    pub fn has(&self, bit: u32) -> bool {
        let bits = self.bits.load(Ordering::Relaxed);
        bits & KNOWN != 0 && bits & bit == bit
    }

    /// Whether a connection told (else every `has` is false, scripting presumed).
    pub fn known(&self) -> bool {
        self.bits.load(Ordering::Relaxed) & KNOWN != 0
    }

    /// The offered bits (KNOWN aside); 0 until a connection told.
    pub fn bits(&self) -> u32 {
        let bits = self.bits.load(Ordering::Relaxed);
        if bits & KNOWN == 0 {
            0
        } else {
            bits & !KNOWN
        }
    }

    /// Offered commands refused since the last connection learnt (see `refuse`).
    pub fn refused(&self) -> u32 {
        self.refused.load(Ordering::Relaxed)
    }

    /// `bit`, offered, was refused (NOPERM, unknown command): today's path instead, while the
    /// same server (name and version) answers.
    pub fn refuse(&self, bit: u32) {
        self.refused.fetch_or(bit, Ordering::Relaxed);
        self.bits.fetch_and(!bit, Ordering::Relaxed);
    }

    /// The server as it described itself, once a connection told.
    pub fn server(&self) -> Option<Server> {
        self.server.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Learn from a new connection's replies to HELLO (no protocol version: it changes
    /// nothing) and to `COMMAND INFO` of `PROBED` (None, or an error, if it was refused:
    /// then the server's name and version decide). A HELLO that failed (a server before 6)
    /// teaches nothing: today's paths stay.
    pub fn learn(&self, hello: &Value, probe: Option<&Value>) {
        let Some(server) = parse_hello(hello) else {
            // Refused (a server before 6, an ACL user without HELLO): not known, so nothing
            // new is used, whatever an earlier connection (to another server, maybe) told.
            return self.forget();
        };
        let probed = probe.and_then(parse_probe);
        self.set(server, probed);
    }

    /// Back to not known: today's paths.
    fn forget(&self) {
        self.bits.store(0, Ordering::Relaxed);
        *self.server.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        self.scripts_refused.store(false, Ordering::Relaxed);
        self.refused.store(0, Ordering::Relaxed);
    }

    /// Learn from the replies of a handshake nobody waited for (read in front of the first
    /// command's): HELLO's reply is the one that reads as such, the probe's the next.
    pub fn learn_discarded(&self, replies: &Value) {
        let Value::Array(items) = replies else { return };
        match items.iter().position(|v| parse_hello(v).is_some()) {
            Some(at) => self.learn(&items[at], items.get(at + 1)),
            // A handshake's (HELLO's and the probe's at least) with HELLO refused; a lone
            // reauthentication's reply says nothing either way.
            None if items.len() >= 2 => self.forget(),
            None => {}
        }
    }

    /// Learn from what Python read (a TLS connection's replies, asked for by Python).
    pub fn set(&self, server: Server, probed: Option<[bool; PROBED.len()]>) {
        let mut bits = derive(&server, probed) | KNOWN;
        let mut known = self.server.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Refusals hold while the same server (name and version) answers: every new
        // connection would otherwise pay one refused command again. An upgrade resets them.
        if known.as_ref() == Some(&server) {
            bits &= !self.refused.load(Ordering::Relaxed);
        } else {
            self.refused.store(0, Ordering::Relaxed);
        }
        *known = Some(server);
        self.bits.store(bits, Ordering::Relaxed);
        self.scripts_refused.store(false, Ordering::Relaxed);
    }

    /// A script was refused: take the script-free paths until a new connection learns again.
    pub fn refuse_scripts(&self) {
        self.scripts_refused.store(true, Ordering::Relaxed);
    }

    /// Whether scripts are known not to run here (refused, or no Lua engine loaded).
    pub fn scripts_refused(&self) -> bool {
        self.scripts_refused.load(Ordering::Relaxed) || (self.known() && !self.has(LUA))
    }
}

/// "9.1.2" as (9, 1, 2); missing or odd parts count as 0.
fn version(text: &str) -> (u32, u32, u32) {
    let mut parts = text.split('.').map(|p| {
        p.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or(0)
    });
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The offers of `server`: the probe says which commands exist where it answered, the
/// version (of the servers whose history we know) where it did not; SET IFEQ, an argument,
/// by version only.
fn derive(server: &Server, probed: Option<[bool; PROBED.len()]>) -> u32 {
    let v = version(&server.version);
    let (valkey, redis) = (server.name == "valkey", server.name == "redis");
    let mut bits = 0;
    if (valkey && v >= (8, 1, 0)) || (redis && v >= (8, 4, 0)) {
        bits |= SET_IFEQ;
    }
    match probed {
        Some(found) => {
            for ((_, bit), present) in PROBED.iter().zip(found) {
                if present {
                    bits |= bit;
                }
            }
        }
        None => {
            if (valkey && v >= (9, 1, 0)) || (redis && v >= (8, 4, 0)) {
                bits |= MSETEX;
            }
            if valkey && v >= (9, 0, 0) {
                bits |= DELIFEQ;
            }
            if redis && v >= (8, 4, 0) {
                bits |= DELEX;
            }
            if valkey && v >= (9, 1, 0) {
                bits |= CLUSTERSCAN;
            }
        }
    }
    // Valkey 9.1 loads Lua as a module, which a server may run without; others build it in.
    let lua_module = server.modules.iter().any(|m| m.eq_ignore_ascii_case("lua"));
    if !(valkey && v >= (9, 1, 0)) || lua_module {
        bits |= LUA;
    }
    bits
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// A map reply (RESP3) or its flat list of fields and values (RESP2), as pairs.
fn pairs(value: &Value) -> Option<Vec<(&Value, &Value)>> {
    match value {
        Value::Map(pairs) => Some(pairs.iter().map(|(k, v)| (k, v)).collect()),
        Value::Array(items) if items.len() % 2 == 0 => {
            Some(items.chunks_exact(2).map(|kv| (&kv[0], &kv[1])).collect())
        }
        _ => None,
    }
}

fn field<'a>(pairs: &[(&Value, &'a Value)], name: &str) -> Option<&'a Value> {
    pairs.iter().find(|(k, _)| text(k).is_some_and(|k| k.eq_ignore_ascii_case(name))).map(|p| p.1)
}

/// HELLO's server, version and module names; None for anything else (an error reply).
fn parse_hello(hello: &Value) -> Option<Server> {
    let fields = pairs(hello)?;
    let name = text(field(&fields, "server")?)?.to_ascii_lowercase();
    let version = text(field(&fields, "version")?)?;
    let modules = match field(&fields, "modules") {
        Some(Value::Array(items) | Value::Set(items)) => items
            .iter()
            .filter_map(|m| pairs(m).and_then(|p| field(&p, "name").and_then(text)))
            .collect(),
        _ => Vec::new(),
    };
    Some(Server { name, version, modules })
}

/// `COMMAND INFO` of `PROBED`: which of them the server has (an entry, not nil).
fn parse_probe(probe: &Value) -> Option<[bool; PROBED.len()]> {
    let Value::Array(entries) = probe else { return None };
    if entries.len() != PROBED.len() {
        return None;
    }
    let mut found = [false; PROBED.len()];
    for (slot, entry) in found.iter_mut().zip(entries) {
        *slot = !matches!(entry, Value::Nil);
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn hello(server: &str, version: &str, modules: &[&str]) -> Value {
        let modules = modules
            .iter()
            .map(|m| Value::Array(vec![bulk("name"), bulk(m), bulk("ver"), Value::Int(1)]))
            .collect();
        Value::Array(vec![
            bulk("server"),
            bulk(server),
            bulk("version"),
            bulk(version),
            bulk("proto"),
            Value::Int(2),
            bulk("modules"),
            Value::Array(modules),
        ])
    }

    fn learned(hello: Value, probe: Option<Value>) -> Offers {
        let offers = Offers::default();
        offers.learn(&hello, probe.as_ref());
        offers
    }

    #[test]
    fn a_refused_command_is_not_offered_until_a_connection_learns_again() {
        let offers = learned(hello("valkey", "9.1.2", &["lua"]), None);
        assert!(offers.has(MSETEX) && offers.refused() == 0);
        offers.refuse(MSETEX);
        assert!(!offers.has(MSETEX) && offers.has(DELIFEQ | SET_IFEQ));
        assert_eq!(offers.refused(), MSETEX);
        // A new connection to the same server keeps it refused; an upgraded one offers it.
        offers.learn(&hello("valkey", "9.1.2", &["lua"]), None);
        assert!(!offers.has(MSETEX) && offers.refused() == MSETEX);
        offers.learn(&hello("valkey", "9.1.3", &["lua"]), None);
        assert!(offers.has(MSETEX) && offers.refused() == 0);
    }

    #[test]
    fn nothing_is_offered_until_a_connection_told() {
        let offers = Offers::default();
        assert!(!offers.known() && !offers.has(MSETEX) && offers.bits() == 0);
        offers.learn(&redis::parse_redis_value(b"-ERR unknown command\r\n").unwrap(), None);
        assert!(!offers.known());
    }

    #[test]
    fn each_servers_names_by_version_when_the_probe_was_refused() {
        let valkey = learned(hello("valkey", "9.1.2", &["lua"]), None);
        assert_eq!(valkey.bits(), MSETEX | SET_IFEQ | DELIFEQ | CLUSTERSCAN | LUA);
        let valkey9 = learned(hello("valkey", "9.0.0", &[]), None);
        assert_eq!(valkey9.bits(), SET_IFEQ | DELIFEQ | LUA);
        let redis84 = learned(hello("redis", "8.4.0", &[]), None);
        assert_eq!(redis84.bits(), MSETEX | SET_IFEQ | DELEX | LUA);
        let redis7 = learned(hello("redis", "7.0.15", &[]), None);
        assert_eq!(redis7.bits(), LUA);
        let other = learned(hello("keydb", "9.9.9", &[]), None);
        assert_eq!(other.bits(), LUA);
    }

    #[test]
    fn valkey_without_its_lua_module_has_no_scripting() {
        assert!(!learned(hello("valkey", "9.1.2", &[]), None).has(LUA));
        assert!(learned(hello("valkey", "8.1.1", &[]), None).has(LUA));
    }

    #[test]
    fn the_probe_decides_which_commands_exist() {
        // A server that calls itself redis 7 but has MSETEX and CLUSTERSCAN.
        let probe = Value::Array(vec![Value::Array(vec![]), Value::Nil, Value::Nil, bulk("x")]);
        let offers = learned(hello("redis", "7.2.0", &[]), Some(probe));
        assert_eq!(offers.bits(), MSETEX | CLUSTERSCAN | LUA);
        // A refused probe: the version decides.
        let refused = redis::parse_redis_value(b"-NOPERM no\r\n").unwrap();
        let offers = learned(hello("valkey", "9.1.0", &["lua"]), Some(refused));
        assert!(offers.has(MSETEX | DELIFEQ | CLUSTERSCAN));
        assert_eq!(offers.server().unwrap().modules, vec!["lua".to_string()]);
    }

    #[test]
    fn a_refusal_of_scripts_lasts_until_the_next_connection_learns() {
        let offers = learned(hello("redis", "7.0.15", &[]), None);
        assert!(!offers.scripts_refused());
        offers.refuse_scripts();
        assert!(offers.scripts_refused());
        offers.learn(&hello("redis", "7.0.15", &[]), None);
        assert!(!offers.scripts_refused());
        assert!(learned(hello("valkey", "9.1.2", &[]), None).scripts_refused());
    }

    #[test]
    fn the_replies_of_a_handshake_nobody_waited_for_teach_the_same() {
        let offers = Offers::default();
        let probe = Value::Array(vec![Value::Array(vec![]), Value::Nil, Value::Nil, Value::Nil]);
        let replies =
            Value::Array(vec![Value::Okay, Value::Okay, hello("redis", "7.0.0", &[]), probe]);
        offers.learn_discarded(&replies);
        assert_eq!(offers.bits(), MSETEX | LUA);
        // A reauthentication's reply alone teaches nothing, and forgets nothing.
        offers.learn_discarded(&Value::Array(vec![Value::Okay]));
        assert_eq!(offers.bits(), MSETEX | LUA);
        // A handshake whose HELLO was refused (this address now a server that refuses it):
        // what an earlier connection told is forgotten.
        let refused = redis::parse_redis_value(b"-NOPERM no\r\n").unwrap();
        offers.learn_discarded(&Value::Array(vec![refused.clone(), refused]));
        assert!(!offers.known() && offers.server().is_none());
    }

    #[test]
    fn a_resp3_map_reads_the_same() {
        let map = Value::Map(vec![
            (bulk("server"), bulk("valkey")),
            (bulk("version"), bulk("9.1.2")),
            (bulk("modules"), Value::Array(vec![Value::Map(vec![(bulk("name"), bulk("lua"))])])),
        ]);
        assert!(learned(map, None).has(MSETEX | LUA));
    }
}
