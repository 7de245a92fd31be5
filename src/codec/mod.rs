//! Compression off the GIL: LZ4 frames (the format python-lz4's `lz4.frame` and django-redis
//! write) and standard zstd frames (pyzstd, zstandard).
//!
//! Decompression trusts nothing in the input: a declared content size is checked against
//! the caller's `max_size` and against what the input could possibly expand to before any
//! allocation, and output without a declared size grows only up to `max_size`.

pub mod lz4;
pub mod zstd;

use crate::errors::{Error, Result};

/// A zstd block's size: the slack allowed over what an input could expand to.
const ZSTD_BLOCK: u64 = 128 * 1024;

fn decode_err(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Decode(format!("invalid {what} data: {detail}"))
}

/// Check a declared decompressed size before allocating for it.
fn check_claim(
    what: &str,
    claimed: u64,
    input_len: usize,
    ratio: u64,
    max: usize,
) -> Result<usize> {
    if claimed > max as u64 {
        return Err(Error::Decode(format!(
            "{what} data declares {claimed} bytes, above the {max}-byte limit"
        )));
    }
    if claimed > (input_len as u64).saturating_mul(ratio).saturating_add(ZSTD_BLOCK) {
        return Err(decode_err(
            what,
            format!("declares {claimed} bytes, more than {input_len} compressed bytes can hold"),
        ));
    }
    usize::try_from(claimed).map_err(|_| decode_err(what, "declared size too large"))
}

#[cfg(test)]
mod test_support {
    use crate::errors::{Error, Result};

    pub const MAX: usize = 512 << 20;

    pub fn sample(len: usize) -> Vec<u8> {
        let text =
            b"{'id': 17, 'name': 'Ada Lovelace', 'email': 'ada@example.com', 'active': True}";
        let mut x = 0x2545_f491_u32;
        (0..len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if x.is_multiple_of(7) {
                    x as u8
                } else {
                    text[i % text.len()]
                }
            })
            .collect()
    }

    pub fn assert_decode_error<T: std::fmt::Debug>(result: Result<T>) {
        assert!(matches!(result, Err(Error::Decode(_))), "{result:?}");
    }
}
