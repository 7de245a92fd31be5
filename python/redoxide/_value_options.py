"""The value codec's options (SERIALIZER, COMPRESSOR and their settings, PICKLE_VERSION,
SIGN_VALUES), parsed for ``options``: each codec built from a dotted path, a class or an
instance, given only the settings it takes; a setting no codec would use is refused."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

from django.utils.module_loading import import_string

from redoxide.exceptions import ConfigurationError
from redoxide.serializers import PickleSerializer
from redoxide.signing import signed_serializer

__all__ = ["value_codec"]


def _fail(option: str, message: str) -> ConfigurationError:
    return ConfigurationError(f"redoxide: OPTIONS[{option!r}] {message}")


# django-redis' classes take its whole OPTIONS dict; ours read and write the same bytes.
_DJANGO_REDIS_EQUIVALENTS = {
    **{
        f"django_redis.serializers.{module}.{name}": f"redoxide.serializers.{ours}"
        for module, name, ours in (
            ("pickle", "PickleSerializer", "PickleSerializer"),
            ("json", "JSONSerializer", "JSONSerializer"),
            ("msgpack", "MSGPackSerializer", "MsgPackSerializer"),
        )
    },
    **{
        f"django_redis.compressors.{module}.{name}": f"redoxide.compressors.{ours}"
        for module, name, ours in (
            ("identity", "IdentityCompressor", "IdentityCompressor"),
            ("zlib", "ZlibCompressor", "ZlibCompressor"),
            ("gzip", "GzipCompressor", "GzipCompressor"),
            ("lzma", "LzmaCompressor", "LzmaCompressor"),
            ("lz4", "Lz4Compressor", "Lz4Compressor"),
            ("zstd", "ZStdCompressor", "ZstdCompressor"),
        )
    },
}


def _codec(
    option: str, value: Any, options: dict[str, Any], **kwargs: Any
) -> tuple[Any, frozenset[str]]:
    """Build a SERIALIZER or COMPRESSOR from a dotted path, a class or an instance (django-redis'
    paths map to ours); return it and the names of the arguments it was given.

    A class gets those of `kwargs` (the ones not None) that its constructor takes; a class
    that takes an ``options`` argument, or that can be built no other way, gets the cache's
    OPTIONS dict, as django-redis gives it. An instance is given nothing.
    """
    obj = value
    if isinstance(obj, str):
        path = _DJANGO_REDIS_EQUIVALENTS.get(obj, obj)
        try:
            obj = import_string(path)
        except ImportError as exc:
            raise _fail(option, f"cannot import {value!r}: {exc}") from exc
    if not isinstance(obj, type):
        return obj, frozenset()
    given = {k: v for k, v in kwargs.items() if v is not None}
    try:
        parameters = inspect.signature(obj).parameters
    except (TypeError, ValueError):  # no signature to read: offer everything
        parameters = None
    attempts: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    if parameters is not None:
        named = {
            name
            for name, p in parameters.items()
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            given = {k: v for k, v in given.items() if k in named}
        if "options" in named:
            attempts.append(((), {**given, "options": options}))
    attempts += [((), given), ((), {}), ((options,), {})]
    for args, kw in attempts:
        try:
            made = obj(*args, **kw)
        except TypeError:
            continue
        return made, frozenset(kw) | (frozenset({"options"}) if args else frozenset())
    raise _fail(option, f"cannot instantiate {value!r}")


def _undelivered(option: str, codec: str, value: Any, argument: str) -> ConfigurationError:
    """An option meant for a codec that cannot take it."""
    what = "given as an instance" if not isinstance(value, (str, type)) else f"{value!r}"
    return _fail(
        option,
        f"cannot be applied: {codec} {what} takes no {argument!r} argument (nor the OPTIONS "
        f"dict); nothing would use it. Remove it, or give a {codec} class that takes it",
    )


def _min_length(value: Any) -> int:
    """A compressor's own min_length, where it has a usable one; else 0 (it decides)."""
    own = getattr(value, "min_length", 0)
    return own if isinstance(own, int) and not isinstance(own, bool) and own >= 0 else 0


def value_codec(opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
    """Pickle protocol, serializer, compressor, signing."""
    protocol = opts.get("pickle_protocol")
    if protocol is not None and (
        isinstance(protocol, bool)
        or not isinstance(protocol, int)
        or not -1 <= protocol <= pickle.HIGHEST_PROTOCOL
    ):
        raise _fail(
            names["pickle_protocol"],
            f"must be a pickle protocol from -1 to {pickle.HIGHEST_PROTOCOL}, not {protocol!r}",
        )
    # What django-redis gives a codec class: the OPTIONS dict, as the user spelled it.
    given_options = {names[k]: v for k, v in opts.items()}
    if "serializer" in opts:
        serializer, received = _codec(
            names["serializer"], opts["serializer"], given_options, protocol=protocol
        )
        if not (
            callable(getattr(serializer, "dumps", None))
            and callable(getattr(serializer, "loads", None))
        ):
            raise _fail(names["serializer"], "must have dumps() and loads() methods")
        if protocol is not None and not received & {"protocol", "options"}:
            raise _undelivered(
                names["pickle_protocol"], "SERIALIZER", opts["serializer"], "protocol"
            )
        kwargs["serializer"] = serializer
    elif protocol is not None:
        kwargs["serializer"] = PickleSerializer(protocol=protocol)
    min_length = opts.get("compress_min_length")
    if min_length is not None and (
        isinstance(min_length, bool) or not isinstance(min_length, int) or min_length < 0
    ):
        raise _fail(
            names["compress_min_length"], f"must be a non-negative integer, not {min_length!r}"
        )
    level = opts.get("compress_level")
    if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
        raise _fail(names["compress_level"], f"must be an integer, not {level!r}")
    if "compressor" in opts:
        try:
            compressor, received = _codec(
                names["compressor"],
                opts["compressor"],
                given_options,
                min_length=min_length,
                level=level,
            )
        except ValueError as exc:
            raise _fail(names.get("compress_level", names["compressor"]), str(exc)) from exc
        # is_compressed() is optional: django-redis' compressors have none (their decompress()
        # refuses data they did not write).
        for method in ("compress", "decompress"):
            if not callable(getattr(compressor, method, None)):
                raise _fail(names["compressor"], f"must have a {method}() method")
        if level is not None and not received & {"level", "options"}:
            raise _undelivered(names["compress_level"], "COMPRESSOR", opts["compressor"], "level")
        kwargs["compressor"] = compressor
        # The cache applies the threshold itself, so it holds for every compressor, also one
        # that takes no min_length (a compressor may still decline to compress a value).
        kwargs["compress_min_length"] = (
            min_length if min_length is not None else _min_length(compressor)
        )
    if "sign_values" in opts or "signing_key" in opts:
        signed = signed_serializer(
            kwargs.get("serializer"), opts.get("sign_values", False), opts.get("signing_key"), names
        )
        if signed is not None:
            kwargs["serializer"] = signed
