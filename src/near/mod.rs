//! The near cache: values of hot keys kept in this process, coherent through the server's
//! client tracking. `store.rs` holds the bytes (`store_stats.rs` its counters), `tracking.rs` the connections that invalidate
//! them and the liveness gate (`tracking/session.rs`: one connection's life, its database
//! marker and probes), `write.rs` own writes sent through them, `fill.rs` the one fill
//! protocol, `sketch.rs` admission by use, `py.rs` the Python surface (`py/forget.rs`: what a command sent through the cache drops; `ready.rs`: a hit's awaitable) (the cache's hooks are in `redoxide/near.py`).

pub(crate) mod fill;
mod py;
mod ready;
mod sketch;
mod store;
mod store_stats;
mod tracking;
mod write;

pub use py::register;
pub use tracking::Source;
