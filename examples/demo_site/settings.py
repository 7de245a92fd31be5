"""Settings for the redoxide example project.

The cache is the only thing configured: no database, no apps, no middleware.
REDOXIDE_URL picks the Redis/Valkey server and REDOXIDE_BACKEND the backend class, so the
same project can run on Django's builtin RedisCache for comparison.
"""

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "redoxide-example-not-a-secret")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, dict[str, str]] = {}
ROOT_URLCONF = "demo_site.urls"
ASGI_APPLICATION = "demo_site.asgi.application"
WSGI_APPLICATION = "demo_site.wsgi.application"
USE_TZ = True

CACHES = {
    "default": {
        "BACKEND": os.environ.get("REDOXIDE_BACKEND", "redoxide.RedisCache"),
        "LOCATION": os.environ.get("REDOXIDE_URL", "redis://127.0.0.1:6379/0"),
        "KEY_PREFIX": "demo",
        "TIMEOUT": 300,
        # The builtin backend's lower-case option names; redoxide accepts these and
        # django-redis' upper-case ones (SOCKET_TIMEOUT, SOCKET_CONNECT_TIMEOUT).
        "OPTIONS": {"socket_timeout": 2.0, "socket_connect_timeout": 1.0},
    }
}

# Print errors raised in views (a failing cache call shows up here with its traceback).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["console"], "level": "ERROR"}},
}
