//! redoxide's Rust core: connections, commands and the asyncio bridge. Module assembly only.

mod blocking;
mod bridge;
mod client;
mod codec;
mod errors;
mod fanout;
#[cfg(test)]
mod fuzz_tests;
mod mux;
mod reply;
mod resp;
mod runtime;
mod slots;

use pyo3::prelude::*;

/// The compiled core of redoxide; use `redoxide.RedisCache`, not this module.
#[pymodule(gil_used = false)]
fn _redoxide(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<bridge::Bridge>()?;
    m.add_class::<bridge::Pending>()?;
    m.add_function(wrap_pyfunction!(client::panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(codec::lz4_compress, m)?)?;
    m.add_function(wrap_pyfunction!(codec::lz4_decompress, m)?)?;
    m.add_function(wrap_pyfunction!(codec::zstd_compress, m)?)?;
    m.add_function(wrap_pyfunction!(codec::zstd_decompress, m)?)?;
    m.add_function(wrap_pyfunction!(fanout::fanout, m)?)?;
    m.add_function(wrap_pyfunction!(slots::key_slot, m)?)?;
    m.add_function(wrap_pyfunction!(slots::key_slots, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
