//! One error type for the crate and the one place where it becomes a Python exception.
//!
//! The exception classes live in `redoxide.exceptions` (Python), so users and docs see
//! ordinary Python classes; Rust imports them once and raises them from here. A server's
//! error reply keeps its code (the reply's first word) all the way: Python's
//! `response_error` factory picks the class from it, and nothing here reads message text.

use std::fmt;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use redis::{ErrorKind, RedisError, ServerError};

/// Everything that can go wrong below the Python layer.
#[derive(Debug, Clone)]
pub enum Error {
    /// The server cannot be reached, or the connection broke.
    Connection(String),
    /// The server did not answer within the configured timeout.
    Timeout(String),
    /// The server answered with an error reply (WRONGTYPE, OOM, NOSCRIPT, ...): `code` is the
    /// reply's first word ("ERR" for errors of our own making), `message` the text for users
    /// (the server's whole reply, with context), `redirect` where MOVED and ASK point.
    Response { code: String, message: String, redirect: Option<Redirect> },
    /// A bad setting, caught when the client is built.
    Config(String),
    /// Stored bytes that cannot be decoded (corrupt, truncated or oversized compressed data).
    Decode(String),
    /// A bug on our side (a panic, a dropped task); never the user's fault.
    Internal(String),
    /// `CREDENTIAL_PROVIDER` has given no credentials to connect with (it raised, returned
    /// something unusable, or has not answered yet).
    Credentials(String),
}

/// Where a cluster's MOVED or ASK reply sends a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub slot: u16,
    /// The node's endpoint as the server wrote it: `host:port`, `:port`, `[::1]:port`...
    pub address: String,
}

impl Redirect {
    /// The target of a MOVED or ASK reply, from the text after its code ("3999 host:port").
    fn parse(code: &str, details: &str) -> Option<Self> {
        if code != "MOVED" && code != "ASK" {
            return None;
        }
        let mut words = details.split_ascii_whitespace();
        let slot = words.next()?.parse().ok()?;
        let address = words.next()?.to_owned();
        Some(Redirect { slot, address })
    }
}

/// The crate-wide result alias.
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Connection(m)
            | Error::Timeout(m)
            | Error::Response { message: m, .. }
            | Error::Config(m)
            | Error::Decode(m)
            | Error::Internal(m)
            | Error::Credentials(m) => f.write_str(m),
        }
    }
}

impl Error {
    /// A server's error reply, as `{context}: {the reply's text}`.
    pub fn from_reply(err: &ServerError, context: &str) -> Self {
        let code = err.code();
        let details = err.details().unwrap_or("");
        Self::response(code, details, context)
    }

    fn response(code: &str, details: &str, context: &str) -> Self {
        let separator = if details.is_empty() { "" } else { " " };
        Error::Response {
            code: code.to_owned(),
            message: format!("{context}: {code}{separator}{details}"),
            redirect: Redirect::parse(code, details),
        }
    }

    /// An error reply of our own making (the code "ERR").
    pub fn other_response(message: String) -> Self {
        Error::Response { code: "ERR".to_owned(), message, redirect: None }
    }

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
                let context = format!("Redis at {addr} replied with an error");
                match (err.code(), err.detail()) {
                    (Some(code), Some(details)) => Self::response(code, details, &context),
                    (code, _) => Error::Response {
                        code: code.unwrap_or("ERR").to_owned(),
                        message: format!("{context}: {err}"),
                        redirect: None,
                    },
                }
            }
            _ => Self::other_response(format!("Redis at {addr}: {err}")),
        }
    }

    fn class_name(&self) -> &'static str {
        match self {
            Error::Connection(_) => "ConnectionInterrupted",
            Error::Timeout(_) => "CacheTimeout",
            Error::Response { .. } => "ResponseError",
            Error::Config(_) => "ConfigurationError",
            Error::Decode(_) => "SerializationError",
            Error::Internal(_) => "InternalError",
            Error::Credentials(_) => "CredentialProviderError",
        }
    }
}

static EXCEPTIONS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static RESPONSE_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn exceptions(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    EXCEPTIONS
        .get_or_try_init(py, || py.import("redoxide.exceptions").map(|m| m.into_any().unbind()))
        .map(|m| m.bind(py))
}

/// The exception for an error reply, made by `redoxide.exceptions.response_error`.
fn response_error(
    py: Python<'_>,
    code: &str,
    message: &str,
    redirect: Option<&Redirect>,
) -> PyResult<PyErr> {
    let factory = RESPONSE_ERROR
        .get_or_try_init(py, || exceptions(py)?.getattr("response_error").map(Bound::unbind))?;
    let (slot, address) = redirect.map(|r| (r.slot, r.address.as_str())).unzip();
    let exc = factory.bind(py).call1((code, message, slot, address))?;
    Ok(PyErr::from_value(exc))
}

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        Python::attach(|py| {
            let made = match &err {
                Error::Response { code, message, redirect } => {
                    response_error(py, code, message, redirect.as_ref())
                }
                _ => exceptions(py)
                    .and_then(|m| m.getattr(err.class_name()))
                    .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from))
                    .map(|class| PyErr::from_type(class, err.to_string())),
            };
            // Only fails if the Python package is broken; still raise, never crash.
            made.unwrap_or_else(|_| PyRuntimeError::new_err(err.to_string()))
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

    fn reply(text: &[u8]) -> ServerError {
        match redis::parse_redis_value(text) {
            Ok(redis::Value::ServerError(err)) => err,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn error_replies_keep_their_code_and_whole_text() {
        let err = Error::from_reply(
            &reply(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            "Redis replied with an error",
        );
        let Error::Response { code, message, redirect } = err else { panic!("{err:?}") };
        assert_eq!(code, "WRONGTYPE");
        assert_eq!(
            message,
            "Redis replied with an error: \
             WRONGTYPE Operation against a key holding the wrong kind of value"
        );
        assert_eq!(redirect, None);
        let err = Error::from_reply(&reply(b"-ERR unknown command 'NOPE'\r\n"), "x");
        assert!(matches!(&err, Error::Response { code, .. } if code == "ERR"), "{err:?}");
        assert_eq!(err.to_string(), "x: ERR unknown command 'NOPE'");
    }

    #[test]
    fn redirects_name_their_slot_and_endpoint_as_written() {
        for (text, slot, address) in [
            (&b"-MOVED 3999 127.0.0.1:6381\r\n"[..], 3999, "127.0.0.1:6381"),
            (b"-ASK 12 :6381\r\n", 12, ":6381"),
            (b"-MOVED 7 ?:6381\r\n", 7, "?:6381"),
            (b"-MOVED 16383 [::1]:6381\r\n", 16383, "[::1]:6381"),
            (b"-ASK 0 ::1:6381\r\n", 0, "::1:6381"),
        ] {
            let err = Error::from_reply(&reply(text), "x");
            let Error::Response { redirect, .. } = &err else { panic!("{err:?}") };
            let want = Redirect { slot, address: address.to_owned() };
            assert_eq!(redirect.as_ref(), Some(&want), "{err:?}");
        }
        // A redirect without a readable target is still the code's error, without a target.
        let err = Error::from_reply(&reply(b"-MOVED soon\r\n"), "x");
        assert!(matches!(&err, Error::Response { code, redirect: None, .. } if code == "MOVED"));
        // Other codes never carry one, whatever their text.
        assert_eq!(Redirect::parse("ERR", "3999 h:1"), None);
    }

    #[test]
    fn panic_messages_are_extracted() {
        let payload = std::panic::catch_unwind(|| panic!("boom {}", 1)).unwrap_err();
        assert_eq!(panic_message(&payload), "boom 1");
    }
}
