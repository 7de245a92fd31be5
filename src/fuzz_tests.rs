//! Random-input tests of every decoder that reads bytes from the server: they must return an
//! error, never panic, hang or allocate without bound. `REDOXIDE_FUZZ_ITERATIONS` (default
//! 20,000) runs them longer, e.g. `REDOXIDE_FUZZ_ITERATIONS=5000000 cargo test --lib fuzz`.

use crate::codec::lz4::{lz4_frame_compress, lz4_frame_decompress};
use crate::codec::zstd::{zstd_frame_compress, zstd_frame_decompress};
use crate::proto::resp;

/// xorshift64*: deterministic, dependency-free randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n as u64)).unwrap_or(0)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| (self.next() >> 56) as u8).collect()
    }
}

fn iterations() -> usize {
    std::env::var("REDOXIDE_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

/// Take a valid input and damage it: flip, cut, splice in random bytes.
fn mutate(rng: &mut Rng, valid: &[u8]) -> Vec<u8> {
    let mut data = valid.to_vec();
    match rng.below(4) {
        0 if !data.is_empty() => {
            let i = rng.below(data.len());
            data[i] ^= 1 << rng.below(8);
        }
        1 => data.truncate(rng.below(data.len() + 1)),
        2 => {
            let at = rng.below(data.len() + 1);
            let n = rng.below(16);
            let extra = rng.bytes(n);
            data.splice(at..at, extra);
        }
        _ => {
            let keep = rng.below(data.len().min(8) + 1);
            data.truncate(keep);
            let n = rng.below(64);
            let tail = rng.bytes(n);
            data.extend(tail);
        }
    }
    data
}

#[test]
fn fuzz_compressed_frames() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let sample: Vec<u8> = (0..3000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
    let lz4 = lz4_frame_compress(&sample).expect("compress");
    let zstd = zstd_frame_compress(&sample, 3).expect("compress");
    for _ in 0..iterations() {
        let max = 1 << 20;
        if let Ok(out) = lz4_frame_decompress(&mutate(&mut rng, &lz4), max) {
            assert!(out.len() <= max);
        }
        if let Ok(out) = zstd_frame_decompress(&mutate(&mut rng, &zstd), max) {
            assert!(out.len() <= max);
        }
    }
}

#[test]
fn fuzz_resp_replies() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let valid: &[&[u8]] = &[
        b"*3\r\n$3\r\nabc\r\n:-7\r\n*2\r\n+OK\r\n$-1\r\n",
        b"$5\r\nhello\r\n",
        b"-ERR wrong\r\n",
        b":123456789\r\n",
    ];
    for _ in 0..iterations() {
        let pick = rng.below(valid.len());
        let input = mutate(&mut rng, valid[pick]);
        let scanned = resp::scan(&input);
        let parsed = resp::parse(&input);
        // A reply the scanner calls complete parses to exactly that length, or is rejected.
        if let (Ok(resp::Scan::Complete(n)), Ok(Some((_, used)))) = (&scanned, &parsed) {
            assert_eq!(n, used, "{input:?}");
        }
    }
}
