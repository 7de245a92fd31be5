"""A credential provider whose answer a test changes (as a secrets manager's would), counting
its calls and the threads it was called on; and traffic that records every failed call."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any


class Holder:
    """What the provider returns now."""

    def __init__(self) -> None:
        self.answer: Any = None
        self.calls = 0
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self) -> Any:
        with self.lock:
            self.calls += 1
            self.threads.add(threading.current_thread().name)
            answer = self.answer
        if isinstance(answer, BaseException):
            raise answer
        return answer


#: The provider for settings that name it by dotted path (support.rotation.provider).
provider = Holder()


def wait_until(check: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Poll `check` until it holds (a bound for a loaded host, not a timing assertion)."""
    import time

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.01)


class Traffic:
    """Sync calls from `threads` threads and async calls from `tasks` tasks on one cache, until
    stopped; every failed call is kept, and every call counted."""

    def __init__(self, cache: Any, *, threads: int = 4, tasks: int = 8) -> None:
        self.cache = cache
        self.failures: list[BaseException] = []
        self.calls = 0
        #: Calls made by each sync thread and each async task.
        self.by_worker: dict[str, int] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers = [
            threading.Thread(target=self._sync, args=(i,), daemon=True) for i in range(threads)
        ]
        self._workers.append(threading.Thread(target=self._async, args=(tasks,), daemon=True))
        self._tasks = tasks

    def _count(self, worker: str, failure: BaseException | None = None) -> None:
        with self._lock:
            self.calls += 1
            self.by_worker[worker] = self.by_worker.get(worker, 0) + 1
            if failure is not None:
                self.failures.append(failure)

    def _sync(self, i: int) -> None:
        key = f"sync:{i}"
        while not self._stop.is_set():
            try:
                self.cache.set(key, i)
                assert self.cache.get(key) == i
                self._count(key)
            except Exception as exc:  # kept and asserted on by the test
                self._count(key, exc)

    def _async(self, tasks: int) -> None:
        async def one(i: int) -> None:
            key = f"async:{i}"
            while not self._stop.is_set():
                try:
                    await self.cache.aset(key, i)
                    assert await self.cache.aget(key) == i
                    self._count(key)
                except Exception as exc:  # kept and asserted on by the test
                    self._count(key, exc)

        async def main() -> None:
            await asyncio.gather(*(one(i) for i in range(tasks)))

        asyncio.run(main())

    @property
    def workers(self) -> int:
        return len(self._workers) - 1 + self._tasks

    def __enter__(self) -> Traffic:
        for worker in self._workers:
            worker.start()
        return self

    def wait_calls(self, more: int) -> None:
        """Wait until `more` calls have been made from now, by every worker at least one (a
        starved thread on a loaded host is waited for, not missed)."""
        with self._lock:
            target = self.calls + more
            start = dict(self.by_worker)

        def done() -> bool:
            with self._lock:
                each = len(self.by_worker) == self.workers and all(
                    n > start.get(w, 0) for w, n in self.by_worker.items()
                )
                return each and self.calls >= target

        wait_until(done, what=f"{more} more calls, from every worker")

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(30)


def clients_of(server: Any) -> dict[int, dict[str, str]]:
    """CLIENT LIST as {id: fields}, redis-cli's own connection left out."""
    found = {}
    for line in server.cli("CLIENT", "LIST").splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if fields.get("name") != "redis-cli" and fields.get("cmd") != "client|list":
            found[int(fields["id"])] = fields
    return found


def answer_next(holder: Holder, cell: Any, answer: Any) -> None:
    """Make the provider answer `answer`, and wait until its next call has been stored."""
    generation = cell.generation
    holder.answer = answer
    wait_until(lambda: cell.generation > generation, what="the provider's next call")
