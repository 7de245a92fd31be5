"""CREDENTIAL_PROVIDER: credentials that change while the process runs (IAM or Entra tokens,
rotated ACL passwords).

The provider is called on a thread of its own, never on a request: when the process first
needs credentials, before their lifetime runs out (CREDENTIAL_REFRESH_SECONDS, or sooner when
the provider says when they expire), and when a server refuses the current ones. What it
returns goes into the Rust core's ``Credentials`` cell, which every new connection's handshake
reads and which makes every live connection send AUTH with the new credentials in front of its
next command. The values are never logged, shown or put in an error message.
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils.module_loading import import_string

from redoxide import _redoxide
from redoxide._registry import Registry, track
from redoxide.exceptions import ConfigurationError

__all__ = ["CredentialProvider", "credentials_for", "parse_credentials"]

logger = logging.getLogger("redoxide")

DEFAULT_REFRESH = 300.0
#: A provider's lifetime hint is cut to this share, so new credentials are in place early.
_EARLY = 0.8
#: Fetches asked for by refused connections are at least this far apart (seconds).
_MIN_GAP = 1.0
#: How long a failing provider is left alone at most before it is asked again (seconds).
_BACKOFF_MAX = 30.0

_SHAPES = "a password or token (str), a (username, password) tuple, or a mapping with 'password'"


@dataclass(frozen=True)
class CredentialProvider:
    """A parsed CREDENTIAL_PROVIDER: what to call and how often."""

    #: A callable returning credentials, or an object with ``get_credentials()`` (redis-py's
    #: ``CredentialProvider``). Compared by identity (``key``): it need not be hashable.
    provider: Any = field(repr=False, compare=False)
    #: How messages name it: its dotted path, or its qualified name.
    name: str
    #: The longest time between two calls, in seconds (CREDENTIAL_REFRESH_SECONDS).
    refresh: float = DEFAULT_REFRESH
    #: The username sent with a bare token (USERNAME, or the one in LOCATION).
    username: str | None = None
    #: The provider's identity.
    key: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", id(self.provider))


def _fail(option: str, message: str) -> ConfigurationError:
    return ConfigurationError(f"redoxide: OPTIONS[{option!r}] {message}")


def _describe(value: Any) -> str:
    made = value if callable(value) and hasattr(value, "__qualname__") else type(value)
    return f"{getattr(made, '__module__', '?')}.{getattr(made, '__qualname__', '?')}"


def parse_credentials(opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
    """CREDENTIAL_PROVIDER (a callable, its dotted path, or redis-py's CredentialProvider) and
    CREDENTIAL_REFRESH_SECONDS; a provider replaces PASSWORD (there can be only one source)."""
    value = opts.get("credential_provider")
    where = f"OPTIONS[{names.get('credential_provider', 'CREDENTIAL_PROVIDER')!r}]"
    pool = opts.get("pool_kwargs")
    if value is None and isinstance(pool, Mapping) and pool.get("credential_provider") is not None:
        # django-redis users hand redis-py's provider to the pool.
        value = pool["credential_provider"]
        where = f"OPTIONS[{names.get('pool_kwargs', 'CONNECTION_POOL_KWARGS')!r}]"
        where += "['credential_provider']"
    if value is None:
        if "credential_refresh" in opts:
            raise _fail(names["credential_refresh"], "needs OPTIONS['CREDENTIAL_PROVIDER']")
        return
    name = value if isinstance(value, str) else _describe(value)
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise ConfigurationError(f"redoxide: {where} cannot import {name!r}: {exc}") from exc
    if not (callable(value) or callable(getattr(value, "get_credentials", None))):
        raise ConfigurationError(
            f"redoxide: {where} "
            "must be a callable returning credentials, its dotted path, or an object with "
            f"get_credentials(), not {type(value).__name__}",
        )
    if kwargs.get("password") is not None:
        raise ConfigurationError(
            f"redoxide: {where} "
            "replaces PASSWORD and a password in LOCATION: set only one of them (the username "
            "may stay, for providers that return a bare token)",
        )
    refresh = opts.get("credential_refresh", DEFAULT_REFRESH)
    if (
        isinstance(refresh, bool)
        or not isinstance(refresh, (int, float))
        or not math.isfinite(refresh)
        or not 1 <= refresh <= 86400
    ):
        raise _fail(
            names.get("credential_refresh", "CREDENTIAL_REFRESH_SECONDS"),
            f"must be a number of seconds from 1 to 86400, not {refresh!r}",
        )
    kwargs["credential_provider"] = CredentialProvider(
        value, name, float(refresh), kwargs.get("username")
    )


class _Unusable(Exception):
    """The provider returned something that is not credentials (says what, never the value)."""


def _text(value: Any, what: str) -> str:
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            raise _Unusable(f"a {what} that is not UTF-8") from None
    if not isinstance(value, str):
        raise _Unusable(f"a {what} of type {type(value).__name__}")
    if not value:
        raise _Unusable(f"an empty {what}")
    return value


def normalize(result: Any, username: str | None) -> tuple[str | None, str, float | None]:
    """The provider's answer as (username, password, seconds until it expires or None)."""
    expires_in = None
    if isinstance(result, Mapping):
        if "password" not in result and "token" not in result:
            raise _Unusable("a mapping without 'password'")
        password = result["password"] if "password" in result else result["token"]
        username = result.get("username") or username
        if result.get("expires_in") is not None:
            expires_in = result["expires_in"]
        elif result.get("expires_at") is not None:
            expires_at = result["expires_at"]
            if isinstance(expires_at, datetime):  # Azure's expires_on, boto's Expiration
                expires_at = expires_at.timestamp()
            if isinstance(expires_at, bool) or not isinstance(expires_at, (int, float)):
                raise _Unusable(f"an expiry of type {type(expires_at).__name__}")
            expires_in = expires_at - time.time()
        if expires_in is not None and (
            isinstance(expires_in, bool) or not isinstance(expires_in, (int, float))
        ):
            raise _Unusable(f"an expiry of type {type(expires_in).__name__}")
    elif isinstance(result, (str, bytes)):
        password = result
    elif isinstance(result, (tuple, list)) and len(result) in (1, 2):
        password = result[-1]
        if len(result) == 2 and result[0]:
            username = result[0]
    else:
        raise _Unusable(type(result).__name__)
    user = None if username is None else _text(username, "username")
    return user, _text(password, "password"), expires_in


class _Fetcher:
    """The thread that calls one provider and keeps its ``Credentials`` cell current."""

    def __init__(self, spec: CredentialProvider) -> None:
        self.spec = spec
        self.cell = _redoxide.Credentials()
        self._closed = False
        track(self)
        atexit.register(self.close)
        self._start()

    def _start(self) -> None:
        threading.Thread(target=self._run, name="redoxide-credentials", daemon=True).start()

    def after_fork(self) -> None:
        """A forked child has the credentials but not the thread: start its own."""
        self.cell.reopen()
        self._start()

    def close(self) -> None:
        self._closed = True
        self.cell.close()

    def _call(self) -> Any:
        provider = self.spec.provider
        get = getattr(provider, "get_credentials", None)
        return get() if callable(get) else provider()

    def fetch(self) -> float | None:
        """Call the provider once; the time until the next call, or None if it failed."""
        where = f"OPTIONS['CREDENTIAL_PROVIDER'] ({self.spec.name})"
        try:
            username, password, expires_in = normalize(self._call(), self.spec.username)
        except _Unusable as exc:
            message = f"{where} returned {exc}; it must return {_SHAPES}"
        except BaseException as exc:  # the user's code: reported, never raised on this thread
            message = f"{where} raised {type(exc).__name__}"
            # Its text may quote what it fetched: only at DEBUG, for whoever asks for it.
            logger.debug("%s", message, exc_info=True)
        else:
            self.cell.set(username, password)
            if expires_in is None:
                return self.spec.refresh
            return max(1.0, min(self.spec.refresh, expires_in * _EARLY))
        logger.warning("%s; the current credentials (if any) stay in use", message)
        self.cell.fail(message)
        return None

    def _run(self) -> None:
        next_at = 0.0  # fetch at once: the first connection waits for it
        last = -math.inf
        backoff = 1.0
        while not self._closed:
            asked = self.cell.wait_for_request(max(0.0, next_at - time.monotonic()))
            if self._closed:
                return
            now = time.monotonic()
            if not asked and now < next_at:
                continue
            if asked and now - last < _MIN_GAP:
                time.sleep(_MIN_GAP - (now - last))
            last = time.monotonic()
            lifetime = self.fetch()
            if lifetime is None:
                next_at, backoff = last + backoff, min(backoff * 2, _BACKOFF_MAX)
            else:
                next_at, backoff = last + lifetime, 1.0


_fetchers: Registry[_Fetcher] = Registry()


def credentials_for(spec: CredentialProvider | None) -> Any:
    """The process' ``Credentials`` cell of a provider (its thread started on first use), or
    None without one."""
    if spec is None:
        return None
    return _fetchers.get(spec, lambda: _Fetcher(spec)).cell
