"""Full-stack soak: the six-op view under granian for minutes, then redis-server killed twice.

    .venv-bench312/bin/python benchmarks/fullstack_soak.py              # 10 min/server + faults
    .venv-bench312/bin/python benchmarks/fullstack_soak.py --minutes 1  # a smoke run
    .venv-bench312/bin/python benchmarks/fullstack_soak.py --faults-only --servers granian-asgi
    .venv-bench312/bin/python benchmarks/fullstack_soak.py --report results/fullstack-soak.json

The project, servers and measuring tools are fullstack.py's (fullstack_project, fullstack_tools,
AppServer): a throwaway redis-server, the generated Django project under granian ASGI (2 workers)
and granian WSGI (2 workers x 4 threads), wrk with 64 keep-alive connections.

Phase 1, steady: the ``six`` view for ``--minutes`` per server, as consecutive 10 s wrk windows;
each window records req/s, p50/p99, non-2xx and socket errors, the RSS and CPU of the app's
process tree (/proc), and redis-server's connected_clients (INFO every 0.5 s on one observer
connection, not counted) and connections opened. The first minute (a third of a shorter run) is
warm-up. Targets: RSS growth from the first post-warm-up window to the last < 5%; server
connections <= 2 per worker under ASGI, <= threads + 1 per worker under WSGI, throughout; p99
drift (median of the last 3 windows over the first 3 after warm-up) < 1.5x; zero non-2xx and
socket errors.

Phase 2, faults: the ``six_open`` view (the same six calls, 200 on a miss) with OPTIONS
IGNORE_EXCEPTIONS and 0.5 s socket timeouts, under wrk in consecutive 1 s windows, while
redis-server is SIGKILLed by pid twice and started again, empty, on the same port ~3 s later.
Targets: every request answers 200 (zero non-2xx and socket errors, every second answers
requests), and cache hits (INFO keyspace_hits of the new server, polled every 50 ms) come back
within 5 s of the restart, with server connections (5 s on) within phase 1's bound. The error
window, kill to the first error-free second after the restart, is reported (0 when no request
failed).

The summary (fullstack_soak_report.py) prints PASS/FAIL per target; results go to
benchmarks/results/fullstack-soak.json (figures, verdicts, per-window series); the exit status is
1 if a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fullstack import SERVERS, AppServer, ServerMode, check_tools, environment, measure
from fullstack_project import write_project
from fullstack_soak_report import columns, dumps, report
from fullstack_tools import Monitor, http_get, rss_bytes, wrk

# The one import of the shared server support (it may move: fix it here only).
from servers import RedisServer

BACKEND = "redoxide.RedisCache"
RESULTS = Path(__file__).resolve().parent / "results" / "fullstack-soak.json"
SOAK_SERVERS = ("granian-asgi", "granian-wsgi-4t")
WORKERS = 2  # fullstack's granian modes
STEADY_WINDOW = 10  # seconds per wrk run in phase 1
WARMUP = 60.0  # seconds, or a third of a shorter run
RSS_GROWTH_MAX = 5.0  # percent
P99_DRIFT_MAX = 1.5  # ratio
DRIFT_WINDOWS = 3
FAIL_OPEN = {"IGNORE_EXCEPTIONS": True, "SOCKET_TIMEOUT": 0.5, "SOCKET_CONNECT_TIMEOUT": 0.5}
# Phase 2's timeline (seconds): load before the first kill, down time, up time before the next.
BEFORE_KILL, DOWN, BETWEEN, AFTER = 8.0, 3.0, 12.0, 15.0
KILLS = 2
RECOVERY_MAX = 5.0  # seconds from the restart to the first cache hit
POLL = 0.05
# The per-window series the JSON keeps, as columns.
STEADY_SERIES = (
    *("t", "requests", "rps", "p50_ms", "p99_ms", "non2xx", "socket_errors", "rss_mib"),
    *("conns_max", "conns_opened", "app_cpu_cores", "app_cpu_us", "redis_cpu_us", "redis_rss_mib"),
)
FAULT_SERIES: tuple[str, ...] = ("t0", "t1", "requests", "p50_ms", "p99_ms", "non2xx")
FAULT_SERIES += ("socket_errors", "hits", "clients")
# What of fullstack.environment() the JSON keeps.
ENVIRONMENT = ("python", "redoxide_tree", "cpus", "loadavg_at_start", "redis_server", "wrk")


def connection_bound(mode: ServerMode) -> int:
    """Return the most server connections the mode's workers may hold (ours, per worker)."""
    if mode.kind == "async":
        return 2 * WORKERS
    threads = int(mode.name.rsplit("-", 1)[1].rstrip("t"))
    return (threads + 1) * WORKERS


def app_env(backend: str, port: int, options: dict[str, Any] | None = None) -> dict[str, str]:
    """Return the generated project's environment: backend on port, with OPTIONS if given."""
    return {
        "BENCH_BACKEND": backend,
        "BENCH_LOCATION": f"redis://127.0.0.1:{port}/0",
        "BENCH_KEY_PREFIX": "soak",
        "BENCH_OPTIONS": json.dumps(options) if options else "",
    }


def set_up(app: AppServer) -> None:
    """Start app and write the counter and keys the views use."""
    app.start()
    status, body = http_get(app.url("setup"))
    if status != 200:
        raise RuntimeError(f"setup answered {status} {body[:80]!r}: {app.log_tail()}")


# -- phase 1: steady ------------------------------------------------------------------------


def steady(project: Path, mode: ServerMode, backend: str, seconds: float) -> dict[str, Any]:
    """Serve ``six`` under mode for `seconds` of 10 s wrk windows; return the series."""
    windows: list[dict[str, float]] = []
    with RedisServer() as redis:
        monitor = Monitor(redis.port)
        app = AppServer(mode, project, app_env(backend, redis.port))
        try:
            set_up(app)
            start = time.monotonic()
            while (elapsed := time.monotonic() - start) < seconds - 1:
                window = measure(app, monitor, "six", min(STEADY_WINDOW, seconds - elapsed))
                window["t"] = time.monotonic() - start
                cpu = window["app_cpu_us"] * window["requests"] / 1e6  # seconds, all processes
                window["app_cpu_cores"] = cpu / (window["t"] - elapsed)
                window["redis_rss_mib"] = rss_bytes([redis.pid]) / 2**20
                windows.append(window)
                print(
                    f"  {mode.name:<16} t={window['t']:5.0f}s {window['rps']:7.0f} req/s"
                    f"  p99 {window['p99_ms']:6.1f} ms  rss {window['rss_mib']:6.1f} MiB"
                    f"  conns {window['conns_max']:.0f} (+{window['conns_opened']:.0f})"
                    f"  cpu {window['app_cpu_cores']:.2f}"
                    + (f"  NON-2XX {window['non2xx']:.0f}" if window["non2xx"] else "")
                    + (
                        f"  SOCKET-ERR {window['socket_errors']:.0f}"
                        if window["socket_errors"]
                        else ""
                    ),
                    flush=True,
                )
        finally:
            app.stop()
            monitor.close()
    return {"server": mode.name, "label": mode.label, "windows": windows, "log": app.log_tail(300)}


def judge_steady(result: dict[str, Any], mode: ServerMode, warmup: float) -> dict[str, Any]:
    """Return the steady figures and a verdict per target."""
    windows = result["windows"]
    after = [w for w in windows if w["t"] - STEADY_WINDOW >= warmup - 1] or windows[-1:]
    rss0, rss1 = after[0]["rss_mib"], after[-1]["rss_mib"]
    p99_0 = statistics.median(w["p99_ms"] for w in after[:DRIFT_WINDOWS])
    p99_1 = statistics.median(w["p99_ms"] for w in after[-DRIFT_WINDOWS:])
    bound = connection_bound(mode)
    figures = {
        "windows": len(windows),
        "windows_after_warmup": len(after),
        "rps_median": statistics.median(w["rps"] for w in after),
        "rss_first_mib": windows[0]["rss_mib"],
        "rss_after_warmup_mib": rss0,
        "rss_end_mib": rss1,
        "rss_max_mib": max(w["rss_mib"] for w in windows),
        "rss_growth_percent": (rss1 - rss0) / rss0 * 100,
        "conns_max": max(w["conns_max"] for w in windows),
        "conns_max_after_warmup": max(w["conns_max"] for w in after),
        "conns_bound": bound,
        "conns_opened_after_warmup": sum(w["conns_opened"] for w in after[1:]),
        "p99_after_warmup_ms": p99_0,
        "p99_end_ms": p99_1,
        "p99_drift": p99_1 / p99_0 if p99_0 else float("nan"),
        "p99_max_ms": max(w["p99_ms"] for w in after),
        "requests": sum(w["requests"] for w in windows),
        "non2xx": sum(w["non2xx"] for w in windows),
        "socket_errors": sum(w["socket_errors"] for w in windows),
        "app_cpu_cores_median": statistics.median(w["app_cpu_cores"] for w in after),
    }
    targets = {
        f"rss_growth_lt_{RSS_GROWTH_MAX:g}pct": figures["rss_growth_percent"] < RSS_GROWTH_MAX,
        f"conns_le_{bound}": figures["conns_max"] <= bound,
        f"p99_drift_lt_{P99_DRIFT_MAX:g}x": figures["p99_drift"] < P99_DRIFT_MAX,
        "zero_non2xx_and_errors": figures["non2xx"] + figures["socket_errors"] == 0,
    }
    return {"figures": figures, "targets": targets}


# -- phase 2: faults --------------------------------------------------------------------------


class Observer:
    """INFO on one connection that follows the server through restarts (None while it is down)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.monitor: Monitor | None = None
        self.lock = threading.Lock()

    def read(self) -> dict[str, Any] | None:
        """Return run_id, keyspace_hits and connected clients (others than this one), or None."""
        with self.lock:
            try:
                if self.monitor is None:
                    self.monitor = Monitor(self.port)
                stats = self.monitor.info("stats")
                clients, _ = self.monitor.clients()
                run_id = self.monitor.info("server")["run_id"]
            except (OSError, RuntimeError, ValueError, KeyError):
                if self.monitor is not None:
                    with contextlib.suppress(OSError):
                        self.monitor.close()
                self.monitor = None
                return None
        return {"run_id": run_id, "hits": int(stats["keyspace_hits"]), "clients": clients}

    def close(self) -> None:
        with self.lock:
            if self.monitor is not None:
                self.monitor.close()
                self.monitor = None


def load_seconds(
    url: str,
    stop: threading.Event,
    origin: float,
    observer: Observer,
    windows: list[dict[str, Any]],
) -> None:
    """Run 1 s wrk windows until stop is set; append each with its times, hits and clients."""
    last = observer.read()
    while not stop.is_set():
        t0 = time.monotonic() - origin
        try:
            window: dict[str, Any] = dict(wrk(url, 1))
        except RuntimeError as exc:  # wrk answered nothing at all
            window = {"requests": 0.0, "rps": 0.0, "non2xx": 0.0, "socket_errors": 0.0}
            window["error"] = str(exc)[:120]
        window["t0"], window["t1"] = t0, time.monotonic() - origin
        now = observer.read()
        if now is None:
            window["hits"] = window["clients"] = None
        else:
            same = last is not None and last["run_id"] == now["run_id"]
            window["hits"] = now["hits"] - (last["hits"] if same and last else 0)
            window["clients"] = now["clients"]
        last = now
        windows.append(window)


def first_hit(port: int, since: float, timeout: float = 30.0) -> float | None:
    """Poll the (new) server's keyspace_hits; return seconds from `since` to the first hit."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(OSError, RuntimeError):
        monitor = Monitor(port)
        try:
            while time.monotonic() < deadline:
                if int(monitor.info("stats")["keyspace_hits"]) > 0:
                    return time.monotonic() - since
                time.sleep(POLL)
        finally:
            monitor.close()
    return None


def faults(project: Path, mode: ServerMode, backend: str) -> dict[str, Any]:
    """Serve ``six_open`` fail-open while redis-server is killed twice; return the timeline."""
    events: list[dict[str, Any]] = []
    with RedisServer() as redis:
        observer = Observer(redis.port)
        app = AppServer(mode, project, app_env(backend, redis.port, FAIL_OPEN))
        stop = threading.Event()
        windows: list[dict[str, Any]] = []
        loader: threading.Thread | None = None
        try:
            set_up(app)
            origin = time.monotonic()
            args = (app.url("six_open"), stop, origin, observer, windows)
            loader = threading.Thread(target=load_seconds, args=args, daemon=True)
            loader.start()
            time.sleep(BEFORE_KILL)
            for n in range(KILLS):
                killed = time.monotonic()
                redis.kill()  # SIGKILL by pid, as a crash
                time.sleep(DOWN)
                redis.fixed_port = True  # the same port again, empty
                redis.start()
                restarted = time.monotonic()
                recovery = first_hit(redis.port, restarted)
                events.append(
                    {
                        "kill_t": killed - origin,
                        "restart_t": restarted - origin,
                        "down_s": restarted - killed,
                        "recovery_s": recovery,
                    }
                )
                print(
                    f"  {mode.name:<16} kill {n + 1} at {killed - origin:5.1f}s, up again after"
                    f" {restarted - killed:.1f}s, first hit "
                    + (f"{recovery:.2f}s after restart" if recovery is not None else "never"),
                    flush=True,
                )
                time.sleep(max(0.0, (BETWEEN if n < KILLS - 1 else AFTER) - (recovery or 0.0)))
        finally:
            stop.set()
            if loader is not None:
                loader.join(30)
            app.stop()
            observer.close()
    for w in windows:
        print(
            f"    {w['t0']:5.1f}-{w['t1']:5.1f}s {w['requests']:6.0f} req"
            f"  p99 {w.get('p99_ms', float('nan')):7.1f} ms  non-2xx {w['non2xx']:.0f}"
            f"  errors {w['socket_errors']:.0f}  hits {w['hits']}  conns {w['clients']}",
            flush=True,
        )
    return {"server": mode.name, "label": mode.label, "events": events, "windows": windows}


def judge_faults(result: dict[str, Any], mode: ServerMode) -> dict[str, Any]:
    """Return the fault figures, each kill's error window and recovery, and the verdicts."""
    windows, events = result["windows"], result["events"]
    failed = [w for w in windows if w["non2xx"] or w["socket_errors"] or "error" in w]
    for i, event in enumerate(events):
        end = events[i + 1]["kill_t"] if i + 1 < len(events) else float("inf")
        during = [w for w in windows if w["t1"] > event["kill_t"] and w["t0"] < end]
        bad = [w for w in during if w in failed]
        # Kill to the end of the last failing second (its next second is error-free); 0 if none.
        event["error_window_s"] = (bad[-1]["t1"] - event["kill_t"]) if bad else 0.0
        down = [w for w in during if w["t0"] >= event["kill_t"] and w["t1"] <= event["restart_t"]]
        event["down_requests_per_s"] = (
            statistics.median(w["requests"] / (w["t1"] - w["t0"]) for w in down) if down else None
        )
        event["down_p99_ms"] = max((w.get("p99_ms", 0.0) for w in down), default=None)
        after = [w for w in during if w["t0"] >= event["restart_t"] + RECOVERY_MAX]
        event["conns_after_recovery"] = max(
            (w["clients"] for w in after if w["clients"] is not None), default=None
        )
    before = [w for w in windows if w["t1"] <= (events[0]["kill_t"] if events else float("inf"))]
    bound = connection_bound(mode)
    figures = {
        "seconds": len(windows),
        "requests": sum(w["requests"] for w in windows),
        "non2xx": sum(w["non2xx"] for w in windows),
        "socket_errors": sum(w["socket_errors"] for w in windows),
        "empty_seconds": sum(1 for w in windows if not w["requests"]),
        "healthy_requests_per_s": statistics.median(
            w["requests"] / (w["t1"] - w["t0"]) for w in before
        )
        if before
        else None,
        "conns_bound": bound,
    }
    recoveries = [e["recovery_s"] for e in events]
    targets = {
        "every_request_200": not failed and figures["non2xx"] + figures["socket_errors"] == 0,
        "every_second_answers": figures["empty_seconds"] == 0 and bool(windows),
        f"recovery_le_{RECOVERY_MAX:g}s": bool(events)
        and all(r is not None and r <= RECOVERY_MAX for r in recoveries),
        f"conns_after_recovery_le_{bound}": all(
            e["conns_after_recovery"] is not None and e["conns_after_recovery"] <= bound
            for e in events
        ),
    }
    return {"figures": figures, "events": events, "targets": targets}


# -- command line ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--minutes", type=float, default=10.0, help="phase 1 per server (10)")
    p.add_argument("--servers", default=",".join(SOAK_SERVERS), help="default: %(default)s")
    p.add_argument("--backend", default=BACKEND, help="the cache BACKEND (%(default)s)")
    p.add_argument("--no-save", action="store_true", help="print only, write no JSON")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--faults-only", action="store_true", help="phase 2 only")
    only.add_argument("--steady-only", action="store_true", help="phase 1 only")
    p.add_argument("--report", metavar="JSON", help="print the summary of a saved run again")
    args = p.parse_args(argv)
    args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if unknown := [s for s in args.servers if s not in SOAK_SERVERS] or not args.servers:
        p.error(f"unknown servers {unknown}; choose from {list(SOAK_SERVERS)}")
    if args.minutes * 60 < 4 * STEADY_WINDOW:
        p.error(f"--minutes must give at least {4 * STEADY_WINDOW} s")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        report(saved)
        return 0 if saved["passed"] else 1
    if problems := check_tools():
        print("\n".join(problems), file=sys.stderr)
        return 2

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    seconds = args.minutes * 60
    warmup = min(WARMUP, seconds / 3)
    env = environment()
    data: dict[str, Any] = {
        "benchmark": "fullstack-soak",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": {
            "backend": args.backend,
            "minutes": args.minutes,
            "warmup_s": warmup,
            "steady_window_s": STEADY_WINDOW,
            "fault_options": FAIL_OPEN,
            "fault_timeline_s": {"before_kill": BEFORE_KILL, "down": DOWN, "between": BETWEEN},
            "servers": args.servers,
        },
        "environment": {k: env[k] for k in ENVIRONMENT},
        "steady": {},
        "faults": {},
    }
    started = time.monotonic()
    project = Path(tempfile.mkdtemp(prefix="redoxide-fullstack-soak-"))
    runs = [("steady", name) for name in args.servers if not args.faults_only]
    runs += [("faults", name) for name in args.servers if not args.steady_only]
    try:
        write_project(project)
        for phase, name in runs:
            mode = SERVERS[name]
            print(f"{phase}: {mode.label}", flush=True)
            try:
                if phase == "steady":
                    result = steady(project, mode, args.backend, seconds)
                    judged = judge_steady(result, mode, warmup)
                    judged["series"] = columns(result["windows"], STEADY_SERIES)
                else:
                    result = faults(project, mode, args.backend)
                    judged = judge_faults(result, mode)
                    judged["series"] = columns(result["windows"], FAULT_SERIES)
                data[phase][name] = judged
            except (RuntimeError, OSError) as exc:
                print(f"  {phase}/{name}: FAILED: {str(exc)[:300]}", flush=True)
                data[phase][name] = {"error": str(exc)[:300], "targets": {"ran": False}}
    except KeyboardInterrupt:
        print("interrupted: reporting what was measured", file=sys.stderr)
        data["interrupted"] = True
    finally:
        shutil.rmtree(project, ignore_errors=True)
    data["seconds_taken"] = round(time.monotonic() - started)
    ok = [all(j["targets"].values()) for p in ("steady", "faults") for j in data[p].values()]
    passed = bool(ok) and all(ok) and not data.get("interrupted")
    data["passed"] = passed
    if not args.no_save:  # before the report, so a long run's figures survive a bug in it
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(dumps(data))
    report(data)
    if not args.no_save:
        print(f"saved {RESULTS.relative_to(RESULTS.parents[2])}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
