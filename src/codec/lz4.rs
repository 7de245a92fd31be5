//! LZ4 frames, written and read on top of lz4_flex's block API (python-lz4's `lz4.frame`).

use lz4_flex::block as lz4_block;
use twox_hash::XxHash32;

use super::{check_claim, decode_err};
use crate::errors::{Error, Result};

const LZ4_MAGIC: u32 = 0x184D_2204;
/// The LZ4 window: linked blocks may refer back this far into earlier output.
const LZ4_WINDOW: usize = 64 * 1024;
const LZ4_BLOCK: usize = 64 * 1024;
/// An LZ4 sequence can expand at most ~255x (each length byte adds 255).
const LZ4_MAX_RATIO: u64 = 256;

/// An output buffer for the LZ4 frame decoder: a fixed slice (the declared or counted size).
trait Sink {
    /// The buffer, made at least `pos + want` bytes long when the limit allows.
    fn reserve(&mut self, pos: usize, want: usize) -> &mut [u8];
}

impl Sink for [u8] {
    fn reserve(&mut self, _pos: usize, _want: usize) -> &mut [u8] {
        self
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

/// What an LZ4 frame header says.
pub struct Lz4Header {
    linked: bool,
    block_checksums: bool,
    content_checksum: bool,
    content_size: Option<u64>,
    block_max: usize,
    len: usize,
}

/// The declared size of a frame's content, checked against `max` and the input's size.
pub fn claimed_size(data: &[u8], header: &Lz4Header, max: usize) -> Result<Option<usize>> {
    header
        .content_size
        .map(|claimed| check_claim("LZ4", claimed, data.len(), LZ4_MAX_RATIO, max))
        .transpose()
}

/// Read and check a frame's header.
pub fn lz4_header(data: &[u8]) -> Result<Lz4Header> {
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
/// Walk a frame's blocks, each checked against the block size and its checksum, handing each
/// one's bytes and whether it is stored raw to `each`; then check that nothing trails the
/// frame. Return the content checksum the frame declares, if any.
fn walk_blocks(
    data: &[u8],
    header: &Lz4Header,
    mut each: impl FnMut(&[u8], bool) -> Result<()>,
) -> Result<Option<u32>> {
    let err = |detail: &str| decode_err("LZ4", detail);
    let mut at = header.len;
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
        each(block, word & 0x8000_0000 != 0)?;
    }
    let checksum = if header.content_checksum {
        let expected = read_u32(data, at)?;
        at += 4;
        Some(expected)
    } else {
        None
    };
    if at != data.len() {
        return Err(err("trailing bytes after the frame"));
    }
    Ok(checksum)
}

fn lz4_decode<S: Sink + ?Sized>(data: &[u8], header: &Lz4Header, sink: &mut S) -> Result<usize> {
    let mut pos = 0usize;
    let checksum = walk_blocks(data, header, |block, raw| {
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
        let written = if raw {
            dst.get_mut(..block.len()).ok_or_else(overflow)?.copy_from_slice(block);
            block.len()
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
        Ok(())
    })?;
    if let Some(expected) = checksum {
        let buf = sink.reserve(pos, 0);
        if XxHash32::oneshot(0, &buf[..pos]) != expected {
            return Err(decode_err("LZ4", "content checksum mismatch"));
        }
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
        None => {
            let mut out = vec![0u8; lz4_decompressed_size(data, &header, max)?];
            lz4_decompress_exact(data, &header, &mut out)?;
            Ok(out)
        }
    }
}

/// Decode a frame whose declared size is `out.len()`.
pub fn lz4_decompress_exact(data: &[u8], header: &Lz4Header, out: &mut [u8]) -> Result<()> {
    let n = lz4_decode(data, header, out)?;
    if n != out.len() {
        return Err(decode_err("LZ4", format!("{n} bytes, not the {} declared", out.len())));
    }
    Ok(())
}

/// The size a frame decompresses to, found by decoding each block into a scratch buffer that
/// keeps only the window linked blocks refer back to: for frames that declare no size, so the
/// output can be made once at its exact size. An error past `max` bytes, so a planted bomb is
/// refused for the price of the scratch buffer. (The content checksum is checked by the pass
/// that keeps the output.)
pub fn lz4_decompressed_size(data: &[u8], header: &Lz4Header, max: usize) -> Result<usize> {
    let mut scratch = vec![0u8; LZ4_WINDOW + header.block_max];
    let mut kept = 0usize; // earlier output at the front of scratch (linked blocks only)
    let mut total = 0usize;
    walk_blocks(data, header, |block, raw| {
        let (prev, rest) = scratch.split_at_mut(kept);
        let dst = &mut rest[..header.block_max];
        let written = if raw {
            dst[..block.len()].copy_from_slice(block);
            block.len()
        } else if header.linked && kept > 0 {
            lz4_block::decompress_into_with_dict(block, dst, prev)
                .map_err(|e| decode_err("LZ4", e))?
        } else {
            lz4_block::decompress_into(block, dst).map_err(|e| decode_err("LZ4", e))?
        };
        total = total.saturating_add(written);
        if total > max {
            return Err(Error::Decode(format!("LZ4 data expands beyond the {max}-byte limit")));
        }
        if header.linked {
            let end = kept + written;
            let keep = end.min(LZ4_WINDOW);
            scratch.copy_within(end - keep..end, 0);
            kept = keep;
        }
        Ok(())
    })?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_decode_error, sample, MAX};
    use super::*;

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
}
