//! The `Client` pyclass: one per cache configuration per process, shared by every backend
//! instance. Sync calls run on a connection owned by the calling thread, with the GIL released;
//! async calls go through one multiplexed connection driven by the tokio runtime.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use redis::{Cmd, ConnectionLike, IntoConnectionInfo, Pipeline, RedisError, Value};

use crate::blocking::{Blocking, Wait};
use crate::bridge::{Bridge, CompletionGuard, Pending, Slot};
use crate::errors::{guard, Error, Result};
use crate::mux::{Mux, MuxConfig, Replies, Target};
use crate::reply::{self, Reply};
use crate::runtime;

static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);

/// How a Python reply is made from the server's.
type Convert = fn(Python<'_>, Reply) -> PyResult<Py<PyAny>>;

/// One round trip's worth of work.
enum Request {
    Cmd(Cmd),
    Pipe(Pipeline),
}

impl Request {
    fn is_idempotent(&self) -> bool {
        // Only plain reads are replayed after a dropped connection.
        let first = |cmd: &Cmd| {
            cmd.args_iter().next().is_some_and(|a| match a {
                redis::Arg::Simple(name) => {
                    let name = name.to_ascii_uppercase();
                    matches!(
                        name.as_slice(),
                        b"GET" | b"MGET" | b"EXISTS" | b"PING" | b"TTL" | b"PTTL"
                    )
                }
                _ => false,
            })
        };
        match self {
            Request::Cmd(cmd) => first(cmd),
            Request::Pipe(_) => false,
        }
    }
}

/// A thread's connection: our own for TCP and unix sockets, redis-rs' for TLS.
enum Link {
    Own(Blocking),
    Redis(redis::Connection),
}

impl Link {
    fn is_stale(&self) -> bool {
        match self {
            Link::Own(conn) => conn.is_stale(),
            Link::Redis(_) => false,
        }
    }
}

struct SyncConn {
    client_id: u64,
    generation: u64,
    link: Link,
}

fn pack(req: &Request) -> (Vec<u8>, Replies) {
    match req {
        Request::Cmd(cmd) => (cmd.get_packed_command(), Replies::One),
        Request::Pipe(pipe) => (pipe.get_packed_pipeline(), Replies::Many(pipe.len())),
    }
}

thread_local! {
    /// This thread's connections, one per client it has used. Closed when the thread exits.
    static SYNC_CONNS: RefCell<Vec<SyncConn>> = const { RefCell::new(Vec::new()) };
}

/// A connection to one Redis/Valkey server for one configuration.
#[pyclass(module = "redoxide._redoxide", frozen)]
pub struct Client {
    id: u64,
    client: redis::Client,
    /// host:port or socket path, for messages: never credentials.
    addr: Arc<str>,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// Where and how to connect, for our own connections (plain TCP and unix sockets).
    server: Option<Arc<MuxConfig>>,
    /// Our own multiplexed connection for plain TCP and unix sockets.
    mux: Option<Mux>,
    /// redis-rs' reconnecting connection, for what `mux` does not speak (TLS).
    aio: Mutex<Option<(u64, ConnectionManager)>>,
}

fn secs(name: &str, value: f64) -> PyResult<Duration> {
    if value.is_finite() && value > 0.0 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(PyValueError::new_err(format!(
            "{name} must be a positive number of seconds, got {value}"
        )))
    }
}

impl Client {
    fn fail(&self, err: &RedisError) -> Error {
        Error::from_redis(err, &self.addr)
    }

    fn connect_sync(&self) -> Result<redis::Connection> {
        let conn = self.client.get_connection_with_timeout(self.connect_timeout).map_err(|e| {
            match Error::from_redis(&e, &self.addr) {
                // Not answering the connect (or the handshake) is the server being away.
                Error::Timeout(_) => Error::Connection(format!(
                    "Connection to Redis at {} timed out after {:?}",
                    self.addr, self.connect_timeout
                )),
                other => other,
            }
        })?;
        conn.set_read_timeout(Some(self.response_timeout)).map_err(|e| self.fail(&e))?;
        conn.set_write_timeout(Some(self.response_timeout)).map_err(|e| self.fail(&e))?;
        Ok(conn)
    }

    fn connect_link(&self) -> Result<Link> {
        match &self.server {
            Some(server) => Blocking::connect(server).map(Link::Own),
            None => self.connect_sync().map(Link::Redis),
        }
    }

    fn send_link(&self, link: &mut Link, req: &Request) -> Result<Reply> {
        match link {
            Link::Own(conn) => {
                let (packed, replies) = pack(req);
                conn.request(
                    &packed,
                    replies,
                    self.server.as_deref().ok_or_else(|| {
                        Error::Internal("own connection without server settings".into())
                    })?,
                )
            }
            Link::Redis(conn) => send_sync(conn, req).map_err(|e| self.fail(&e)),
        }
    }

    /// This thread's connection for this client in `conns`: its position, and whether it was
    /// reused (not just made). Made on first use; remade if stale or from before a fork.
    fn thread_conn(&self, conns: &mut Vec<SyncConn>, generation: u64) -> Result<(usize, bool)> {
        let found = conns.iter().position(|c| c.client_id == self.id);
        match found {
            Some(i) if conns[i].generation == generation && !conns[i].link.is_stale() => {
                Ok((i, true))
            }
            other => {
                if let Some(i) = other {
                    let old = conns.swap_remove(i);
                    if old.generation != generation {
                        // Inherited across fork(): the socket is the parent's too.
                        std::mem::forget(old);
                    }
                }
                conns.push(SyncConn { client_id: self.id, generation, link: self.connect_link()? });
                Ok((conns.len() - 1, false))
            }
        }
    }

    /// Run one request on this thread's connection (made on first use, remade after errors).
    fn exec_sync(&self, req: &Request) -> Result<Reply> {
        let generation = runtime::generation();
        SYNC_CONNS
            .try_with(|cell| {
                let mut conns = cell.borrow_mut();
                let (index, reused) = self.thread_conn(&mut conns, generation)?;
                let mut result = self.send_link(&mut conns[index].link, req);
                if let Err(err) = &result {
                    if matches!(err, Error::Connection(_) | Error::Timeout(_) | Error::Internal(_))
                    {
                        // The connection may be out of step with the server: never reuse it.
                        conns.swap_remove(index);
                        // A read that met a connection closed under it is safe to replay once.
                        if reused && matches!(err, Error::Connection(_)) && req.is_idempotent() {
                            let mut link = self.connect_link()?;
                            result = self.send_link(&mut link, req);
                            if !matches!(result, Err(Error::Connection(_) | Error::Timeout(_))) {
                                conns.push(SyncConn { client_id: self.id, generation, link });
                            }
                        }
                    }
                }
                result
            })
            .unwrap_or_else(|_| Err(Error::Internal("thread is shutting down".into())))
    }

    fn run_sync(&self, py: Python<'_>, req: Request, convert: Convert) -> PyResult<Py<PyAny>> {
        let reply = py.detach(|| self.exec_sync(&req))?;
        convert(py, reply)
    }

    /// The multiplexed connection for async traffic, made on first use in this process.
    fn aio_conn(&self) -> Result<ConnectionManager> {
        let generation = runtime::generation();
        let mut aio = self.aio.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((g, manager)) = aio.as_ref() {
            if *g == generation {
                return Ok(manager.clone());
            }
        }
        if let Some(stale) = aio.take() {
            // The parent's connection, driven by a runtime that does not exist here.
            std::mem::forget(stale);
        }
        let rt = runtime::get()?;
        let _entered = rt.enter();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(0);
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| self.fail(&e))?;
        *aio = Some((generation, manager.clone()));
        Ok(manager)
    }

    fn run_async(&self, bridge: Py<Bridge>, req: Request, convert: Convert) -> PyResult<Pending> {
        let slot = Slot::new();
        if let Some(mux) = &self.mux {
            let (packed, replies) = pack(&req);
            let conn =
                mux.submit(&packed, replies, Arc::clone(&slot), Arc::clone(&bridge.get().queue))?;
            return Ok(Pending::new(slot, bridge, Some(conn), convert));
        }
        let mut conn = self.aio_conn()?;
        let rt = runtime::get()?;
        let completion = CompletionGuard::new(Arc::clone(&slot), Arc::clone(&bridge.get().queue));
        let addr = Arc::clone(&self.addr);
        // A hard bound over reconnecting plus answering, in case any layer below misbehaves.
        let limit = self.connect_timeout + self.response_timeout + Duration::from_millis(250);
        rt.spawn(async move {
            let work = async {
                let mut result = send_async(&mut conn, &req).await;
                if let Err(err) = &result {
                    if err.is_connection_dropped() && req.is_idempotent() {
                        result = send_async(&mut conn, &req).await;
                    }
                }
                result
            };
            let outcome = match tokio::time::timeout(limit, work).await {
                Ok(result) => result.map_err(|e| Error::from_redis(&e, &addr)),
                Err(_) => Err(Error::Timeout(format!("Redis at {addr} did not answer in time"))),
            };
            completion.finish(outcome);
        });
        Ok(Pending::new(slot, bridge, None, convert))
    }

    /// Run several commands in one round trip; `convert` makes the Python reply.
    fn run_pipeline(
        &self,
        py: Python<'_>,
        commands: &Bound<'_, PyAny>,
        bridge: Option<Py<Bridge>>,
        convert: Convert,
    ) -> PyResult<Py<PyAny>> {
        let mut pipe = Pipeline::new();
        for args in commands.try_iter()? {
            pipe.add_command(command_from(&args?)?);
        }
        if pipe.is_empty() {
            // Nothing to send: the answer is an empty list, now (awaitable when asked for).
            let Some(bridge) = bridge else {
                return Ok(pyo3::types::PyList::empty(py).into_any().unbind());
            };
            let slot = Slot::new();
            slot.complete(Ok(Value::Array(Vec::new())), &bridge.get().queue);
            return Ok(Py::new(py, Pending::new(slot, bridge, None, convert))?.into_any());
        }
        self.run(py, bridge, Request::Pipe(pipe), convert)
    }

    fn run(
        &self,
        py: Python<'_>,
        bridge: Option<Py<Bridge>>,
        req: Request,
        convert: Convert,
    ) -> PyResult<Py<PyAny>> {
        match bridge {
            None => self.run_sync(py, req, convert),
            Some(bridge) => Ok(Py::new(py, self.run_async(bridge, req, convert)?)?.into_any()),
        }
    }
}

fn send_sync(conn: &mut redis::Connection, req: &Request) -> redis::RedisResult<Reply> {
    match req {
        Request::Cmd(cmd) => conn.req_command(cmd),
        Request::Pipe(pipe) => {
            conn.req_packed_commands(&pipe.get_packed_pipeline(), 0, pipe.len()).map(Value::Array)
        }
    }
}

async fn send_async(conn: &mut ConnectionManager, req: &Request) -> redis::RedisResult<Reply> {
    match req {
        Request::Cmd(cmd) => conn.send_packed_command(cmd).await,
        Request::Pipe(pipe) => {
            conn.send_packed_commands(pipe, 0, pipe.len()).await.map(Value::Array)
        }
    }
}

/// Run one pipeline per client from this thread, all at once: every request is written (on
/// the thread's connection to each server) before any reply is read, so the servers work in
/// parallel and a call to N servers costs about one round trip plus N reads.
pub(crate) fn fanout_sync(calls: &[(&Client, Pipeline)]) -> Vec<Result<Reply>> {
    let generation = runtime::generation();
    // One response timeout for the whole fan-out, counted from when the requests are sent.
    let mut deadline = std::time::Instant::now();
    SYNC_CONNS
        .try_with(|cell| {
            let mut conns = cell.borrow_mut();
            let mut outcomes: Vec<Option<Result<Reply>>> = (0..calls.len()).map(|_| None).collect();
            let mut sent = vec![false; calls.len()];
            for (i, (client, pipe)) in calls.iter().enumerate() {
                let Some(server) = client.server.as_deref() else { continue };
                let packed = pipe.get_packed_pipeline();
                let outcome =
                    client.thread_conn(&mut conns, generation).and_then(|(at, _)| match &mut conns
                        [at]
                        .link
                    {
                        Link::Own(conn) => conn.send(&packed, server),
                        Link::Redis(_) => Err(Error::Internal("unexpected TLS link".into())),
                    });
                match outcome {
                    Ok(()) => sent[i] = true,
                    Err(err) => {
                        drop_conn(&mut conns, client.id);
                        outcomes[i] = Some(Err(err));
                    }
                }
            }
            let longest = calls.iter().map(|(c, _)| c.response_timeout).max();
            deadline = std::time::Instant::now() + longest.unwrap_or_default();
            for (i, (client, pipe)) in calls.iter().enumerate() {
                if outcomes[i].is_some() {
                    continue;
                }
                let outcome = match client.server.as_deref() {
                    // TLS goes through redis-rs: one after another, after the others are sent.
                    None => {
                        drop(conns);
                        let outcome = client.exec_sync(&Request::Pipe(pipe.clone()));
                        conns = cell.borrow_mut();
                        outcome
                    }
                    Some(server) => match conns.iter_mut().find(|c| c.client_id == client.id) {
                        Some(SyncConn { link: Link::Own(conn), .. }) if sent[i] => conn.receive_by(
                            Replies::Many(pipe.len()),
                            server,
                            deadline,
                            Wait::Yield,
                        ),
                        _ => Err(Error::Internal("lost track of a connection".into())),
                    },
                };
                if matches!(
                    outcome,
                    Err(Error::Connection(_) | Error::Timeout(_) | Error::Internal(_))
                ) {
                    drop_conn(&mut conns, client.id);
                }
                outcomes[i] = Some(outcome);
            }
            outcomes
                .into_iter()
                .map(|o| o.unwrap_or_else(|| Err(Error::Internal("no outcome".into()))))
                .collect()
        })
        .unwrap_or_else(|_| {
            calls.iter().map(|_| Err(Error::Internal("thread is shutting down".into()))).collect()
        })
}

/// Close this thread's connection of one client (it may be out of step with the server).
fn drop_conn(conns: &mut Vec<SyncConn>, client_id: u64) {
    if let Some(at) = conns.iter().position(|c| c.client_id == client_id) {
        conns.swap_remove(at);
    }
}

/// Append one Python value to a command: bytes and str as they are, ints as digits.
fn push_arg(cmd: &mut Cmd, obj: &Bound<'_, PyAny>) -> PyResult<()> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        cmd.arg(b.as_bytes());
    } else if let Ok(s) = obj.cast::<PyString>() {
        cmd.arg(s.to_str()?);
    } else if obj.is_instance_of::<PyInt>() {
        cmd.arg(obj.str()?.to_str()?);
    } else if let Ok(f) = obj.extract::<f64>() {
        cmd.arg(f);
    } else {
        return Err(PyTypeError::new_err(format!(
            "command arguments must be bytes, str, int or float, not {}",
            obj.get_type().name()?
        )));
    }
    Ok(())
}

pub(crate) fn command_from(args: &Bound<'_, PyAny>) -> PyResult<Cmd> {
    let mut cmd = Cmd::new();
    for arg in args.try_iter()? {
        push_arg(&mut cmd, &arg?)?;
    }
    if cmd.args_iter().next().is_none() {
        return Err(PyValueError::new_err("a command needs at least its name"));
    }
    Ok(cmd)
}

fn set_cmd(key: &str, value: &[u8], ttl_ms: Option<u64>, nx: bool, xx: bool) -> Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    if let Some(ms) = ttl_ms {
        cmd.arg("PX").arg(ms.max(1));
    }
    if nx {
        cmd.arg("NX");
    } else if xx {
        cmd.arg("XX");
    }
    cmd
}

#[pymethods]
impl Client {
    /// Describe a server; nothing connects until the first command.
    #[new]
    /// `readonly` sends READONLY after connecting: reads from a cluster replica.
    /// The `tls_*` arguments apply to `rediss://` URLs: PEM bytes of the CA certificates and
    /// of a client certificate and key, whether to verify the server's certificate at all,
    /// and whether it must name the host.
    #[pyo3(signature = (
        url, *, connect_timeout, response_timeout, username=None, password=None, db=None,
        readonly=false, tls_ca_certs=None, tls_certfile=None, tls_keyfile=None, tls_verify=true,
        tls_check_hostname=true,
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
    ) -> PyResult<Self> {
        guard(|| {
            runtime::watch_forks();
            let info = url.into_connection_info().map_err(|e| {
                Error::Config(format!("cannot parse LOCATION {}: {}", redact(url), e.category()))
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
            // No CLIENT SETINFO: a connection without AUTH or SELECT then needs no handshake at all.
            redis_settings = redis_settings.set_skip_set_lib_name();
            let addr: Arc<str> = info.addr().to_string().into();
            let info = info
                .set_redis_settings(redis_settings)
                .set_tcp_settings(TcpSettings::default().set_nodelay(true));
            let tls = Tls {
                ca_certs: tls_ca_certs,
                certfile: tls_certfile,
                keyfile: tls_keyfile,
                verify: tls_verify,
                check_hostname: tls_check_hostname,
            };
            let client = open_client(info, tls, url)?;
            let connect_timeout = secs("SOCKET_CONNECT_TIMEOUT", connect_timeout)?;
            let response_timeout = secs("SOCKET_TIMEOUT", response_timeout)?;
            let info = client.get_connection_info();
            let target = match info.addr() {
                redis::ConnectionAddr::Tcp(host, port) => Some(Target::Tcp(host.clone(), *port)),
                redis::ConnectionAddr::Unix(path) => Some(Target::Unix(path.clone())),
                _ => None,
            };
            let server = target.map(|target| {
                let settings = info.redis_settings();
                let mut handshake = Pipeline::new();
                if let Some(password) = settings.password() {
                    let mut auth = redis::cmd("AUTH");
                    if let Some(user) = settings.username() {
                        auth.arg(user);
                    }
                    handshake.add_command(auth.arg(password).clone());
                }
                if settings.db() != 0 {
                    handshake.add_command(redis::cmd("SELECT").arg(settings.db()).clone());
                }
                if readonly {
                    handshake.add_command(redis::cmd("READONLY"));
                }
                Arc::new(MuxConfig {
                    target,
                    handshake_replies: handshake.len(),
                    handshake: handshake.get_packed_pipeline(),
                    connect_timeout,
                    response_timeout,
                    addr: Arc::clone(&addr),
                })
            });
            let mux = server.as_ref().map(|server| Mux::new(Arc::clone(server)));
            Ok(Client {
                id: NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
                client,
                addr,
                connect_timeout,
                response_timeout,
                server,
                mux,
                aio: Mutex::new(None),
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
    fn mget(
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

    /// Store several values in one round trip: MSET, or one SET PX each when they expire.
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
            let req = match ttl_ms {
                None => {
                    let mut cmd = redis::cmd("MSET");
                    for (k, v) in keys.iter().zip(&values) {
                        push_arg(&mut cmd, k)?;
                        push_arg(&mut cmd, v)?;
                    }
                    Request::Cmd(cmd)
                }
                Some(ms) => {
                    let mut pipe = Pipeline::with_capacity(keys.len());
                    for (k, v) in keys.iter().zip(&values) {
                        let mut cmd = redis::cmd("SET");
                        push_arg(&mut cmd, k)?;
                        push_arg(&mut cmd, v)?;
                        cmd.arg("PX").arg(ms.max(1));
                        pipe.add_command(cmd);
                    }
                    Request::Pipe(pipe)
                }
            };
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

/// The URL with any password replaced, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let shown =
                if userinfo.contains(':') { format!("{user}:***") } else { "***".to_owned() };
            format!("{}{}{}", &url[..scheme_end + 3], shown, &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// TLS settings for a `rediss://` server (OPTIONS `SSL_*`); certificates and key as PEM.
struct Tls {
    ca_certs: Option<Vec<u8>>,
    certfile: Option<Vec<u8>>,
    keyfile: Option<Vec<u8>>,
    verify: bool,
    check_hostname: bool,
}

impl Tls {
    fn is_default(&self) -> bool {
        self.ca_certs.is_none()
            && self.certfile.is_none()
            && self.keyfile.is_none()
            && self.verify
            && self.check_hostname
    }
}

/// Build the redis-rs client, with the TLS settings for a `rediss://` URL.
fn open_client(info: redis::ConnectionInfo, tls: Tls, url: &str) -> Result<redis::Client> {
    let invalid = |e: RedisError| {
        Error::Config(format!("invalid LOCATION {}: {}", redact(url), e.category()))
    };
    let redis::ConnectionAddr::TcpTls { host, port, insecure, tls_params } = info.addr().clone()
    else {
        if tls.is_default() {
            return redis::Client::open(info).map_err(invalid);
        }
        return Err(Error::Config(format!(
            "the SSL_* options need a rediss:// or valkeys:// LOCATION, not {}",
            redact(url)
        )));
    };
    // Verification off (SSL_CERT_REQS none) is redis-rs' "insecure" address, as `#insecure`.
    let insecure = insecure || !tls.verify;
    let info = info.set_addr(redis::ConnectionAddr::TcpTls { host, port, insecure, tls_params });
    let client_tls = match (tls.certfile, tls.keyfile) {
        (Some(client_cert), Some(client_key)) => {
            Some(redis::ClientTlsConfig { client_cert, client_key })
        }
        (None, None) => None,
        _ => {
            return Err(Error::Config(
                "SSL_CERTFILE and SSL_KEYFILE must be given together".to_owned(),
            ))
        }
    };
    let client = if client_tls.is_some() || tls.ca_certs.is_some() {
        let certs = redis::TlsCertificates { client_tls, root_cert: tls.ca_certs };
        // Certificate errors name the file's role, never its contents.
        redis::Client::build_with_tls(info, certs)
            .map_err(|e| Error::Config(format!("invalid TLS certificate or key: {e}")))?
    } else {
        redis::Client::open(info).map_err(invalid)?
    };
    if tls.check_hostname || insecure {
        return Ok(client);
    }
    // SSL_CHECK_HOSTNAME False: the certificate must still chain to a trusted CA.
    let mut addr = client.get_connection_info().addr().clone();
    addr.set_danger_accept_invalid_hostnames(true);
    redis::Client::open(client.get_connection_info().clone().set_addr(addr)).map_err(invalid)
}

/// Raise `InternalError` from inside Rust, to prove a panic never crashes the interpreter.
#[pyfunction]
pub fn panic_for_tests() -> PyResult<()> {
    guard(|| panic!("deliberate panic for the tests"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_passwords() {
        assert_eq!(redact("redis://user:secret@h:1/0"), "redis://user:***@h:1/0");
        assert_eq!(redact("redis://:secret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://secret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
    }

    #[test]
    fn set_command_has_expiry_and_mode() {
        let packed =
            String::from_utf8(set_cmd("k", b"v", Some(0), true, false).get_packed_command())
                .unwrap();
        assert!(packed.contains("PX\r\n$1\r\n1\r\n"), "{packed}");
        assert!(packed.ends_with("NX\r\n"), "{packed}");
    }

    #[test]
    fn only_reads_are_replayed() {
        let mut get = redis::cmd("get");
        get.arg("k");
        assert!(Request::Cmd(get).is_idempotent());
        let mut incr = redis::cmd("INCR");
        incr.arg("k");
        assert!(!Request::Cmd(incr).is_idempotent());
    }
}
