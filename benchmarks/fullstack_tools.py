"""Measuring tools for fullstack.py: /proc accounting, HTTP probes, INFO, wrk.

CPU is utime + stime of a whole process tree from ``/proc/<pid>/stat`` (every thread of each
process; the kernel derives the total from the scheduler's precise runtime), RSS from
``/proc/<pid>/statm``; redis-server figures come from INFO on one monitoring connection.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

WRK = shutil.which("wrk") or "/usr/bin/wrk"
CONNECTIONS = 64
WRK_THREADS = 2
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")

# -- processes and /proc ---------------------------------------------------------------------


def process_tree(root: int) -> list[int]:
    """Return root and every live descendant (from /proc/<pid>/stat parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def cpu_seconds(pids: Sequence[int]) -> float:
    """Return utime + stime of the processes (all their threads), in seconds."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / TICK


def cpu_split(pids: Sequence[int]) -> tuple[float, float]:
    """Return (utime, stime) of the processes (all their threads), in seconds."""
    user = system = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            system += int(fields[12])
    return user / TICK, system / TICK


def switches(pids: Sequence[int]) -> tuple[int, int]:
    """Return the (voluntary, involuntary) context switches of the processes' live threads:
    how often they slept (on a socket, a lock, the GIL) and how often they were preempted."""
    vol = invol = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in os.scandir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, ValueError), open(f"{task.path}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            vol += int(line.split()[1])
                        elif line.startswith("nonvoluntary_ctxt_switches:"):
                            invol += int(line.split()[1])
    return vol, invol


def rss_bytes(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/statm") as f:
            total += int(f.read().split()[1]) * PAGE
    return total


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never an http_proxy


def http_get(url: str) -> tuple[int, str]:
    try:
        with _OPENER.open(url, timeout=10) as resp:
            return resp.status, resp.read(200).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(200).decode(errors="replace")
    except OSError as exc:
        return 0, repr(exc)


# -- redis-server INFO on one monitoring connection -------------------------------------------


class Monitor:
    """A minimal RESP client for INFO (stdlib only; its own connection is not counted)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.file = self.sock.makefile("rb")
        self.lock = threading.Lock()
        self.pid: int | None = None

    def info(self, section: str) -> dict[str, str]:
        with self.lock:
            self.sock.sendall(f"*2\r\n$4\r\nINFO\r\n${len(section)}\r\n{section}\r\n".encode())
            header = self.file.readline()
            if not header.startswith(b"$"):
                raise RuntimeError(f"unexpected INFO reply {header!r}")
            body = self.file.read(int(header[1:]) + 2).decode()
        return dict(line.split(":", 1) for line in body.splitlines() if ":" in line)

    def cpu(self) -> float:
        info = self.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def work(self) -> dict[str, float]:
        """Return what the server did so far: reads and writes on client sockets, bytes in and
        out, and the microseconds its commands took (``cmd_us``).

        The difference between its CPU and the commands' time is what it spent on the sockets:
        fewer, fuller reads and writes cost less. (INFO's own traffic counts too: a few reads
        per cell.)"""
        stats = self.info("stats")
        work = {
            name: float(stats.get(field, 0))
            for name, field in (
                ("reads", "total_reads_processed"),
                ("writes", "total_writes_processed"),
                ("in_bytes", "total_net_input_bytes"),
                ("out_bytes", "total_net_output_bytes"),
            )
        }
        work["cmd_us"] = 0.0
        for field in self.info("commandstats").values():
            parts = dict(part.split("=", 1) for part in field.split(",") if "=" in part)
            work["cmd_us"] += float(parts.get("usec", 0))
        # Its CPU split: user (commands, parsing, replies) and kernel (the socket calls, and on
        # loopback the delivery to, and wake-up of, whoever waits for each reply it writes).
        cpu = self.info("cpu")
        work["user_us"] = float(cpu["used_cpu_user"]) * 1e6
        work["sys_us"] = float(cpu["used_cpu_sys"]) * 1e6
        work["sleeps"] = float(self._sleeps())
        return work

    def _sleeps(self) -> int:
        """How many times the server has waited for work (its voluntary context switches): a
        server kept busy by full reads sleeps, and is woken, less per request."""
        if self.pid is None:
            self.pid = int(self.info("server").get("process_id", 0)) or 0
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])
        return 0

    def clients(self) -> tuple[int, int]:
        """Return (connected clients other than this one, total connections received)."""
        clients = int(self.info("clients")["connected_clients"]) - 1
        return clients, int(self.info("stats")["total_connections_received"])

    def close(self) -> None:
        self.sock.close()


# -- wrk ----------------------------------------------------------------------------------------

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def wrk(url: str, seconds: float) -> dict[str, float]:
    """Run wrk on url; return requests, req/s, p50/p99 (ms), non-2xx and socket errors."""
    duration = f"-d{max(1, round(seconds))}s"  # wrk takes whole seconds
    args = [WRK, f"-t{WRK_THREADS}", f"-c{CONNECTIONS}", duration, "--timeout", "10s"]
    out = subprocess.run(
        [*args, "--latency", url],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    ).stdout
    requests = re.search(r"(\d+) requests in", out)
    if requests is None:
        raise RuntimeError(f"wrk gave no result: {out[:200]!r}")
    result = {
        "requests": float(requests.group(1)),
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "non2xx": 0.0,
        "socket_errors": 0.0,
    }
    for pct in ("50", "99"):
        found = re.search(rf"^\s+{pct}%\s+(\S+)", out, re.M)
        result[f"p{pct}_ms"] = _ms(found.group(1)) if found else float("nan")
    if found := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        result["non2xx"] = float(found.group(1))
    if found := re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    ):
        result["socket_errors"] = float(sum(int(g) for g in found.groups()))
    return result
