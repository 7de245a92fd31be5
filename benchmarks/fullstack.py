"""Full-stack benchmark: Django under real servers, wrk for load, peers in the same run.

    .venv-bench312/bin/python benchmarks/fullstack.py            # 3 rounds, 8 s cells (~50 min)
    .venv-bench312/bin/python benchmarks/fullstack.py --quick    # 1 round, 3 s cells (~8 min)
    .venv-bench312/bin/python benchmarks/fullstack.py --quick --servers granian-asgi \\
        --backends redoxide --conditions loopback                # a smoke cell
    .venv-bench312/bin/python benchmarks/fullstack.py --redraw results.json  # tables + chart again

The venv (`make bench-fullstack` builds it): ``$(pyenv root)/versions/3.12.*/bin/python -m venv
.venv-bench312``, then pip install django granian uvicorn uvloop httptools django-vcache
django-valkey "valkey[libvalkey]" django-redis redis hiredis matplotlib, and a .pth file
pointing at this checkout's python/ (the compiled module is abi3); wrk is Debian's ``wrk``.

Run it with the interpreter of a venv that has Django, granian, uvicorn and the peers
(django-vcache needs Python >= 3.12): the app servers are started with the same interpreter,
so every backend is measured on one Python. A throwaway redis-server on a free loopback
port; a generated Django project (fullstack_project.py) served by granian ASGI (2 workers),
uvicorn (1 worker), granian WSGI (2 workers x 4 threads, and x 1 thread); wrk with 64
keep-alive connections and 2 threads drives each (server, view, backend) cell after a
warm-up. Rounds interleave the backends; figures are medians over rounds. Two network
conditions: loopback, and a proxy that delays each direction (fullstack_proxy.py).
Per cell: req/s, p50/p99, non-2xx, CPU per request of the app processes and of redis-server,
the cache's share of it (minus the no-cache view), RSS, and server connections.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

# The one import of the shared server support (it may move: fix it here only).
import harness
import result_files
from fullstack_project import PACKAGE, write_project
from fullstack_proxy import DelayProxy, ping_rtt_ms
from fullstack_report import (
    BASELINE_NAME,
    REFERENCE,
    Config,
    Run,
    chart,
    medians,
    ratios,
    report,
    summary,
)
from fullstack_tools import (
    CONNECTIONS,
    WRK,
    WRK_THREADS,
    Monitor,
    cpu_seconds,
    cpu_split,
    http_get,
    process_tree,
    rss_bytes,
    switches,
    wrk,
)
from servers import RedisServer, free_port, redis_server_version

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
SAMPLE_EVERY = 0.5  # seconds between connected_clients samples during a cell
PACKAGES = (
    "django",
    "granian",
    "gunicorn",
    "uvicorn",
    "uvloop",
    "httptools",
    "redoxide",
    "django-vcache",
    "django-valkey",
    "valkey",
    "libvalkey",
    "django-redis",
    "redis",
    "hiredis",
)


@dataclass(frozen=True)
class ServerMode:
    name: str
    kind: str  # "async" (ASGI views) or "sync" (WSGI views)
    label: str

    def command(self, port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        if self.name == "uvicorn":
            return [
                *(sys.executable, "-m", "uvicorn", "benchsite.asgi:application", *host),
                *("--loop", "uvloop", "--http", "httptools", "--lifespan", "off"),
                "--no-access-log",
                *("--log-level", "warning"),
            ]
        granian = [sys.executable, "-m", "granian", *host, "--workers", "2"]
        granian += ["--no-ws", "--log-level", "warning"]
        if self.kind == "async":
            return [
                *granian,
                "--interface",
                "asginl",
                "--loop",
                "uvloop",
                "benchsite.asgi:application",
            ]
        threads = self.name.rsplit("-", 1)[1].rstrip("t")
        if self.name.startswith("gunicorn"):
            return [
                *(sys.executable, "-m", "gunicorn", "benchsite.wsgi:application"),
                *("--bind", f"127.0.0.1:{port}", "--workers", "2"),
                *("--worker-class", "gthread", "--threads", threads),
                *("--log-level", "warning", "--backlog", "2048"),
            ]
        return [
            *granian,
            "--interface",
            "wsgi",
            "--blocking-threads",
            threads,
            "benchsite.wsgi:application",
        ]


SERVERS = {
    s.name: s
    for s in (
        ServerMode("granian-asgi", "async", "granian ASGI, 2 workers"),
        ServerMode("uvicorn", "async", "uvicorn, 1 worker (uvloop, httptools)"),
        ServerMode("granian-wsgi-4t", "sync", "granian WSGI, 2 workers x 4 threads"),
        ServerMode("gunicorn-gthread-4t", "sync", "gunicorn gthread, 2 workers x 4 threads"),
        ServerMode("granian-wsgi-1t", "sync", "granian WSGI, 2 workers x 1 thread"),
    )
}

LABELS = {name: mode.label for name, mode in SERVERS.items()}


@dataclass(frozen=True)
class Backend:
    name: str
    async_class: str  # BACKEND under ASGI
    sync_class: str  # BACKEND under WSGI
    options: str = ""  # OPTIONS, as JSON
    env: tuple[tuple[str, str], ...] = ()  # environment of the app server
    # What the app servers must import, where the class's module is not enough to check (a
    # class of the generated project, which does not exist before the run).
    requires: str = ""

    def backend(self, kind: str) -> str:
        return self.async_class if kind == "async" else self.sync_class


def _same(name: str, path: str) -> Backend:
    return Backend(name, path, path)


BACKENDS = {
    b.name: b
    for b in (
        _same("redoxide", "redoxide.RedisCache"),
        # The near cache on the read view's hot keys (hot:*).
        Backend(
            "redoxide-near",
            "redoxide.RedisCache",
            "redoxide.RedisCache",
            '{"NEAR_CACHE": {"PREFIXES": ["hot:"]}}',
        ),
        # The near cache by use: no prefixes named, keys kept once read twice lately.
        Backend(
            "redoxide-near-use",
            "redoxide.RedisCache",
            "redoxide.RedisCache",
            '{"NEAR_CACHE": {"ADMIT_AFTER_READS": 2}}',
        ),
        # django-vcache's incr (a bare INCRBY, no missing-key check): Redis' work like for like.
        Backend(
            "redoxide-incrby",
            f"{PACKAGE}.backends.IncrByCache",
            f"{PACKAGE}.backends.IncrByCache",
            requires="redoxide",
        ),
        # MessagePack, as django-vcache stores by default: the like-for-like row beside it.
        Backend(
            "redoxide-msgpack",
            "redoxide.RedisCache",
            "redoxide.RedisCache",
            '{"SERIALIZER": "redoxide.serializers.MsgPackSerializer"}',
        ),
        # Defaults, as its README configures it: msgpack serializer, one multiplexed connection.
        _same("django-vcache", "django_vcache.backend.ValkeyCache"),
        # Its client-side cache (redis-rs' tracking cache) on.
        Backend(
            "django-vcache-csc",
            "django_vcache.backend.ValkeyCache",
            "django_vcache.backend.ValkeyCache",
            '{"CLIENT_SIDE_CACHE": {"ENABLED": true}}',
        ),
        Backend(
            "django-valkey",
            "django_valkey.async_cache.cache.AsyncValkeyCache",
            "django_valkey.cache.ValkeyCache",
        ),
        _same("django-redis", "django_redis.cache.RedisCache"),
        _same("django", "django.core.cache.backends.redis.RedisCache"),
        # The floor: the views' cache work in-process, with no network and no Redis.
        Backend(
            "locmem",
            f"{PACKAGE}.backends.LocMemFloor",
            f"{PACKAGE}.backends.LocMemFloor",
            requires="django",
        ),
    )
}
# Standing variants, measured only when asked for (--backends ...). One-off variants (other
# OPTIONS, an environment switch, another build of the package) are named with --variant.
OPT_IN = (
    "redoxide-near",
    "redoxide-near-use",
    "redoxide-msgpack",
    "redoxide-incrby",
    "django-vcache-csc",
)


def variant(spec: str) -> Backend:
    """A backend named on the command line: ``NAME=BASE`` and, after a space or a colon, a
    JSON object with ``OPTIONS`` (merged over BASE's), ``env`` (the app server's environment,
    e.g. ``{"REDOXIDE_POLL": "never"}``) and ``pythonpath`` (another build of the package,
    for an A/B in one run). E.g.
    ``--variant 'redoxide-shared=redoxide:{"OPTIONS": {"SYNC_CONNECTIONS": "shared"}}'``."""
    name, sep, rest = spec.partition("=")
    found = re.match(r"([\w.-]*)[:\s]?(.*)", rest, re.S)
    base_name, extra = found.groups() if found else ("", "")
    if not sep or not name or base_name not in BACKENDS or name in BACKENDS:
        raise argparse.ArgumentTypeError(
            f"--variant {spec!r}: NAME=BASE[:JSON] with a new NAME and BASE one of {list(BACKENDS)}"
        )
    try:
        fields = json.loads(extra) if extra.strip() else {}
        if not isinstance(fields, dict) or set(fields) - {"OPTIONS", "env", "pythonpath"}:
            raise ValueError("keys: OPTIONS, env, pythonpath")
        base = BACKENDS[base_name]
        options = {**json.loads(base.options or "{}"), **fields.get("OPTIONS", {})}
        env = {**dict(base.env), **{str(k): str(v) for k, v in fields.get("env", {}).items()}}
    except (ValueError, AttributeError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"--variant {spec!r}: {exc}") from None
    if "pythonpath" in fields:
        env["PYTHONPATH"] = str(fields["pythonpath"])
    return replace(
        base, name=name, options=json.dumps(options) if options else "", env=tuple(env.items())
    )


BASELINE = _same(BASELINE_NAME, "django.core.cache.backends.dummy.DummyCache")
VIEWS = ("six", "read", "base", "read1", "read20")
#: What a run measures unless --views says otherwise.
DEFAULT_VIEWS = ("six", "read", "base")
CONDITIONS = ("loopback", "delay")


class AppServer:
    """One app server process (and its workers), started in the foreground, stopped by pid."""

    def __init__(self, mode: ServerMode, project: Path, env: dict[str, str]) -> None:
        self.mode = mode
        self.project = project
        self.port = free_port()
        self.log_path = project / f"server-{self.port}.log"
        # An inherited PYTHONPATH stays after the project (to run another checkout's package).
        # A backend's own PYTHONPATH (another build of the package) comes right after it.
        inherited = (env.get("PYTHONPATH"), os.environ.get("PYTHONPATH"))
        path = os.pathsep.join(p for p in (str(project), *inherited) if p)
        self.env = {**os.environ, **env, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, view: str) -> str:
        return f"http://127.0.0.1:{self.port}/{self.mode.kind}/{view}/"

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.mode.command(self.port),
                cwd=self.project,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while http_get(self.url("base"))[0] != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.mode.name} did not start: {self.log_tail()}")
            time.sleep(0.1)
        # Every worker must be up before the CPU of the tree means anything.
        time.sleep(0.5)

    def pids(self) -> list[int]:
        return process_tree(self.proc.pid) if self.proc is not None else []

    def log_tail(self, chars: int = 600) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:].strip()
        return ""

    def stop(self) -> None:
        """SIGTERM the main process, then SIGKILL whatever of its tree is left, by pid."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        tree = process_tree(proc.pid)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        for pid in tree[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def measure(
    app: AppServer, monitor: Monitor, view: str, seconds: float, proxy_pid: int | None = None
) -> dict[str, float]:
    """Time one wrk window; return its figures with CPU, RSS and connections around it."""
    pids = app.pids()
    proxy = [proxy_pid] if proxy_pid is not None else []
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_EVERY):
            samples.append(monitor.clients()[0])

    clients0, received0 = monitor.clients()
    app0, redis0, work0 = cpu_seconds(pids), monitor.cpu(), monitor.work()
    split0, switches0 = cpu_split(pids), switches(pids)
    proxy0 = cpu_seconds(proxy)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = wrk(app.url(view), seconds)
    finally:
        done.set()
        sampler.join()
    app1, redis1, work1 = cpu_seconds(pids), monitor.cpu(), monitor.work()  # the same processes
    split1, switches1 = cpu_split(pids), switches(pids)
    proxy1 = cpu_seconds(proxy)
    clients1, received1 = monitor.clients()
    n = max(result["requests"], 1.0)
    pids = app.pids()
    result.update(
        app_cpu_us=(app1 - app0) / n * 1e6,
        redis_cpu_us=(redis1 - redis0) / n * 1e6,
        app_user_us=(split1[0] - split0[0]) / n * 1e6,
        app_sys_us=(split1[1] - split0[1]) / n * 1e6,
        # The app's threads' sleeps (socket, futex, GIL) and preemptions per request.
        app_sleeps=(switches1[0] - switches0[0]) / n,
        app_preempted=(switches1[1] - switches0[1]) / n,
        # The delay proxy's own CPU: a cost of the simulation that a real network does not
        # put on the app's host (0 at loopback).
        proxy_cpu_us=(proxy1 - proxy0) / n * 1e6,
        **{f"redis_{name}": (work1[name] - work0[name]) / n for name in work1},
        rss_mib=rss_bytes(pids) / 2**20,
        processes=float(len(pids)),
        conns_max=float(max([clients0, clients1, *samples])),
        conns_end=float(clients1),
        conns_opened=float(received1 - received0),
    )
    return result


def run_group(
    run: Run,
    monitor: Monitor,
    project: Path,
    condition: str,
    location_port: int,
    proxy_pid: int | None,
    mode: ServerMode,
    backend: Backend,
    views: Sequence[str],
) -> None:
    """Start mode's server on backend, set the keys up, measure each view, stop it."""
    config = run.config
    env = {
        "BENCH_BACKEND": backend.backend(mode.kind),
        "BENCH_LOCATION": f"redis://127.0.0.1:{location_port}/0",
        "BENCH_KEY_PREFIX": "fs-" + re.sub(r"\W", "", backend.name),
        "BENCH_OPTIONS": backend.options,
        **dict(backend.env),
    }
    app = AppServer(mode, project, env)
    tag = f"{condition}/{mode.name}/{backend.name}"
    try:
        app.start()
        status, body = (200, "") if backend is BASELINE else http_get(app.url("setup"))
        if status != 200:
            raise RuntimeError(f"setup answered {status} {body[:80]!r}: {app.log_tail()}")
        for view in views:
            wrk(app.url(view), config.warmup)
            cell = measure(app, monitor, view, config.seconds, proxy_pid)
            run.cells.setdefault(Run.key(condition, mode.name, view, backend.name), []).append(cell)
            print(
                f"  {tag:<42} {view:<5} {cell['rps']:8.0f} req/s  p99 {cell['p99_ms']:6.1f} ms"
                f"  app {cell['app_cpu_us']:5.0f} us"
                f" (user {cell['app_user_us']:.0f} / sys {cell['app_sys_us']:.0f} us,"
                f" {cell['app_sleeps']:.1f} sleeps, {cell['app_preempted']:.1f} preempted)"
                f"  redis {cell['redis_cpu_us']:4.0f} us"
                + (f"  proxy {cell['proxy_cpu_us']:4.0f} us" if proxy_pid is not None else "")
                + f" (user {cell['redis_user_us']:.0f} / sys {cell['redis_sys_us']:.0f} us,"
                f" commands {cell['redis_cmd_us']:.0f} us, {cell['redis_reads']:.1f} reads,"
                f" {cell['redis_writes']:.1f} writes, {cell['redis_sleeps']:.2f} sleeps,"
                f" {cell['redis_in_bytes']:.0f} B in,"
                f" {cell['redis_out_bytes']:.0f} B out)"
                f"  conns {cell['conns_max']:.0f}"
                + (f"  NON-2XX {cell['non2xx']:.0f}" if cell["non2xx"] else ""),
                flush=True,
            )
            if cell["non2xx"] and tag not in run.notes:
                run.notes[tag] = f"non-2xx answers; server log: {app.log_tail(300)}"
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        run.notes.setdefault(tag, str(exc)[:400])
        print(f"  {tag}: FAILED: {str(exc)[:200]}", flush=True)
    finally:
        app.stop()


def run_all(run: Run) -> None:
    config = run.config
    cache_views = [v for v in config.views if v != "base"]
    with RedisServer() as redis, contextlib.ExitStack() as stack:
        monitor = Monitor(redis.port)
        stack.callback(monitor.close)
        project = Path(tempfile.mkdtemp(prefix="redoxide-fullstack-"))
        stack.callback(shutil.rmtree, project, True)
        write_project(project)
        ports = {"loopback": redis.port}
        proxy_pids: dict[str, int | None] = {"loopback": None}
        run.proxy_rtt_ms["loopback"] = ping_rtt_ms(redis.port)
        if "delay" in config.conditions:
            proxy = DelayProxy(redis.port, config.delay_ms).start()
            stack.callback(proxy.stop)
            ports["delay"] = proxy.port
            proxy_pids["delay"] = proxy.pid
            run.proxy_rtt_ms["delay"] = ping_rtt_ms(proxy.port)
        print(f"PING round trip (ms): {run.proxy_rtt_ms}", flush=True)
        backends = [BACKENDS[name] for name in config.backends]
        for r in range(config.rounds):
            order = harness.rotated(backends, r)  # none always runs first
            for condition in config.conditions:
                for name in config.servers:
                    mode = SERVERS[name]
                    print(f"round {r + 1}/{config.rounds}: {condition}, {mode.label}", flush=True)
                    port, proxy_pid = ports[condition], proxy_pids[condition]
                    where = (run, monitor, project, condition, port, proxy_pid, mode)
                    if "base" in config.views:
                        run_group(*where, BASELINE, ["base"])
                    if cache_views:
                        for backend in order:
                            run_group(*where, backend, cache_views)


# -- environment, output, command line ------------------------------------------------------


def check_tools(servers: Sequence[str] = ()) -> list[str]:
    """Return what is missing to run at all (servers, wrk, Django)."""
    wanted = ["django", "granian", "uvicorn", "uvloop", "httptools"]
    if any(name.startswith("gunicorn") for name in servers):
        wanted.append("gunicorn")
    missing = [m for m in wanted if not importlib.util.find_spec(m)]
    problems = []
    if missing:
        problems.append(
            f"{sys.executable} lacks {', '.join(missing)}: pip install django granian uvicorn "
            "uvloop httptools gunicorn (see the docstring and `make bench-fullstack`)"
        )
    if not os.access(WRK, os.X_OK):
        problems.append("wrk not found: apt-get install -y wrk")
    return problems


def importable(backend: Backend) -> str | None:
    """Return why backend cannot be imported by the app servers, or None."""
    modules = {path.rsplit(".", 1)[0] for path in (backend.async_class, backend.sync_class)}
    for module in {backend.requires} if backend.requires else modules:
        try:
            if importlib.util.find_spec(module) is None:
                return f"module {module} not found"
        except (ImportError, ValueError) as exc:
            return f"import {module} failed: {exc!r}"
    return None


def environment() -> dict[str, Any]:
    wrk_version = subprocess.run([WRK, "-v"], capture_output=True, text=True).stdout
    env = harness.environment(
        PACKAGES,
        redis_server=redis_server_version(),
        wrk=wrk_version.splitlines()[0] if wrk_version else "",
        servers={name: mode.label for name, mode in SERVERS.items()},
        wrk_args={"connections": CONNECTIONS, "threads": WRK_THREADS},
    )
    # Earlier result files name the versions "packages", and leave out what is not installed.
    env["packages"] = {name: v for name, v in env.pop("versions").items() if v is not None}
    return env


def _finite(value: Any) -> Any:
    """Return value with NaN floats as None, others rounded, tuples as lists (strict JSON)."""
    if isinstance(value, float):
        return None if value != value else round(value, 1 if abs(value) >= 10 else 3)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def save(data: dict[str, Any]) -> list[Path]:
    """The current result (results/fullstack-latest.json) and a line of history: the ratios
    to django-vcache and redoxide's req/s, CPU per request and p99 in every cell."""
    data = _finite(data)
    summary = {
        "ratios_to_django-vcache": data.get("ratios_to_django-vcache"),
        "redoxide": {
            cell: {k: figures.get(k) for k in ("rps", "app_cpu_us", "redis_cpu_us", "p99_ms")}
            for cell, figures in data["medians"].items()
            if cell.endswith("|redoxide")
        },
    }
    return [result_files.save("fullstack-latest", data, summary, indent=1)]


def parse_list(text: str, choices: Sequence[str], what: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [x for x in items if x not in choices]
    if unknown or not items:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {list(choices)}")
    return items


def parse_args(argv: Sequence[str] | None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="1 round, 3 s cells, 1 s warm-up")
    p.add_argument("--rounds", type=int, help="rounds (default 3; --quick 1)")
    p.add_argument("--seconds", type=int, help="timed seconds per cell (default 8; --quick 3)")
    p.add_argument("--warmup", type=int, help="warm-up seconds per cell (default 2; --quick 1)")
    p.add_argument("--servers", default=",".join(SERVERS), help="default: %(default)s")
    p.add_argument(
        "--views",
        default=",".join(DEFAULT_VIEWS),
        help=f"default: %(default)s (of {', '.join(VIEWS)})",
    )
    p.add_argument(
        "--backends",
        default=",".join(b for b in BACKENDS if b not in OPT_IN),
        help=f"default: %(default)s (also: {', '.join(OPT_IN)}, and each --variant)",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=BASE[:JSON]",
        help="add a backend: BASE with JSON's OPTIONS / env / pythonpath (see variant())",
    )
    p.add_argument("--conditions", default=",".join(CONDITIONS), help="default: %(default)s")
    p.add_argument("--delay-ms", type=float, default=0.5, help="per direction (default 0.5)")
    p.add_argument("--no-save", action="store_true", help="print only, write no files")
    p.add_argument(
        "--redraw", metavar="JSON", help="print the tables and redraw the chart from a saved run"
    )
    p.add_argument(
        "--summary",
        metavar="JSON",
        help="print a saved run's six-op view as one table per server mode (the READMEs')",
    )
    args = p.parse_args(argv)
    try:
        for spec in args.variant:
            added = variant(spec)
            BACKENDS[added.name] = added
            if added.name not in args.backends.split(","):
                args.backends += "," + added.name
        return Config(
            rounds=args.rounds or (1 if args.quick else 3),
            seconds=args.seconds or (3.0 if args.quick else 8.0),
            warmup=args.warmup if args.warmup is not None else (1.0 if args.quick else 2.0),
            servers=parse_list(args.servers, tuple(SERVERS), "server"),
            views=parse_list(args.views, VIEWS, "view"),
            backends=parse_list(args.backends, tuple(BACKENDS), "backend"),
            conditions=parse_list(args.conditions, CONDITIONS, "condition"),
            delay_ms=args.delay_ms,
            quick=args.quick,
            no_save=args.no_save,
            redraw=args.redraw or args.summary,
            summary=bool(args.summary),
        )
    except argparse.ArgumentTypeError as exc:
        p.error(str(exc))  # exits


def redraw(path: str, summarize: bool = False) -> int:
    """Print the tables of a saved run and draw its chart again."""
    data = json.loads(Path(path).read_text())
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items()
    }
    fields.pop("summary", None)
    run = Run(
        Config(**fields),
        cells=data.get("rounds", {}),
        notes=data["notes"],
        proxy_rtt_ms=data["ping_rtt_ms"],
    )
    med = data["medians"]
    for figures in med.values():
        # Runs saved before the column existed: the sum of the medians stands in.
        if "stack_cpu_us" not in figures and {"app_cpu_us", "redis_cpu_us"} <= figures.keys():
            figures["stack_cpu_us"] = figures["app_cpu_us"] + figures["redis_cpu_us"]
    if summarize:
        print(summary(run, med, ratios(med, run), "six"))
        return 0
    print(report(run, med, ratios(med, run), LABELS))
    print(chart(run, med, RESULTS_DIR / "fullstack.png"))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    if config.redraw:
        return redraw(config.redraw, config.summary)
    if problems := check_tools(config.servers):
        print("\n".join(problems), file=sys.stderr)
        return 2

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    run = Run(config)
    available = []
    for name in config.backends:
        if (why := importable(BACKENDS[name])) is None:
            available.append(name)
        else:
            run.notes[name] = f"skipped: {why}"
            print(f"{name}: skipped: {why}", file=sys.stderr)
    config.backends = tuple(available)
    env = environment()
    started = time.monotonic()
    try:
        run_all(run)
    except KeyboardInterrupt:
        print("interrupted: reporting what was measured", file=sys.stderr)
        run.notes["run"] = "interrupted"
    med = medians(run)
    rat = ratios(med, run)
    print(report(run, med, rat, LABELS))
    if config.no_save or not run.cells:
        return 0 if run.cells else 1
    data = {
        "benchmark": "fullstack",
        "config": asdict(config),
        "environment": env,
        "seconds_taken": round(time.monotonic() - started),
        "ping_rtt_ms": run.proxy_rtt_ms,
        "medians": med,
        "ratios_to_" + REFERENCE: rat,
        "notes": run.notes,
    }
    if config.rounds > 1:
        data["rounds"] = run.cells
    for path in save(data):
        print(f"saved {path}")
    print(chart(run, med, RESULTS_DIR / "fullstack.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
