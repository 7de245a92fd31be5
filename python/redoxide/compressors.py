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
from typing import Any, ClassVar

from redoxide._redoxide import lz4_compress, lz4_decompress, zstd_compress, zstd_decompress
from redoxide.exceptions import SerializationError

__all__ = [
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


def _inflate(data: bytes, wbits: int, fmt: str, max_size: int) -> bytes:
    """Decompress zlib (wbits 15) or gzip (wbits 31, every member) into at most max_size bytes."""
    out = []
    total = 0
    while True:
        d = zlib.decompressobj(wbits)
        try:
            chunk = d.decompress(data, max_size - total + 1)
        except zlib.error as exc:
            raise SerializationError(f"invalid {fmt} data: {exc}") from exc
        total += len(chunk)
        if total > max_size:
            raise _too_large(fmt, max_size)
        out.append(chunk)
        if not d.eof:
            raise SerializationError(f"invalid {fmt} data: truncated stream")
        # Like gzip.decompress: further members may follow, then zero padding. Like
        # zlib.decompress: bytes after a zlib stream are ignored.
        data = d.unused_data.lstrip(b"\x00") if wbits == 31 else b""
        if not data:
            return b"".join(out)


def _unxz(data: bytes, max_size: int) -> bytes:
    """Decompress xz data (every stream), at most max_size bytes."""
    out = []
    total = 0
    while True:
        d = lzma.LZMADecompressor(lzma.FORMAT_AUTO, memlimit=_LZMA_MEMLIMIT)
        try:
            chunk = d.decompress(data, max_size - total + 1)
        except lzma.LZMAError as exc:
            raise SerializationError(f"invalid xz data: {exc}") from exc
        total += len(chunk)
        if total > max_size:
            raise _too_large("xz", max_size)
        out.append(chunk)
        if not d.eof:
            raise SerializationError("invalid xz data: truncated stream")
        data = d.unused_data
        if not data:
            return b"".join(out)


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


class BaseCompressor:
    """Subclasses implement `compress`, `decompress` and `is_compressed`.

    `level` is the compression level (each compressor documents its range and default);
    values shorter than `min_length` bytes are stored uncompressed. Both can also be set as
    class attributes of a subclass.
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
