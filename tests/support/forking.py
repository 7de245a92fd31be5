"""Forked children for tests: run a function in a child process, and reap it with a bound."""

from __future__ import annotations

import errno
import os
import signal
import time
import warnings
from typing import Any

import pytest

__all__ = ["fd_open", "fork_child", "reap", "spawn"]


def fork_child(child: Any, timeout: float = 60) -> int:
    """Run child() in a forked process; its exit code (it is killed, failing the test, if it
    has not ended after `timeout` s)."""
    return reap(spawn(child), timeout)


def spawn(child: Any) -> int:
    """Fork; the child runs child() and exits with what it returns."""
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock: what the child
        # does after the fork (a Sentinel watcher of its own, say) is what the tests check.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = child()
        finally:
            os._exit(code)
    return pid


def reap(pid: int, timeout: float = 60) -> int:
    """The child's exit code, once it ends; killed (failing the test) after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child did not end within {timeout} s")
        time.sleep(0.01)


def fd_open(fd: int) -> bool:
    """Whether `fd` is an open file descriptor of this process."""
    try:
        os.fstat(fd)
    except OSError as exc:
        assert exc.errno == errno.EBADF
        return False
    return True
