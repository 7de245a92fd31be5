"""redoxide's management commands (cache_ping, cache_stats, cache_clear, cache_keys, and check
with the connectivity tag); base.py holds what they share."""
