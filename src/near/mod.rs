//! The near cache: values of hot keys kept in this process, coherent through the server's
//! client tracking.
//! - `store.rs` holds the bytes (`store_stats.rs` its counters; `store/heard.rs` what the
//!   server's invalidations drop and which keys in use they read again; `store/writes.rs` the
//!   claims of own writes);
//! - `tracking.rs` the connections that invalidate them and the liveness gate
//!   (`tracking/session.rs`: one connection's life, its database marker and probes;
//!   `tracking/admission.rs`: admission by use, whose fills go through them);
//! - `write.rs` own writes sent through them, `fill.rs` the one fill protocol, `sketch.rs` the
//!   read counts of admission by use;
//! - `py.rs` the Python surface (`py/forget.rs`: what a command sent through the cache drops;
//!   `py/stats.rs`: the counters; `ready.rs`: a hit's awaitable; `holding.rs`: a routed write's). The cache's hooks are in
//!   `redoxide/near.py`.

pub(crate) mod fill;
mod holding;
mod key_hash;
mod py;
mod ready;
mod sketch;
mod store;
mod store_stats;
mod tracking;
mod write;

pub use py::register;
pub use tracking::Source;
