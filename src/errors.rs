//! One error type for the crate and the one place where it becomes a Python exception.
//!
//! The exception classes live in `redoxide.exceptions` (Python), so users and docs see
//! ordinary Python classes; Rust imports them once and raises them from here.

use std::fmt;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use redis::{ErrorKind, RedisError};

/// Everything that can go wrong below the Python layer.
#[derive(Debug, Clone)]
pub enum Error {
    /// The server cannot be reached, or the connection broke.
    Connection(String),
    /// The server did not answer within the configured timeout.
    Timeout(String),
    /// The server answered with an error reply (WRONGTYPE, OOM, NOSCRIPT, ...).
    Response(String),
    /// A bad setting, caught when the client is built.
    Config(String),
    /// Stored bytes that cannot be decoded (corrupt, truncated or oversized compressed data).
    Decode(String),
    /// A bug on our side (a panic, a dropped task); never the user's fault.
    Internal(String),
}

/// The crate-wide result alias.
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Connection(m)
            | Error::Timeout(m)
            | Error::Response(m)
            | Error::Config(m)
            | Error::Decode(m)
            | Error::Internal(m) => f.write_str(m),
        }
    }
}

impl Error {
    /// Classify a redis-rs error. `addr` names the server (never with credentials).
    pub fn from_redis(err: &RedisError, addr: &str) -> Self {
        if err.is_timeout() {
            return Error::Timeout(format!("Redis at {addr} did not answer in time: {err}"));
        }
        match err.kind() {
            ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => {
                Error::Connection(format!("Connection to Redis at {addr} failed: {err}"))
            }
            ErrorKind::AuthenticationFailed => Error::Connection(format!(
                "Authentication to Redis at {addr} failed: check the username and password"
            )),
            ErrorKind::InvalidClientConfig => {
                Error::Config(format!("Invalid Redis settings: {err}"))
            }
            ErrorKind::Server(_) | ErrorKind::Extension => {
                Error::Response(format!("Redis at {addr} replied with an error: {err}"))
            }
            _ => Error::Response(format!("Redis at {addr}: {err}")),
        }
    }

    fn class_name(&self) -> &'static str {
        match self {
            Error::Connection(_) => "ConnectionInterrupted",
            Error::Timeout(_) => "CacheTimeout",
            Error::Response(_) => "ResponseError",
            Error::Config(_) => "ConfigurationError",
            Error::Decode(_) => "SerializationError",
            Error::Internal(_) => "InternalError",
        }
    }
}

static EXCEPTIONS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        Python::attach(|py| {
            let module = EXCEPTIONS.get_or_try_init(py, || {
                py.import("redoxide.exceptions").map(|m| m.into_any().unbind())
            });
            let class = module
                .and_then(|m| m.bind(py).getattr(err.class_name()))
                .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
            match class {
                Ok(class) => PyErr::from_type(class, err.to_string()),
                // Only reachable if the Python package is broken; still raise, never crash.
                Err(_) => PyRuntimeError::new_err(err.to_string()),
            }
        })
    }
}

/// Run `f`, turning a Rust panic into `InternalError` instead of PyO3's `PanicException`
/// (a `BaseException` that `except Exception` would not catch).
pub fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(Error::Internal(format!(
            "internal error in redoxide (please report it): {}",
            panic_message(&payload)
        ))
        .into()),
    }
}

/// The text of a panic payload, when it has one.
pub fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_connection_errors() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = Error::from_redis(&RedisError::from(io), "127.0.0.1:1");
        assert!(matches!(err, Error::Connection(_)), "{err:?}");
        assert!(err.to_string().contains("127.0.0.1:1"));
    }

    #[test]
    fn timeouts_are_timeouts() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow");
        let err = Error::from_redis(&RedisError::from(io), "h:1");
        assert!(matches!(err, Error::Timeout(_)), "{err:?}");
    }

    #[test]
    fn panic_messages_are_extracted() {
        let payload = std::panic::catch_unwind(|| panic!("boom {}", 1)).unwrap_err();
        assert_eq!(panic_message(&payload), "boom 1");
    }
}
