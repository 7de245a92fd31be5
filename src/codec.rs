//! Compression off the GIL: LZ4 frames (the format python-lz4's `lz4.frame` and django-redis
//! write) and standard zstd frames (pyzstd, zstandard).
//!
//! Decompression trusts nothing in the input: a declared content size is checked against
//! the caller's `max_size` and against what the input could possibly expand to before any
//! allocation, and output without a declared size grows only up to `max_size`.

use std::cell::RefCell;

use lz4_flex::block as lz4_block;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use twox_hash::XxHash32;
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx, DParameter, InBuffer, OutBuffer};

use crate::errors::{guard, Error, Result};

/// Inputs at least this long are (de)compressed with the GIL released; below it the
/// release and re-acquire would cost more than the work.
const DETACH_THRESHOLD: usize = 4 * 1024;

const LZ4_MAGIC: u32 = 0x184D_2204;
/// The LZ4 window: linked blocks may refer back this far into earlier output.
const LZ4_WINDOW: usize = 64 * 1024;
const LZ4_BLOCK: usize = 64 * 1024;
/// An LZ4 sequence can expand at most ~255x (each length byte adds 255).
const LZ4_MAX_RATIO: u64 = 256;
/// A zstd RLE block turns 4 bytes into at most 128 KiB.
const ZSTD_MAX_RATIO: u64 = 32 * 1024;
const ZSTD_BLOCK: u64 = 128 * 1024;
/// zstd contexts are kept per thread for inputs up to this size; larger inputs get a fresh
/// context so one big value does not pin megabytes of tables to every thread.
const ZSTD_CACHED_INPUT: usize = 256 * 1024;

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

/// An output buffer for the LZ4 frame decoder: a fixed slice (the declared size) or a vector
/// that grows up to a limit.
trait Sink {
    /// The buffer, made at least `pos + want` bytes long when the limit allows.
    fn reserve(&mut self, pos: usize, want: usize) -> &mut [u8];
}

impl Sink for [u8] {
    fn reserve(&mut self, _pos: usize, _want: usize) -> &mut [u8] {
        self
    }
}

struct Growing {
    buf: Vec<u8>,
    max: usize,
}

impl Sink for Growing {
    fn reserve(&mut self, pos: usize, want: usize) -> &mut [u8] {
        let need = pos.saturating_add(want).min(self.max);
        if self.buf.len() < need {
            let len = need.max(self.buf.len().saturating_mul(2)).min(self.max);
            self.buf.resize(len, 0);
        }
        &mut self.buf
    }
}

/// Compress `data` into one LZ4 frame: independent 64 KiB blocks (python-lz4's default block
/// size, so readers allocate little), the content size declared, no checksums.
pub fn lz4_frame_compress(data: &[u8]) -> Result<Vec<u8>> {
    let blocks = data.len().div_ceil(LZ4_BLOCK);
    let bound = 15 + 4 + blocks * 4 + lz4_block::get_maximum_output_size(LZ4_BLOCK) * blocks;
    let bound = bound.min(15 + 4 + blocks * 4 + lz4_block::get_maximum_output_size(data.len()));
    let mut out = vec![0u8; bound];
    out[..4].copy_from_slice(&LZ4_MAGIC.to_le_bytes());
    // FLG: version 01, independent blocks, content size present. BD: 64 KiB blocks.
    out[4] = 0b0110_1000;
    out[5] = 0b0100_0000;
    out[6..14].copy_from_slice(&(data.len() as u64).to_le_bytes());
    out[14] = (XxHash32::oneshot(0, &out[4..14]) >> 8) as u8;
    let mut pos = 15;
    for chunk in data.chunks(LZ4_BLOCK) {
        let (head, body) = out[pos..].split_at_mut(4);
        let size = match lz4_block::compress_into(chunk, body) {
            Ok(n) if n < chunk.len() => n as u32,
            // Incompressible: store the block raw (the high bit marks it).
            _ => {
                body[..chunk.len()].copy_from_slice(chunk);
                chunk.len() as u32 | 0x8000_0000
            }
        };
        head.copy_from_slice(&size.to_le_bytes());
        pos += 4 + (size & 0x7FFF_FFFF) as usize;
    }
    out[pos..pos + 4].fill(0);
    out.truncate(pos + 4);
    Ok(out)
}

struct Lz4Header {
    linked: bool,
    block_checksums: bool,
    content_checksum: bool,
    content_size: Option<u64>,
    block_max: usize,
    len: usize,
}

fn lz4_header(data: &[u8]) -> Result<Lz4Header> {
    let err = |detail: &str| decode_err("LZ4", detail);
    if data.len() < 7 || data[..4] != LZ4_MAGIC.to_le_bytes() {
        return Err(err("not an LZ4 frame"));
    }
    let (flg, bd) = (data[4], data[5]);
    if flg >> 6 != 1 || flg & 0b10 != 0 || bd & 0b1000_1111 != 0 {
        return Err(err("unsupported frame version or reserved bits set"));
    }
    if flg & 1 != 0 {
        return Err(err("frames with a dictionary are not supported"));
    }
    let block_max = match (bd >> 4) & 0b111 {
        4 => 64 * 1024,
        5 => 256 * 1024,
        6 => 1024 * 1024,
        7 => 4 * 1024 * 1024,
        _ => return Err(err("invalid block size")),
    };
    let has_size = flg & 0b1000 != 0;
    let len = if has_size { 15 } else { 7 };
    if data.len() < len {
        return Err(err("truncated frame header"));
    }
    let content_size = has_size.then(|| {
        let mut size = [0u8; 8];
        size.copy_from_slice(&data[6..14]);
        u64::from_le_bytes(size)
    });
    if data[len - 1] != (XxHash32::oneshot(0, &data[4..len - 1]) >> 8) as u8 {
        return Err(err("frame header checksum mismatch"));
    }
    Ok(Lz4Header {
        linked: flg & 0b10_0000 == 0,
        block_checksums: flg & 0b1_0000 != 0,
        content_checksum: flg & 0b100 != 0,
        content_size,
        block_max,
        len,
    })
}

fn read_u32(data: &[u8], pos: usize) -> Result<u32> {
    data.get(pos..pos + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| decode_err("LZ4", "truncated frame"))
}

/// Decode the blocks of an LZ4 frame into `sink`; return the decompressed length.
fn lz4_decode<S: Sink + ?Sized>(data: &[u8], header: &Lz4Header, sink: &mut S) -> Result<usize> {
    let err = |detail: &str| decode_err("LZ4", detail);
    let mut at = header.len;
    let mut pos = 0usize;
    loop {
        let word = read_u32(data, at)?;
        at += 4;
        if word == 0 {
            break;
        }
        let size = (word & 0x7FFF_FFFF) as usize;
        if size > header.block_max {
            return Err(err("block larger than the frame's block size"));
        }
        let block = data.get(at..at + size).ok_or_else(|| err("truncated frame"))?;
        at += size;
        if header.block_checksums {
            if read_u32(data, at)? != XxHash32::oneshot(0, block) {
                return Err(err("block checksum mismatch"));
            }
            at += 4;
        }
        let buf = sink.reserve(pos, header.block_max);
        let (prev, rest) = buf.split_at_mut(pos);
        let room = header.block_max.min(rest.len());
        let dst = &mut rest[..room];
        // A block that does not fit a buffer cut short by the declared size or the limit.
        let overflow = || {
            Error::Decode(format!(
                "LZ4 data expands beyond {} bytes (its declared size or the limit)",
                pos + room
            ))
        };
        let written = if word & 0x8000_0000 != 0 {
            dst.get_mut(..size).ok_or_else(overflow)?.copy_from_slice(block);
            size
        } else {
            let result = if header.linked && pos > 0 {
                let dict = &prev[pos.saturating_sub(LZ4_WINDOW)..];
                lz4_block::decompress_into_with_dict(block, dst, dict)
            } else {
                lz4_block::decompress_into(block, dst)
            };
            match result {
                Ok(n) => n,
                Err(lz4_block::DecompressError::OutputTooSmall { .. })
                    if room < header.block_max =>
                {
                    return Err(overflow())
                }
                Err(e) => return Err(decode_err("LZ4", e)),
            }
        };
        pos += written;
    }
    if header.content_checksum {
        let expected = read_u32(data, at)?;
        at += 4;
        let buf = sink.reserve(pos, 0);
        if XxHash32::oneshot(0, &buf[..pos]) != expected {
            return Err(err("content checksum mismatch"));
        }
    }
    if at != data.len() {
        return Err(err("trailing bytes after the frame"));
    }
    Ok(pos)
}

/// Decompress one LZ4 frame of at most `max` bytes (what `lz4_decompress` does, into a `Vec`).
#[cfg(test)]
pub fn lz4_frame_decompress(data: &[u8], max: usize) -> Result<Vec<u8>> {
    let header = lz4_header(data)?;
    match header.content_size {
        Some(claimed) => {
            let mut out = vec![0u8; check_claim("LZ4", claimed, data.len(), LZ4_MAX_RATIO, max)?];
            lz4_decompress_exact(data, &header, &mut out)?;
            Ok(out)
        }
        None => lz4_decompress_growing(data, &header, max),
    }
}

fn lz4_decompress_exact(data: &[u8], header: &Lz4Header, out: &mut [u8]) -> Result<()> {
    let n = lz4_decode(data, header, out)?;
    if n != out.len() {
        return Err(decode_err("LZ4", format!("{n} bytes, not the {} declared", out.len())));
    }
    Ok(())
}

fn lz4_decompress_growing(data: &[u8], header: &Lz4Header, max: usize) -> Result<Vec<u8>> {
    let start = data.len().saturating_mul(4).clamp(1024, LZ4_BLOCK).min(max);
    let mut sink = Growing { buf: Vec::with_capacity(start), max };
    let n = lz4_decode(data, header, &mut sink)?;
    sink.buf.truncate(n);
    Ok(sink.buf)
}

thread_local! {
    static ZSTD_C: RefCell<Option<CCtx<'static>>> = const { RefCell::new(None) };
    static ZSTD_D: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

fn zstd_err(code: usize) -> Error {
    decode_err("zstd", zstd_safe::get_error_name(code))
}

/// Compress `data` into one zstd frame (content size declared, no checksum) at `level`.
pub fn zstd_frame_compress(data: &[u8], level: i32) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
    // compress2 (unlike compressCCtx) reuses a context without clearing its tables.
    let run = |cctx: &mut CCtx<'static>, out: &mut Vec<u8>| {
        cctx.set_parameter(CParameter::CompressionLevel(level))
            .and_then(|_| cctx.compress2(out, data))
            .map_err(|code| {
                let name = zstd_safe::get_error_name(code);
                Error::Internal(format!("zstd compression failed: {name}"))
            })
    };
    if data.len() > ZSTD_CACHED_INPUT {
        run(&mut CCtx::create(), &mut out)?;
    } else {
        ZSTD_C.with(|cell| {
            let mut slot = cell.borrow_mut();
            run(slot.get_or_insert_with(CCtx::create), &mut out)
        })?;
    }
    Ok(out)
}

/// The zstd content size declared by the (first) frame header, if any.
fn zstd_claim(data: &[u8]) -> Result<Option<u64>> {
    zstd_safe::get_frame_content_size(data).map_err(|_| decode_err("zstd", "bad frame header"))
}

/// Decompress zstd frames whose declared size is `out.len()`. `Ok(false)` means the data
/// holds more than declared (several frames): decode it with `zstd_decompress_growing`.
fn zstd_decompress_exact(data: &[u8], out: &mut [u8]) -> Result<bool> {
    let result = ZSTD_D.with(|cell| {
        let mut slot = cell.borrow_mut();
        slot.get_or_insert_with(DCtx::create).decompress(out, data)
    });
    match result {
        Ok(n) if n == out.len() => Ok(true),
        Ok(n) => Err(decode_err("zstd", format!("{n} bytes, not the {} declared", out.len()))),
        Err(code) if zstd_safe::get_error_name(code).contains("too small") => Ok(false),
        Err(code) => Err(zstd_err(code)),
    }
}

/// Stream-decode zstd frames without a declared size into at most `max` bytes.
fn zstd_decompress_growing(data: &[u8], max: usize) -> Result<Vec<u8>> {
    let too_big = || Error::Decode(format!("zstd data expands beyond the {max}-byte limit"));
    let mut dctx = DCtx::create();
    // Bound the window the decoder may allocate by the output allowed, but never below
    // 8 MiB: streaming compressors at levels up to 19 use windows up to that size.
    let window_log = usize::BITS - max.saturating_sub(1).leading_zeros();
    dctx.set_parameter(DParameter::WindowLogMax(window_log.clamp(23, 27))).map_err(zstd_err)?;
    let start = data.len().saturating_mul(4).clamp(1024, 1 << 20).min(max);
    let mut out: Vec<u8> = Vec::with_capacity(start);
    let mut input = InBuffer::around(data);
    let mut probe = [0u8; 1];
    // Whether the last call that moved data ended a frame (zstd then returns 0).
    let mut frame_done = false;
    loop {
        let progress = (out.len(), input.pos());
        let (hint, room_left, moved) = if out.len() < out.capacity() {
            let mut output = OutBuffer::around_pos(&mut out, progress.0);
            let hint = dctx.decompress_stream(&mut output, &mut input).map_err(zstd_err)?;
            let room_left = output.pos() < output.capacity();
            (hint, room_left, (output.pos(), input.pos()) != progress)
        } else if out.len() < max {
            let grow = out.capacity().max(1024).min(max - out.len());
            out.try_reserve_exact(grow).map_err(|_| too_big())?;
            continue;
        } else {
            // At the limit: one more byte of output means the value is too large.
            let mut output = OutBuffer::around(&mut probe[..]);
            let hint = dctx.decompress_stream(&mut output, &mut input).map_err(zstd_err)?;
            if output.pos() > 0 {
                return Err(too_big());
            }
            (hint, true, input.pos() != progress.1)
        };
        if moved {
            frame_done = hint == 0;
        } else if room_left {
            if input.pos() < data.len() {
                return Err(decode_err("zstd", "decoder made no progress"));
            }
            // Room to write and nothing moved: all input used and all output flushed.
            break;
        }
        // With input consumed and room left, the decoder has flushed all it can.
        if input.pos() == data.len() && room_left {
            break;
        }
    }
    if !frame_done {
        return Err(decode_err("zstd", "truncated frame"));
    }
    if out.len() > max {
        return Err(too_big());
    }
    Ok(out)
}

/// Decompress zstd frames into at most `max` bytes (what `zstd_decompress` does, into a `Vec`).
#[cfg(test)]
pub fn zstd_frame_decompress(data: &[u8], max: usize) -> Result<Vec<u8>> {
    if let Some(claimed) = zstd_claim(data)? {
        let mut out = vec![0u8; check_claim("zstd", claimed, data.len(), ZSTD_MAX_RATIO, max)?];
        if zstd_decompress_exact(data, &mut out)? {
            return Ok(out);
        }
    }
    zstd_decompress_growing(data, max)
}

/// Run `f`, without the GIL when `heavy`; panics become `InternalError`.
fn run<T: Send>(py: Python<'_>, heavy: bool, f: impl FnOnce() -> Result<T> + Send) -> PyResult<T> {
    guard(|| {
        let result = if heavy { py.detach(f) } else { f() };
        result.map_err(PyErr::from)
    })
}

/// Decode into a new bytes object: straight into it when the size is declared.
fn decode_into_bytes<'py>(
    py: Python<'py>,
    data: &[u8],
    claimed: Option<usize>,
    exact: impl FnOnce(&mut [u8]) -> Result<bool> + Send,
    growing: impl FnOnce() -> Result<Vec<u8>> + Send,
) -> PyResult<Bound<'py, PyBytes>> {
    let heavy = data.len() >= DETACH_THRESHOLD;
    if let Some(size) = claimed {
        let mut complete = true;
        let bytes = PyBytes::new_with(py, size, |buf| {
            complete = run(py, heavy || size >= 4 * DETACH_THRESHOLD, || exact(buf))?;
            Ok(())
        })?;
        if complete {
            return Ok(bytes);
        }
    }
    // No declared size: the output may be large whatever the input length.
    let out = run(py, true, growing)?;
    Ok(PyBytes::new(py, &out))
}

/// Compress `data` into one LZ4 frame (the format of python-lz4's `lz4.frame.compress`).
///
/// `level` is accepted for symmetry with `zstd_compress`; lz4_flex implements LZ4's default
/// fast mode only (python-lz4's level 0), so it is ignored.
#[pyfunction]
#[pyo3(signature = (data, level = 0))]
pub fn lz4_compress<'py>(
    py: Python<'py>,
    data: &[u8],
    level: i32,
) -> PyResult<Bound<'py, PyBytes>> {
    let _ = level;
    let out = run(py, data.len() >= DETACH_THRESHOLD, || lz4_frame_compress(data))?;
    Ok(PyBytes::new(py, &out))
}

/// Decompress one LZ4 frame; raise `SerializationError` if it is invalid, truncated or would
/// exceed `max_size` bytes.
#[pyfunction]
pub fn lz4_decompress<'py>(
    py: Python<'py>,
    data: &[u8],
    max_size: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let header = lz4_header(data)?;
    let claimed = match header.content_size {
        Some(c) => Some(check_claim("LZ4", c, data.len(), LZ4_MAX_RATIO, max_size)?),
        None => None,
    };
    let header = &header;
    decode_into_bytes(
        py,
        data,
        claimed,
        |buf| lz4_decompress_exact(data, header, buf).map(|()| true),
        || lz4_decompress_growing(data, header, max_size),
    )
}

/// Compress `data` into one zstd frame at `level` (zstd's default is 3).
#[pyfunction]
#[pyo3(signature = (data, level = 3))]
pub fn zstd_compress<'py>(
    py: Python<'py>,
    data: &[u8],
    level: i32,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = run(py, data.len() >= DETACH_THRESHOLD, || zstd_frame_compress(data, level))?;
    Ok(PyBytes::new(py, &out))
}

/// Decompress zstd frames; raise `SerializationError` if they are invalid, truncated or would
/// exceed `max_size` bytes.
#[pyfunction]
pub fn zstd_decompress<'py>(
    py: Python<'py>,
    data: &[u8],
    max_size: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let claimed = match zstd_claim(data)? {
        Some(c) => Some(check_claim("zstd", c, data.len(), ZSTD_MAX_RATIO, max_size)?),
        None => None,
    };
    decode_into_bytes(
        py,
        data,
        claimed,
        |buf| zstd_decompress_exact(data, buf),
        || zstd_decompress_growing(data, max_size),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 512 << 20;

    fn sample(len: usize) -> Vec<u8> {
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

    fn assert_decode_error<T: std::fmt::Debug>(result: Result<T>) {
        assert!(matches!(result, Err(Error::Decode(_))), "{result:?}");
    }

    /// A hand-made LZ4 frame header (no content checksum) with a correct header checksum.
    fn lz4_frame_header(flg: u8, bd: u8, content_size: Option<u64>) -> Vec<u8> {
        let mut out = LZ4_MAGIC.to_le_bytes().to_vec();
        out.extend([flg, bd]);
        if let Some(size) = content_size {
            out.extend(size.to_le_bytes());
        }
        out.push((XxHash32::oneshot(0, &out[4..]) >> 8) as u8);
        out
    }

    #[test]
    fn lz4_round_trips() {
        for len in [0, 1, 100, 14 * 1024, LZ4_BLOCK, LZ4_BLOCK + 1, 300_000] {
            let data = sample(len);
            let frame = lz4_frame_compress(&data).unwrap();
            assert_eq!(frame[..4], LZ4_MAGIC.to_le_bytes());
            assert_eq!(lz4_frame_decompress(&frame, MAX).unwrap(), data, "len {len}");
        }
    }

    #[test]
    fn lz4_incompressible_blocks_are_stored_raw() {
        let mut x = 1u64;
        let data: Vec<u8> = (0..100_000)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (x >> 56) as u8
            })
            .collect();
        let frame = lz4_frame_compress(&data).unwrap();
        assert!(frame.len() <= data.len() + 15 + 4 + 8);
        assert_eq!(lz4_frame_decompress(&frame, MAX).unwrap(), data);
    }

    #[test]
    fn lz4_reads_frames_without_size_linked_and_with_checksums() {
        let data = sample(5000);
        let block = lz4_block::compress(&data);
        // Linked blocks, block and content checksums, no content size.
        let mut frame = lz4_frame_header(0b0101_0100, 0b0100_0000, None);
        frame.extend((block.len() as u32).to_le_bytes());
        frame.extend(&block);
        frame.extend(XxHash32::oneshot(0, &block).to_le_bytes());
        frame.extend(0u32.to_le_bytes());
        frame.extend(XxHash32::oneshot(0, &data).to_le_bytes());
        assert_eq!(lz4_frame_decompress(&frame, MAX).unwrap(), data);
        // A corrupted content checksum is caught.
        let last = frame.len() - 1;
        frame[last] ^= 1;
        assert_decode_error(lz4_frame_decompress(&frame, MAX));
    }

    #[test]
    fn lz4_rejects_truncated_frames() {
        let frame = lz4_frame_compress(&sample(200_000)).unwrap();
        for cut in [3, 6, 14, 15, 18, 100, frame.len() / 2, frame.len() - 4, frame.len() - 1] {
            assert_decode_error(lz4_frame_decompress(&frame[..cut], MAX));
        }
    }

    #[test]
    fn lz4_rejects_garbage_after_a_valid_magic() {
        let mut data = LZ4_MAGIC.to_le_bytes().to_vec();
        data.extend(sample(1000));
        assert_decode_error(lz4_frame_decompress(&data, MAX));
        let mut frame = lz4_frame_compress(&sample(3000)).unwrap();
        frame.push(0);
        assert_decode_error(lz4_frame_decompress(&frame, MAX));
    }

    #[test]
    fn lz4_rejects_huge_claims_before_allocating() {
        let mut frame = lz4_frame_header(0b0110_1000, 0b0100_0000, Some(4 << 30));
        frame.extend(0u32.to_le_bytes());
        assert_decode_error(lz4_frame_decompress(&frame, MAX));
        // Below the limit, but more than 20 bytes could ever expand to.
        let mut frame = lz4_frame_header(0b0110_1000, 0b0100_0000, Some(400 << 20));
        frame.extend(0u32.to_le_bytes());
        assert_decode_error(lz4_frame_decompress(&frame, MAX));
    }

    #[test]
    fn lz4_output_without_declared_size_is_bounded() {
        let data = vec![b'a'; 1 << 20];
        let block = lz4_block::compress(&data[..LZ4_BLOCK]);
        let mut frame = lz4_frame_header(0b0110_0000, 0b0100_0000, None);
        for _ in 0..16 {
            frame.extend((block.len() as u32).to_le_bytes());
            frame.extend(&block);
        }
        frame.extend(0u32.to_le_bytes());
        assert_eq!(lz4_frame_decompress(&frame, 1 << 20).unwrap(), data);
        assert_decode_error(lz4_frame_decompress(&frame, (1 << 20) - 1));
    }

    #[test]
    fn zstd_round_trips() {
        for len in [0, 1, 100, 14 * 1024, 300_000, ZSTD_CACHED_INPUT + 1] {
            let data = sample(len);
            for level in [1, 3, 19] {
                let frame = zstd_frame_compress(&data, level).unwrap();
                assert_eq!(frame[..4], [0x28, 0xB5, 0x2F, 0xFD]);
                assert_eq!(zstd_frame_decompress(&frame, MAX).unwrap(), data, "len {len}");
            }
        }
    }

    fn zstd_streamed(data: &[u8]) -> Vec<u8> {
        // A frame without a content size, as streaming compressors write.
        let mut cctx = CCtx::create();
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()) + 64);
        let mut input = InBuffer::around(data);
        let mut output = OutBuffer::around(&mut out);
        cctx.compress_stream2(
            &mut output,
            &mut input,
            zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_continue,
        )
        .unwrap();
        while cctx
            .compress_stream2(
                &mut output,
                &mut input,
                zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end,
            )
            .unwrap()
            != 0
        {}
        out
    }

    #[test]
    fn zstd_reads_frames_without_size_and_concatenated_frames() {
        let data = sample(300_000);
        let frame = zstd_streamed(&data);
        assert_eq!(zstd_claim(&frame).unwrap(), None);
        assert_eq!(zstd_frame_decompress(&frame, MAX).unwrap(), data);
        let mut two = zstd_frame_compress(&data[..1000], 3).unwrap();
        two.extend(zstd_frame_compress(&data[1000..], 3).unwrap());
        assert_eq!(zstd_frame_decompress(&two, MAX).unwrap(), data);
    }

    #[test]
    fn zstd_rejects_truncated_and_garbage() {
        let data = sample(200_000);
        for frame in [zstd_frame_compress(&data, 3).unwrap(), zstd_streamed(&data)] {
            for cut in [3, 5, 9, 100, frame.len() / 2, frame.len() - 1] {
                assert_decode_error(zstd_frame_decompress(&frame[..cut], MAX));
            }
        }
        let mut garbage = vec![0x28, 0xB5, 0x2F, 0xFD];
        garbage.extend(sample(1000));
        assert_decode_error(zstd_frame_decompress(&garbage, MAX));
    }

    #[test]
    fn zstd_rejects_huge_claims_and_bounds_undeclared_output() {
        // Single-segment frame declaring 4 GiB (8-byte size), then one empty last raw block.
        let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0xE0];
        frame.extend((4u64 << 30).to_le_bytes());
        frame.extend([1, 0, 0]);
        assert_decode_error(zstd_frame_decompress(&frame, MAX));
        frame[5..13].copy_from_slice(&(400u64 << 20).to_le_bytes());
        assert_decode_error(zstd_frame_decompress(&frame, MAX));
        let zeros = zstd_streamed(&vec![0u8; 4 << 20]);
        assert_eq!(zstd_frame_decompress(&zeros, 4 << 20).unwrap().len(), 4 << 20);
        assert_decode_error(zstd_frame_decompress(&zeros, (4 << 20) - 1));
        assert_decode_error(zstd_frame_decompress(&zeros, 1000));
    }
}
