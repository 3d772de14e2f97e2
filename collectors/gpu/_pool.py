"""A small bounded pool of daemon threads for calls that may hang forever.

:class:`concurrent.futures.ThreadPoolExecutor` joins its (non-daemon) workers
at interpreter exit, so one NVML call stuck in the driver would stop the daemon
from exiting. These workers are daemon threads, their number is fixed, and the
caller (the facade) never queues a second call for a GPU whose previous call is
still outstanding, so stuck calls cannot pile up threads or queue entries.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_STOP = object()


class CallPool:
    """Fixed-size pool of daemon worker threads, started lazily."""

    def __init__(self, workers: int, *, name: str = "nvml") -> None:
        if workers < 1:
            msg = "workers must be >= 1"
            raise ValueError(msg)
        self._max = workers
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self._busy = 0

    @property
    def busy(self) -> int:
        """Calls running or queued right now (stuck ones included)."""
        return self._busy

    @property
    def threads(self) -> int:
        """Worker threads started so far (never more than ``workers``)."""
        return len(self._threads)

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` on a worker; the future carries its result or exception."""
        fut: Future[T] = Future()
        with self._lock:
            if self._closed:
                msg = "pool is closed"
                raise RuntimeError(msg)
            self._busy += 1
            if len(self._threads) < min(self._max, self._busy):
                t = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(t)
                t.start()
        self._queue.put((fut, fn, args))
        return fut

    def close(self) -> None:
        """Stop idle workers; a worker stuck in a call exits when (if) the call returns."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            n = len(self._threads)
        for _ in range(n):
            self._queue.put(_STOP)

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds in total for workers to exit; True if all did."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            fut, fn, args = item
            try:
                if fut.set_running_or_notify_cancel():
                    try:
                        result = fn(*args)
                    except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                        fut.set_exception(exc)
                    else:
                        fut.set_result(result)
            finally:
                with self._lock:
                    self._busy -= 1
