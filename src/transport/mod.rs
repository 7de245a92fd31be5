//! The connections to one server, behind one `Transport`, all made from one recipe (its
//! `Endpoint`: where, TLS, timeouts, the handshake with identity and credentials): a blocking
//! one per thread for sync calls (or one shared by the threads), one multiplexed per process
//! for async calls. TCP, unix sockets and TLS alike are our own sockets.

mod blocking;
mod fanout;
mod mux;
mod thread_conns;
mod tls;
mod tls_io;

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
pub use mux::{flush_deferred, Done, Ordered, PushSink, Pushed, Seen};
pub use thread_conns::exec_sync;
pub use tls::TlsOptions;

/// Where a server is.
pub enum Target {
    Tcp(String, u16),
    Unix(PathBuf),
    /// TLS over TCP, set up once for every connection.
    Tls {
        host: String,
        port: u16,
        setup: tls::TlsSetup,
    },
}

/// The recipe of every connection made to one server, whoever owns it.
pub struct Endpoint {
    pub target: Target,
    /// Sent first on every connection.
    pub handshake: Handshake,
    /// The same, speaking RESP3: for the near cache's tracking connection.
    pub resp3: Handshake,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// host:port or path, for messages: never credentials.
    pub addr: Arc<str>,
    /// The client's counters (bytes, connections, reconnects).
    pub stats: Arc<Stats>,
    /// What the server offers, learnt by the handshake of every new connection.
    pub offers: Arc<crate::offers::Offers>,
}

/// How one client reaches its server: its endpoint and the connections made from it.
/// `shared` carries every thread's sync calls under `SYNC_CONNECTIONS: "shared"`.
pub struct Transport {
    config: Arc<Endpoint>,
    mux: mux::Mux,
    shared: blocking::shared::Shared,
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
        &self.config.offers
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
            ConnectionAddr::TcpTls { host, port, insecure, .. } => {
                let setup = tls::TlsSetup::new(host, &tls, *insecure)?;
                Target::Tls { host: host.clone(), port: *port, setup }
            }
            _ if !tls.is_default() => {
                return Err(Error::Config(format!(
                    "the SSL_* options need a rediss:// or valkeys:// LOCATION, not one for {addr}"
                )))
            }
            ConnectionAddr::Tcp(host, port) => Target::Tcp(host.clone(), *port),
            ConnectionAddr::Unix(path) => Target::Unix(path.clone()),
            other => {
                return Err(Error::Config(format!("unsupported address for {addr}: {other:?}")))
            }
        };
        let settings = info.redis_settings();
        let library = Some(("redoxide", env!("CARGO_PKG_VERSION")));
        let password = if creds.is_some() { None } else { settings.password() };
        let offers = Arc::<crate::offers::Offers>::default();
        let (user, db) = (settings.username(), settings.db());
        let handshake = Handshake::identified(user, password, db, readonly, library)
            .with_credentials(creds.clone())
            .learning(Arc::clone(&offers));
        let resp3 = Handshake::resp3(user, password, db, readonly, library).with_credentials(creds);
        let config = Arc::new(Endpoint {
            target,
            handshake,
            resp3,
            connect_timeout: timeouts.connect,
            response_timeout: timeouts.response,
            addr: Arc::clone(addr),
            stats: Arc::clone(stats),
            offers,
        });
        Ok(Transport {
            mux: mux::Mux::new(Arc::clone(&config)),
            shared: blocking::shared::Shared::new(Arc::clone(&config)),
            config,
        })
    }

    /// The recipe of its connections (the near cache's tracking connection is made from it).
    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.config
    }

    /// The client's counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.config.stats
    }

    /// How long a reply may take.
    pub fn response_timeout(&self) -> Duration {
        self.config.response_timeout
    }

    /// A sync call on the process' one shared sync connection, the GIL released by the
    /// caller.
    pub fn call_shared(&self, req: &Request) -> Result<Reply> {
        self.shared.call(req)
    }

    /// A new blocking connection, for one thread.
    fn connect(&self) -> Result<Link> {
        blocking::Blocking::connect(&self.config)
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
        let (packed, replies) = req.pack();
        let replayable = req.is_idempotent();
        let (conn, schedule) = self.mux.submit(packed, replies, replayable, slot, queue)?;
        let conn: Arc<dyn Poller> = conn;
        Ok((Some(conn), schedule))
    }
}

/// One thread's blocking connection to a server.
type Link = blocking::Blocking;

impl Link {
    /// One round trip.
    fn send_request(&mut self, req: &Request) -> Result<Reply> {
        let (packed, replies) = req.pack();
        self.request(&packed, replies)
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
        let kind = |t: &Target| match t {
            Target::Tcp(..) => "tcp",
            Target::Unix(_) => "unix",
            Target::Tls { .. } => "tls",
        };
        let target = |url| open(url, options()).map(|t| kind(&t.config.target));
        assert!(matches!(target("redis://:pw@127.0.0.1:1/2"), Ok("tcp")));
        assert!(matches!(target("unix:///tmp/r.sock"), Ok("unix")));
        assert!(matches!(target("rediss://127.0.0.1:1"), Ok("tls")));
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
