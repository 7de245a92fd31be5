//! TLS servers (`rediss://`), through redis-rs: a blocking `redis::Connection` per thread and
//! one reconnecting `ConnectionManager` per process for async calls. redis-rs reads the replies,
//! so bytes received are not counted here; bytes sent are the requests' packed sizes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError, Value};

use crate::bridge::{CompletionGuard, LoopQueue, Slot};
use crate::credentials::{self, Cell};
use crate::errors::{Error, Result};
use crate::proto::{Reply, Request};
use crate::runtime::{self, PerFork};
use crate::stats::{Open, Stats};
use crate::transport::Timeouts;

/// TLS settings for a `rediss://` server (OPTIONS `SSL_*`); certificates and key as PEM.
#[derive(Clone)]
pub struct TlsOptions {
    pub ca_certs: Option<Vec<u8>>,
    pub certfile: Option<Vec<u8>>,
    pub keyfile: Option<Vec<u8>>,
    pub verify: bool,
    pub check_hostname: bool,
}

impl TlsOptions {
    /// Whether nothing was set (the only settings a plain server accepts).
    pub fn is_default(&self) -> bool {
        self.ca_certs.is_none()
            && self.certfile.is_none()
            && self.keyfile.is_none()
            && self.verify
            && self.check_hostname
    }
}

/// A TLS server's redis-rs client and its shared async connection.
pub struct TlsTransport {
    shared: Arc<Shared>,
    pub timeouts: Timeouts,
    /// Reads from a cluster replica: every connection must say READONLY first.
    readonly: bool,
    addr: Arc<str>,
    pub stats: Arc<Stats>,
    /// What the server offers: learnt by each new blocking connection (the async one is
    /// redis-rs' manager, which reconnects with no hook: Python asks through it instead).
    pub offers: Arc<crate::offers::Offers>,
}

/// What the I/O runtime's tasks need too: the client and the async connection.
struct Shared {
    /// The redis-rs client and the generation of the credentials in it (0: fixed ones).
    client: Mutex<(u64, redis::Client)>,
    /// Credentials that change (`CREDENTIAL_PROVIDER`): the client is rebuilt with new ones.
    creds: Option<Arc<Cell>>,
    /// What the client is built from, for rebuilding it.
    info: ConnectionInfo,
    tls: TlsOptions,
    timeouts: Timeouts,
    addr: Arc<str>,
    stats: Arc<Stats>,
    /// The reconnecting connection for async traffic, per fork generation (a child leaks the
    /// parent's: it is driven by a runtime that does not exist there), and the generation of
    /// its credentials.
    aio: PerFork<Mutex<Option<(ConnectionManager, Open, u64)>>>,
}

/// One thread's blocking TLS connection.
pub struct TlsLink {
    conn: redis::Connection,
    creds: Option<Arc<Cell>>,
    /// The generation of the credentials it authenticated with.
    auth_gen: u64,
    addr: Arc<str>,
    stats: Arc<Stats>,
    _open: Open,
}

impl TlsTransport {
    /// Build the redis-rs client for a `rediss://` address with the TLS settings.
    pub fn open(
        info: ConnectionInfo,
        tls: TlsOptions,
        readonly: bool,
        timeouts: Timeouts,
        addr: &Arc<str>,
        stats: &Arc<Stats>,
        creds: Option<Arc<Cell>>,
    ) -> Result<Self> {
        let client = tls_client(info.clone(), tls.clone(), addr)?;
        let shared = Arc::new(Shared {
            client: Mutex::new((0, client)),
            creds,
            info,
            tls,
            timeouts,
            addr: Arc::clone(addr),
            stats: Arc::clone(stats),
            aio: PerFork::new(),
        });
        Ok(TlsTransport {
            shared,
            timeouts,
            readonly,
            addr: Arc::clone(addr),
            stats: Arc::clone(stats),
            offers: Arc::default(),
        })
    }
}

impl Shared {
    /// The redis-rs client with the current credentials, and their generation.
    fn client(&self) -> Result<(u64, redis::Client)> {
        let mut client = self.client.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(creds) = &self.creds {
            // (Generation 0 is the client made without credentials: never used with a provider.)
            if client.0 == 0 || creds.generation() != client.0 {
                let (generation, secret) = creds.current()?;
                let mut settings = self.info.redis_settings().clone();
                if let Some(user) = &secret.username {
                    settings = settings.set_username(user);
                }
                settings = settings.set_password(&secret.password);
                let info = self.info.clone().set_redis_settings(settings);
                *client = (generation, tls_client(info, self.tls.clone(), &self.addr)?);
            }
        }
        Ok(client.clone())
    }

    fn fail(&self, err: &RedisError) -> Error {
        Error::from_redis(err, &self.addr)
    }

    /// The multiplexed connection for async traffic, made on first use in this process, and
    /// the generation of its credentials.
    fn aio_conn(&self) -> Result<(ConnectionManager, u64)> {
        let mut aio = self.aio.get().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let generation = self.creds.as_ref().map_or(0, |creds| creds.generation());
        if let Some((manager, _, made_with)) = aio.as_ref() {
            // New credentials: a new connection with them (redis-rs' manager reconnects with
            // the credentials it was made with). Calls in flight finish on the old one.
            if *made_with == generation {
                return Ok((manager.clone(), generation));
            }
        }
        if let Some(creds) = self.creds.as_ref().filter(|c| c.generation() == 0) {
            // No credentials yet: ask for them, but never wait on the caller's event loop.
            creds.request_refresh();
        }
        let (generation, client) = self.client()?;
        let rt = runtime::get()?;
        let _entered = rt.enter();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeouts.connect))
            .set_response_timeout(Some(self.timeouts.response))
            .set_number_of_retries(0);
        let manager =
            ConnectionManager::new_lazy_with_config(client, config).map_err(|e| self.fail(&e))?;
        *aio = Some((manager.clone(), self.stats.opened(), generation));
        Ok((manager, generation))
    }
}

impl TlsTransport {
    /// A new blocking connection, within one connect timeout however many tries it takes.
    pub fn connect(&self) -> Result<TlsLink> {
        let deadline = std::time::Instant::now() + self.timeouts.connect;
        let left = || deadline.saturating_duration_since(std::time::Instant::now());
        let mut seen = 0;
        match self.connect_once(left(), &mut seen) {
            Err(err) if self.refreshed(&err, seen, left()) => self.connect_once(left(), &mut seen),
            outcome => outcome,
        }
    }

    /// After a connection refused with credentials of generation `seen`: whether newer ones
    /// came within `timeout` (asked for from the provider), so that connecting is worth one
    /// more try.
    fn refreshed(&self, err: &Error, seen: u64, timeout: Duration) -> bool {
        match &self.shared.creds {
            Some(creds) if credentials::refused(err) => creds.refresh(seen, timeout),
            _ => false,
        }
    }

    /// Learn what the server offers on a new connection (as a plain one's handshake does);
    /// a refusal teaches nothing and fails nothing.
    fn learn(&self, conn: &mut redis::Connection) {
        let Ok(hello) = redis::cmd("HELLO").query::<redis::Value>(conn) else { return };
        let mut probe = redis::cmd("COMMAND");
        probe.arg("INFO");
        for (name, _) in crate::offers::PROBED {
            probe.arg(name);
        }
        let probe = probe.query::<redis::Value>(conn).ok();
        self.offers.learn(&hello, probe.as_ref());
    }

    /// One try; `auth_gen` is set to the generation of the credentials it used.
    fn connect_once(&self, timeout: Duration, auth_gen: &mut u64) -> Result<TlsLink> {
        let connect_timeout = self.timeouts.connect;
        if let Some(creds) = &self.shared.creds {
            creds.first(timeout)?;
        }
        let (generation, client) = self.shared.client()?;
        *auth_gen = generation;
        let timeout = timeout.max(Duration::from_millis(1));
        let mut conn = client.get_connection_with_timeout(timeout).map_err(|e| {
            match self.shared.fail(&e) {
                // Not answering the connect (or the handshake) is the server being away.
                Error::Timeout(_) => Error::Connection(format!(
                    "Connection to Redis at {} timed out after {connect_timeout:?}",
                    self.addr
                )),
                other => other,
            }
        })?;
        conn.set_read_timeout(Some(self.timeouts.response)).map_err(|e| self.shared.fail(&e))?;
        conn.set_write_timeout(Some(self.timeouts.response)).map_err(|e| self.shared.fail(&e))?;
        if self.readonly {
            redis::cmd("READONLY").query::<()>(&mut conn).map_err(|e| self.shared.fail(&e))?;
        }
        self.learn(&mut conn);
        Ok(TlsLink {
            conn,
            creds: self.shared.creds.clone(),
            auth_gen: *auth_gen,
            addr: Arc::clone(&self.addr),
            stats: Arc::clone(&self.stats),
            _open: self.stats.opened(),
        })
    }

    /// Run a request on the I/O runtime; its outcome lands in `slot`.
    pub fn submit(&self, req: Request, slot: Arc<Slot>, queue: Arc<LoopQueue>) -> Result<()> {
        let (mut conn, auth_gen) = self.shared.aio_conn()?;
        let shared = Arc::clone(&self.shared);
        let rt = runtime::get()?;
        self.stats.sent(packed_len(&req));
        let completion = CompletionGuard::new(slot, queue);
        let addr = Arc::clone(&self.addr);
        // redis-rs' manager reconnects on its own, with no hook to run READONLY on the new
        // connection, so a replica's reads carry it: one trivial extra command per request.
        let wrapped = self.readonly.then_some(matches!(req, Request::Cmd(_)));
        let req = if self.readonly { with_readonly(&req) } else { req };
        // A hard bound over reconnecting plus answering, in case any layer below misbehaves.
        let limit = self.timeouts.connect * 2 + self.timeouts.response + Duration::from_millis(250);
        rt.spawn(async move {
            let work = async {
                let mut result = send_async(&mut conn, &req).await;
                if let Err(err) = &result {
                    if err.is_connection_dropped() && req.is_idempotent() {
                        result = send_async(&mut conn, &req).await;
                    }
                }
                if let (Err(err), Some(creds)) = (&result, &shared.creds) {
                    // The manager reconnected with credentials the server no longer takes:
                    // ask for fresh ones, and send once more on a connection made with them
                    // (a refused connection ran nothing).
                    if err.kind() == redis::ErrorKind::AuthenticationFailed
                        && creds.refresh_async(auth_gen, shared.timeouts.connect).await
                    {
                        if let Ok((mut fresh, _)) = shared.aio_conn() {
                            result = send_async(&mut fresh, &req).await;
                        }
                    }
                }
                result
            };
            let outcome = match tokio::time::timeout(limit, work).await {
                Ok(result) => result
                    .map(|reply| unwrap_readonly(reply, wrapped))
                    .map_err(|e| Error::from_redis(&e, &addr)),
                Err(_) => Err(Error::Timeout(format!("Redis at {addr} did not answer in time"))),
            };
            completion.finish(outcome);
        });
        Ok(())
    }
}

/// The redis-rs client for a `rediss://` address with the TLS settings applied (also used by
/// the near cache's tracking connection, which speaks RESP3).
pub fn tls_client(info: ConnectionInfo, tls: TlsOptions, addr: &Arc<str>) -> Result<redis::Client> {
    let invalid =
        |e: RedisError| Error::Config(format!("invalid LOCATION for {addr}: {}", e.category()));
    let ConnectionAddr::TcpTls { host, port, insecure, tls_params } = info.addr().clone() else {
        return Err(Error::Internal(format!("{addr} is not a TLS address")));
    };
    // Verification off (SSL_CERT_REQS none) is redis-rs' "insecure" address, as `#insecure`.
    let insecure = insecure || !tls.verify;
    let info = info.set_addr(ConnectionAddr::TcpTls { host, port, insecure, tls_params });
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
    let mut client = if client_tls.is_some() || tls.ca_certs.is_some() {
        let certs = redis::TlsCertificates { client_tls, root_cert: tls.ca_certs };
        // Certificate errors name the file's role, never its contents.
        redis::Client::build_with_tls(info, certs)
            .map_err(|e| Error::Config(format!("invalid TLS certificate or key: {e}")))?
    } else {
        redis::Client::open(info).map_err(invalid)?
    };
    if !tls.check_hostname && !insecure {
        // SSL_CHECK_HOSTNAME False: the certificate must still chain to a trusted CA.
        let mut addr = client.get_connection_info().addr().clone();
        addr.set_danger_accept_invalid_hostnames(true);
        client = redis::Client::open(client.get_connection_info().clone().set_addr(addr))
            .map_err(invalid)?;
    }
    Ok(client)
}

impl TlsLink {
    /// One round trip.
    pub fn send(&mut self, req: &Request) -> Result<Reply> {
        if let Some(creds) = &self.creds {
            if creds.generation() != self.auth_gen {
                // New credentials: AUTH with them on this connection first (one more round
                // trip, once per change). A refusal leaves it authenticated as before.
                let (generation, secret) = creds.current()?;
                let mut auth = redis::cmd("AUTH");
                if let Some(user) = &secret.username {
                    auth.arg(user);
                }
                auth.arg(&secret.password);
                match auth.query::<Value>(&mut self.conn) {
                    // A refusal (WRONGPASS and the like) leaves the connection as it was.
                    Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
                        return Err(Error::from_redis(&e, &self.addr))
                    }
                    _ => {}
                }
                self.auth_gen = generation;
            }
        }
        self.stats.sent(packed_len(req));
        let result = match req {
            Request::Cmd(cmd) => self.conn.req_command(cmd),
            Request::Pipe(pipe) => self
                .conn
                .req_packed_commands(&pipe.get_packed_pipeline(), 0, pipe.len())
                .map(Value::Array),
        };
        result.map_err(|e| Error::from_redis(&e, &self.addr))
    }
}

/// The request as a pipeline led by READONLY; see `unwrap_readonly` for the reply.
fn with_readonly(req: &Request) -> Request {
    let mut pipe = redis::pipe();
    pipe.add_command(redis::cmd("READONLY"));
    match req {
        Request::Cmd(cmd) => {
            pipe.add_command(cmd.clone());
        }
        Request::Pipe(inner) => {
            for cmd in inner.cmd_iter() {
                pipe.add_command(cmd.clone());
            }
        }
    }
    Request::Pipe(pipe)
}

/// The replies of a `with_readonly` request as the original request would have had them:
/// `single` (a plain command) is its own reply, a pipeline a list; None = not wrapped.
fn unwrap_readonly(reply: Reply, single: Option<bool>) -> Reply {
    let Some(single) = single else { return reply };
    match reply {
        Value::Array(mut items) if !items.is_empty() => {
            items.remove(0);
            if single {
                items.pop().unwrap_or(Value::Nil)
            } else {
                Value::Array(items)
            }
        }
        other => other,
    }
}

/// The size of a request on the wire (packed again: only counted when stats are on).
fn packed_len(req: &Request) -> usize {
    if !crate::stats::ENABLED {
        return 0;
    }
    match req {
        Request::Cmd(cmd) => cmd.get_packed_command().len(),
        Request::Pipe(pipe) => pipe.get_packed_pipeline().len(),
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
