//! The `Client` pyclass: one per cache configuration per process, shared by every backend
//! instance. Sync calls run on a connection owned by the calling thread, with the GIL released;
//! async calls go through the process' shared connection and complete through a `Bridge`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use redis::{IntoConnectionInfo, Pipeline, Value};

use crate::bridge::{Bridge, Pending, Slot};
use crate::errors::{guard, Error};
use crate::proto::command::{command_from, pipeline_from, push_arg, set_cmd};
use crate::proto::reply::{self, Reply};
use crate::proto::Request;
use crate::runtime;
use crate::stats::{Meter, Stats};
use crate::transport::{exec_sync, Timeouts, TlsOptions, Transport};

static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);

/// How a Python reply is made from the server's.
pub(crate) type Convert = fn(Python<'_>, Reply) -> PyResult<Py<PyAny>>;

/// Add the class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add("STATS_ENABLED", crate::stats::ENABLED)?;
    m.add_function(wrap_pyfunction!(_flush_writes, m)?)
}

/// Write what this thread's event loop deferred (scheduled by `schedule_flush`).
#[pyfunction]
fn _flush_writes() {
    crate::transport::flush_deferred();
}

/// Have the running event loop write what its tasks send, once the tasks ready now have run
/// (`loop.call_soon`): their commands then reach the server in one write. Without a loop to
/// ask, write now.
fn schedule_flush(py: Python<'_>) {
    static GET_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static FLUSH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let scheduled = GET_LOOP
        .get_or_try_init(py, || {
            py.import("asyncio").and_then(|m| m.getattr("get_running_loop")).map(Bound::unbind)
        })
        .and_then(|get_loop| {
            let flush = FLUSH.get_or_try_init(py, || {
                py.import("redoxide._redoxide")
                    .and_then(|m| m.getattr("_flush_writes"))
                    .map(Bound::unbind)
            })?;
            get_loop.bind(py).call0()?.call_method1(intern!(py, "call_soon"), (flush,))
        });
    if scheduled.is_err() {
        crate::transport::flush_deferred();
    }
}

/// A connection to one Redis/Valkey server for one configuration.
#[pyclass(module = "redoxide._redoxide", frozen)]
pub struct Client {
    /// Names this client's connection in each thread's registry.
    pub(crate) id: u64,
    /// host:port or socket path, for messages: never credentials.
    addr: Arc<str>,
    pub(crate) transport: Transport,
    /// Sync calls share one connection per process instead of one connection per thread.
    shared_sync: bool,
    pub(crate) stats: Arc<Stats>,
    /// How a near cache's tracking connection reaches the same server.
    tracking: crate::near::Source,
}

impl Client {
    /// Where a near cache's tracking connection for this server connects, and how.
    pub(crate) fn tracking_source(&self) -> crate::near::Source {
        self.tracking.clone()
    }

    /// host:port or socket path (the tracking source's too): what a near cache checks a
    /// fill's server against.
    pub(crate) fn addr(&self) -> &Arc<str> {
        &self.addr
    }
}

/// The longest timeout taken as given (a year); `float(sys.maxsize)` means "never" too.
const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;

fn secs(name: &str, value: f64) -> PyResult<Duration> {
    if value.is_finite() && value > 0.0 {
        // Longer is a year: deadlines (now + timeout) must not overflow.
        Ok(Duration::from_secs_f64(value.min(MAX_TIMEOUT_SECS)))
    } else {
        Err(PyValueError::new_err(format!(
            "{name} must be a positive number of seconds, got {value}"
        )))
    }
}

impl Client {
    /// One blocking round trip with the GIL released, counted in the node's stats; the raw
    /// reply.
    pub(crate) fn call_sync(&self, py: Python<'_>, req: &Request) -> Result<Reply, Error> {
        py.detach(|| {
            let meter = Meter::start(req);
            let outcome = if self.shared_sync {
                self.transport.call_shared(req)
            } else {
                exec_sync(self.id, &self.transport, req)
            };
            if let Some(meter) = meter {
                meter.record(&self.stats, &outcome);
            }
            outcome
        })
    }

    pub(crate) fn run_sync(
        &self,
        py: Python<'_>,
        req: Request,
        convert: Convert,
    ) -> PyResult<Py<PyAny>> {
        let reply = self.call_sync(py, &req)?;
        convert(py, reply)
    }

    /// Send a request from an event loop; the awaitable that converts its reply.
    pub(crate) fn run_async(
        &self,
        py: Python<'_>,
        bridge: Py<Bridge>,
        req: Request,
        convert: Convert,
    ) -> PyResult<Pending> {
        let slot = Slot::metered(&self.stats, Meter::start(&req));
        let queue = Arc::clone(&bridge.get().queue);
        let (poller, schedule) = self.transport.submit(req, Arc::clone(&slot), queue)?;
        if schedule {
            schedule_flush(py);
        }
        Ok(Pending::new(slot, bridge, poller, convert))
    }

    /// Run several commands in one round trip; `convert` makes the Python reply.
    fn run_pipeline(
        &self,
        py: Python<'_>,
        commands: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
        convert: Convert,
    ) -> PyResult<Py<PyAny>> {
        let pipe = pipeline_from(commands)?;
        if pipe.is_empty() {
            // Nothing to send: the answer is an empty list, now (awaitable when asked for).
            let Some(bridge) = bridge else {
                return Ok(PyList::empty(py).into_any().unbind());
            };
            let slot = Slot::new();
            slot.complete(Ok(Value::Array(Vec::new())), &bridge.get().queue);
            return Ok(Py::new(py, Pending::new(slot, bridge, None, convert))?.into_any());
        }
        self.run(py, bridge, Request::Pipe(pipe), convert)
    }

    /// set_many's request: MSET; when they expire, one MSETEX where the server offers it,
    /// else one SET PX each.
    pub(crate) fn set_many_request(
        &self,
        keys: &[Bound<'_, PyAny>],
        values: &[Bound<'_, PyAny>],
        ttl_ms: Option<u64>,
    ) -> PyResult<Request> {
        let req = match ttl_ms {
            None => {
                let mut cmd = redis::cmd("MSET");
                for (k, v) in keys.iter().zip(values) {
                    push_arg(&mut cmd, k)?;
                    push_arg(&mut cmd, v)?;
                }
                Request::Cmd(cmd)
            }
            Some(ms) if keys.len() > 1 && self.transport.offers().has(crate::offers::MSETEX) => {
                let mut cmd = redis::cmd("MSETEX");
                cmd.arg(keys.len());
                for (k, v) in keys.iter().zip(values) {
                    push_arg(&mut cmd, k)?;
                    push_arg(&mut cmd, v)?;
                }
                cmd.arg("PX").arg(ms.max(1));
                Request::Cmd(cmd)
            }
            Some(ms) => {
                let mut pipe = Pipeline::with_capacity(keys.len());
                for (k, v) in keys.iter().zip(values) {
                    let mut cmd = redis::cmd("SET");
                    push_arg(&mut cmd, k)?;
                    push_arg(&mut cmd, v)?;
                    cmd.arg("PX").arg(ms.max(1));
                    pipe.add_command(cmd);
                }
                Request::Pipe(pipe)
            }
        };
        Ok(req)
    }

    pub(crate) fn run(
        &self,
        py: Python<'_>,
        bridge: Option<Py<Bridge>>,
        req: Request,
        convert: Convert,
    ) -> PyResult<Py<PyAny>> {
        match bridge {
            None => self.run_sync(py, req, convert),
            Some(bridge) => Ok(Py::new(py, self.run_async(py, bridge, req, convert)?)?.into_any()),
        }
    }
}

#[pymethods]
impl Client {
    /// Describe a server; nothing connects until the first command.
    #[new]
    /// `readonly` sends READONLY after connecting: reads from a cluster replica.
    /// The `tls_*` arguments apply to `rediss://` URLs: PEM bytes of the CA certificates and
    /// of a client certificate and key, whether to verify the server's certificate at all,
    /// and whether it must name the host. `shared_sync` makes every thread's sync calls
    /// share one connection (plain servers) instead of one connection per thread.
    #[pyo3(signature = (
        url, *, connect_timeout, response_timeout, username=None, password=None, db=None,
        readonly=false, tls_ca_certs=None, tls_certfile=None, tls_keyfile=None, tls_verify=true,
        tls_check_hostname=true, shared_sync=false, credentials=None,
    ))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn new(
        url: &str,
        connect_timeout: f64,
        response_timeout: f64,
        username: Option<&str>,
        password: Option<&str>,
        db: Option<i64>,
        readonly: bool,
        tls_ca_certs: Option<Vec<u8>>,
        tls_certfile: Option<Vec<u8>>,
        tls_keyfile: Option<Vec<u8>>,
        tls_verify: bool,
        tls_check_hostname: bool,
        shared_sync: bool,
        credentials: Option<Py<crate::credentials::PyCredentials>>,
    ) -> PyResult<Self> {
        // Credentials that change (CREDENTIAL_PROVIDER) replace the password and username.
        let creds = credentials.map(|c| Arc::clone(&c.get().0));
        guard(|| {
            runtime::watch_forks();
            // Never the URL itself in a message: it may hold a password.
            let info = url.into_connection_info().map_err(|e| {
                Error::Config(format!("cannot parse the LOCATION URL: {}", e.category()))
            })?;
            let mut redis_settings = info.redis_settings().clone();
            if let Some(u) = username {
                redis_settings = redis_settings.set_username(u);
            }
            if let Some(p) = password {
                redis_settings = redis_settings.set_password(p);
            }
            if let Some(db) = db {
                redis_settings = redis_settings.set_db(db);
            }
            let addr: Arc<str> = info.addr().to_string().into();
            let info = info.set_redis_settings(redis_settings);
            let tls = TlsOptions {
                ca_certs: tls_ca_certs,
                certfile: tls_certfile,
                keyfile: tls_keyfile,
                verify: tls_verify,
                check_hostname: tls_check_hostname,
            };
            let timeouts = Timeouts {
                connect: secs("SOCKET_CONNECT_TIMEOUT", connect_timeout)?,
                response: secs("SOCKET_TIMEOUT", response_timeout)?,
            };
            let stats = Arc::new(Stats::default());
            let transport = Transport::open(info, tls, readonly, timeouts, &addr, &stats, creds)?;
            let tracking = crate::near::Source {
                endpoint: Arc::clone(transport.endpoint()),
                addr: Arc::clone(&addr),
                check_db: true,
            };
            Ok(Client {
                id: NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
                addr,
                transport,
                shared_sync,
                stats,
                tracking,
            })
        })
    }

    fn __repr__(&self) -> String {
        format!("<redoxide Client {}>", self.addr)
    }

    /// The server's address (host:port or socket path), without credentials.
    #[getter]
    fn address(&self) -> String {
        self.addr.to_string()
    }

    /// This client's counters as a plain dict (see the stubs for its shape).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.stats.to_py(py)
    }

    /// What the server offers, as its connections learnt it (HELLO and a probe, on each new
    /// connection): None until one told, else `{"server", "version", "modules", "offers",
    /// "refused", "scripts_refused"}`, "offers" the names of what it has of MSETEX, SET IFEQ,
    /// DELIFEQ, DELEX, CLUSTERSCAN and Lua, "refused" those it then refused.
    #[getter]
    fn offers<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let offers = self.transport.offers();
        let Some(server) = offers.server().filter(|_| offers.known()) else { return Ok(None) };
        let out = PyDict::new(py);
        out.set_item("server", server.name)?;
        out.set_item("version", server.version)?;
        out.set_item("modules", server.modules)?;
        out.set_item("offers", crate::offers::names(offers.bits()))?;
        out.set_item("refused", crate::offers::names(offers.refused()))?;
        out.set_item("scripts_refused", offers.scripts_refused())?;
        Ok(Some(out))
    }

    /// Whether scripts are known not to run on this server: one was refused (an ACL user
    /// without `@scripting`), or it has no Lua engine. Renewed when a new connection learns.
    #[getter]
    fn scripts_refused(&self) -> bool {
        self.transport.offers().scripts_refused()
    }

    /// Note that a script was refused here: script-free paths until a new connection learns.
    fn refuse_scripts(&self) {
        self.transport.offers().refuse_scripts();
    }

    /// Note that `name` ("MSETEX", "SET IFEQ", "DELIFEQ", "DELEX", "CLUSTERSCAN"), offered,
    /// was refused here (an ACL that lists commands by name, a node not upgraded yet): today's
    /// path while the same server (name and version) answers.
    fn refuse(&self, name: &str) -> PyResult<()> {
        let Some((bit, _)) =
            crate::offers::NAMES.iter().find(|(bit, n)| *n == name && *bit != crate::offers::LUA)
        else {
            return Err(PyValueError::new_err(format!("not an offered command: {name:?}")));
        };
        self.transport.offers().refuse(*bit);
        Ok(())
    }

    /// Learn what the server offers from replies Python read (a TLS client's async
    /// connection, which has no handshake of ours): HELLO's server, version and module names,
    /// and which of MSETEX, DELIFEQ, DELEX, CLUSTERSCAN `COMMAND INFO` found (None if it was
    /// refused).
    #[pyo3(signature = (server, version, modules, probed=None))]
    fn learn_offers(
        &self,
        server: String,
        version: String,
        modules: Vec<String>,
        probed: Option<Vec<bool>>,
    ) -> PyResult<()> {
        let probed = match probed {
            None => None,
            Some(found) => {
                Some(<[bool; crate::offers::PROBED.len()]>::try_from(found).map_err(|_| {
                    PyValueError::new_err("probed names MSETEX, DELIFEQ, DELEX and CLUSTERSCAN")
                })?)
            }
        };
        let server = crate::offers::Server { name: server.to_ascii_lowercase(), version, modules };
        self.transport.offers().set(server, probed);
        Ok(())
    }

    /// Zero this client's counters; the open connections too only if `connections` (a
    /// forked child, whose inherited connections are its parent's).
    #[pyo3(signature = (*, connections=false))]
    fn reset_stats(&self, connections: bool) {
        self.stats.reset(connections);
    }

    /// GET key -> bytes or None. With `bridge`, return an awaitable instead.
    #[pyo3(signature = (key, bridge=None))]
    fn get(&self, py: Python<'_>, key: &str, bridge: Option<Py<Bridge>>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let mut cmd = redis::cmd("GET");
            cmd.arg(key);
            self.run(py, bridge, Request::Cmd(cmd), reply::to_py)
        })
    }

    /// SET key value [PX ttl_ms] [NX|XX] -> whether it was stored.
    #[pyo3(signature = (key, value, ttl_ms=None, nx=false, xx=false, bridge=None))]
    #[allow(clippy::too_many_arguments)]
    fn set(
        &self,
        py: Python<'_>,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
        nx: bool,
        xx: bool,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let cmd = set_cmd(key, value, ttl_ms, nx, xx);
            self.run(py, bridge, Request::Cmd(cmd), reply::to_py_bool)
        })
    }

    /// MGET keys -> a list of bytes or None, in order.
    #[pyo3(signature = (keys, bridge=None))]
    pub(crate) fn mget(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let mut cmd = redis::cmd("MGET");
            for key in keys.try_iter()? {
                push_arg(&mut cmd, &key?)?;
            }
            self.run(py, bridge, Request::Cmd(cmd), reply::to_py)
        })
    }

    /// Store several values in one round trip: MSET; when they expire, one MSETEX where the
    /// server offers it, else one SET PX each.
    #[pyo3(signature = (keys, values, ttl_ms=None, bridge=None))]
    fn set_many(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        ttl_ms: Option<u64>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let keys: Vec<Bound<'_, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
            let values: Vec<Bound<'_, PyAny>> = values.try_iter()?.collect::<PyResult<_>>()?;
            if keys.len() != values.len() {
                return Err(PyValueError::new_err("keys and values differ in length"));
            }
            if keys.is_empty() {
                return Err(PyValueError::new_err("set_many needs at least one key"));
            }
            let req = self.set_many_request(&keys, &values, ttl_ms)?;
            self.run(py, bridge, req, reply::to_py)
        })
    }

    /// Run any command: `execute(("HSET", key, field, value))`.
    #[pyo3(signature = (args, bridge=None))]
    fn execute(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let cmd = command_from(args)?;
            self.run(py, bridge, Request::Cmd(cmd), reply::to_py)
        })
    }

    /// Run several commands in one round trip (not a transaction); return their replies.
    /// An error reply raises `ResponseError`.
    #[pyo3(signature = (commands, bridge=None))]
    fn pipeline(
        &self,
        py: Python<'_>,
        commands: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| self.run_pipeline(py, commands, bridge, reply::to_py))
    }

    /// Like `pipeline`, but an error reply comes back in the list as a `ResponseError`
    /// instance instead of being raised (a failed round trip still raises).
    #[pyo3(signature = (commands, bridge=None))]
    fn pipeline_results(
        &self,
        py: Python<'_>,
        commands: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| self.run_pipeline(py, commands, bridge, reply::to_py_results))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{secs, MAX_TIMEOUT_SECS};

    #[test]
    fn a_timeout_longer_than_a_year_is_a_year() {
        let year = Duration::from_secs_f64(MAX_TIMEOUT_SECS);
        assert_eq!(secs("t", 2.5).unwrap(), Duration::from_millis(2500));
        assert_eq!(secs("t", 9.3e18).unwrap(), year); // float(sys.maxsize)
        assert_eq!(secs("t", 1e300).unwrap(), year);
        // (Duration::from_secs_f64(1e300) panics, and now + 2**63 s overflows.)
        assert!(Instant::now().checked_add(year).is_some());
    }
}
