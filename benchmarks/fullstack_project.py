"""The Django project that benchmarks/fullstack.py writes into a temp dir and serves.

No database, no apps, no middleware: the cache is the only thing configured, from environment
variables (``BENCH_BACKEND``, ``BENCH_LOCATION``, ``BENCH_KEY_PREFIX``, ``BENCH_OPTIONS`` as
JSON). Every view has an async twin (for the ASGI servers) and a sync twin (for WSGI):

- ``six``: aincr of a counter, aset of a ~150-byte dict, aget of it, aset_many of 10 keys,
  aget_many of those 10, adelete of one key;
- ``read``: 10 gets of hot keys, one 10-key get_many, and one set in every ten requests;
- ``read1`` / ``read20``: the gets and the get_many of ``read``, and a set_many of all ten hot
  keys in 1% / 20% of requests (each worker process writes what the others keep);
- ``base``: no cache at all, a 2-byte response (the server's and Django's own cost);
- ``setup``: writes the counter and the hot keys, then reads one back (run once per server);
- ``six_open``: the six calls of ``six`` for a fail-open cache (fullstack_soak.py's faults):
  a miss, an unreachable server or a restarted, empty one (no counter) still answers 200.

A view whose reads miss answers 500 (but ``six_open``), so a misconfigured backend shows up as
non-2xx.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = "benchsite"

SETTINGS = """\
import json
import os

SECRET_KEY = "fullstack-benchmark-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
INSTALLED_APPS = []
MIDDLEWARE = []
DATABASES = {}
ROOT_URLCONF = "benchsite.urls"
USE_TZ = True

CACHES = {
    "default": {
        "BACKEND": os.environ["BENCH_BACKEND"],
        "LOCATION": os.environ["BENCH_LOCATION"],
        "KEY_PREFIX": os.environ.get("BENCH_KEY_PREFIX", "bench"),
        "TIMEOUT": 300,
    }
}
_options = json.loads(os.environ.get("BENCH_OPTIONS") or "{}")
if _options:
    CACHES["default"]["OPTIONS"] = _options

# The first few errors raised in views go to stderr (the benchmark keeps that log).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"first": {"()": "benchsite.logs.FirstErrors"}},
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "filters": ["first"]},
    },
    "loggers": {"django.request": {"handlers": ["stderr"], "level": "ERROR"}},
}
"""

LOGS = '''\
import logging


class FirstErrors(logging.Filter):
    """Let the first few records of a process through, then drop the rest."""

    def __init__(self, limit=3):
        super().__init__()
        self.left = limit

    def filter(self, record):
        self.left -= 1
        return self.left >= 0
'''

VIEWS = """\
import itertools

from django.core.cache import cache
from django.http import HttpResponse

# ~150 bytes once pickled: a small user-like record (the same as benchmarks/bench.py).
VALUE = {
    "id": 12345,
    "username": "user12345",
    "email": "user12345@example.com",
    "is_active": True,
    "score": 3.5,
    "groups": ["staff"],
    "joined": "2026-11-30",
}
ITEMS = 1000
BATCH = {f"batch:{i}": VALUE for i in range(10)}
BATCH_KEYS = list(BATCH)
HOT = [f"hot:{i}" for i in range(10)]
HOT_VALUES = {key: VALUE for key in HOT}
_reads = itertools.count()


def _reply(ok):
    return HttpResponse(b"ok") if ok else HttpResponse(b"miss", status=500)


def setup(request):
    cache.set("counter", 0, None)
    cache.set_many({key: VALUE for key in HOT}, None)
    return _reply(cache.get(HOT[0]) == VALUE and cache.incr("counter") == 1)


async def asetup(request):
    await cache.aset("counter", 0, None)
    await cache.aset_many({key: VALUE for key in HOT}, None)
    return _reply(await cache.aget(HOT[0]) == VALUE and await cache.aincr("counter") == 1)


def six(request):
    n = cache.incr("counter")
    item = f"item:{n % ITEMS}"
    cache.set(item, VALUE)
    value = cache.get(item)
    cache.set_many(BATCH)
    got = cache.get_many(BATCH_KEYS)
    cache.delete(f"item:{(n + ITEMS // 2) % ITEMS}")
    return _reply(value is not None and len(got) == len(BATCH))


async def asix(request):
    n = await cache.aincr("counter")
    item = f"item:{n % ITEMS}"
    await cache.aset(item, VALUE)
    value = await cache.aget(item)
    await cache.aset_many(BATCH)
    got = await cache.aget_many(BATCH_KEYS)
    await cache.adelete(f"item:{(n + ITEMS // 2) % ITEMS}")
    return _reply(value is not None and len(got) == len(BATCH))


def six_open(request):
    try:
        n = cache.incr("counter") or 0  # None: the server is away (IGNORE_EXCEPTIONS)
    except ValueError:  # a restarted, empty server has no counter yet
        n = 0
        cache.add("counter", n, None)
    item = f"item:{n % ITEMS}"
    cache.set(item, VALUE)
    cache.get(item)
    cache.set_many(BATCH)
    cache.get_many(BATCH_KEYS)
    cache.delete(f"item:{(n + ITEMS // 2) % ITEMS}")
    return HttpResponse(b"ok")


async def asix_open(request):
    try:
        n = await cache.aincr("counter") or 0
    except ValueError:
        n = 0
        await cache.aadd("counter", n, None)
    item = f"item:{n % ITEMS}"
    await cache.aset(item, VALUE)
    await cache.aget(item)
    await cache.aset_many(BATCH)
    await cache.aget_many(BATCH_KEYS)
    await cache.adelete(f"item:{(n + ITEMS // 2) % ITEMS}")
    return HttpResponse(b"ok")


def read(request):
    hits = sum(cache.get(key) is not None for key in HOT)
    got = cache.get_many(HOT)
    n = next(_reads)
    if n % 10 == 0:
        cache.set(HOT[n // 10 % len(HOT)], VALUE, None)
    return _reply(hits == len(HOT) and len(got) == len(HOT))


async def aread(request):
    hits = 0
    for key in HOT:
        hits += await cache.aget(key) is not None
    got = await cache.aget_many(HOT)
    n = next(_reads)
    if n % 10 == 0:
        await cache.aset(HOT[n // 10 % len(HOT)], VALUE, None)
    return _reply(hits == len(HOT) and len(got) == len(HOT))


def _read_writing(every):
    hits = sum(cache.get(key) is not None for key in HOT)
    got = cache.get_many(HOT)
    if next(_reads) % every == 0:
        cache.set_many(HOT_VALUES, None)
    return _reply(hits == len(HOT) and len(got) == len(HOT))


def read1(request):
    return _read_writing(100)


def read20(request):
    return _read_writing(5)


async def _aread_writing(every):
    hits = 0
    for key in HOT:
        hits += await cache.aget(key) is not None
    got = await cache.aget_many(HOT)
    if next(_reads) % every == 0:
        await cache.aset_many(HOT_VALUES, None)
    return _reply(hits == len(HOT) and len(got) == len(HOT))


async def aread1(request):
    return await _aread_writing(100)


async def aread20(request):
    return await _aread_writing(5)


def base(request):
    return HttpResponse(b"ok")


async def abase(request):
    return HttpResponse(b"ok")
"""

URLS = """\
from django.urls import path

from benchsite import views

urlpatterns = [
    path("sync/setup/", views.setup),
    path("sync/six/", views.six),
    path("sync/six_open/", views.six_open),
    path("sync/read/", views.read),
    path("sync/read1/", views.read1),
    path("sync/read20/", views.read20),
    path("sync/base/", views.base),
    path("async/setup/", views.asetup),
    path("async/six/", views.asix),
    path("async/six_open/", views.asix_open),
    path("async/read/", views.aread),
    path("async/read1/", views.aread1),
    path("async/read20/", views.aread20),
    path("async/base/", views.abase),
]
"""

ASGI = """\
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")

from django.core.asgi import get_asgi_application

application = get_asgi_application()
"""

WSGI = ASGI.replace("asgi", "wsgi")

# redoxide with django-vcache's incr: a bare INCRBY, which creates a missing key holding delta
# (no ValueError, no expiry) instead of the script that keeps Django's contract. Measured only
# to compare Redis' work like for like; not a setting of redoxide's.
BACKENDS = """\
import redoxide
from django.core.cache.backends.locmem import LocMemCache


class IncrByCache(redoxide.RedisCache):
    def incr(self, key, delta=1, version=None, *, ignore_key_check=True):
        return super().incr(key, delta, version, ignore_key_check=ignore_key_check)

    async def aincr(self, key, delta=1, version=None, *, ignore_key_check=True):
        return await super().aincr(key, delta, version, ignore_key_check=ignore_key_check)


# The floor of what the views' cache work can cost: Django's in-process LocMemCache (no network,
# no Redis; each worker process has its own). Each process starts from the state the setup
# request leaves in a shared cache, since only one worker gets that request.
class LocMemFloor(LocMemCache):
    def __init__(self, location, params):
        super().__init__(location, params)
        from benchsite.views import HOT, VALUE

        if self.add("counter", 0, None):
            self.set_many({key: VALUE for key in HOT}, None)
"""

FILES = {
    "__init__.py": "",
    "settings.py": SETTINGS,
    "logs.py": LOGS,
    "views.py": VIEWS,
    "urls.py": URLS,
    "asgi.py": ASGI,
    "wsgi.py": WSGI,
    "backends.py": BACKENDS,
}


def write_project(root: Path) -> None:
    """Write the ``benchsite`` package under root (which then goes on PYTHONPATH)."""
    package = root / PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (package / name).write_text(text)
