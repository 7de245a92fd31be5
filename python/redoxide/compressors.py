"""Compressors shrink large serialized values. Reads recognise compressed data by its magic bytes,
so values written before COMPRESSOR changed (or below the size threshold) still read back."""

from __future__ import annotations

import zlib
from typing import Any

__all__ = ["BaseCompressor", "IdentityCompressor", "ZlibCompressor"]


class BaseCompressor:
    """Subclasses implement `compress`, `decompress` and `is_compressed`."""

    #: Values shorter than this many bytes are stored uncompressed.
    min_length = 256

    def __init__(self, min_length: int | None = None, **options: Any) -> None:
        if min_length is not None:
            self.min_length = min_length
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
    """zlib, as django-redis' ZlibCompressor writes it."""

    def __init__(self, level: int = 6, **options: Any) -> None:
        super().__init__(**options)
        self.level = level

    def compress(self, data: bytes) -> bytes:
        return zlib.compress(data, self.level)

    def decompress(self, data: bytes) -> bytes:
        return zlib.decompress(data)

    def is_compressed(self, data: bytes) -> bool:
        # zlib's CMF byte is 0x78 for the default window; pickles start with 0x80.
        return len(data) > 1 and data[0] == 0x78 and (data[0] * 256 + data[1]) % 31 == 0
