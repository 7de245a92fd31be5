//! What every new connection sends before its first command (AUTH, SELECT, READONLY as
//! configured, then CLIENT SETINFO naming the library), and how its replies are judged: by
//! which command failed, not by their text.

use std::borrow::Cow;
use std::sync::Arc;

use redis::{Pipeline, Value};

use crate::credentials::Cell;
use crate::errors::{Error, Result};
use crate::offers::Offers;
use crate::proto::Replies;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Auth,
    Select,
    ReadOnly,
    /// CLIENT SETINFO: servers before 7.2 refuse it, and that is no reason to fail.
    SetInfo,
    /// `HELLO 3`, for the near cache's tracking connection: a refusal (a server before 6) is
    /// one of tracking.
    Resp3,
    /// HELLO without a protocol version (it changes nothing): the server's name, version and
    /// modules. A server before 6 refuses it: nothing is learnt, no reason to fail.
    Hello,
    /// `COMMAND INFO` of the commands whose names differ between servers (an ACL user may
    /// be refused it: then the version decides).
    Probe,
}

/// The packed handshake of one server's connections.
pub struct Handshake {
    /// Everything but the AUTH of changing credentials (which is packed per connection).
    packed: Vec<u8>,
    /// The command each reply answers, in order.
    steps: Vec<Step>,
    /// Credentials that change (`CREDENTIAL_PROVIDER`): AUTH goes first, with the current ones.
    creds: Option<Arc<Cell>>,
    /// What the server offers, learnt from HELLO and the probe (`learning`).
    offers: Option<Arc<Offers>>,
}

impl Handshake {
    /// AUTH when there is a password, SELECT for a database other than 0, READONLY to read
    /// from a cluster replica.
    #[cfg(test)]
    pub fn new(username: Option<&str>, password: Option<&str>, db: i64, readonly: bool) -> Self {
        Self::identified(username, password, db, readonly, None)
    }

    /// `new`, then `CLIENT SETINFO lib-name` and `lib-ver` when `library` (name, version) is
    /// given, so the server's CLIENT LIST shows which clients are connected. In the same
    /// pipeline: a server that does not know SETINFO (before 7.2) answers an error reply,
    /// which `check` ignores, and no round trip is spent finding out.
    pub fn identified(
        username: Option<&str>,
        password: Option<&str>,
        db: i64,
        readonly: bool,
        library: Option<(&str, &str)>,
    ) -> Self {
        Self::build(username, password, db, readonly, library, false)
    }

    /// `identified`, speaking RESP3 (`HELLO 3` right after AUTH): the near cache's tracking
    /// connection, whose invalidations are pushed between its replies.
    pub fn resp3(
        username: Option<&str>,
        password: Option<&str>,
        db: i64,
        readonly: bool,
        library: Option<(&str, &str)>,
    ) -> Self {
        Self::build(username, password, db, readonly, library, true)
    }

    fn build(
        username: Option<&str>,
        password: Option<&str>,
        db: i64,
        readonly: bool,
        library: Option<(&str, &str)>,
        resp3: bool,
    ) -> Self {
        let mut pipe = Pipeline::new();
        let mut steps = Vec::new();
        if let Some(password) = password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = username {
                auth.arg(user);
            }
            pipe.add_command(auth.arg(password).clone());
            steps.push(Step::Auth);
        }
        if resp3 {
            pipe.add_command(redis::cmd("HELLO").arg(3).clone());
            steps.push(Step::Resp3);
        }
        if db != 0 {
            pipe.add_command(redis::cmd("SELECT").arg(db).clone());
            steps.push(Step::Select);
        }
        if readonly {
            pipe.add_command(redis::cmd("READONLY"));
            steps.push(Step::ReadOnly);
        }
        if let Some((name, version)) = library {
            for (attr, value) in [("lib-name", name), ("lib-ver", version)] {
                pipe.add_command(redis::cmd("CLIENT").arg("SETINFO").arg(attr).arg(value).clone());
                steps.push(Step::SetInfo);
            }
        }
        Handshake { packed: pipe.get_packed_pipeline(), steps, creds: None, offers: None }
    }

    /// Also ask the server what it offers (HELLO, then `COMMAND INFO` of the commands whose
    /// names differ), learnt into `offers` from every connection's handshake replies (by
    /// `check`, or where nobody waits for them, in front of the first command's): renewed on
    /// each reconnect.
    pub fn learning(mut self, offers: Arc<Offers>) -> Self {
        let mut pipe = Pipeline::new();
        pipe.add_command(redis::cmd("HELLO"));
        let mut probe = redis::cmd("COMMAND");
        probe.arg("INFO");
        for (name, _) in crate::offers::PROBED {
            probe.arg(name);
        }
        pipe.add_command(probe);
        self.packed.extend_from_slice(&pipe.get_packed_pipeline());
        self.steps.extend([Step::Hello, Step::Probe]);
        self.offers = Some(offers);
        self
    }

    /// Authenticate with the credentials in `creds`, for a handshake built without a password
    /// (they replace it).
    pub fn with_credentials(mut self, creds: Option<Arc<Cell>>) -> Self {
        if let Some(creds) = creds {
            debug_assert!(!self.steps.contains(&Step::Auth), "a fixed password and a provider");
            self.steps.insert(0, Step::Auth);
            self.creds = Some(creds);
        }
        self
    }

    /// Wait (up to `timeout`) for a provider's first credentials if there are none yet; the
    /// reason if none came.
    pub fn first(&self, timeout: std::time::Duration) -> Result<()> {
        match &self.creds {
            Some(creds) => creds.first(timeout),
            None => Ok(()),
        }
    }

    /// `first` for async code.
    pub async fn first_async(&self, timeout: std::time::Duration) -> Result<()> {
        match &self.creds {
            Some(creds) => creds.first_async(timeout).await,
            None => Ok(()),
        }
    }

    /// The bytes to write on a new connection, and the generation of the credentials in them
    /// (0 when they do not change).
    pub fn start(&self) -> Result<(Cow<'_, [u8]>, u64)> {
        let Some(creds) = &self.creds else { return Ok((Cow::Borrowed(&self.packed), 0)) };
        let (generation, secret) = creds.current()?;
        let mut bytes = secret.auth();
        bytes.extend_from_slice(&self.packed);
        Ok((Cow::Owned(bytes), generation))
    }

    /// AUTH with the current credentials, for a live connection that authenticated under
    /// generation `seen` (which moves on); None while that is still the current one.
    #[inline]
    pub fn reauth(&self, seen: &mut u64) -> Option<Vec<u8>> {
        let creds = self.creds.as_ref()?;
        if creds.generation() == *seen {
            return None;
        }
        let (generation, secret) = creds.current().ok()?;
        *seen = generation;
        Some(secret.auth())
    }

    /// After `check` failed with `err` on credentials of generation `seen`: whether fresh
    /// credentials came within `timeout` (asked for from the provider), so that the handshake
    /// is worth one more try.
    pub fn refreshed(&self, err: &Error, seen: u64, timeout: std::time::Duration) -> bool {
        match &self.creds {
            Some(creds) if crate::credentials::refused(err) => creds.refresh(seen, timeout),
            _ => false,
        }
    }

    /// `refreshed` for async code.
    pub async fn refreshed_async(
        &self,
        err: &Error,
        seen: u64,
        timeout: std::time::Duration,
    ) -> bool {
        match &self.creds {
            Some(creds) if crate::credentials::refused(err) => {
                creds.refresh_async(seen, timeout).await
            }
            _ => false,
        }
    }

    /// Whether there is nothing to send (a connection is ready as soon as it is open).
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Whether a connection must wait for the replies before its first command: not when
    /// the handshake is only CLIENT SETINFO, HELLO and the probe, whose replies are read in
    /// front of the first command's (so naming the client and learning what the server offers
    /// cost no round trip, and a stalled server is a command's timeout, not the connect's):
    /// the offers are learnt from them there (`Offers::learn_discarded`).
    pub fn needs_answer(&self) -> bool {
        self.steps.iter().any(|step| !matches!(step, Step::SetInfo | Step::Hello | Step::Probe))
    }

    /// The bytes to write (no credentials that change: see `start`).
    #[cfg(test)]
    pub fn packed(&self) -> &[u8] {
        &self.packed
    }

    /// The replies the handshake gets.
    pub fn replies(&self) -> Replies {
        Replies::Many(self.steps.len())
    }

    /// Judge the handshake's replies (a list, one per command): a refused AUTH, or a server
    /// asking for one (NOAUTH), is bad credentials; any other error reply is a setting the
    /// server refused.
    pub fn check(&self, replies: Value, addr: &str) -> Result<()> {
        let replies = match replies {
            Value::Array(items) => items,
            one => vec![one],
        };
        let (mut hello, mut probe) = (None, None);
        for (step, reply) in self.steps.iter().zip(&replies) {
            match step {
                Step::Hello => hello = Some(reply),
                Step::Probe => probe = Some(reply),
                _ => {}
            }
            let Value::ServerError(err) = reply else { continue };
            if matches!(step, Step::SetInfo | Step::Hello | Step::Probe) {
                continue;
            }
            return Err(if *step == Step::Auth || err.code() == "NOAUTH" {
                Error::Connection(format!(
                    "Authentication to Redis at {addr} failed: check the username and password"
                ))
            } else {
                Error::from_reply(err, &format!("Redis at {addr} refused the connection settings"))
            });
        }
        if let (Some(offers), Some(hello)) = (&self.offers, hello) {
            offers.learn(hello, probe);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &[u8]) -> Value {
        redis::parse_redis_value(text).unwrap()
    }

    #[test]
    fn sends_only_what_is_configured() {
        let none = Handshake::new(Some("user"), None, 0, false);
        assert!(none.is_empty());
        let all = Handshake::new(Some("user"), Some("pw"), 2, true);
        assert_eq!(all.replies(), Replies::Many(3));
        let text = String::from_utf8_lossy(all.packed()).into_owned();
        assert!(text.starts_with("*3\r\n$4\r\nAUTH\r\n$4\r\nuser\r\n$2\r\npw\r\n"), "{text}");
        assert!(text.contains("SELECT\r\n$1\r\n2\r\n"), "{text}");
        assert!(text.ends_with("*1\r\n$8\r\nREADONLY\r\n"), "{text}");
    }

    #[test]
    fn a_failed_auth_is_bad_credentials_whatever_its_text() {
        let hs = Handshake::new(None, Some("pw"), 1, false);
        let replies = Value::Array(vec![reply(b"-ERR some new wording\r\n"), Value::Okay]);
        let err = hs.check(replies, "h:1").unwrap_err();
        assert!(
            matches!(&err, Error::Connection(m) if m == "Authentication to Redis at h:1 failed: check the username and password"),
            "{err:?}"
        );
    }

    #[test]
    fn a_refused_setting_is_a_response_error_with_its_code() {
        let hs = Handshake::new(None, Some("pw"), 99, false);
        let replies = Value::Array(vec![Value::Okay, reply(b"-ERR DB index is out of range\r\n")]);
        let err = hs.check(replies, "h:1").unwrap_err();
        let Error::Response { code, message, .. } = &err else { panic!("{err:?}") };
        assert_eq!(code, "ERR");
        assert_eq!(
            message,
            "Redis at h:1 refused the connection settings: ERR DB index is out of range"
        );
        // A SELECT refused because the server wants a password is about credentials.
        let hs = Handshake::new(None, None, 3, false);
        let err = hs.check(reply(b"-NOAUTH Authentication required.\r\n"), "h:1").unwrap_err();
        assert!(matches!(err, Error::Connection(_)), "{err:?}");
        assert!(hs.check(Value::Array(vec![Value::Okay]), "h:1").is_ok());
    }

    #[test]
    fn client_setinfo_follows_the_settings_and_its_refusal_is_ignored() {
        let alone = Handshake::identified(None, None, 0, false, Some(("redoxide", "1.2.3")));
        assert!(!alone.is_empty() && !alone.needs_answer());
        let hs = Handshake::identified(None, None, 2, false, Some(("redoxide", "1.2.3")));
        assert!(hs.needs_answer());
        assert_eq!(hs.replies(), Replies::Many(3));
        let text = String::from_utf8_lossy(hs.packed()).into_owned();
        assert!(text.contains("SETINFO\r\n$8\r\nlib-name\r\n$8\r\nredoxide\r\n"), "{text}");
        assert!(text.ends_with("lib-ver\r\n$5\r\n1.2.3\r\n"), "{text}");
        // A server before 7.2 does not know SETINFO.
        let old = reply(b"-ERR unknown subcommand 'SETINFO'. Try CLIENT HELP.\r\n");
        let replies = Value::Array(vec![Value::Okay, old.clone(), old]);
        assert!(hs.check(replies, "h:1").is_ok());
        // Any other refusal still counts.
        let bad_db = reply(b"-ERR DB index is out of range\r\n");
        let replies = Value::Array(vec![bad_db, Value::Okay, Value::Okay]);
        assert!(matches!(hs.check(replies, "h:1"), Err(Error::Response { .. })));
    }

    #[test]
    fn a_resp3_handshake_says_hello_3_after_auth_and_its_refusal_counts() {
        let hs = Handshake::resp3(None, Some("pw"), 0, false, Some(("redoxide", "1.2.3")));
        assert!(hs.needs_answer());
        assert_eq!(hs.replies(), Replies::Many(4));
        let text = String::from_utf8_lossy(hs.packed()).into_owned();
        assert!(text.contains("AUTH\r\n$2\r\npw\r\n*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"), "{text}");
        let old = reply(b"-ERR unknown command 'HELLO'\r\n");
        let replies = Value::Array(vec![Value::Okay, old, Value::Okay, Value::Okay]);
        assert!(matches!(hs.check(replies, "h:1"), Err(Error::Response { .. })));
        let map = Value::Map(vec![]);
        assert!(hs
            .check(Value::Array(vec![Value::Okay, map, Value::Okay, Value::Okay]), "h:1")
            .is_ok());
    }

    #[test]
    fn a_learning_handshake_asks_last_and_learns_from_any_connection() {
        let offers = Arc::new(Offers::default());
        let alone = Handshake::identified(None, None, 0, false, Some(("redoxide", "1.2.3")))
            .learning(Arc::new(Offers::default()));
        assert!(!alone.needs_answer());
        let hs = Handshake::identified(None, None, 2, false, None).learning(Arc::clone(&offers));
        assert!(hs.needs_answer());
        assert_eq!(hs.replies(), Replies::Many(3));
        let text = String::from_utf8_lossy(hs.packed()).into_owned();
        assert!(text.contains("*1\r\n$5\r\nHELLO\r\n*6\r\n$7\r\nCOMMAND\r\n$4\r\nINFO"), "{text}");
        let hello =
            reply(b"*4\r\n$6\r\nserver\r\n$6\r\nvalkey\r\n$7\r\nversion\r\n$5\r\n9.1.2\r\n");
        let probe = reply(b"*4\r\n*0\r\n*0\r\n_\r\n*0\r\n");
        let replies = Value::Array(vec![Value::Okay, hello, probe]);
        assert!(hs.check(replies, "h:1").is_ok());
        assert!(offers.has(crate::offers::MSETEX | crate::offers::DELIFEQ));
        assert!(!offers.has(crate::offers::DELEX));
        // A server before 6 refuses HELLO and COMMAND INFO's names: no reason to fail.
        let old = reply(b"-ERR unknown command 'HELLO'\r\n");
        let fresh = Arc::new(Offers::default());
        let hs = Handshake::identified(None, None, 0, false, None).learning(Arc::clone(&fresh));
        assert!(hs.check(Value::Array(vec![old.clone(), old]), "h:1").is_ok());
        assert!(!fresh.known());
    }
}
