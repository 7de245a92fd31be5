"""``manage.py cache_keys [alias] PATTERN [--count N]``: the cache's keys matching a glob
pattern (in its KEY_PREFIX and VERSION), found with SCAN on every primary."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandParser

from redoxide.management.base import CacheCommand, refuse, resolve

DEFAULT_COUNT = 100


def positive(text: str) -> int:
    """argparse type: a positive int."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


class Command(CacheCommand):
    help = (
        "List a redoxide cache's keys matching a glob pattern (as iter_keys finds them: SCAN on "
        "every primary, never KEYS), at most --count of them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "words", nargs="+", metavar="[alias] pattern", help="Alias (default: default)."
        )
        parser.add_argument(
            "--count",
            type=positive,
            default=DEFAULT_COUNT,
            help=f"Show at most this many keys (default {DEFAULT_COUNT}).",
        )
        parser.add_argument(
            "--version", type=int, dest="key_version", help="Key version (default: VERSION)."
        )
        super().add_arguments(parser)

    def run(self, **options: Any) -> None:
        words = options["words"]
        if len(words) > 2:
            raise refuse("Give a pattern, or an alias and a pattern.")
        alias, pattern = (words[0], words[1]) if len(words) == 2 else ("default", words[0])
        count, version = options["count"], options.get("key_version")
        target = resolve(alias)
        keys: list[str] = []
        truncated = False
        for key in target.cache.iter_keys(pattern, version=version):
            if len(keys) == count:
                truncated = True
                break
            keys.append(key)
        report = {"alias": alias, "pattern": pattern, "keys": keys, "truncated": truncated}
        self.emit(report, keys)
        if truncated and not self.as_json:
            self.stderr.write(f"(the first {count} keys shown; more match: raise --count)")
