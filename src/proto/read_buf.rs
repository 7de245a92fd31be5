//! A connection's read buffer and the one loop that takes complete replies out of it.

use redis::Value;

use crate::errors::Error;
use crate::proto::resp::{self, ParseError, Scan};

/// Replies are parsed from `buf[start..filled]`. The buffer stays initialised, so reads need
/// no zeroing, and grows only for a reply larger than it.
pub struct ReadBuf {
    buf: Vec<u8>,
    /// Where the first unparsed reply begins.
    start: usize,
    filled: usize,
    /// Parsing waits until `filled` reaches this: the known size of an incomplete reply.
    need: usize,
}

impl ReadBuf {
    /// An empty buffer of `capacity` bytes to start with.
    pub fn new(capacity: usize) -> Self {
        ReadBuf { buf: vec![0; capacity], start: 0, filled: 0, need: 0 }
    }

    /// The next complete reply, or `None` until more bytes arrive. A reply is scanned (its
    /// headers only) before it is parsed, so a large reply arriving in many reads is parsed
    /// once, when it is whole.
    pub fn next_reply(&mut self) -> Result<Option<Value>, ParseError> {
        if self.filled < self.need {
            return Ok(None);
        }
        let rest = &self.buf[self.start..self.filled];
        match resp::scan(rest)? {
            Scan::Complete(n) => Ok(resp::parse(&rest[..n])?.map(|(value, _)| {
                self.start += n;
                value
            })),
            Scan::NeedAtLeast(n) => {
                self.need = self.start + n;
                Ok(None)
            }
        }
    }

    /// The free part of the buffer to read into: parsed replies are moved out of the way
    /// first if the buffer is full, and a buffer full of one incomplete reply grows.
    pub fn room(&mut self) -> &mut [u8] {
        if self.filled == self.buf.len() {
            if self.start > 0 {
                self.compact();
            } else {
                let len = (self.buf.len() * 2).max(self.need);
                self.buf.resize(len, 0);
            }
        }
        &mut self.buf[self.filled..]
    }

    /// Count `n` bytes just read into `room()`.
    pub fn advance(&mut self, n: usize) {
        self.filled += n;
    }

    /// Move what is not parsed yet to the front.
    pub fn compact(&mut self) {
        if self.start == 0 {
            // Nothing parsed: a large reply arriving in many reads is not moved each time.
            return;
        }
        self.buf.copy_within(self.start..self.filled, 0);
        self.filled -= self.start;
        self.need -= self.start.min(self.need);
        self.start = 0;
    }

    /// Every complete reply read so far (then `compact`), and the error that ended them if
    /// the bytes after them are not RESP (those of a server at `addr`).
    pub fn take_replies(&mut self, addr: &str) -> (Vec<Value>, Option<Error>) {
        let mut values = Vec::new();
        let failure = loop {
            match self.next_reply() {
                Ok(Some(value)) => values.push(value),
                Ok(None) => break None,
                Err(e) => break Some(unreadable(addr, e)),
            }
        };
        self.compact();
        (values, failure)
    }
}

/// The error for bytes that are not RESP: the connection is out of step and must be dropped.
pub fn unreadable(addr: &str, err: ParseError) -> Error {
    let ParseError::Protocol(m) = err;
    Error::Connection(format!("Redis at {addr} sent an unreadable reply ({m})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(rb: &mut ReadBuf, bytes: &[u8]) {
        for &b in bytes {
            rb.room()[0] = b;
            rb.advance(1);
        }
    }

    fn drain(rb: &mut ReadBuf) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(v) = rb.next_reply().unwrap() {
            out.push(v);
        }
        out
    }

    #[test]
    fn replies_come_out_whole_and_in_order_whatever_the_reads() {
        let stream = b":1\r\n$5\r\nhello\r\n*2\r\n+OK\r\n$-1\r\n";
        for split in 0..stream.len() {
            let mut rb = ReadBuf::new(4);
            let mut got = Vec::new();
            feed(&mut rb, &stream[..split]);
            got.extend(drain(&mut rb));
            feed(&mut rb, &stream[split..]);
            got.extend(drain(&mut rb));
            assert_eq!(
                got,
                vec![
                    Value::Int(1),
                    Value::BulkString(b"hello".to_vec()),
                    Value::Array(vec![Value::Okay, Value::Nil]),
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn an_incomplete_reply_is_not_reparsed_before_its_size_arrives() {
        let mut rb = ReadBuf::new(64);
        feed(&mut rb, b"$10\r\nab");
        assert_eq!(rb.next_reply(), Ok(None));
        assert_eq!(rb.need, 17);
        feed(&mut rb, b"cdefghij\r\n:2\r\n");
        assert_eq!(drain(&mut rb), vec![Value::BulkString(b"abcdefghij".to_vec()), Value::Int(2)]);
        rb.compact();
        // Empty again: even the next reply's type byte and CRLF are still to come.
        assert_eq!((rb.start, rb.filled, rb.need), (0, 0, 3));
    }

    #[test]
    fn a_full_buffer_makes_room_by_compacting_then_by_growing() {
        let mut rb = ReadBuf::new(8);
        feed(&mut rb, b":1\r\n:2\r\n");
        assert_eq!(rb.next_reply(), Ok(Some(Value::Int(1))));
        // Full, with a parsed reply in front: compacted, not grown.
        assert_eq!(rb.room().len(), 4);
        assert_eq!(rb.buf.len(), 8);
        assert_eq!(drain(&mut rb), vec![Value::Int(2)]);
        feed(&mut rb, b"$20\r\n0123456789012345678");
        assert!(rb.buf.len() >= 27);
        feed(&mut rb, b"9\r\n");
        assert_eq!(drain(&mut rb), vec![Value::BulkString(b"01234567890123456789".to_vec())]);
    }

    #[test]
    fn garbage_is_an_error() {
        let mut rb = ReadBuf::new(16);
        feed(&mut rb, b"?\r\n");
        let err = unreadable("h:1", rb.next_reply().unwrap_err());
        assert!(matches!(&err, Error::Connection(m) if m.contains("h:1")), "{err:?}");
    }
}
