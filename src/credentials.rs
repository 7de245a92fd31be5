//! Credentials that change while connections live (OPTIONS `CREDENTIAL_PROVIDER`: IAM or Entra
//! tokens, rotated passwords).
//!
//! One `Cell` per provider per process holds the current username and password and a
//! generation that moves on each change. Python owns the provider: a thread of its own calls
//! it (never the I/O thread, never a caller's request) and stores what it returns here. Every
//! handshake reads the cell, and a connection that authenticated under an older generation
//! sends AUTH with the new credentials in front of its next command, in the same write: no
//! reconnect, no extra round trip. A handshake the server refuses asks the provider's thread
//! for fresh credentials and waits for them once (bounded by the connect timeout).
//!
//! The password is never formatted: `Secret` has no `Debug`, and messages name the option.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::{Error, Result};

/// One set of credentials.
pub struct Secret {
    pub username: Option<String>,
    pub password: String,
}

impl Secret {
    /// `AUTH [username] password`, packed.
    pub fn auth(&self) -> Vec<u8> {
        let mut cmd = redis::cmd("AUTH");
        if let Some(user) = &self.username {
            cmd.arg(user);
        }
        cmd.arg(&self.password);
        cmd.get_packed_command()
    }
}

#[derive(Default)]
struct Requests {
    /// Refreshes asked for and not yet taken by the provider's thread.
    pending: u64,
    /// The provider's thread stopped waiting for good (its owner is gone).
    closed: bool,
    /// Why the provider gave nothing usable last time (names the option, never a value).
    failure: Option<String>,
}

/// The current credentials of one provider, shared by every connection that uses it.
#[derive(Default)]
pub struct Cell {
    /// 0 until the provider first answered; moves on with every change.
    generation: AtomicU64,
    /// Moves on with every answer of the provider, changed or not, failed or not: a connection
    /// waiting for fresh credentials stops waiting when it moves.
    answers: AtomicU64,
    current: RwLock<Option<Arc<Secret>>>,
    requests: Mutex<Requests>,
    /// Wakes the provider's thread (a refresh is wanted) and connections waiting for new
    /// credentials (they changed).
    changed: Condvar,
    changed_async: tokio::sync::Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Cell {
    /// The generation of the current credentials (0: none yet).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current credentials and their generation.
    pub fn current(&self) -> Result<(u64, Arc<Secret>)> {
        let current = self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        match current.as_ref() {
            // Read under the lock `set` writes under: the pair is consistent.
            Some(secret) => Ok((self.generation(), Arc::clone(secret))),
            None => {
                Err(Error::Credentials(lock(&self.requests).failure.clone().unwrap_or_else(|| {
                    "OPTIONS['CREDENTIAL_PROVIDER'] has not given credentials yet".into()
                })))
            }
        }
    }

    /// Before a connection's first credentials: if there are none yet, ask the provider's
    /// thread and wait up to `timeout` for its answer (the first call of a process meets this);
    /// the reason if none came.
    pub fn first(&self, timeout: Duration) -> Result<()> {
        if self.generation() == 0 {
            self.refresh(0, timeout);
        }
        self.current().map(drop)
    }

    /// `first` for async code.
    pub async fn first_async(&self, timeout: Duration) -> Result<()> {
        if self.generation() == 0 {
            self.refresh_async(0, timeout).await;
        }
        self.current().map(drop)
    }

    /// Store new credentials; false (and nothing moves) when they are the ones in use.
    pub fn set(&self, username: Option<String>, password: String) -> bool {
        {
            let mut current =
                self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(old) = current.as_ref() {
                if old.username == username && old.password == password {
                    drop(current);
                    self.answered();
                    return false;
                }
            }
            *current = Some(Arc::new(Secret { username, password }));
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        lock(&self.requests).failure = None;
        self.answered();
        true
    }

    /// Wake everyone waiting for the provider's answer.
    fn answered(&self) {
        // Counted under the lock the waiters check under: none can miss the wake-up.
        let guard = lock(&self.requests);
        self.answers.fetch_add(1, Ordering::AcqRel);
        drop(guard);
        self.changed.notify_all();
        self.changed_async.notify_waiters();
    }

    /// Ask the provider's thread for fresh credentials and wait up to `timeout` for its
    /// answer; whether credentials newer than generation `seen` came.
    pub fn refresh(&self, seen: u64, timeout: Duration) -> bool {
        let mut requests = lock(&self.requests);
        let before = self.answers.load(Ordering::Acquire);
        requests.pending += 1;
        self.changed.notify_all();
        let waiting = |r: &mut Requests| {
            !r.closed && self.generation() == seen && self.answers.load(Ordering::Acquire) == before
        };
        drop(
            self.changed
                .wait_timeout_while(requests, timeout, waiting)
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        self.generation() != seen
    }

    /// `refresh` for async code.
    pub async fn refresh_async(&self, seen: u64, timeout: Duration) -> bool {
        let before = {
            let mut requests = lock(&self.requests);
            requests.pending += 1;
            self.answers.load(Ordering::Acquire)
        };
        self.changed.notify_all();
        let wait = async {
            loop {
                let notified = self.changed_async.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.generation() != seen
                    || self.answers.load(Ordering::Acquire) != before
                    || lock(&self.requests).closed
                {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
        self.generation() != seen
    }

    /// Without waiting: ask the provider's thread for fresh credentials.
    pub fn request_refresh(&self) {
        lock(&self.requests).pending += 1;
        self.changed.notify_all();
    }

    /// For the provider's thread: wait up to `timeout` for a refresh request; whether one came
    /// (all requests so far are taken).
    pub(crate) fn take_request(&self, timeout: Duration) -> bool {
        let (mut requests, _) = self
            .changed
            .wait_timeout_while(lock(&self.requests), timeout, |r| r.pending == 0 && !r.closed)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut requests.pending) > 0
    }
}

/// Whether an error is a server refusing credentials (see `Handshake::check`).
pub fn refused(err: &Error) -> bool {
    matches!(err, Error::Connection(m) if m.starts_with("Authentication to Redis at "))
}

/// The credentials of one `CREDENTIAL_PROVIDER`, as Python sees them: set by the provider's
/// thread, read by every connection of the clients built with it. Never shows its values.
#[pyclass(module = "redoxide._redoxide", name = "Credentials", frozen)]
pub struct PyCredentials(pub Arc<Cell>);

#[pymethods]
impl PyCredentials {
    #[new]
    fn new() -> Self {
        PyCredentials(Arc::default())
    }

    /// Store credentials; whether they differ from the current ones (then every live
    /// connection re-authenticates before its next command).
    #[pyo3(signature = (username, password))]
    fn set(&self, username: Option<String>, password: String) -> bool {
        self.0.set(username, password)
    }

    /// How many times the credentials changed (0: never set).
    #[getter]
    fn generation(&self) -> u64 {
        self.0.generation()
    }

    /// Wait (the GIL released) up to `timeout` seconds for a connection to ask for fresh
    /// credentials; whether one did.
    fn wait_for_request(&self, py: Python<'_>, timeout: f64) -> bool {
        let timeout = Duration::from_secs_f64(timeout.clamp(0.0, 86_400.0));
        let cell = Arc::clone(&self.0);
        py.detach(move || cell.take_request(timeout))
    }

    /// Record why the provider gave nothing usable (named in the errors of connections that
    /// have no credentials yet; never a value).
    fn fail(&self, message: String) {
        lock(&self.0.requests).failure = Some(message);
        // Connections waiting for the answer give up now, with the reason.
        self.0.answered();
    }

    /// Stop waiting: the provider's thread and connections waiting for new credentials return.
    fn close(&self) {
        lock(&self.0.requests).closed = true;
        self.0.changed.notify_all();
        self.0.changed_async.notify_waiters();
    }

    /// Open again after `close` (a forked child restarts the provider's thread).
    fn reopen(&self) {
        lock(&self.0.requests).closed = false;
    }

    fn __repr__(&self) -> String {
        format!("<redoxide Credentials generation={}>", self.0.generation())
    }
}

/// Add `Credentials` to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCredentials>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_move_only_on_change() {
        let cell = Cell::default();
        assert_eq!(cell.generation(), 0);
        assert!(cell.current().is_err());
        assert!(cell.set(Some("u".into()), "a".into()));
        assert!(!cell.set(Some("u".into()), "a".into()));
        assert_eq!(cell.generation(), 1);
        assert!(cell.set(None, "a".into()));
        let (generation, secret) = cell.current().unwrap();
        assert_eq!((generation, secret.username.as_deref()), (2, None));
        assert_eq!(secret.auth(), b"*2\r\n$4\r\nAUTH\r\n$1\r\na\r\n");
    }

    #[test]
    fn a_waiter_sees_new_credentials_and_the_thread_sees_requests() {
        let cell = Arc::new(Cell::default());
        cell.set(None, "old".into());
        let answer = |password: &'static str| {
            let cell = Arc::clone(&cell);
            std::thread::spawn(move || {
                assert!(cell.take_request(Duration::from_secs(30)));
                cell.set(None, password.into());
            })
        };
        let thread = answer("new");
        assert!(cell.refresh(1, Duration::from_secs(30)));
        thread.join().unwrap();
        assert!(!cell.take_request(Duration::ZERO));
        // The same credentials again: the wait ends, with nothing newer.
        let thread = answer("new");
        assert!(!cell.refresh(2, Duration::from_secs(30)));
        thread.join().unwrap();
    }
}
