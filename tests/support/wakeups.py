"""The ways the core wakes an event loop (``REDOXIDE_ASYNC_WAKEUP``), as test parameters."""

from __future__ import annotations

import sys

import pytest

#: Read per bridge: a loop made after setting it wakes that way.
ENV = "REDOXIDE_ASYNC_WAKEUP"

#: Every wake-up this platform has: eventfd (Linux), a self-pipe, call_soon_threadsafe.
MODES = [
    pytest.param(
        "eventfd",
        marks=pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only"),
    ),
    "pipe",
    "threadsafe",
]
