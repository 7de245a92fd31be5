//! Commands: built from Python arguments, and packed into the bytes a connection writes.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString, PyTuple};
use redis::{Cmd, Pipeline};

use crate::commands::{self, Facts};

/// One round trip's worth of work.
pub enum Request {
    Cmd(Cmd),
    Pipe(Pipeline),
}

/// How many replies a request gets, and whether they come back as a list (a pipeline of one
/// command still answers with a list of one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replies {
    One,
    Many(usize),
}

impl Replies {
    /// How many replies.
    pub fn count(self) -> usize {
        match self {
            Replies::One => 1,
            Replies::Many(n) => n,
        }
    }
}

impl Request {
    /// Whether the request may be replayed after a dropped connection: only a read (by the
    /// command table, src/commands.rs) alone is.
    pub fn is_idempotent(&self) -> bool {
        let Request::Cmd(cmd) = self else { return false };
        cmd.args_iter().next().is_some_and(|a| match a {
            redis::Arg::Simple(name) => commands::facts(name).is_some_and(Facts::replayable),
            _ => false,
        })
    }

    /// The bytes to write, and the replies they get.
    pub fn pack(&self) -> (Vec<u8>, Replies) {
        match self {
            Request::Cmd(cmd) => (cmd.get_packed_command(), Replies::One),
            Request::Pipe(pipe) => (pipe.get_packed_pipeline(), Replies::Many(pipe.len())),
        }
    }
}

/// Append one Python value to a command: bytes and str as they are, ints as digits.
pub fn push_arg(cmd: &mut Cmd, obj: &Bound<'_, PyAny>) -> PyResult<()> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        cmd.arg(b.as_bytes());
    } else if let Ok(s) = obj.cast::<PyString>() {
        cmd.arg(s.to_str()?);
    } else if obj.is_exact_instance_of::<PyInt>() {
        // An int's digits, without a Python str made for them (one past 64 bits as Python
        // writes it).
        match obj.extract::<i64>() {
            Ok(n) => cmd.arg(n),
            Err(_) => cmd.arg(obj.str()?.to_str()?),
        };
    } else if obj.is_instance_of::<PyInt>() {
        // A bool, or an int subclass: as Python writes it ("True").
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

/// A command from a sequence of Python arguments, its name first.
pub fn command_from(args: &Bound<'_, PyAny>) -> PyResult<Cmd> {
    let mut cmd;
    if let Ok(tuple) = args.cast::<PyTuple>() {
        // What the cache sends: a tuple, whose length sizes the command at once.
        cmd = Cmd::with_capacity(tuple.len(), 32 * tuple.len());
        for arg in tuple.iter() {
            push_arg(&mut cmd, &arg)?;
        }
    } else {
        cmd = Cmd::new();
        for arg in args.try_iter()? {
            push_arg(&mut cmd, &arg?)?;
        }
    }
    if cmd.args_iter().next().is_none() {
        return Err(PyValueError::new_err("a command needs at least its name"));
    }
    Ok(cmd)
}

/// A pipeline from an iterable of Python argument sequences.
pub fn pipeline_from(commands: &Bound<'_, PyAny>) -> PyResult<Pipeline> {
    let mut pipe = Pipeline::new();
    for args in commands.try_iter()? {
        pipe.add_command(command_from(&args?)?);
    }
    Ok(pipe)
}

/// SET key value [PX ttl_ms] [NX|XX]; a zero TTL is one millisecond (SET rejects PX 0).
pub fn set_cmd(key: &str, value: &[u8], ttl_ms: Option<u64>, nx: bool, xx: bool) -> Cmd {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(Request::Cmd(redis::cmd("MGet")).is_idempotent());
        assert!(!Request::Cmd(redis::cmd("GETDEL")).is_idempotent(), "a prefix is not a read");
        let mut incr = redis::cmd("INCR");
        incr.arg("k");
        assert!(!Request::Cmd(incr).is_idempotent());
        assert!(!Request::Pipe(Pipeline::new()).is_idempotent());
        assert!(Request::Cmd(redis::cmd("HGET")).is_idempotent(), "every read, by the table");
        assert!(!Request::Cmd(redis::cmd("MULTI")).is_idempotent(), "control is not a read");
        assert!(!Request::Cmd(redis::cmd("NOSUCHCOMMAND")).is_idempotent());
    }

    #[test]
    fn pipelines_expect_one_reply_per_command() {
        let mut pipe = Pipeline::new();
        pipe.add_command(redis::cmd("PING")).add_command(redis::cmd("PING"));
        assert_eq!(Request::Pipe(pipe).pack().1, Replies::Many(2));
        assert_eq!(Request::Cmd(redis::cmd("PING")).pack().1, Replies::One);
    }
}
