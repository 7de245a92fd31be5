//! TLS servers (`rediss://`), through redis-rs: a blocking `redis::Connection` per thread and
//! one reconnecting `ConnectionManager` per process for async calls. redis-rs reads the replies,
//! so bytes received are not counted here; bytes sent are the requests' packed sizes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError, Value};

use crate::bridge::{CompletionGuard, LoopQueue, Slot};
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
    client: redis::Client,
    pub timeouts: Timeouts,
    /// Reads from a cluster replica: every connection must say READONLY first.
    readonly: bool,
    addr: Arc<str>,
    pub stats: Arc<Stats>,
    /// The reconnecting connection for async traffic, per fork generation (a child leaks the
    /// parent's: it is driven by a runtime that does not exist there).
    aio: PerFork<Mutex<Option<(ConnectionManager, Open)>>>,
}

/// One thread's blocking TLS connection.
pub struct TlsLink {
    conn: redis::Connection,
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
    ) -> Result<Self> {
        let client = tls_client(info, tls, addr)?;
        Ok(TlsTransport {
            client,
            timeouts,
            readonly,
            addr: Arc::clone(addr),
            stats: Arc::clone(stats),
            aio: PerFork::new(),
        })
    }

    fn fail(&self, err: &RedisError) -> Error {
        Error::from_redis(err, &self.addr)
    }

    /// A new blocking connection.
    pub fn connect(&self) -> Result<TlsLink> {
        let connect_timeout = self.timeouts.connect;
        let mut conn = self.client.get_connection_with_timeout(connect_timeout).map_err(|e| {
            match self.fail(&e) {
                // Not answering the connect (or the handshake) is the server being away.
                Error::Timeout(_) => Error::Connection(format!(
                    "Connection to Redis at {} timed out after {connect_timeout:?}",
                    self.addr
                )),
                other => other,
            }
        })?;
        conn.set_read_timeout(Some(self.timeouts.response)).map_err(|e| self.fail(&e))?;
        conn.set_write_timeout(Some(self.timeouts.response)).map_err(|e| self.fail(&e))?;
        if self.readonly {
            redis::cmd("READONLY").query::<()>(&mut conn).map_err(|e| self.fail(&e))?;
        }
        Ok(TlsLink {
            conn,
            addr: Arc::clone(&self.addr),
            stats: Arc::clone(&self.stats),
            _open: self.stats.opened(),
        })
    }

    /// The multiplexed connection for async traffic, made on first use in this process.
    fn aio_conn(&self) -> Result<ConnectionManager> {
        let mut aio = self.aio.get().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((manager, _)) = aio.as_ref() {
            return Ok(manager.clone());
        }
        let rt = runtime::get()?;
        let _entered = rt.enter();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeouts.connect))
            .set_response_timeout(Some(self.timeouts.response))
            .set_number_of_retries(0);
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| self.fail(&e))?;
        *aio = Some((manager.clone(), self.stats.opened()));
        Ok(manager)
    }

    /// Run a request on the I/O runtime; its outcome lands in `slot`.
    pub fn submit(&self, req: Request, slot: Arc<Slot>, queue: Arc<LoopQueue>) -> Result<()> {
        let mut conn = self.aio_conn()?;
        let rt = runtime::get()?;
        self.stats.sent(packed_len(&req));
        let completion = CompletionGuard::new(slot, queue);
        let addr = Arc::clone(&self.addr);
        // redis-rs' manager reconnects on its own, with no hook to run READONLY on the new
        // connection, so a replica's reads carry it: one trivial extra command per request.
        let wrapped = self.readonly.then_some(matches!(req, Request::Cmd(_)));
        let req = if self.readonly { with_readonly(&req) } else { req };
        // A hard bound over reconnecting plus answering, in case any layer below misbehaves.
        let limit = self.timeouts.connect + self.timeouts.response + Duration::from_millis(250);
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
