//! The reply parser of our connections: incremental, allocation-light, bounded. RESP2, which
//! every data connection speaks, and RESP3's types too, for the near cache's tracking
//! connection (`HELLO 3`): its replies and the invalidations pushed between them (`>`).

use redis::{PushKind, Value};

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
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(Scan::Complete(next)),
        b'$' | b'!' | b'=' => {
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
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let len = int(text)?;
            // A map's and an attribute's entries are pairs; an attribute precedes its value.
            let items = match kind {
                b'%' => len.max(0).saturating_mul(2),
                b'|' => len.max(0).saturating_mul(2).saturating_add(1),
                _ => len.max(0),
            };
            let mut at = next;
            for _ in 0..items {
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
        b'_' => Ok(Some((Value::Nil, next))),
        b'#' => match text {
            b"t" => Ok(Some((Value::Boolean(true), next))),
            b"f" => Ok(Some((Value::Boolean(false), next))),
            _ => Err(ParseError::Protocol("bad boolean".into())),
        },
        b',' => {
            let double = std::str::from_utf8(text).ok().and_then(|t| t.parse::<f64>().ok());
            let double = double.ok_or_else(|| ParseError::Protocol("bad double".into()))?;
            Ok(Some((Value::Double(double), next)))
        }
        b'(' => Ok(Some((Value::BigNumber(text.to_vec()), next))),
        b'!' | b'=' => {
            // Rare (a blob error, a verbatim string): let redis-rs read the whole of it.
            let Scan::Complete(end) = scan_at(buf, start, depth)? else { return Ok(None) };
            let value = redis::parse_redis_value(&buf[start..end])
                .map_err(|e| ParseError::Protocol(format!("bad reply: {e}")))?;
            Ok(Some((value, end)))
        }
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
            Ok(items_at(buf, next, len, depth)?.map(|(items, at)| (Value::Array(items), at)))
        }
        b'~' | b'>' | b'%' | b'|' => {
            let len = usize::try_from(int(text)?)
                .map_err(|_| ParseError::Protocol("bad length".into()))?;
            let count = match kind {
                b'%' | b'|' => len.saturating_mul(2),
                _ => len,
            };
            let Some((items, mut at)) = items_at(buf, next, count, depth)? else {
                return Ok(None);
            };
            let pairs = |items: Vec<Value>| {
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
                pairs
            };
            let value = match kind {
                b'~' => Value::Set(items),
                b'%' => Value::Map(pairs(items)),
                b'>' => {
                    let kind = match items.first() {
                        Some(Value::BulkString(b)) if b == b"invalidate" => PushKind::Invalidate,
                        Some(Value::BulkString(b)) => {
                            PushKind::Other(String::from_utf8_lossy(b).into_owned())
                        }
                        _ => PushKind::Other(String::new()),
                    };
                    Value::Push { kind, data: items.into_iter().skip(1).collect() }
                }
                _ => {
                    // An attribute: what it describes is the value after it.
                    let Some((data, after)) = parse_at(buf, at, depth + 1)? else {
                        return Ok(None);
                    };
                    at = after;
                    Value::Attribute { data: Box::new(data), attributes: pairs(items) }
                }
            };
            Ok(Some((value, at)))
        }
        other => Err(ParseError::Protocol(format!("unexpected reply type byte {other:#04x}"))),
    }
}

/// The `count` elements of an aggregate starting at `start` (one level below `depth`), and
/// where they end; `None` if more bytes are needed.
#[inline]
fn items_at(
    buf: &[u8],
    start: usize,
    count: usize,
    depth: usize,
) -> Result<Option<(Vec<Value>, usize)>, ParseError> {
    // Never trust a count for an allocation: each element needs at least 3 bytes.
    let mut items = Vec::with_capacity(count.min((buf.len() - start) / 3 + 1));
    let mut at = start;
    for _ in 0..count {
        match parse_at(buf, at, depth + 1)? {
            Some((item, after)) => {
                items.push(item);
                at = after;
            }
            None => return Ok(None),
        }
    }
    Ok(Some((items, at)))
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
    fn resp3_types_parse_and_scan() {
        assert_eq!(one(b"_\r\n"), Value::Nil);
        assert_eq!(one(b"#t\r\n"), Value::Boolean(true));
        assert_eq!(one(b",1.5\r\n"), Value::Double(1.5));
        assert_eq!(
            one(b"(12345678901234567890\r\n"),
            Value::BigNumber(b"12345678901234567890".to_vec())
        );
        assert_eq!(
            one(b"%2\r\n+a\r\n:1\r\n+b\r\n_\r\n"),
            Value::Map(vec![
                (Value::SimpleString("a".into()), Value::Int(1)),
                (Value::SimpleString("b".into()), Value::Nil)
            ])
        );
        assert_eq!(one(b"~1\r\n:1\r\n"), Value::Set(vec![Value::Int(1)]));
        assert!(matches!(one(b"!9\r\nERR oops!\r\n"), Value::ServerError(_)));
        assert!(matches!(one(b"=7\r\ntxt:abc\r\n"), Value::VerbatimString { .. }));
        assert_eq!(
            one(b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"),
            Value::Push {
                kind: PushKind::Invalidate,
                data: vec![Value::Array(vec![Value::BulkString(b"k".to_vec())])]
            }
        );
        assert_eq!(
            one(b">2\r\n$10\r\ninvalidate\r\n_\r\n"),
            Value::Push { kind: PushKind::Invalidate, data: vec![Value::Nil] }
        );
        let attr = one(b"|1\r\n+ttl\r\n:3\r\n:7\r\n");
        assert!(matches!(attr, Value::Attribute { ref data, .. } if **data == Value::Int(7)));
        let replies: [&[u8]; 4] = [
            b"%1\r\n$1\r\nk\r\n~2\r\n#f\r\n,-inf\r\n",
            b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            b"|1\r\n+a\r\n+b\r\n$2\r\nxy\r\n",
            b"!3\r\nERR\r\n",
        ];
        for reply in replies {
            assert_eq!(scan(reply), Ok(Scan::Complete(reply.len())), "{reply:?}");
            assert_eq!(parse(reply).unwrap().unwrap().1, reply.len(), "{reply:?}");
            for cut in 0..reply.len() {
                assert!(matches!(scan(&reply[..cut]), Ok(Scan::NeedAtLeast(_))), "{reply:?} {cut}");
                assert_eq!(parse(&reply[..cut]), Ok(None), "{reply:?} {cut}");
            }
        }
        assert!(parse(b"#x\r\n").is_err());
        assert!(parse(b",nope\r\n").is_err());
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
