"""A small Django project that uses redoxide as its cache (see scripts/demo.py)."""
