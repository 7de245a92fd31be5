"""TLS options (``rediss://`` / ``valkeys://``), named as redis-py and django-redis name them.

OPTIONS (or django-redis' ``CONNECTION_POOL_KWARGS``, in lower case) may hold:

- ``SSL_CA_CERTS``: path of a PEM file of the CA certificates to trust instead of the bundled
  web roots (``SSL_CA_DATA``: the PEM text itself);
- ``SSL_CERTFILE`` and ``SSL_KEYFILE``: paths of the client certificate and its unencrypted
  key (PEM), for servers that require client certificates (``tls-auth-clients yes``);
- ``SSL_CERT_REQS``: ``"required"`` (the default) verifies the server's certificate;
  ``"none"`` (or ``None``, or ``ssl.CERT_NONE``) turns verification off entirely, which lets
  anyone on the network path impersonate the server;
- ``SSL_CHECK_HOSTNAME``: ``True`` (the default, unlike redis-py) requires the certificate to
  name the host in LOCATION; ``False`` accepts any certificate from a trusted CA.

Files are read once, when the cache is configured, so a missing file is an ImproperlyConfigured
error at startup, not at the first request.
"""

from __future__ import annotations

import os
import ssl
from typing import Any
from urllib.parse import urlsplit

from redoxide.exceptions import ConfigurationError

__all__ = ["TLS_OPTIONS", "tls_settings"]

#: Accepted spellings and the canonical name of each TLS option.
TLS_OPTIONS = {
    "SSL_CA_CERTS": "ssl_ca_certs",
    "SSL_CA_DATA": "ssl_ca_data",
    "SSL_CERTFILE": "ssl_certfile",
    "SSL_KEYFILE": "ssl_keyfile",
    "SSL_CERT_REQS": "ssl_cert_reqs",
    "SSL_CHECK_HOSTNAME": "ssl_check_hostname",
}
_TLS_SCHEMES = frozenset({"rediss", "valkeys"})
_CERT_REQS: dict[Any, bool] = {
    "required": True,
    "optional": True,  # a client always checks a certificate the server sends
    "none": False,
    None: False,
    ssl.CERT_REQUIRED: True,
    ssl.CERT_OPTIONAL: True,
    ssl.CERT_NONE: False,
}


def _fail(where: str, message: str) -> ConfigurationError:
    return ConfigurationError(f"redoxide: {where} {message}")


def _pem_file(option: str, value: Any) -> bytes:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise _fail(option, f"must be the path of a PEM file, not {type(value).__name__}")
    try:
        with open(value, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise _fail(option, f"cannot read {os.fspath(value)!r}: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise _fail(option, f"{os.fspath(value)!r} is not a PEM file")
    return data


def tls_settings(
    options: dict[str, Any],
    names: dict[str, str],
    servers: tuple[str, ...],
    query: dict[str, Any] | None = None,
) -> tuple[tuple[str, Any], ...]:
    """Return the Rust client's TLS keyword arguments as sorted (name, value) pairs.

    `options` maps canonical option names to values (the TLS ones are the lower-case names
    in TLS_OPTIONS; "pool_kwargs" is CONNECTION_POOL_KWARGS, whose ssl_* keys count too);
    `names` gives the spelling the user wrote; `query` holds what LOCATION's query gives
    (?ssl_cert_reqs=none...), which OPTIONS may repeat but not contradict.
    """
    given = {key: options[key] for key in TLS_OPTIONS.values() if key in options}
    shown = {key: f"OPTIONS[{names.get(key, key)!r}]" for key in given}
    for key, value in (query or {}).items():
        if key not in TLS_OPTIONS.values():
            continue
        if key in given and _normal(key, given[key]) != _normal(key, value):
            raise _fail(shown[key], f"contradicts ?{key}= in LOCATION; give it in one place")
        if key not in given:
            given[key], shown[key] = value, f"LOCATION's ?{key}="
    pool = options.get("pool_kwargs")
    if isinstance(pool, dict):
        for key in TLS_OPTIONS.values():
            if key in pool:
                where = f"OPTIONS[{names.get('pool_kwargs', 'pool_kwargs')!r}][{key!r}]"
                if key in given:
                    raise _fail(where, f"is also given as {shown[key]}; use one")
                given[key], shown[key] = pool[key], where
    if not given:
        return ()
    if any(urlsplit(s).scheme not in _TLS_SCHEMES for s in servers):
        raise _fail(shown[next(iter(given))], "needs a rediss:// or valkeys:// LOCATION (TLS)")
    kwargs: dict[str, Any] = {}
    _certificates(given, shown, kwargs)
    _verification(given, shown, kwargs)
    return tuple(sorted(kwargs.items()))


#: The words of ssl_cert_reqs, by the ssl module's constants.
_CERT_REQS_WORDS: dict[Any, str] = {
    None: "none",
    ssl.CERT_NONE: "none",
    ssl.CERT_OPTIONAL: "optional",
    ssl.CERT_REQUIRED: "required",
}


def _normal(key: str, value: Any) -> Any:
    """A TLS setting as compared between OPTIONS and LOCATION's query."""
    if key == "ssl_cert_reqs":
        if isinstance(value, str):
            return value.lower()
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return _CERT_REQS_WORDS.get(value, value)
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _certificates(given: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
    """The CA certificates to trust, and the client certificate and key."""
    if "ssl_ca_certs" in given and "ssl_ca_data" in given:
        raise _fail(names["ssl_ca_data"], "cannot be combined with SSL_CA_CERTS")
    if given.get("ssl_ca_certs") is not None:
        kwargs["tls_ca_certs"] = _pem_file(names["ssl_ca_certs"], given["ssl_ca_certs"])
    if given.get("ssl_ca_data") is not None:
        data = given["ssl_ca_data"]
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, bytes) or b"-----BEGIN " not in data:
            raise _fail(names["ssl_ca_data"], "must be PEM text (str or bytes)")
        kwargs["tls_ca_certs"] = data
    certfile, keyfile = given.get("ssl_certfile"), given.get("ssl_keyfile")
    if (certfile is None) != (keyfile is None):
        missing = "ssl_keyfile" if keyfile is None else "ssl_certfile"
        present = "ssl_certfile" if keyfile is None else "ssl_keyfile"
        raise _fail(names[present], f"needs {missing.upper()} too")
    if certfile is not None:
        kwargs["tls_certfile"] = _pem_file(names["ssl_certfile"], certfile)
        kwargs["tls_keyfile"] = _pem_file(names["ssl_keyfile"], keyfile)


def _verification(given: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
    """Whether the server's certificate is verified, and must name the host."""
    if "ssl_cert_reqs" in given:
        reqs = given["ssl_cert_reqs"]
        key = reqs.lower() if isinstance(reqs, str) else reqs
        if (
            isinstance(key, bool)
            or not isinstance(key, (str, int, type(None)))
            or (key not in _CERT_REQS)
        ):
            raise _fail(
                names["ssl_cert_reqs"],
                f'must be "required", "optional", "none" or None, not {reqs!r}',
            )
        if not _CERT_REQS[key]:
            kwargs["tls_verify"] = False
    if "ssl_check_hostname" in given:
        check = given["ssl_check_hostname"]
        if not isinstance(check, bool):
            raise _fail(names["ssl_check_hostname"], f"must be True or False, not {check!r}")
        if not check:
            kwargs["tls_check_hostname"] = False
