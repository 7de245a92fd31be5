"""Which replicas to leave out of the read rotation for a while."""

from __future__ import annotations

import threading
import time
from typing import Any, TypeVar

from redoxide._protocols import ClientLike
from redoxide.exceptions import (
    BusyError,
    CacheError,
    CacheTimeout,
    LoadingError,
    MasterDownError,
    ResponseError,
)
from redoxide.plans import Plan, Step
from redoxide.topology.calls import Call

__all__ = ["REPLICA_DOWN_SECONDS", "ReplicaHealth"]

R = TypeVar("R")

#: How long a replica that failed a read is left out of the read rotation.
REPLICA_DOWN_SECONDS = 5.0


class ReplicaHealth:
    """Replicas that failed lately: skipped for REPLICA_DOWN_SECONDS, then tried again."""

    def __init__(self) -> None:
        self._down: dict[int, float] = {}  # id(replica) -> monotonic time it may be retried
        self._lock = threading.Lock()

    def mark_down(self, replica: Any) -> None:
        self._down[id(replica)] = time.monotonic() + REPLICA_DOWN_SECONDS

    def usable(self, replica: Any) -> bool:
        until = self._down.get(id(replica))
        if until is None:
            return True
        if until <= time.monotonic():
            # Not a plain pop: another thread may have marked it down again since the read.
            with self._lock:
                if self._down.get(id(replica)) == until:
                    del self._down[id(replica)]
            return True
        return False

    def read(self, replica: ClientLike, call: Call[R], fallback: Step) -> Plan[R]:
        """A plan: run `call` on `replica`; if it fails, leave it out for a while and take
        `fallback` (the primary), except after a timeout, whose time is spent already."""
        reply: R
        try:
            reply = yield call.step(replica)
            return reply
        except CacheTimeout:
            self.mark_down(replica)
            raise
        except (LoadingError, MasterDownError, BusyError):
            # A replica loading its data, cut off from its primary, or running a script.
            self.mark_down(replica)
        except ResponseError:
            # The command's own answer (WRONGTYPE, a syntax error, READONLY to a write sent
            # through a read client): the primary would say the same; the replica is fine.
            raise
        except CacheError:
            # A replica that is down or unreachable.
            self.mark_down(replica)
        reply = yield fallback
        return reply
