"""Writes lost in a Sentinel failover, planned and killed: redoxide against redis-py's Sentinel.

    .venv/bin/python benchmarks/failover_bench.py [--runs N] [--timeout S] [--no-save]

Each run starts a throwaway sentinel set (a primary, two replicas, three sentinels with
``down-after-milliseconds 1000``; tests/support/servers.py) and makes one failover of it:

- planned: ``SENTINEL FAILOVER`` (the old primary stays up; the sentinels turn it into a
  replica of the new one some seconds later, and what it acknowledged meanwhile is gone);
- killed: the primary is killed by its own pid (SIGKILL).

Two writers run through the failover at once, each in its own thread: redoxide's cache
(``SENTINELS``) and redis-py's ``Sentinel(...).master_for(...)`` (what django-redis'
SentinelClient uses), both with SOCKET_TIMEOUT (``socket_timeout``) of --timeout seconds.
Each sets distinct keys (``<who>:<i>`` to i), about one a millisecond, and records every
write the server acknowledged. A third thread asks both replicas for ROLE every few ms: the
first one to answer ``master`` is the promotion. Once every sentinel names the new primary,
the old one (planned) is its replica again and a second has passed, the writers stop, and the
new primary is read:

- lost: acknowledged writes missing from the new primary;
- old-primary window: from the promotion to the last lost write's acknowledgement (the time
  writes kept going to the old primary after the replica took over; 0 when none was lost);
- first write on new: from the promotion to the first acknowledged write sent after it
  that the new primary holds;
- longest stall: the longest time between two acknowledged writes (a held or failing spell);
- failed: writes that raised (a typed error, nothing acknowledged).

Figures are medians over the runs. Results go to benchmarks/results/failover.json (and a
line in results/history.jsonl).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import result_files  # noqa: E402

harness.setup_django()

import redis  # noqa: E402
import redis.sentinel  # noqa: E402
from servers import TESTS  # noqa: E402, F401 - puts tests/ on sys.path
from support.servers import RedisServer, SentinelSet  # noqa: E402

SCENARIOS = ("planned", "killed")
WHO = ("redoxide", "redis-py")


class Writer:
    """Sets `<who>:<i>` to i in a loop until stopped; records each acknowledged write."""

    def __init__(self, who: str, setter: Callable[[str, int], Any]) -> None:
        self.who = who
        self.setter = setter
        self.acked: list[tuple[int, float, float]] = []  # i, sent, acknowledged
        self.failed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            sent = time.monotonic()
            try:
                self.setter(f"{self.who}:{i}", i)
            except Exception:  # every client's errors count as failed writes
                self.failed += 1
                time.sleep(0.01)
                continue
            self.acked.append((i, sent, time.monotonic()))
            time.sleep(0.001)


class Roles:
    """Asks each replica for ROLE every few ms; notes when the first answers master."""

    def __init__(self, replicas: list[RedisServer]) -> None:
        self.clients = [(r.port, redis.Redis(port=r.port, socket_timeout=0.2)) for r in replicas]
        self.promoted_at: float | None = None
        self.promoted_port: int | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set() and self.promoted_at is None:
            for port, client in self.clients:
                try:
                    role = client.execute_command("ROLE")[0]
                except redis.RedisError:
                    continue
                if role in (b"master", "master"):
                    self.promoted_at, self.promoted_port = time.monotonic(), port
                    return
            time.sleep(0.002)


def _named(sset: SentinelSet) -> set[int]:
    ports = set()
    for sentinel in sset.sentinels:
        try:
            reply = sentinel.cli("sentinel", "get-master-addr-by-name", sset.service).split()
            ports.add(int(reply[1]))
        except (RuntimeError, IndexError, ValueError):
            ports.add(-1)
    return ports


def _wait(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _role(node: RedisServer) -> str:
    try:
        return node.info("replication").get("role", "")
    except Exception:
        return ""


def one_run(scenario: str, timeout: float) -> dict[str, Any]:
    """One sentinel set, one failover, both writers; the figures of each writer."""
    from django.utils.module_loading import import_string

    with SentinelSet() as sset:
        old_port = sset.current_primary_port()
        old = sset.node_for_port(old_port)
        prefix = uuid.uuid4().hex[:6]
        ours = import_string("redoxide.RedisCache")(
            f"redis://{sset.service}/0",
            {
                "KEY_PREFIX": prefix,
                "OPTIONS": {
                    "SENTINELS": sset.sentinel_addresses,
                    "SOCKET_TIMEOUT": timeout,
                    "SOCKET_CONNECT_TIMEOUT": timeout,
                },
            },
        )
        sentinel = redis.sentinel.Sentinel(
            sset.sentinel_addresses, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        theirs = sentinel.master_for(
            sset.service, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        ours.set("warm-up", 1)
        theirs.set(f"{prefix}:warm-up", 1)
        watcher = getattr(getattr(ours._client, "primary", None), "watcher", None)
        if watcher is not None:  # redoxide follows the sentinels' events: let it hear them
            _wait("the watcher", lambda: watcher.links == len(sset.sentinels), 10)
        writers = {
            "redoxide": Writer("redoxide", lambda k, v: ours.set(k, v)),
            "redis-py": Writer("redis-py", lambda k, v: theirs.set(f"{prefix}:{k}", v)),
        }
        roles = Roles(sset.replicas)
        for writer in writers.values():
            writer.thread.start()
        time.sleep(1.0)  # steady writing first
        roles.thread.start()
        triggered = time.monotonic()
        if scenario == "planned":
            sset.sentinels[0].cli("sentinel", "failover", sset.service)
        else:
            os.kill(old.pid, signal.SIGKILL)
        _wait("every sentinel to name the new primary", lambda: old_port not in _named(sset))
        switched = time.monotonic()
        new_port = _named(sset).pop()
        new = sset.node_for_port(new_port)
        if scenario == "planned":
            _wait(
                "the old primary to be a replica with its link up",
                lambda: (
                    _role(old) == "slave"
                    and old.info("replication").get("master_link_status") == "up"
                ),
            )
        settled = time.monotonic()
        time.sleep(1.0)
        for writer in writers.values():
            writer.stop.set()
        for writer in writers.values():
            writer.thread.join(30)
        roles.stop.set()
        roles.thread.join(5)
        promoted = roles.promoted_at if roles.promoted_at is not None else switched
        reader = redis.Redis(port=new_port)
        figures: dict[str, Any] = {
            "promotion_after_trigger_s": round(promoted - triggered, 3),
            "sentinels_all_switched_after_trigger_s": round(switched - triggered, 3),
            "old_primary_demoted_after_trigger_s": round(settled - triggered, 3),
        }
        for who, writer in writers.items():
            key = ours.make_key if who == "redoxide" else (lambda k: f"{prefix}:{k}")
            names = [key(f"{who}:{i}") for i, _, _ in writer.acked]
            present: list[Any] = []
            for start in range(0, len(names), 1000):
                present += reader.mget(names[start : start + 1000])
            lost = [
                (i, sent, acked)
                for (i, sent, acked), got in zip(writer.acked, present, strict=True)
                if got is None
            ]
            on_new = [
                acked
                for (i, sent, acked), got in zip(writer.acked, present, strict=True)
                if got is not None and sent >= promoted
            ]
            acks = [a for _, _, a in writer.acked]
            figures[who] = {
                "acked": len(writer.acked),
                "longest_stall_s": round(max(b - a for a, b in itertools.pairwise(acks)), 3),
                "failed": writer.failed,
                "lost": len(lost),
                "old_primary_window_s": round(max(0.0, max(a for _, _, a in lost) - promoted), 3)
                if lost
                else 0.0,
                "first_write_on_new_s": round(min(on_new) - promoted, 3) if on_new else None,
            }
        reader.close()
        if new is None:
            raise RuntimeError("no new primary")
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1.0, help="SOCKET_TIMEOUT, s")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SCENARIOS}
    for run in range(args.runs):
        for scenario in harness.rotated(SCENARIOS, run):
            figures = one_run(scenario, args.timeout)
            runs[scenario].append(figures)
            print(f"run {run + 1} {scenario}: {json.dumps(figures)}", flush=True)
    summary: dict[str, Any] = {}
    for scenario, results in runs.items():
        summary[scenario] = {
            "promotion_after_trigger_s": _median([r["promotion_after_trigger_s"] for r in results]),
        }
        for who in WHO:
            summary[scenario][who] = {
                field: _median([r[who][field] for r in results])
                for field in (
                    "lost",
                    "old_primary_window_s",
                    "first_write_on_new_s",
                    "failed",
                    "longest_stall_s",
                )
            }
    print()
    print("| Failover | Client | Writes lost | Old-primary window (s) | First write on new (s) "
          "| Longest stall (s) | Failed writes |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for scenario in SCENARIOS:
        for who in WHO:
            s = summary[scenario][who]
            print(
                f"| {scenario} | {who} | {s['lost']} | {s['old_primary_window_s']} "
                f"| {s['first_write_on_new_s']} | {s['longest_stall_s']} | {s['failed']} |"
            )
    if not args.no_save:
        data = {
            "runs": runs,
            "summary": summary,
            "timeout": args.timeout,
            "environment": harness.environment(["redis"]),
        }
        print(result_files.save("failover", data, summary))


def _median(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


if __name__ == "__main__":
    main()
