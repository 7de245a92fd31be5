"""Compressors shrink large serialized values. Reads recognise compressed data by its magic bytes,
so values written before COMPRESSOR changed (or below the size threshold) still read back.

The formats are those django-redis writes: zlib, gzip, xz (lzma), the LZ4 frame format of
python-lz4's ``lz4.frame`` and standard zstd frames. Lz4 and Zstd run in the Rust core with the
GIL released for large values; the others use the standard library.
"""

from __future__ import annotations

import gzip
import lzma
import zlib
from collections.abc import Callable
from typing import Any, ClassVar

from redoxide._redoxide import lz4_compress, lz4_decompress, zstd_compress, zstd_decompress
from redoxide.exceptions import SerializationError

__all__ = [
    "BUILTIN_COMPRESSORS",
    "MAX_DECOMPRESSED_SIZE",
    "MAX_VALUE_SIZE",
    "BaseCompressor",
    "GzipCompressor",
    "IdentityCompressor",
    "Lz4Compressor",
    "LzmaCompressor",
    "ZStdCompressor",
    "ZlibCompressor",
    "ZstdCompressor",
    "decompress_any",
    "looks_compressed",
]

#: The largest value Redis takes (proto-max-bulk-len, 512 MiB by default). A larger one is
#: refused before it is sent: the server would read it all, then drop the connection.
MAX_VALUE_SIZE = 512 * 1024 * 1024
#: Decompressed values larger than this are refused: nothing legitimately stored can exceed
#: Redis' own limit, while a forged header cannot make us allocate more.
MAX_DECOMPRESSED_SIZE = MAX_VALUE_SIZE

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"
_XZ_MAGIC = b"\xfd7zXZ\x00"
# Enough for the largest xz preset (9: a 64 MiB dictionary).
_LZMA_MEMLIMIT = 256 * 1024 * 1024


def _is_zlib(data: bytes) -> bool:
    # CMF 0x78 (deflate, 32 KiB window) and a valid header checksum; pickles start with 0x80.
    return len(data) > 1 and data[0] == 0x78 and (data[0] * 256 + data[1]) % 31 == 0


def _too_large(fmt: str, max_size: int) -> SerializationError:
    return SerializationError(f"{fmt} data expands beyond the {max_size}-byte limit")


# Decompression hands out at most this much at a time, so no step allocates more.
_STEP = 4 * 1024 * 1024
# Output kept on a first pass. Past this, the data is first inflated without keeping anything,
# to learn its size, and only then for real: a planted bomb never costs more memory than this
# (a legitimate value this large is decompressed twice).
_KEEP_FIRST = 64 * 1024 * 1024


class _Overflow(Exception):
    """The output passed the bound of the current pass."""


def _stream(
    make: Callable[[], Any], data: bytes, fmt: str, bound: int, keep: list[bytes] | None
) -> int:
    """Decompress every stream in data (a gzip or xz file may hold several), in steps of at
    most _STEP bytes of output; keep the output in `keep` (None: count it only). Return the
    size; raise _Overflow past `bound`, SerializationError if the data is corrupt or cut."""
    total = 0
    while True:
        d = make()
        zlib_like = hasattr(d, "unconsumed_tail")
        pending = data
        while True:
            try:
                chunk = d.decompress(pending, _STEP)
            except (zlib.error, lzma.LZMAError) as exc:
                raise SerializationError(f"invalid {fmt} data: {exc}") from exc
            total += len(chunk)
            if total > bound:
                raise _Overflow
            if keep is not None and chunk:
                keep.append(chunk)
            if d.eof:
                break
            pending = d.unconsumed_tail if zlib_like else b""
            stalled = not pending if zlib_like else d.needs_input
            if not chunk and stalled:
                raise SerializationError(f"invalid {fmt} data: truncated stream")
        # Like gzip.decompress: further members may follow, then zero padding. Like
        # zlib.decompress: bytes after a zlib stream are ignored.
        data = d.unused_data
        if fmt == "gzip":
            data = data.lstrip(b"\x00")
        elif fmt == "zlib":
            data = b""
        if not data:
            return total


def _expand(make: Callable[[], Any], data: bytes, fmt: str, max_size: int) -> bytes:
    """Decompress data into at most max_size bytes, never holding more than _KEEP_FIRST bytes
    of output for data that turns out to expand beyond max_size."""
    kept: list[bytes] = []
    try:
        _stream(make, data, fmt, min(max_size, _KEEP_FIRST), kept)
        return b"".join(kept)
    except _Overflow:
        if max_size <= _KEEP_FIRST:
            raise _too_large(fmt, max_size) from None
    kept.clear()
    try:
        _stream(make, data, fmt, max_size, None)  # the size, keeping nothing
        _stream(make, data, fmt, max_size, kept)
    except _Overflow:
        raise _too_large(fmt, max_size) from None
    return b"".join(kept)


def _inflate(data: bytes, wbits: int, fmt: str, max_size: int) -> bytes:
    """Decompress zlib (wbits 15) or gzip (wbits 31, every member) into at most max_size bytes."""
    return _expand(lambda: zlib.decompressobj(wbits), data, fmt, max_size)


def _unxz(data: bytes, max_size: int) -> bytes:
    """Decompress xz data (every stream), at most max_size bytes."""
    return _expand(
        lambda: lzma.LZMADecompressor(lzma.FORMAT_AUTO, memlimit=_LZMA_MEMLIMIT),
        data,
        "xz",
        max_size,
    )


def decompress_any(data: bytes, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """Return `data` decompressed if it starts with a known compression magic, else unchanged.

    Recognises the LZ4 frame, zstd, gzip, xz and zlib formats whatever COMPRESSOR is set, so a
    value written by another compressor (or another backend) still reads back. Raise
    SerializationError for corrupt or truncated data, or output above `max_size` bytes.
    """
    head = data[:4]
    if head == _LZ4_MAGIC:
        return lz4_decompress(data, max_size)
    if head == _ZSTD_MAGIC:
        return zstd_decompress(data, max_size)
    if head[:2] == _GZIP_MAGIC:
        return _inflate(data, 31, "gzip", max_size)
    if head[:1] == b"\xfd" and data[:6] == _XZ_MAGIC:
        return _unxz(data, max_size)
    if _is_zlib(data):
        return _inflate(data, 15, "zlib", max_size)
    return data


def looks_compressed(data: bytes) -> bool:
    """Whether data starts like one of the formats decompress_any reads."""
    head = data[:4]
    return (
        head in (_LZ4_MAGIC, _ZSTD_MAGIC)
        or head[:2] == _GZIP_MAGIC
        or data[:6] == _XZ_MAGIC
        or _is_zlib(data)
    )


class BaseCompressor:
    """Subclasses implement `compress`, `decompress` and `is_compressed`.

    `level` is the compression level (each compressor documents its range and default);
    values shorter than `min_length` bytes are stored uncompressed. Both can also be set as
    class attributes of a subclass. The cache applies the threshold itself (COMPRESS_MIN_LENGTH,
    else this `min_length`) before calling `compress`, so a compressor of any class, even one
    without `min_length`, is handed only values at least that long.
    """

    #: Values shorter than this many bytes are stored uncompressed.
    min_length = 256
    #: The compression level; None means the compressor's default.
    level: int | None = None
    #: The accepted range of `level`, inclusive.
    levels: ClassVar[tuple[int, int]] = (0, 0)

    def __init__(
        self, min_length: int | None = None, level: int | None = None, **options: Any
    ) -> None:
        if min_length is not None:
            self.min_length = min_length
        if level is not None:
            self.level = level
        if self.level is not None:
            low, high = self.levels
            if isinstance(self.level, bool) or not isinstance(self.level, int):
                raise TypeError(f"{type(self).__name__} level must be an int, not {self.level!r}")
            if not low <= self.level <= high:
                raise ValueError(
                    f"{type(self).__name__} level must be from {low} to {high}, not {self.level}"
                )
        self.options = options

    def compress(self, data: bytes) -> bytes:
        raise NotImplementedError

    def decompress(self, data: bytes) -> bytes:
        raise NotImplementedError

    def is_compressed(self, data: bytes) -> bool:
        raise NotImplementedError


class IdentityCompressor(BaseCompressor):
    """No compression (the default)."""

    def compress(self, data: bytes) -> bytes:
        return data

    def decompress(self, data: bytes) -> bytes:
        return data

    def is_compressed(self, data: bytes) -> bool:
        return False


class ZlibCompressor(BaseCompressor):
    """zlib, as django-redis' ZlibCompressor writes it (level 0-9, default 6)."""

    level = 6
    levels = (-1, 9)

    def compress(self, data: bytes) -> bytes:
        return zlib.compress(data, self.level if self.level is not None else 6)

    def decompress(self, data: bytes) -> bytes:
        return _inflate(data, 15, "zlib", MAX_DECOMPRESSED_SIZE)

    def is_compressed(self, data: bytes) -> bool:
        return _is_zlib(data)


class GzipCompressor(BaseCompressor):
    """gzip, as django-redis' GzipCompressor writes it (level 0-9, default 9)."""

    level = 9
    levels = (0, 9)

    def compress(self, data: bytes) -> bytes:
        # mtime=0 makes equal values compress to equal bytes.
        return gzip.compress(data, self.level if self.level is not None else 9, mtime=0)

    def decompress(self, data: bytes) -> bytes:
        return _inflate(data, 31, "gzip", MAX_DECOMPRESSED_SIZE)

    def is_compressed(self, data: bytes) -> bool:
        return data[:2] == _GZIP_MAGIC


class LzmaCompressor(BaseCompressor):
    """xz (lzma), as django-redis' LzmaCompressor writes it (preset 0-9, default 4)."""

    level = 4
    levels = (0, 9)

    def compress(self, data: bytes) -> bytes:
        return lzma.compress(data, preset=self.level if self.level is not None else 4)

    def decompress(self, data: bytes) -> bytes:
        return _unxz(data, MAX_DECOMPRESSED_SIZE)

    def is_compressed(self, data: bytes) -> bool:
        return data[:6] == _XZ_MAGIC


class Lz4Compressor(BaseCompressor):
    """LZ4 frames, as django-redis' Lz4Compressor (python-lz4) writes them; runs in Rust.

    The Rust encoder has LZ4's default fast mode only (python-lz4's level 0, which
    django-redis uses); `level` is accepted for symmetry and ignored.
    """

    level = 0
    levels = (-(2**31), 2**31 - 1)

    def compress(self, data: bytes) -> bytes:
        return lz4_compress(data)

    def decompress(self, data: bytes) -> bytes:
        return lz4_decompress(data, MAX_DECOMPRESSED_SIZE)

    def is_compressed(self, data: bytes) -> bool:
        return data[:4] == _LZ4_MAGIC


class ZstdCompressor(BaseCompressor):
    """Zstandard frames, as django-redis' ZStdCompressor (pyzstd) writes them; runs in Rust.

    `level` runs from -7 (fastest) to 22 (smallest); the default 3 is zstd's and pyzstd's.
    """

    level = 3
    levels = (-7, 22)

    def compress(self, data: bytes) -> bytes:
        return zstd_compress(data, self.level if self.level is not None else 3)

    def decompress(self, data: bytes) -> bytes:
        return zstd_decompress(data, MAX_DECOMPRESSED_SIZE)

    def is_compressed(self, data: bytes) -> bool:
        return data[:4] == _ZSTD_MAGIC


#: django-redis' spelling.
ZStdCompressor = ZstdCompressor

#: The compressors whose formats decompress_any recognises (exact classes: a subclass may write
#: its own format).
BUILTIN_COMPRESSORS = frozenset(
    {
        IdentityCompressor,
        ZlibCompressor,
        GzipCompressor,
        LzmaCompressor,
        Lz4Compressor,
        ZstdCompressor,
    }
)
