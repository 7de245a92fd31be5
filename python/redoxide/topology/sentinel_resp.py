"""The sentinels' side of RESP2, as the events watcher (sentinel_events.py) speaks it over
plain sockets: commands encoded, replies parsed, events and sentinel replies read."""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["Incomplete", "addresses_of", "command", "fields_of", "parse", "parse_event", "reply"]


class Incomplete(Exception):
    """The buffer ends inside a reply."""


def parse(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    """One RESP2 value from `buf` at `pos`: (value, position after it). An error reply is a
    ValueError (returned, not raised)."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete
    kind, line = buf[pos : pos + 1], bytes(buf[pos + 1 : end])
    pos = end + 2
    if kind == b"+":
        return line, pos
    if kind == b"-":
        return ValueError(line.decode(errors="replace")), pos
    if kind == b":":
        return int(line), pos
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, pos
        if len(buf) < pos + size + 2:
            raise Incomplete
        return bytes(buf[pos : pos + size]), pos + size + 2
    if kind == b"*":
        count = int(line)
        items = []
        for _ in range(max(count, 0)):
            item, pos = parse(buf, pos)
            items.append(item)
        return (items if count >= 0 else None), pos
    raise ValueError(f"not a RESP2 reply: {bytes(buf[pos - 2 - len(line) - 1 : end])!r}")


def command(*args: str | bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def reply(sock: socket.socket, buf: bytearray) -> Any:
    """The next reply on `sock` (blocking, within its timeout); `buf` keeps what came after it
    (an event, say)."""
    while True:
        try:
            value, end = parse(buf, 0)
        except Incomplete:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("closed") from None
            buf += chunk
        else:
            del buf[:end]
            return value


def parse_event(channel: str, data: str) -> tuple[str, str, str, str, int] | None:
    """An event's (channel, service, instance type, ip, port), or None if it names no
    service. ``+switch-master``'s address is the new primary's."""
    parts = data.split()
    try:
        if channel == "+switch-master":  # <name> <old ip> <old port> <new ip> <new port>
            return channel, parts[0], "master", parts[3], int(parts[4])
        # <type> <name> <ip> <port> [@ <master name> <master ip> <master port>]
        kind = parts[0]
        service = parts[parts.index("@") + 1] if "@" in parts else parts[1]
        return channel, service, kind, parts[2], int(parts[3])
    except (IndexError, ValueError):
        return None


def fields_of(entry: Any) -> dict[bytes, Any]:
    """A sentinel's flat field list (``SENTINEL MASTER``, one entry of ``SENTINEL SENTINELS``)
    as a dict; empty for anything else (an error reply, say)."""
    if not isinstance(entry, list):
        return {}
    return dict(zip(entry[::2], entry[1::2], strict=False))


def addresses_of(value: Any) -> list[tuple[str, int]]:
    """The (ip, port) of each sentinel in a ``SENTINEL SENTINELS`` reply (none for an error)."""
    found = []
    for entry in value if isinstance(value, list) else ():
        fields = fields_of(entry)
        try:
            found.append((fields[b"ip"].decode(), int(fields[b"port"])))
        except (KeyError, ValueError, AttributeError):
            continue
    return found
