"""Compressors: round trips, interop with the packages django-redis uses, corrupt input, GIL."""

from __future__ import annotations

import gzip
import lzma
import os
import pickle
import resource
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable

import lz4.frame
import pytest
import pyzstd
import zstandard
from redoxide import _redoxide
from redoxide.compressors import (
    MAX_DECOMPRESSED_SIZE,
    BaseCompressor,
    GzipCompressor,
    IdentityCompressor,
    Lz4Compressor,
    LzmaCompressor,
    ZlibCompressor,
    ZstdCompressor,
    decompress_any,
)
from redoxide.exceptions import SerializationError

COMPRESSORS: list[type[BaseCompressor]] = [
    ZlibCompressor,
    GzipCompressor,
    LzmaCompressor,
    Lz4Compressor,
    ZstdCompressor,
]


def users(n: int) -> bytes:
    """The pickled list of user-like dicts of the benchmarks (~14 KiB for n=80)."""
    return pickle.dumps(
        [
            {
                "id": i,
                "username": f"user{i}",
                "email": f"user{i}@example.com",
                "first_name": "Ada",
                "last_name": f"Lovelace-{i % 7}",
                "is_active": i % 3 != 0,
                "groups": ["staff", "editors"][: i % 3],
                "score": i * 1.5,
            }
            for i in range(n)
        ],
        pickle.HIGHEST_PROTOCOL,
    )


def payload(size: int) -> bytes:
    """`size` bytes of compressible, not trivially repetitive data."""
    base = users(80)
    return (base * (size // len(base) + 1))[:size]


SIZES = [0, 1, 100, 14 * 1024, 5_000_000]

# What the packages django-redis uses write, and how they read.
FOREIGN: dict[type[BaseCompressor], tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    ZlibCompressor: (zlib.compress, zlib.decompress),
    GzipCompressor: (gzip.compress, gzip.decompress),
    LzmaCompressor: (lambda d: lzma.compress(d, preset=4), lzma.decompress),
    Lz4Compressor: (lz4.frame.compress, lz4.frame.decompress),
    ZstdCompressor: (pyzstd.compress, pyzstd.decompress),
}


@pytest.mark.parametrize("cls", COMPRESSORS)
@pytest.mark.parametrize("size", SIZES)
def test_round_trip(cls: type[BaseCompressor], size: int) -> None:
    data = payload(size)
    compressor = cls()
    packed = compressor.compress(data)
    assert compressor.is_compressed(packed)
    assert compressor.decompress(packed) == data
    assert decompress_any(packed) == data
    if size >= 14 * 1024:
        assert len(packed) < len(data) / 2


@pytest.mark.parametrize("cls", COMPRESSORS)
@pytest.mark.parametrize("size", [0, 100, 14 * 1024, 5_000_000])
def test_reads_and_writes_what_the_reference_packages_do(
    cls: type[BaseCompressor], size: int
) -> None:
    data = payload(size)
    write, read = FOREIGN[cls]
    theirs = write(data)
    assert cls().is_compressed(theirs)
    assert cls().decompress(theirs) == data
    assert decompress_any(theirs) == data
    assert read(cls().compress(data)) == data


LZ4_VARIANTS = [
    {},
    {"store_size": False},
    {"content_checksum": True},
    {"block_checksum": True, "content_checksum": True, "store_size": False},
    {"block_linked": False},
    {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    {"block_size": lz4.frame.BLOCKSIZE_MAX256KB, "block_linked": True},
    {"compression_level": lz4.frame.COMPRESSIONLEVEL_MAX},
]


@pytest.mark.parametrize("options", LZ4_VARIANTS, ids=str)
def test_lz4_reads_every_python_lz4_frame_variant(options: dict[str, object]) -> None:
    data = payload(700_000)
    for chunk in (data[:20_000], data):
        assert _redoxide.lz4_decompress(lz4.frame.compress(chunk, **options), 1 << 30) == chunk


def test_zstd_reads_zstandard_frames_with_and_without_size() -> None:
    data = payload(1_000_000)
    cctx = zstandard.ZstdCompressor(level=3, write_content_size=False, write_checksum=True)
    for frame in (zstandard.ZstdCompressor(level=3).compress(data), cctx.compress(data)):
        assert ZstdCompressor().decompress(frame) == data
    streamed = zstandard.ZstdCompressor().compressobj()
    frame = streamed.compress(data) + streamed.flush()
    assert zstandard.frame_header_size(frame) > 0
    assert _redoxide.zstd_decompress(frame, len(data)) == data
    with pytest.raises(SerializationError, match="limit"):
        _redoxide.zstd_decompress(frame, len(data) - 1)
    assert zstandard.ZstdDecompressor().decompress(ZstdCompressor(level=19).compress(data)) == data


def test_zstd_levels() -> None:
    data = payload(100_000)
    sizes = [len(ZstdCompressor(level=level).compress(data)) for level in (-5, 1, 19)]
    assert sizes[0] > sizes[1] > sizes[2]
    with pytest.raises(ValueError, match="level"):
        ZstdCompressor(level=23)
    with pytest.raises(ValueError, match="level"):
        ZlibCompressor(level=10)


def test_level_and_min_length_options() -> None:
    assert ZlibCompressor().level == 6
    assert GzipCompressor().level == 9
    assert LzmaCompressor().level == 4
    assert ZstdCompressor().level == 3
    compressor = ZlibCompressor(level=1, min_length=10)
    assert (compressor.level, compressor.min_length) == (1, 10)
    assert ZlibCompressor(min_length=None).min_length == BaseCompressor.min_length


def test_decompress_any_leaves_other_data_alone() -> None:
    for data in (b"", b"x", b"123", pickle.dumps({"a": 1}), b'{"json": true}', b"xyz", b"\xfd7z"):
        assert decompress_any(data) is data
    assert not IdentityCompressor().is_compressed(zlib.compress(b"x"))


CORRUPT: dict[str, bytes] = {
    "lz4 garbage": b"\x04\x22\x4d\x18" + bytes(range(256)) * 4,
    "zstd garbage": b"\x28\xb5\x2f\xfd" + bytes(range(256)) * 4,
    "gzip garbage": b"\x1f\x8b" + bytes(range(256)) * 4,
    "xz garbage": b"\xfd7zXZ\x00" + bytes(range(256)) * 4,
    "zlib garbage": b"\x78\x9c" + bytes(range(256)) * 4,
    # Frame headers declaring 4 GiB, with (almost) nothing behind them.
    "lz4 4 GiB claim": b"\x04\x22\x4d\x18\x68\x40"
    + struct.pack("<Q", 4 << 30)
    + bytes([0x4E])  # not the header checksum: caught either way
    + b"\x00" * 4,
    "zstd 4 GiB claim": b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 4 << 30) + b"\x01\x00\x00",
    "zstd 400 MiB claim": b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 400 << 20) + b"\x01\x00\x00",
}
for _name, (_write, _) in {
    "lz4": FOREIGN[Lz4Compressor],
    "zstd": FOREIGN[ZstdCompressor],
    "gzip": FOREIGN[GzipCompressor],
    "xz": FOREIGN[LzmaCompressor],
    "zlib": FOREIGN[ZlibCompressor],
}.items():
    _frame = _write(payload(100_000))
    CORRUPT[f"{_name} truncated"] = _frame[: len(_frame) // 2]
    CORRUPT[f"{_name} without its last byte"] = _frame[:-1]


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_corrupt_data_raises_serialization_error_quickly(name: str) -> None:
    data = CORRUPT[name]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(SerializationError):
        decompress_any(data)
    assert time.perf_counter() - start < 1.0
    # ru_maxrss is in KiB: no gigabyte (or hundreds of MiB) allocation happened.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 64 * 1024


def test_valid_lz4_header_claiming_4_gib_is_refused_before_allocating() -> None:
    # python-lz4 writes the header (and its checksum) for a declared size; no data follows.
    head = lz4.frame.LZ4FrameCompressor().begin(source_size=4 << 30)
    claim = head + struct.pack("<I", 0)  # end mark straight away
    assert lz4.frame.get_frame_info(claim)["content_size"] == 4 << 30
    with pytest.raises(SerializationError, match="limit"):
        Lz4Compressor().decompress(claim)
    head = lz4.frame.LZ4FrameCompressor().begin(source_size=400 << 20)
    with pytest.raises(SerializationError):
        decompress_any(head + struct.pack("<I", 0))


def test_decompress_any_is_bounded() -> None:
    data = b"\x00" * 3_000_000
    for packed in (
        zlib.compress(data),
        gzip.compress(data),
        lzma.compress(data),
        lz4.frame.compress(data, store_size=False),
        lz4.frame.compress(data),
        pyzstd.compress(data),
    ):
        assert decompress_any(packed, max_size=len(data)) == data
        with pytest.raises(SerializationError, match="limit"):
            decompress_any(packed, max_size=len(data) - 1)
    assert MAX_DECOMPRESSED_SIZE == 512 * 1024 * 1024


def test_gzip_reads_several_members() -> None:
    two = gzip.compress(b"a" * 50) + gzip.compress(b"b" * 50) + b"\x00" * 8
    assert decompress_any(two) == b"a" * 50 + b"b" * 50


@pytest.mark.parametrize("compress", [_redoxide.lz4_compress, _redoxide.zstd_compress])
def test_large_compression_releases_the_gil(compress: Callable[[bytes], bytes]) -> None:
    # 50 MB of hex digits: few long matches, so even LZ4 takes tens of milliseconds.
    data = os.urandom(25_000_000).hex().encode()
    stamps: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            stamps.append(time.perf_counter())

    # A switch interval far longer than the call: a thread holding the GIL through it is never
    # made to give it up in between, so the other thread can tick inside the call only if the
    # call released the GIL (whatever the host's load, which only thins the ticks out).
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    thread = threading.Thread(target=tick)
    thread.start()
    try:
        while not stamps:
            time.sleep(0.001)
        start = time.perf_counter()
        compress(data)
        end = time.perf_counter()
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    inside = [t for t in stamps if start < t < end]
    assert inside, f"no tick in the {end - start:.3f} s call: it held the GIL"
