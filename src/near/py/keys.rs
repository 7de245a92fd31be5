//! Keys as the near cache's Python surface takes them.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::near::fill::{self, FillKey};
use crate::near::store::Token;
use crate::near::tracking::Near;

/// A key's bytes, or None for a key the near cache cannot hold (not str or bytes).
pub(super) fn key_bytes<'a>(key: &'a Bound<'_, PyAny>) -> Option<&'a [u8]> {
    // (Not `functions::key_bytes`: an int among a command's arguments is no key, and needs
    // no error message written.)
    if let Ok(s) = key.cast::<PyString>() {
        s.to_str().ok().map(str::as_bytes)
    } else {
        key.cast::<PyBytes>().ok().map(|b| b.as_bytes())
    }
}

/// The keys of a fill paired with their tokens (int, or None: not kept here). A key that is
/// not str or bytes, or a str that cannot be encoded, raises as a command argument would, and
/// the fill never starts: every token given is cancelled first.
pub(super) fn fill_keys_of(
    near: &Near,
    keys: &Bound<'_, PyAny>,
    tokens: &Bound<'_, PyAny>,
) -> PyResult<Vec<FillKey>> {
    let keys: Vec<Bound<'_, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
    let tokens: Vec<Option<u64>> =
        tokens.try_iter()?.map(|t| t?.extract::<Option<u64>>()).collect::<PyResult<_>>()?;
    let mut out = Vec::with_capacity(keys.len());
    let mut failed = (keys.len() != tokens.len())
        .then(|| PyValueError::new_err("a fill needs a token (or None) per key"));
    for (key, token) in keys.iter().zip(&tokens) {
        match crate::py::functions::key_bytes(key) {
            Ok(bytes) => out.push((Box::from(bytes), token.map(Token))),
            Err(err) => _ = failed.get_or_insert(err),
        }
    }
    if let Some(err) = failed {
        fill::cancel_all(near, &out);
        return Err(err);
    }
    Ok(out)
}

/// A set_many's keys and values as bytes, for a write through the tracking connection: None
/// when one is not str or bytes (a key) or bytes (a value), or they are not as many, or none
/// (the write goes the usual way, which says what is wrong).
pub(super) fn set_items<'a>(
    keys: &'a [Bound<'_, PyAny>],
    values: &'a [Bound<'_, PyAny>],
) -> Option<Vec<(&'a [u8], &'a [u8])>> {
    if keys.is_empty() || keys.len() != values.len() {
        return None;
    }
    keys.iter()
        .zip(values)
        .map(|(key, value)| Some((key_bytes(key)?, value.cast::<PyBytes>().ok()?.as_bytes())))
        .collect()
}
