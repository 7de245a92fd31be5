//! redoxide's Rust core: connections, commands and the asyncio bridge. Module assembly only.

mod bridge;
mod codec;
mod commands;
mod credentials;
mod errors;
mod ffi;
#[cfg(test)]
mod fuzz_tests;
mod idle;
mod near;
mod offers;
mod proto;
mod py;
mod runtime;
mod slots;
mod stats;
mod transport;

use pyo3::prelude::*;

/// The compiled core of redoxide; use `redoxide.RedisCache`, not this module.
#[pymodule(gil_used = false)]
fn _redoxide(m: &Bound<'_, PyModule>) -> PyResult<()> {
    py::register(m)?;
    bridge::register(m)?;
    near::register(m)?;
    credentials::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
