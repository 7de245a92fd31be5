//! A RESP2 reply parser for the async connection: incremental, allocation-light, bounded.

use redis::Value;

/// Why a buffer could not be parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The bytes are not RESP: the connection is out of step and must be dropped.
    Protocol(String),
}

/// Replies nest at most this deep; deeper input is treated as garbage, not recursed into.
const MAX_DEPTH: usize = 64;
/// A bulk string longer than Redis' own limit (512 MB) is garbage.
const MAX_BULK: i64 = 512 * 1024 * 1024;

/// How much of a buffer the first reply takes, found without building it.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// The first reply is complete and this many bytes long.
    Complete(usize),
    /// Incomplete: nothing can be parsed before the buffer holds at least this many bytes.
    NeedAtLeast(usize),
}

/// Find where the first reply ends, skipping bulk payloads by their length: linear in the
/// reply's headers, not its bytes, so a large reply arriving in many reads is cheap to re-check.
pub fn scan(buf: &[u8]) -> Result<Scan, ParseError> {
    scan_at(buf, 0, 0)
}

fn scan_at(buf: &[u8], start: usize, depth: usize) -> Result<Scan, ParseError> {
    if depth > MAX_DEPTH {
        return Err(ParseError::Protocol("reply nested too deep".into()));
    }
    let Some(&kind) = buf.get(start) else { return Ok(Scan::NeedAtLeast(start + 3)) };
    let Some((text, next)) = line(buf, start + 1) else {
        return Ok(Scan::NeedAtLeast(buf.len() + 1));
    };
    match kind {
        b'+' | b'-' | b':' => Ok(Scan::Complete(next)),
        b'$' => {
            let len = int(text)?;
            if len < 0 {
                return Ok(Scan::Complete(next));
            }
            if len > MAX_BULK {
                return Err(ParseError::Protocol(format!("bulk string of {len} bytes")));
            }
            let end = next
                + usize::try_from(len).map_err(|_| ParseError::Protocol("bad length".into()))?
                + 2;
            Ok(if buf.len() >= end { Scan::Complete(end) } else { Scan::NeedAtLeast(end) })
        }
        b'*' => {
            let len = int(text)?;
            let mut at = next;
            for _ in 0..len.max(0) {
                match scan_at(buf, at, depth + 1)? {
                    Scan::Complete(end) => at = end,
                    need => return Ok(need),
                }
            }
            Ok(Scan::Complete(at))
        }
        other => Err(ParseError::Protocol(format!("unexpected reply type byte {other:#04x}"))),
    }
}

/// Parse one complete reply from the front of `buf`.
/// Return the reply and the bytes it used, or `None` if more bytes are needed.
pub fn parse(buf: &[u8]) -> Result<Option<(Value, usize)>, ParseError> {
    parse_at(buf, 0, 0)
}

fn line(buf: &[u8], start: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(start..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], start + end + 2))
}

fn int(text: &[u8]) -> Result<i64, ParseError> {
    std::str::from_utf8(text).ok().and_then(|s| s.parse::<i64>().ok()).ok_or_else(|| {
        ParseError::Protocol(format!("bad integer {:?}", String::from_utf8_lossy(text)))
    })
}

fn parse_at(buf: &[u8], start: usize, depth: usize) -> Result<Option<(Value, usize)>, ParseError> {
    if depth > MAX_DEPTH {
        return Err(ParseError::Protocol("reply nested too deep".into()));
    }
    let Some(&kind) = buf.get(start) else { return Ok(None) };
    let Some((text, next)) = line(buf, start + 1) else { return Ok(None) };
    match kind {
        b'+' => {
            let value = if text == b"OK" {
                Value::Okay
            } else {
                Value::SimpleString(String::from_utf8_lossy(text).into_owned())
            };
            Ok(Some((value, next)))
        }
        b'-' => {
            // Rare: let redis-rs classify the error reply (WRONGTYPE, NOSCRIPT, ...).
            let value = redis::parse_redis_value(&buf[start..next])
                .map_err(|e| ParseError::Protocol(format!("bad error reply: {e}")))?;
            Ok(Some((value, next)))
        }
        b':' => Ok(Some((Value::Int(int(text)?), next))),
        b'$' => {
            let len = int(text)?;
            if len < 0 {
                return Ok(Some((Value::Nil, next)));
            }
            if len > MAX_BULK {
                return Err(ParseError::Protocol(format!("bulk string of {len} bytes")));
            }
            let len =
                usize::try_from(len).map_err(|_| ParseError::Protocol("bad length".into()))?;
            let end = next + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ParseError::Protocol("bulk string without CRLF".into()));
            }
            Ok(Some((Value::BulkString(buf[next..end].to_vec()), end + 2)))
        }
        b'*' => {
            let len = int(text)?;
            if len < 0 {
                return Ok(Some((Value::Nil, next)));
            }
            let len =
                usize::try_from(len).map_err(|_| ParseError::Protocol("bad length".into()))?;
            // Never trust a count for an allocation: each element needs at least 3 bytes.
            let mut items = Vec::with_capacity(len.min((buf.len() - next) / 3 + 1));
            let mut at = next;
            for _ in 0..len {
                match parse_at(buf, at, depth + 1)? {
                    Some((item, after)) => {
                        items.push(item);
                        at = after;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Value::Array(items), at)))
        }
        other => Err(ParseError::Protocol(format!("unexpected reply type byte {other:#04x}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep_garbage() -> String {
        "*1\r\n".repeat(100)
    }

    fn one(input: &[u8]) -> Value {
        let (value, used) = parse(input).unwrap().unwrap();
        assert_eq!(used, input.len());
        value
    }

    #[test]
    fn parses_each_type() {
        assert_eq!(one(b"+OK\r\n"), Value::Okay);
        assert_eq!(one(b"+PONG\r\n"), Value::SimpleString("PONG".into()));
        assert_eq!(one(b":-42\r\n"), Value::Int(-42));
        assert_eq!(one(b"$3\r\na\r\n\r\n"), Value::BulkString(b"a\r\n".to_vec()));
        assert_eq!(one(b"$0\r\n\r\n"), Value::BulkString(Vec::new()));
        assert_eq!(one(b"$-1\r\n"), Value::Nil);
        assert_eq!(one(b"*-1\r\n"), Value::Nil);
        assert_eq!(
            one(b"*3\r\n$1\r\nx\r\n$-1\r\n:7\r\n"),
            Value::Array(vec![Value::BulkString(b"x".to_vec()), Value::Nil, Value::Int(7)])
        );
        assert!(matches!(one(b"-WRONGTYPE bad\r\n"), Value::ServerError(_)));
    }

    #[test]
    fn incomplete_input_asks_for_more() {
        for input in [&b""[..], b"$", b"$5\r\nab", b"$2\r\nab", b"*2\r\n:1\r\n", b":12"] {
            assert_eq!(parse(input), Ok(None), "{input:?}");
        }
    }

    #[test]
    fn consecutive_replies_split_cleanly() {
        let buf = b":1\r\n$1\r\nz\r\n";
        let (first, used) = parse(buf).unwrap().unwrap();
        assert_eq!(first, Value::Int(1));
        assert_eq!(parse(&buf[used..]).unwrap().unwrap().0, Value::BulkString(b"z".to_vec()));
    }

    #[test]
    fn scan_agrees_with_parse() {
        let replies: [&[u8]; 6] = [
            b"+OK\r\n",
            b":-42\r\n",
            b"$3\r\na\r\n\r\n",
            b"$-1\r\n",
            b"*3\r\n$1\r\nx\r\n$-1\r\n*1\r\n:7\r\n",
            b"-ERR no\r\n",
        ];
        for reply in replies {
            assert_eq!(scan(reply), Ok(Scan::Complete(reply.len())), "{reply:?}");
            for cut in 0..reply.len() {
                match scan(&reply[..cut]) {
                    Ok(Scan::NeedAtLeast(n)) => {
                        assert!(n > cut && n <= reply.len() + 1, "{reply:?} {cut} {n}")
                    }
                    other => panic!("{reply:?} cut at {cut}: {other:?}"),
                }
            }
        }
        // A big bulk string asks for all of itself at once, not one read at a time.
        assert_eq!(scan(b"$1000\r\nab"), Ok(Scan::NeedAtLeast(1009)));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic_or_a_huge_allocation() {
        assert!(parse(b"?what\r\n").is_err());
        assert!(parse(b":abc\r\n").is_err());
        assert!(parse(b"$99999999999\r\n").is_err());
        assert!(parse(b"$1\r\nabc").is_err());
        assert!(scan(b"?what\r\n").is_err());
        assert!(scan(deep_garbage().as_bytes()).is_err());
        assert_eq!(parse(b"*4000000000\r\n"), Ok(None));
        let deep = "*1\r\n".repeat(100);
        assert!(parse(deep.as_bytes()).is_err());
    }
}
