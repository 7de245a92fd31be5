"""Django's ``check``, which also runs redoxide's connectivity check when its tag is asked:
``manage.py check --tag redoxide_connectivity``."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.check import Command as DjangoCheck

from redoxide.checks import CONNECTIVITY, connectivity_asked


class Command(DjangoCheck):
    help = f"{DjangoCheck.help} With --tag {CONNECTIVITY}, PING every node of every redoxide cache."

    def handle(self, *app_labels: Any, **options: Any) -> None:
        with connectivity_asked(CONNECTIVITY in (options.get("tags") or ())):
            super().handle(*app_labels, **options)
