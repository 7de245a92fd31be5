"""Support code of the test suite: real servers, the backend under test, sync/async dispatch.

benchmarks/ and scripts/demo.py use support.servers too (they put tests/ on sys.path).
"""
