//! Server replies and their conversion into Python objects.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use pyo3::IntoPyObjectExt;
use redis::Value;

use crate::errors::Error;

/// A raw server reply: one value, or one per command of a pipeline.
pub type Reply = Value;

fn reply_error(err: &redis::ServerError) -> Error {
    Error::from_reply(err, "Redis replied with an error")
}

/// Convert any reply: nil -> None, bulk -> bytes, integer -> int, status -> str ("OK" -> True),
/// arrays -> list. An error reply raises `ResponseError`.
pub fn to_py(py: Python<'_>, reply: Reply) -> PyResult<Py<PyAny>> {
    Ok(match reply {
        Value::Nil => py.None(),
        Value::BulkString(bytes) => PyBytes::new(py, &bytes).into_any().unbind(),
        Value::Int(i) => i.into_py_any(py)?,
        Value::Okay => true.into_py_any(py)?,
        Value::SimpleString(s) => s.into_py_any(py)?,
        Value::Boolean(b) => b.into_py_any(py)?,
        Value::Double(d) => d.into_py_any(py)?,
        Value::Array(items) | Value::Set(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Map(pairs) => {
            let dict = PyDict::new(py);
            for (k, v) in pairs {
                dict.set_item(to_py(py, k)?, to_py(py, v)?)?;
            }
            dict.into_any().unbind()
        }
        Value::Attribute { data, .. } => to_py(py, *data)?,
        Value::VerbatimString { text, .. } => text.into_py_any(py)?,
        Value::BigNumber(n) => py
            .import("builtins")?
            .getattr("int")?
            .call1((String::from_utf8_lossy(&n).into_owned(),))?
            .unbind(),
        Value::Push { data, .. } => to_py(py, Value::Array(data))?,
        Value::ServerError(err) => return Err(reply_error(&err).into()),
        other => return Err(Error::Internal(format!("unexpected reply {other:?}")).into()),
    })
}

/// Convert a pipeline's replies into a list in which an error reply is a `ResponseError`
/// instance (not raised), so a caller can retry just the commands that failed. Errors nested
/// in a reply stay in place too, as redis-py leaves them: EXEC's reply holds one per queued
/// command that failed, beside the others' results.
pub fn to_py_results(py: Python<'_>, reply: Reply) -> PyResult<Py<PyAny>> {
    match reply {
        Value::Array(items) => in_place_list(py, items),
        other => to_py(py, other),
    }
}

fn in_place_list(py: Python<'_>, items: Vec<Value>) -> PyResult<Py<PyAny>> {
    let list = PyList::empty(py);
    for item in items {
        list.append(in_place(py, item)?)?;
    }
    Ok(list.into_any().unbind())
}

fn in_place(py: Python<'_>, reply: Reply) -> PyResult<Py<PyAny>> {
    match reply {
        Value::ServerError(err) => Ok(PyErr::from(reply_error(&err)).into_value(py).into_any()),
        Value::Array(items) | Value::Set(items) => in_place_list(py, items),
        other => to_py(py, other),
    }
}

/// Convert the reply of a command that answers with one value, treating `OK` as True.
pub fn to_py_bool(py: Python<'_>, reply: Reply) -> PyResult<Py<PyAny>> {
    match reply {
        Value::Okay => true.into_py_any(py),
        Value::Nil => false.into_py_any(py),
        Value::Int(i) => (i != 0).into_py_any(py),
        other => to_py(py, other),
    }
}
