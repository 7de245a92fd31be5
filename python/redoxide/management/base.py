"""What every cache_* command shares: finding the alias' cache, ``--json``, and errors that
end the command with a message and a non-zero exit status.

A command works on a cache built from the alias' settings with fail-open turned off
(IGNORE_EXCEPTIONS False, whatever the settings say): an operator must see an outage, not
an empty answer. The cache shares the site's process-wide connections as any other instance.

Exit status: 0 done; 1 a server failed (unreachable, timed out, an error reply), or some node
did not answer; 2 nothing was done (no such alias, not a redoxide cache, settings it refuses,
a FLUSHDB, or a delete that may take another cache's keys, without ``--yes``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from redoxide.checks import backend_class, configuration_errors, redoxide_caches
from redoxide.exceptions import CacheError
from redoxide.options import Config, _names, parse_config
from redoxide.topology.survey import describe

__all__ = [
    "EXIT_FAILED",
    "EXIT_REFUSED",
    "CacheCommand",
    "Target",
    "redoxide_aliases",
    "refuse",
    "render",
    "resolve",
]

EXIT_FAILED = 1
EXIT_REFUSED = 2


def refuse(message: str) -> CommandError:
    """An error for a command that did nothing (exit status 2)."""
    return CommandError(message, returncode=EXIT_REFUSED)


@dataclass(frozen=True)
class Target:
    """The cache a command works on."""

    alias: str
    cache: Any  # a RedisCache built with fail-open off
    config: Config


def _caches() -> dict[str, Any]:
    from django.conf import settings

    return dict(getattr(settings, "CACHES", {}) or {})


def _options_with(options: Any, **values: Any) -> dict[str, Any]:
    """OPTIONS with these options (canonical names) set, however the user spelt them."""
    _, spelt = _names(options)
    given = dict(options or {})
    for canonical, value in values.items():
        given.pop(spelt.get(canonical, canonical), None)
        given[canonical.upper()] = value
    return given


def resolve(alias: str, **options: Any) -> Target:
    """The alias' cache, fail-open off and with any other OPTIONS given (canonical names)."""
    entries = _caches()
    if alias not in entries:
        known = ", ".join(sorted(map(repr, entries))) or "none"
        raise refuse(f"There is no cache {alias!r} in CACHES (aliases: {known}).")
    entry = entries[alias]
    backend = entry.get("BACKEND")
    try:
        cls = backend_class(backend)
    except ImportError as exc:
        raise refuse(f"CACHES[{alias!r}]: BACKEND {backend!r} cannot be imported: {exc}") from None
    if cls is None:
        raise refuse(f"CACHES[{alias!r}] is not a redoxide cache (BACKEND {backend!r}).")
    errors = configuration_errors(alias, entry)
    if errors:
        raise refuse(f"{errors[0].msg} ({errors[0].id})")
    params = {k: v for k, v in entry.items() if k not in ("BACKEND", "LOCATION")}
    params["OPTIONS"] = _options_with(entry.get("OPTIONS"), ignore_exceptions=False, **options)
    location = entry.get("LOCATION", "")
    return Target(alias, cls(location, params), parse_config(location, params["OPTIONS"]))


def redoxide_aliases() -> list[str]:
    """Every alias of a redoxide cache in CACHES."""
    aliases = [alias for alias, _ in redoxide_caches()]
    if not aliases:
        raise refuse("No cache in CACHES has a redoxide BACKEND.")
    return aliases


def _scalar(value: Any) -> str:
    return "-" if value is None else str(value)


def render(value: Any, indent: int = 0) -> Iterator[str]:
    """Lines showing nested dicts and lists, one "name: value" a line, indented by depth."""
    pad = "  " * indent
    items: Iterable[tuple[str, Any]]
    if isinstance(value, dict):
        items = ((f"{name}:", item) for name, item in value.items())
    elif isinstance(value, (list, tuple)):
        items = (("-", item) for item in value)
    else:
        yield f"{pad}{_scalar(value)}"
        return
    for label, item in items:
        if isinstance(item, (dict, list, tuple)) and item:
            yield f"{pad}{label}"
            yield from render(item, indent + 1)
        else:
            yield f"{pad}{label} {_scalar(item)}"


class CacheCommand(BaseCommand):
    """A management command on redoxide caches: ``--json``, errors as CommandError."""

    # The command checks its own cache's settings; the project's other checks are not its
    # business (and may be slow).
    requires_system_checks = ()
    as_json = False

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        # --version N names a key version here, in place of Django's --version (its own).
        kwargs.setdefault("conflict_handler", "resolve")
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="Print JSON instead of text."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.as_json = bool(options.get("as_json"))
        try:
            self.run(**options)
        except ImproperlyConfigured as exc:  # redoxide's ConfigurationError is a CacheError too
            raise refuse(str(exc)) from exc
        except CacheError as exc:
            raise CommandError(describe(exc), returncode=EXIT_FAILED) from exc

    def run(self, **options: Any) -> None:
        """Do the command's work (a CacheError ends it with exit status 1)."""
        raise NotImplementedError

    def emit(self, data: Any, lines: Iterable[str]) -> None:
        """Print data as JSON with --json, else the text lines."""
        if self.as_json:
            self.stdout.write(json.dumps(data, indent=2, default=str))
        else:
            for line in lines:
                self.stdout.write(line)


class EveryAliasCommand(CacheCommand):
    """A CacheCommand on one alias, or on every redoxide cache when none is given."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("alias", nargs="?", help="A cache alias (default: every one).")
        super().add_arguments(parser)

    @staticmethod
    def aliases(options: dict[str, Any]) -> list[str]:
        """The alias asked for, or every redoxide cache's."""
        return [options["alias"]] if options.get("alias") else redoxide_aliases()
