//! Standard zstd frames (pyzstd, zstandard), with per-thread contexts for small values.

use std::cell::RefCell;

use zstd::zstd_safe::zstd_sys::ZSTD_ErrorCode;
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx, DParameter, InBuffer, OutBuffer};

use super::{check_claim, decode_err};
use crate::errors::{Error, Result};

/// A zstd RLE block turns 4 bytes into at most 128 KiB.
const ZSTD_MAX_RATIO: u64 = 32 * 1024;
/// zstd contexts are kept per thread for inputs up to this size; larger inputs get a fresh
/// context so one big value does not pin megabytes of tables to every thread.
const ZSTD_CACHED_INPUT: usize = 256 * 1024;

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

/// The declared size of the (first) frame's content, checked against `max` and the input.
pub fn claimed_size(data: &[u8], max: usize) -> Result<Option<usize>> {
    zstd_claim(data)?
        .map(|claimed| check_claim("zstd", claimed, data.len(), ZSTD_MAX_RATIO, max))
        .transpose()
}

/// The zstd content size declared by the (first) frame header, if any.
fn zstd_claim(data: &[u8]) -> Result<Option<u64>> {
    zstd_safe::get_frame_content_size(data).map_err(|_| decode_err("zstd", "bad frame header"))
}

/// Decompress zstd frames whose declared size is `out.len()`. `Ok(false)` means the data
/// holds more than declared (several frames): count it with `zstd_decompressed_size`.
pub fn zstd_decompress_exact(data: &[u8], out: &mut [u8]) -> Result<bool> {
    let result = ZSTD_D.with(|cell| {
        let mut slot = cell.borrow_mut();
        slot.get_or_insert_with(DCtx::create).decompress(out, data)
    });
    match result {
        Ok(n) if n == out.len() => Ok(true),
        Ok(n) => Err(decode_err("zstd", format!("{n} bytes, not the {} declared", out.len()))),
        Err(code)
            if zstd_safe::is_error_kind(code, ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall) =>
        {
            Ok(false)
        }
        Err(code) => Err(zstd_err(code)),
    }
}

/// The size zstd frames decompress to, found by decoding them into a small scratch buffer
/// that keeps nothing: for frames that declare no size (or a wrong one), so the output can be
/// made once at its exact size. An error past `max` bytes, so a planted bomb is refused for
/// the price of a scratch buffer, never by allocating up to the limit.
pub fn zstd_decompressed_size(data: &[u8], max: usize) -> Result<usize> {
    let too_big = || Error::Decode(format!("zstd data expands beyond the {max}-byte limit"));
    let mut dctx = DCtx::create();
    // Frames may ask for a window up to the limit's size (no legitimate one needs more).
    let window_log = usize::BITS - max.saturating_sub(1).leading_zeros();
    dctx.set_parameter(DParameter::WindowLogMax(window_log.clamp(23, 27))).map_err(zstd_err)?;
    let mut scratch = vec![0u8; 128 * 1024];
    let mut input = InBuffer::around(data);
    let mut total = 0usize;
    let mut frame_done = false;
    loop {
        let before = input.pos();
        let mut output = OutBuffer::around(&mut scratch[..]);
        let hint = dctx.decompress_stream(&mut output, &mut input).map_err(zstd_err)?;
        let written = output.pos();
        total = total.saturating_add(written);
        if total > max {
            return Err(too_big());
        }
        if written > 0 || input.pos() != before {
            frame_done = hint == 0;
        } else {
            if input.pos() < data.len() {
                return Err(decode_err("zstd", "decoder made no progress"));
            }
            break;
        }
        if input.pos() == data.len() && written < scratch.len() {
            break;
        }
    }
    if !frame_done {
        return Err(decode_err("zstd", "truncated frame"));
    }
    Ok(total)
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
    let mut out = vec![0u8; zstd_decompressed_size(data, max)?];
    if !zstd_decompress_exact(data, &mut out)? {
        return Err(decode_err("zstd", "more output than counted"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_decode_error, sample, MAX};
    use super::*;

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
