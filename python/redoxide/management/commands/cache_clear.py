"""``manage.py cache_clear [alias] [--prefix-only] [--version N] [--pattern GLOB] [--yes]``:
delete a cache's keys. Without a filter it runs the cache's clear(), which is FLUSHDB (unless
CLEAR_PREFIX_ONLY): that deletes every key in the database, other users' too, so it is refused
without --yes.

The filters delete only names of the cache's own shape (``KEY_PREFIX:VERSION:key``, or its
KEY_FUNCTION's), which need no --yes, unless another cache in CACHES on the same database makes
names of that shape too (KEY_PREFIX "site" beside "site:1", say: redoxide.W006): its keys
would go as well, so that too is refused without --yes, naming it. So is a prefix clear of a
cache whose KEY_FUNCTION keeps no version apart from the key (redoxide.W008): every name under
its prefix may be its own, so another writer's keys there would go too."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from redoxide.checks import shared_names, unversioned_clear
from redoxide.management.base import CacheCommand, Target, refuse, resolve
from redoxide.topology.kinds import kind_of

Report = dict[str, Any]


def flushed(target: Target) -> str:
    """What FLUSHDB on the cache empties, in words."""
    return kind_of(target.config).flushed(target.config)


class Command(CacheCommand):
    help = (
        "Delete a redoxide cache's keys: those matching --pattern, of --version, or under its "
        "KEY_PREFIX (--prefix-only); with no filter, clear() (FLUSHDB unless CLEAR_PREFIX_ONLY, "
        "which needs --yes). --yes is needed too when another cache in CACHES makes names of "
        "this one's shape on the same database."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("alias", nargs="?", default="default", help="Default: default.")
        parser.add_argument(
            "--prefix-only",
            action="store_true",
            help="Delete only this cache's keys: the names of its KEY_PREFIX:VERSION:key shape "
            "(or its KEY_FUNCTION's), every version.",
        )
        parser.add_argument(
            "--version", type=int, dest="key_version", help="Delete only keys of this version."
        )
        parser.add_argument("--pattern", help="Delete only keys matching this glob pattern.")
        parser.add_argument(
            "--yes",
            action="store_true",
            help="Really run FLUSHDB when no filter is given, or delete keys another cache "
            "may own (redoxide.W006).",
        )
        super().add_arguments(parser)

    def run(self, **options: Any) -> None:
        alias, pattern, version = options["alias"], options["pattern"], options["key_version"]
        yes = options["yes"]
        if pattern is not None or version is not None:
            target = resolve(alias)
            _refuse_shared(target, False, yes, "--pattern" if pattern is not None else "--version")
            report, text = self._matching(target, pattern or "*", version)
        elif options["prefix_only"]:
            target = resolve(alias, clear_prefix_only=True)
            _refuse_shared(target, True, yes, "--prefix-only")
            report, text = self._prefix(target)
        else:
            target = resolve(alias)
            if target.config.behaviour.clear_prefix_only:  # clear() deletes only the cache's keys
                _refuse_shared(target, True, yes, "CLEAR_PREFIX_ONLY")
                report, text = self._prefix(target)
            else:
                report, text = self._flush(target, yes)
        self.emit(report, [text])

    @staticmethod
    def _matching(target: Target, pattern: str, version: int | None) -> tuple[Report, str]:
        cache = target.cache
        deleted = cache.delete_pattern(pattern, version=version)
        used = cache.version if version is None else version
        report: Report = {"alias": target.alias, "action": "pattern", "pattern": pattern}
        report.update(version=used, deleted=deleted)
        return report, f"Deleted {deleted} key(s) matching {pattern!r}, version {used}."

    @staticmethod
    def _prefix(target: Target) -> tuple[Report, str]:
        target.cache.clear()
        prefix = target.cache.key_prefix
        report = {"alias": target.alias, "action": "prefix", "key_prefix": prefix}
        return report, f"Deleted this cache's keys (KEY_PREFIX {prefix!r}, every version)."

    @staticmethod
    def _flush(target: Target, yes: bool) -> tuple[Report, str]:
        where = flushed(target)
        if not yes:
            raise refuse(
                f"Clearing {target.alias!r} runs FLUSHDB on {where}: every key there goes, not "
                "only this cache's. Pass --yes to do it, or --prefix-only to delete only this "
                "cache's keys."
            )
        target.cache.clear()
        return {"alias": target.alias, "action": "flushdb", "flushed": where}, f"Flushed {where}."


def _refuse_shared(target: Target, clearing: bool, yes: bool, how: str) -> None:
    """Refuse, unless --yes, to delete by this cache's shape where another cache's names can
    be of that shape too (what check --deploy reports as redoxide.W006)."""
    glob = unversioned_clear(target.alias) if clearing else None
    if glob is not None and not yes:
        raise refuse(
            f"Clearing {target.alias!r} with {how} deletes every name matching {glob!r}: its "
            "KEY_FUNCTION's names hold no version apart from the key, so keys another writer "
            "puts there would go as well. Pass --yes to do it anyway (redoxide.W008)."
        )
    shared = shared_names(target.alias, clearing)
    if shared and not yes:
        others = ", ".join(f"CACHES[{other!r}] ({name!r}, say)" for other, _, name in shared)
        raise refuse(
            f"Clearing {target.alias!r} with {how} deletes names of its shape, and {others} on "
            "the same database makes such names too: their keys would go as well. Pass --yes "
            "to do it anyway (redoxide.W006)."
        )
