//! The connections to one server, behind one `Transport`: our own sockets for TCP and unix
//! servers (a blocking one per thread for sync calls, one multiplexed per process for async
//! calls), or redis-rs' for TLS.

mod blocking;
mod fanout;
mod mux;
mod thread_conns;
mod tls;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo};

use crate::bridge::{LoopQueue, Poller, Slot};
use crate::credentials::Cell;
use crate::errors::{Error, Result};
use crate::proto::handshake::Handshake;
use crate::proto::{Reply, Request};
use crate::stats::Stats;

pub use fanout::{fanout_sync, Call};
pub use mux::flush_deferred;
pub use thread_conns::exec_sync;
pub use tls::{tls_client, TlsOptions};

/// Where a plain server is.
#[derive(Clone, Debug)]
pub enum Target {
    Tcp(String, u16),
    Unix(PathBuf),
}

/// Settings for every plain connection made to one server.
pub struct PlainConfig {
    pub target: Target,
    /// Sent first on every connection.
    pub handshake: Handshake,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// host:port or path, for messages: never credentials.
    pub addr: Arc<str>,
    /// The client's counters (bytes, connections, reconnects).
    pub stats: Arc<Stats>,
    /// What the server offers, learnt by the handshake of every new connection.
    pub offers: Arc<crate::offers::Offers>,
}

/// How one client reaches its server.
pub enum Transport {
    /// TCP or a unix socket, on our own connections.
    /// `shared` carries every thread's sync calls under `SYNC_CONNECTIONS: "shared"`.
    Plain { config: Arc<PlainConfig>, mux: mux::Mux, shared: blocking::shared::Shared },
    /// TLS, on redis-rs' connections (boxed: redis-rs' client is large).
    Tls(Box<tls::TlsTransport>),
}

/// Connection timeouts, validated.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub connect: Duration,
    pub response: Duration,
}

impl Transport {
    /// What the server offers, as its connections learnt it.
    pub fn offers(&self) -> &Arc<crate::offers::Offers> {
        match self {
            Transport::Plain { config, .. } => &config.offers,
            Transport::Tls(tls) => &tls.offers,
        }
    }

    /// The transport for a parsed LOCATION (credentials and database already applied).
    /// `readonly` sends READONLY on every connection (reads from a cluster replica). `creds`:
    /// credentials that change, which replace any password in `info`.
    pub fn open(
        info: ConnectionInfo,
        tls: TlsOptions,
        readonly: bool,
        timeouts: Timeouts,
        addr: &Arc<str>,
        stats: &Arc<Stats>,
        creds: Option<Arc<Cell>>,
    ) -> Result<Self> {
        let target = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Target::Tcp(host.clone(), *port),
            ConnectionAddr::Unix(path) => Target::Unix(path.clone()),
            _ => {
                return tls::TlsTransport::open(info, tls, readonly, timeouts, addr, stats, creds)
                    .map(|t| Transport::Tls(Box::new(t)))
            }
        };
        if !tls.is_default() {
            return Err(Error::Config(format!(
                "the SSL_* options need a rediss:// or valkeys:// LOCATION, not one for {addr}"
            )));
        }
        let settings = info.redis_settings();
        let library = Some(("redoxide", env!("CARGO_PKG_VERSION")));
        let password = if creds.is_some() { None } else { settings.password() };
        let offers = Arc::<crate::offers::Offers>::default();
        let handshake =
            Handshake::identified(settings.username(), password, settings.db(), readonly, library)
                .with_credentials(creds)
                .learning(Arc::clone(&offers));
        let config = Arc::new(PlainConfig {
            target,
            handshake,
            connect_timeout: timeouts.connect,
            response_timeout: timeouts.response,
            addr: Arc::clone(addr),
            stats: Arc::clone(stats),
            offers,
        });
        Ok(Transport::Plain {
            mux: mux::Mux::new(Arc::clone(&config)),
            shared: blocking::shared::Shared::new(Arc::clone(&config)),
            config,
        })
    }

    /// The client's counters.
    pub fn stats(&self) -> &Arc<Stats> {
        match self {
            Transport::Plain { config, .. } => &config.stats,
            Transport::Tls(tls) => &tls.stats,
        }
    }

    /// How long a reply may take.
    pub fn response_timeout(&self) -> Duration {
        match self {
            Transport::Plain { config, .. } => config.response_timeout,
            Transport::Tls(tls) => tls.timeouts.response,
        }
    }

    /// A sync call on the process' one shared sync connection (plain servers), the GIL
    /// released by the caller; None for TLS, whose sync calls use a connection per thread.
    pub fn call_shared(&self, req: &Request) -> Option<Result<Reply>> {
        let Transport::Plain { shared, .. } = self else { return None };
        Some(shared.call(req))
    }

    /// A new blocking connection, for one thread.
    fn connect(&self) -> Result<Link> {
        match self {
            Transport::Plain { config, .. } => blocking::Blocking::connect(config).map(Link::Plain),
            Transport::Tls(tls) => tls.connect().map(Link::Tls),
        }
    }

    /// Send a request from an event loop on the process' shared connection; its outcome
    /// lands in `slot`. Return the connection, if a caller waiting for the reply may poll
    /// it, and whether the loop must call `flush_deferred` soon (see `Mux::submit`).
    pub fn submit(
        &self,
        req: Request,
        slot: Arc<Slot>,
        queue: Arc<LoopQueue>,
    ) -> Result<(Option<Arc<dyn Poller>>, bool)> {
        match self {
            Transport::Plain { mux, .. } => {
                let (packed, replies) = req.pack();
                let replayable = req.is_idempotent();
                let (conn, schedule) = mux.submit(packed, replies, replayable, slot, queue)?;
                let conn: Arc<dyn Poller> = conn;
                Ok((Some(conn), schedule))
            }
            Transport::Tls(tls) => tls.submit(req, slot, queue).map(|()| (None, false)),
        }
    }
}

/// One thread's blocking connection to a server.
enum Link {
    Plain(blocking::Blocking),
    Tls(tls::TlsLink),
}

impl Link {
    /// Whether the server closed the connection (or sent something unasked) while it sat idle.
    fn is_stale(&self) -> bool {
        match self {
            Link::Plain(conn) => conn.is_stale(),
            Link::Tls(_) => false,
        }
    }

    /// One round trip.
    fn send(&mut self, req: &Request) -> Result<Reply> {
        match self {
            Link::Plain(conn) => {
                let (packed, replies) = req.pack();
                conn.request(&packed, replies)
            }
            Link::Tls(conn) => conn.send(req),
        }
    }
}

#[cfg(test)]
mod tests {
    use redis::IntoConnectionInfo;

    use super::*;

    const TIMEOUTS: Timeouts =
        Timeouts { connect: Duration::from_secs(1), response: Duration::from_secs(1) };

    fn options() -> TlsOptions {
        TlsOptions {
            ca_certs: None,
            certfile: None,
            keyfile: None,
            verify: true,
            check_hostname: true,
        }
    }

    fn open(url: &str, tls: TlsOptions) -> Result<Transport> {
        let info = url.into_connection_info().unwrap();
        let addr: Arc<str> = info.addr().to_string().into();
        Transport::open(info, tls, false, TIMEOUTS, &addr, &Arc::default(), None)
    }

    #[test]
    fn plain_and_tls_urls_choose_their_transport() {
        assert!(matches!(
            open("redis://:pw@127.0.0.1:1/2", options()),
            Ok(Transport::Plain { .. })
        ));
        assert!(matches!(open("unix:///tmp/r.sock", options()), Ok(Transport::Plain { .. })));
        assert!(matches!(open("rediss://127.0.0.1:1", options()), Ok(Transport::Tls(_))));
    }

    #[test]
    fn tls_settings_on_a_plain_url_are_refused_without_echoing_the_url() {
        let tls = TlsOptions { verify: false, ..options() };
        let Err(err) = open("redis://user:secret@127.0.0.1:1/0", tls) else { panic!() };
        assert!(matches!(&err, Error::Config(m) if m.contains("127.0.0.1:1")), "{err:?}");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn a_client_certificate_needs_its_key() {
        let tls = TlsOptions { certfile: Some(b"pem".to_vec()), ..options() };
        assert!(matches!(open("rediss://127.0.0.1:1", tls), Err(Error::Config(_))));
    }
}
