"""Compressor and serializer benchmarks, in one run against one throwaway server.

    .venv/bin/python benchmarks/codec_bench.py [--quick] [--busy]

1. Compressor micro: ratio and MB/s for compress and decompress of the ~14 KiB payload (a pickled
   list of 80 user-like dicts): redoxide's Rust Lz4 / Zstd beside python-lz4, zstandard, pyzstd
   and the stdlib's zlib, gzip and lzma, at the same levels, interleaved round by round.
2. End to end: get / set / get_many / set_many of that payload through redoxide, per COMPRESSOR.
3. Serializers: dumps + loads round trip of the small (~150 byte) dict, and get / set through
   redoxide, per SERIALIZER.
Results go to benchmarks/results/codec-<regime>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib
import json
import lzma
import pickle
import statistics
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import result_files
from servers import RedisServer

RESULTS = Path(__file__).parent / "results"
SMALL = {
    "id": 1234,
    "username": "ada.lovelace",
    "email": "ada@example.com",
    "active": True,
    "score": 98.5,
    "tags": ["admin", "staff"],
    "bio": "Analyst of engines.",
}
LARGE = [
    {
        "id": i,
        "username": f"user{i:04d}",
        "email": f"user{i:04d}@example.com",
        "first_name": "First",
        "last_name": f"Last{i}",
        "active": i % 3 != 0,
        "score": i * 1.25,
        "groups": ["staff", "editors"] if i % 2 else ["viewers"],
        "bio": f"User {i} writes about caching and queues.",
        "address": f"{i * 7919 % 10000} Long St, Town {i % 17}",
        "last_login": f"2026-11-{i % 28 + 1:02d}T{i % 24:02d}:{i % 60:02d}:00Z",
    }
    for i in range(80)
]
PAYLOAD = pickle.dumps(LARGE, pickle.HIGHEST_PROTOCOL)


def codecs() -> dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]]:
    """Name -> (compress, decompress), for whatever is installed."""
    out: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {}
    comp = importlib.import_module("redoxide.compressors")
    for name, cls, level in (
        ("redoxide lz4", "Lz4Compressor", 0),
        ("redoxide zstd", "ZstdCompressor", 3),
    ):
        if hasattr(comp, cls):
            c = getattr(comp, cls)(level=level)
            out[name] = (c.compress, c.decompress)
    with contextlib.suppress(ImportError):
        import lz4.frame

        out["python-lz4"] = (
            lambda d: lz4.frame.compress(d, compression_level=0),
            lz4.frame.decompress,
        )
    with contextlib.suppress(ImportError):
        import zstandard

        zc, zd = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
        out["zstandard"] = (zc.compress, zd.decompress)
    with contextlib.suppress(ImportError):
        import pyzstd

        out["pyzstd"] = (lambda d: pyzstd.compress(d, 3), pyzstd.decompress)
    out["zlib"] = (lambda d: zlib.compress(d, 6), zlib.decompress)
    out["gzip"] = (lambda d: gzip.compress(d, 6), gzip.decompress)
    out["lzma"] = (lzma.compress, lzma.decompress)
    return out


def rate(fn: Callable[[], Any], n: int) -> float:
    return harness.per_second(lambda i: fn(), n)


def micro(rounds: int, n: int) -> dict[str, dict[str, float]]:
    table = codecs()
    samples: dict[str, dict[str, list[float]]] = {k: {"c": [], "d": []} for k in table}
    for _ in range(rounds):
        for name, (compress, decompress) in table.items():
            count = max(1, n // 50) if name == "lzma" else n
            blob = compress(PAYLOAD)
            samples[name]["c"].append(rate(lambda c=compress: c(PAYLOAD), count))
            samples[name]["d"].append(rate(lambda d=decompress, b=blob: d(b), count))
    mb = len(PAYLOAD) / 1e6
    return {
        name: {
            "ratio": len(PAYLOAD) / len(table[name][0](PAYLOAD)),
            "compress_mb_s": statistics.median(s["c"]) * mb,
            "decompress_mb_s": statistics.median(s["d"]) * mb,
        }
        for name, s in samples.items()
    }


def make_cache(url: str, options: dict[str, Any]) -> Any:
    from redoxide import RedisCache

    return RedisCache(url, {"OPTIONS": options, "KEY_PREFIX": "codec"})


def e2e(url: str, options: dict[str, Any], value: Any, rounds: int, n: int) -> dict[str, float]:
    cache = make_cache(url, options)
    keys = [f"k{i}" for i in range(10)]
    cache.set_many(dict.fromkeys(keys, value))
    ops = {
        "get": lambda: cache.get("k0"),
        "set": lambda: cache.set("k0", value),
        "get_many": lambda: cache.get_many(keys),
        "set_many": lambda: cache.set_many(dict.fromkeys(keys, value)),
    }
    runs: dict[str, list[float]] = {k: [] for k in ops}
    for _ in range(rounds):
        for name, fn in ops.items():
            runs[name].append(rate(fn, n))
    return {name: statistics.median(r) for name, r in runs.items()}


def serializer_micro(rounds: int, n: int) -> dict[str, float]:
    ser = importlib.import_module("redoxide.serializers")
    out: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name in ("PickleSerializer", "JSONSerializer", "MsgPackSerializer"):
            if not hasattr(ser, name):
                continue
            s = getattr(ser, name)()
            out.setdefault(name, []).append(rate(lambda s=s: s.loads(s.dumps(SMALL)), n))
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    parser.add_argument("--busy", action="store_true", help="hold /dev/cpu_dma_latency at 0")
    args = parser.parse_args()
    rounds, n = (3, 300) if args.quick else (7, 2000)
    regime = "busy" if args.busy else "idle"
    sys.path.insert(0, str(Path(__file__).parent))
    comp = importlib.import_module("redoxide.compressors")
    with harness.busy(args.busy), RedisServer() as server:
        results: dict[str, Any] = {"regime": regime, "payload_bytes": len(PAYLOAD)}
        results["compressors"] = micro(rounds, n)
        e2e_out: dict[str, dict[str, float]] = {}
        for name in (
            "IdentityCompressor",
            "Lz4Compressor",
            "ZstdCompressor",
            "ZlibCompressor",
            "GzipCompressor",
            "LzmaCompressor",
        ):
            if hasattr(comp, name):
                opts = {"COMPRESSOR": f"redoxide.compressors.{name}"}
                count = max(20, n // 20) if name == "LzmaCompressor" else n // 2
                e2e_out[name] = e2e(server.url, opts, LARGE, rounds, count)
        results["end_to_end_14k"] = e2e_out
        results["serializer_round_trip"] = serializer_micro(rounds, n * 5)
        ser_e2e: dict[str, dict[str, float]] = {}
        ser = importlib.import_module("redoxide.serializers")
        for name in ("PickleSerializer", "JSONSerializer", "MsgPackSerializer"):
            if hasattr(ser, name):
                opts = {"SERIALIZER": f"redoxide.serializers.{name}"}
                ser_e2e[name] = e2e(server.url, opts, SMALL, rounds, n)
        results["end_to_end_small"] = ser_e2e

    print(f"== compressors on a {len(PAYLOAD)}-byte payload ({regime} host) ==")
    print(f"  {'codec':<15} {'ratio':>6} {'compress MB/s':>14} {'decompress MB/s':>16}")
    for name, r in results["compressors"].items():
        c, d = r["compress_mb_s"], r["decompress_mb_s"]
        print(f"  {name:<15} {r['ratio']:>6.2f} {c:>14.0f} {d:>16.0f}")
    print("== end to end, 14 KiB value, calls/s (get_many/set_many: 10-key calls) ==")
    for name, r in e2e_out.items():
        print(f"  {name:<20} " + "  ".join(f"{k} {v / 1000:6.1f}k" for k, v in r.items()))
    base = e2e_out.get("IdentityCompressor", {}).get("get")
    if base and "Lz4Compressor" in e2e_out:
        print(f"  get with Lz4 / get uncompressed: {e2e_out['Lz4Compressor']['get'] / base:.2f}x")
    print("== serializers, small dict: dumps+loads round trips/s ==")
    for name, v in results["serializer_round_trip"].items():
        print(f"  {name:<20} {v / 1000:8.1f}k")
    print("== serializers end to end, small dict, calls/s ==")
    for name, r in ser_e2e.items():
        print(f"  {name:<20} " + "  ".join(f"{k} {v / 1000:6.1f}k" for k, v in r.items()))
    if args.quick:  # not a result to keep: its own file, no history line
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"codec-{regime}-quick.json"
        out.write_text(json.dumps(results, indent=2) + "\n")
    else:
        summary = {
            "compress_mb_s": {k: v["compress_mb_s"] for k, v in results["compressors"].items()},
            "end_to_end_14k_get": {k: v["get"] for k, v in e2e_out.items()},
            "serializer_round_trip": results["serializer_round_trip"],
        }
        out = result_files.save(f"codec-{regime}", results, summary)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
