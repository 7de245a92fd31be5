//! The module's functions: compression, cluster hash slots, the sync fan-out, get_many's decoding
//! loop, and (in a build with the `test-hooks` feature only) a panic for the tests.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use redis::Pipeline;

use crate::codec::{lz4, zstd};
use crate::errors::{guard, Error, Result};
use crate::proto::command::pipeline_from;
use crate::proto::reply;
use crate::proto::Reply;
use crate::py::client::Client;
use crate::slots::slot;
use crate::stats::Meter;
use crate::transport::{fanout_sync, Call};

/// Inputs at least this long are (de)compressed with the GIL released; below it the
/// release and re-acquire would cost more than the work.
const DETACH_THRESHOLD: usize = 4 * 1024;

/// Add the functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Set, not added: kept out of `__all__` and so out of the stub's public surface.
    #[cfg(feature = "test-hooks")]
    m.setattr("_panic_for_tests", wrap_pyfunction!(panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(lz4_compress, m)?)?;
    m.add_function(wrap_pyfunction!(lz4_decompress, m)?)?;
    m.add_function(wrap_pyfunction!(zstd_compress, m)?)?;
    m.add_function(wrap_pyfunction!(zstd_decompress, m)?)?;
    m.add_function(wrap_pyfunction!(fanout, m)?)?;
    m.add_function(wrap_pyfunction!(key_slot, m)?)?;
    m.add_function(wrap_pyfunction!(decode_many, m)?)?;
    m.add_function(wrap_pyfunction!(key_slots, m)?)?;
    m.add_function(wrap_pyfunction!(crate::commands::command_facts, m)?)?;
    Ok(())
}

/// Raise `InternalError` from inside Rust, to prove a panic never crashes the interpreter.
/// Only in a build with the `test-hooks` feature (`make build`), never in a wheel.
#[cfg(feature = "test-hooks")]
#[pyfunction(name = "_panic_for_tests")]
fn panic_for_tests() -> PyResult<()> {
    guard(|| panic!("deliberate panic for the tests"))
}

/// Run `f`, without the GIL when `heavy`; panics become `InternalError`.
fn run<T: Send>(py: Python<'_>, heavy: bool, f: impl FnOnce() -> Result<T> + Send) -> PyResult<T> {
    guard(|| {
        let result = if heavy { py.detach(f) } else { f() };
        result.map_err(PyErr::from)
    })
}

/// Decode into a new bytes object made once at its final size: the declared size, or, where
/// a frame declares none (or the decoder finds more than declared), the size a first pass
/// counts without keeping anything. So a frame that expands past the limit costs a scratch
/// buffer to refuse, and a legitimate one is never held twice (a growing buffer, then its copy).
fn decode_into_bytes<'py>(
    py: Python<'py>,
    data: &[u8],
    claimed: Option<usize>,
    exact: impl Fn(&mut [u8]) -> Result<bool> + Sync,
    count: impl FnOnce() -> Result<usize> + Send,
) -> PyResult<Bound<'py, PyBytes>> {
    if let Some(size) = claimed {
        if let Some(bytes) = decode_sized(py, data, size, &exact)? {
            return Ok(bytes);
        }
        // More than declared (concatenated frames): count it as for an undeclared size.
    }
    let size = run(py, true, count)?;
    match decode_sized(py, data, size, &exact)? {
        Some(bytes) => Ok(bytes),
        None => Err(Error::Decode("compressed data decodes to more than counted".into()).into()),
    }
}

/// Decode into a new bytes object of `size` bytes; None if the data holds more.
fn decode_sized<'py>(
    py: Python<'py>,
    data: &[u8],
    size: usize,
    exact: &(impl Fn(&mut [u8]) -> Result<bool> + Sync),
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let heavy = data.len() >= DETACH_THRESHOLD || size >= 4 * DETACH_THRESHOLD;
    let mut complete = true;
    let bytes = PyBytes::new_with(py, size, |buf| {
        complete = run(py, heavy, || exact(buf))?;
        Ok(())
    })?;
    Ok(complete.then_some(bytes))
}

/// Compress `data` into one LZ4 frame (the format of python-lz4's `lz4.frame.compress`).
///
/// `level` is accepted for symmetry with `zstd_compress`; lz4_flex implements LZ4's default
/// fast mode only (python-lz4's level 0), so it is ignored.
#[pyfunction]
#[pyo3(signature = (data, level = 0))]
pub fn lz4_compress<'py>(
    py: Python<'py>,
    data: &[u8],
    level: i32,
) -> PyResult<Bound<'py, PyBytes>> {
    let _ = level;
    let out = run(py, data.len() >= DETACH_THRESHOLD, || lz4::lz4_frame_compress(data))?;
    Ok(PyBytes::new(py, &out))
}

/// Decompress one LZ4 frame; raise `SerializationError` if it is invalid, truncated or would
/// exceed `max_size` bytes.
#[pyfunction]
pub fn lz4_decompress<'py>(
    py: Python<'py>,
    data: &[u8],
    max_size: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let header = &lz4::lz4_header(data)?;
    let claimed = lz4::claimed_size(data, header, max_size)?;
    decode_into_bytes(
        py,
        data,
        claimed,
        |buf| lz4::lz4_decompress_exact(data, header, buf).map(|()| true),
        || lz4::lz4_decompressed_size(data, header, max_size),
    )
}

/// Compress `data` into one zstd frame at `level` (zstd's default is 3).
#[pyfunction]
#[pyo3(signature = (data, level = 3))]
pub fn zstd_compress<'py>(
    py: Python<'py>,
    data: &[u8],
    level: i32,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = run(py, data.len() >= DETACH_THRESHOLD, || zstd::zstd_frame_compress(data, level))?;
    Ok(PyBytes::new(py, &out))
}

/// Decompress zstd frames; raise `SerializationError` if they are invalid, truncated or would
/// exceed `max_size` bytes.
#[pyfunction]
pub fn zstd_decompress<'py>(
    py: Python<'py>,
    data: &[u8],
    max_size: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let claimed = zstd::claimed_size(data, max_size)?;
    decode_into_bytes(
        py,
        data,
        claimed,
        |buf| zstd::zstd_decompress_exact(data, buf),
        || zstd::zstd_decompressed_size(data, max_size),
    )
}

/// A key's bytes: str (UTF-8) or bytes; anything else is a TypeError.
pub(crate) fn key_bytes<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(s) = key.cast::<PyString>() {
        Ok(s.to_str()?.as_bytes())
    } else if let Ok(b) = key.cast::<PyBytes>() {
        Ok(b.as_bytes())
    } else {
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "a key must be str or bytes, not {}",
            key.get_type().name()?
        )))
    }
}

/// The cluster hash slot of a key (str or bytes), honouring `{hash tags}`.
/// get_many's decoding: `{key: value}` for each stored value that is not None, read by `loads`
/// when it starts with one of `heads` (bytes only the serializer's own output starts with),
/// else by `decode(data, key)`. None, having stored nothing, if a value is not bytes or either
/// function raises: the caller's general path then decodes key by key and names the one that
/// failed. (The loop the request path would otherwise run in Python, per key.)
#[pyfunction]
pub fn decode_many<'py>(
    keys: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
    loads: &Bound<'py, PyAny>,
    heads: &[u8],
    decode: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    guard(|| {
        let (Ok(keys), Ok(values)) = (keys.cast::<PyList>(), values.cast::<PyList>()) else {
            return Ok(None);
        };
        if keys.len() != values.len() {
            return Ok(None);
        }
        let found = PyDict::new(keys.py());
        for (key, value) in keys.iter().zip(values.iter()) {
            if value.is_none() {
                continue;
            }
            let Ok(data) = value.cast::<PyBytes>() else { return Ok(None) };
            let fast = data.as_bytes().first().is_some_and(|head| heads.contains(head));
            let decoded = if fast { loads.call1((data,)) } else { decode.call1((data, &key)) };
            match decoded {
                Ok(decoded) => found.set_item(key, decoded)?,
                // An Exception is the general path's to report; anything else (an interrupt)
                // goes on up.
                Err(err) if err.is_instance_of::<PyException>(keys.py()) => return Ok(None),
                Err(err) => return Err(err),
            }
        }
        Ok(Some(found))
    })
}

#[pyfunction]
pub fn key_slot(key: &Bound<'_, PyAny>) -> PyResult<u16> {
    guard(|| Ok(slot(key_bytes(key)?)))
}

/// The hash slots of several keys, in order.
#[pyfunction]
pub fn key_slots<'py>(keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    guard(|| {
        let mut slots = Vec::new();
        for key in keys.try_iter()? {
            slots.push(slot(key_bytes(&key?)?));
        }
        PyList::new(keys.py(), slots)
    })
}

/// Run one pipeline per (client, commands) pair, all at once: every request is written before
/// any reply is read, so the servers work in parallel. Return, in order, each one's replies
/// (a list in which an error reply is a `ResponseError` instance) or, for a pipeline that
/// failed as a whole (connection lost, timeout), the exception instance. Raises nothing for
/// the servers' sake: the caller decides what to retry.
#[pyfunction]
pub fn fanout<'py>(
    py: Python<'py>,
    calls: Vec<(Py<Client>, Bound<'py, PyAny>)>,
) -> PyResult<Bound<'py, PyList>> {
    guard(|| {
        let mut parts = Vec::with_capacity(calls.len());
        for (client, commands) in &calls {
            parts.push((client.get(), pipeline_from(commands)?));
        }
        let out = PyList::empty(py);
        for outcome in fanout_metered(py, parts) {
            match outcome {
                Ok(reply) => out.append(reply::to_py_results(py, reply)?)?,
                Err(err) => out.append(PyErr::from(err).into_value(py))?,
            }
        }
        Ok(out)
    })
}

/// One pipeline per client, all at once (see `fanout`), the GIL released and each part
/// counted in its client's stats; each part's outcome, in order.
pub(crate) fn fanout_metered(
    py: Python<'_>,
    parts: Vec<(&Client, Pipeline)>,
) -> Vec<Result<Reply>> {
    let mut meters = Vec::with_capacity(parts.len());
    let mut calls = Vec::with_capacity(parts.len());
    for (client, pipe) in parts {
        meters.push((Meter::start_pipe(&pipe), &client.stats));
        calls.push(Call { id: client.id, transport: &client.transport, pipe });
    }
    py.detach(|| {
        let outcomes = fanout_sync(&calls);
        for ((meter, stats), outcome) in meters.iter().zip(&outcomes) {
            if let Some(meter) = meter {
                meter.record(stats, outcome);
            }
        }
        outcomes
    })
}
