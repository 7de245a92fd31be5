"""A smoke of an installed wheel on another platform: the package comes from site-packages (not
this checkout), the compiled module is the platform's, the Rust compressors round-trip and write
their formats, and the near cache keeps, serves and drops a key when another client writes it.

Not collected by the default run (its name does not start with ``test_``): scripts/arm64_check.sh
passes it to pytest explicitly, beside Django's contract and the async contract, under an arm64
CPython in qemu-user. REDOXIDE_EXPECT_MACHINE names the machine the interpreter must report.
"""

from __future__ import annotations

import os
import platform
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.backend import build_cache
from support.near import near_options, serving, stop_tracking, wait_for, warm
from support.servers import RedisServer

CHECKOUT = Path(__file__).resolve().parents[2]


def test_the_package_is_the_installed_wheel() -> None:
    import redoxide
    import redoxide._redoxide as native

    package = Path(redoxide.__file__).resolve()
    assert CHECKOUT / "python" not in package.parents, f"imported from the checkout: {package}"
    assert "site-packages" in package.parts
    assert Path(native.__file__).name.endswith(".abi3.so")
    expected = os.environ.get("REDOXIDE_EXPECT_MACHINE")
    if expected:
        assert platform.machine() == expected
    elf_machine = Path(native.__file__).read_bytes()[18:20]
    # e_machine of the ELF header: 0xB7 is AArch64, 0x3E is x86-64.
    assert {"aarch64": b"\xb7\x00", "x86_64": b"\x3e\x00"}[platform.machine()] == elf_machine


@pytest.mark.parametrize("name", ["Zlib", "Gzip", "Lzma", "Lz4", "Zstd"])
def test_compressors_round_trip_and_write_their_format(
    redis_server: RedisServer, name: str
) -> None:
    import redis

    prefix = f"c{uuid.uuid4().hex[:8]}"
    cache = build_cache(
        redis_server.url,
        {"KEY_PREFIX": prefix, "OPTIONS": {"COMPRESSOR": f"redoxide.compressors.{name}Compressor"}},
    )
    value = {"rows": [f"row {i} " * 8 for i in range(400)]}
    cache.set("big", value, 60)
    assert cache.get("big") == value
    raw = redis.Redis(host="127.0.0.1", port=redis_server.port).get(f"{prefix}:1:big")
    assert raw is not None
    magic = {
        "Zlib": (b"\x78",),
        "Gzip": (b"\x1f\x8b",),
        "Lzma": (b"\xfd7zXZ",),
        "Lz4": (b"\x04\x22\x4d\x18",),
        "Zstd": (b"\x28\xb5\x2f\xfd",),
    }[name]
    assert raw.startswith(magic), raw[:8]
    assert len(raw) < len(repr(value)) // 4


def test_near_cache_keeps_serves_and_drops(redis_server: RedisServer) -> None:
    import redis

    prefix = f"n{uuid.uuid4().hex[:8]}"
    cache: Any = build_cache(
        redis_server.url, {"KEY_PREFIX": prefix, "OPTIONS": {"NEAR_CACHE": near_options()}}
    )
    try:
        serving(cache)
        cache.set("cfg:flag", {"on": True}, 60)
        assert warm(cache, "cfg:flag") == {"on": True}
        # Another process writes the key: the server invalidates it, the next read refills.
        other = redis.Redis(host="127.0.0.1", port=redis_server.port)
        other.set(f"{prefix}:1:cfg:flag", b"7")
        wait_for("the other client's write", lambda: cache.get("cfg:flag") == 7)
        assert cache.near_cache_stats()["invalidations"] >= 1
    finally:
        stop_tracking(cache)
