"""Integrations with other packages, each an optional extra (see each module)."""
