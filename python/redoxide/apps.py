"""The Django app ``redoxide`` (add it to INSTALLED_APPS): system checks of the redoxide
caches and the cache_* management commands. The backend itself works without it."""

from __future__ import annotations

from django.apps import AppConfig


class RedoxideConfig(AppConfig):
    """Register redoxide's system checks."""

    name = "redoxide"
    verbose_name = "redoxide"

    def ready(self) -> None:
        from django.core import checks

        from redoxide import checks as ours

        checks.register(ours.check_configuration, ours.TAG, checks.Tags.caches)
        checks.register(
            ours.check_deployment, ours.TAG, checks.Tags.caches, checks.Tags.security, deploy=True
        )
        checks.register(ours.check_connectivity, ours.CONNECTIVITY)
