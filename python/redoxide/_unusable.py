"""A cache whose settings were refused: built all the same, every call raising why.

Django's own cache checks build every cache in CACHES before redoxide's checks can report, so
a bad setting must not raise at construction (``manage.py check`` would crash with a traceback
instead of listing redoxide.E001-E005).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from redoxide.exceptions import ConfigurationError

__all__ = ["make_unusable"]


def make_unusable(cache: Any, exc: BaseException) -> None:
    """Turn a cache whose settings were refused into one whose every call raises why."""
    error = exc if isinstance(exc, ConfigurationError) else ConfigurationError(f"redoxide: {exc}")
    if error is not exc:
        error.__cause__ = exc
    cache.__class__ = _unusable_class(type(cache))
    cache.__dict__.clear()
    cache._config_error = error


_UNUSABLE: dict[type, type] = {}


def _fresh(error: BaseException) -> BaseException:
    """A new exception like `error` for each call: raising the stored one again and again
    would grow its traceback with every call."""
    made = copy.copy(error)
    made.__cause__ = error.__cause__
    made.__traceback__ = None
    return made


def _unusable_class(cls: type) -> type:
    """A subclass of `cls` whose public methods and properties raise the stored error (close()
    and aclose(), which Django calls at the end of every request, do nothing)."""
    made = _UNUSABLE.get(cls)
    if made is not None:
        return made

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise _fresh(self._config_error)

    async def arefuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise _fresh(self._config_error)

    def nothing(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    async def anothing(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    members: dict[str, Any] = {"__repr__": lambda self: f"<{cls.__name__} (unusable settings)>"}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if name in ("close", "aclose"):
            members[name] = anothing if name == "aclose" else nothing
        elif isinstance(attr, property):
            members[name] = property(refuse)
        elif inspect.iscoroutinefunction(attr) or inspect.isasyncgenfunction(attr):
            members[name] = arefuse
        elif callable(attr):
            members[name] = refuse
    made = type(cls.__name__, (cls,), members)
    made.__qualname__ = cls.__qualname__
    made.__module__ = cls.__module__
    _UNUSABLE[cls] = made
    return made
