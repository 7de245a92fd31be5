//! The Python surface of the core, apart from the asyncio bridge: the `Client` class and the
//! module's functions. Each file adds its own names to the module.

pub mod client;
pub mod functions;

use pyo3::prelude::*;

/// Add the client and the functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    client::register(m)?;
    functions::register(m)
}
