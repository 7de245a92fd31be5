"""``manage.py cache_ping [alias]``: PING every node of a redoxide cache (of every one without
an alias), with the round trip, the server's version, its role, and what it offers beyond
every supported server's commands (MSETEX, SET IFEQ, DELIFEQ, DELEX, CLUSTERSCAN, Lua)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.core.management.base import CommandError

from redoxide.management.base import EXIT_FAILED, EveryAliasCommand, resolve
from redoxide.topology.survey import Probe, probe, survey


def _line(answer: Probe) -> str:
    node = answer.node
    if not answer.ok:
        return f"  {node.kind:<8} {node.address:<22} DOWN  {answer.error}"
    rtt = f"{answer.rtt_ms:.3f} ms" if answer.rtt_ms is not None else "-"
    version, role = answer.version or "-", answer.role or "-"
    offers = "-" if answer.offers is None else ", ".join(answer.offers) or "none"
    return f"  {node.kind:<8} {node.address:<22} {rtt:>10}  {version}  {role}  offers: {offers}"


class Command(EveryAliasCommand):
    help = (
        "PING every node of a redoxide cache (every redoxide cache without an alias): round "
        "trip, server version, role and what it offers (MSETEX, SET IFEQ, DELIFEQ, DELEX, "
        "CLUSTERSCAN, Lua). Exits 1 if any node does not answer."
    )

    def run(self, **options: Any) -> None:
        aliases = self.aliases(options)
        report: dict[str, Any] = {}
        lines: list[str] = []
        failed = 0
        for alias in aliases:
            target = resolve(alias)
            found = survey(target.config)
            answers = [probe(node) for node in found.nodes]
            failed += len(found.problems) + sum(not answer.ok for answer in answers)
            report[alias] = {
                "topology": found.topology,
                "nodes": [answer.as_dict() for answer in answers],
                "problems": found.problems,
            }
            lines.extend(self._text(alias, found.topology, answers, found.problems))
        self.emit(report, lines)
        if failed:
            raise CommandError(f"{failed} node(s) or lookups failed.", returncode=EXIT_FAILED)

    @staticmethod
    def _text(
        alias: str, topology: str, answers: list[Probe], problems: list[str]
    ) -> Iterator[str]:
        yield f"{alias} ({topology})"
        for answer in answers:
            yield _line(answer)
        for problem in problems:
            yield f"  problem: {problem}"
