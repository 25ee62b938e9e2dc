"""Gathers the requests that many server threads make at once into one model call."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class Batcher(Generic[Item, Result]):
    """Items submitted from many threads go to one call of `run(items)`: those arriving within
    `window_s` of the first, and those that queued while the previous call ran, at most `max_items`
    at a time. Each submitter gets the result at its own item's position. One worker thread makes
    every call, so `run` never runs twice at once.

    `run` returns one result per item, a failure as an exception in its place. When `run` raises for
    a batch of several items, each item is run alone, so that a failing item fails alone."""

    def __init__(self, run: Callable[[list[Item]], Sequence[Result | Exception]], *, window_s: float = 0.005,
                 max_items: int = 256, name: str = "batcher") -> None:
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        self.run, self.window_s, self.max_items = run, window_s, max_items
        self.calls = 0  # calls of `run`
        self._queue: queue.SimpleQueue[tuple[Item, Future[Result | Exception]] | None] = queue.SimpleQueue()
        self._closed = False
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: Item) -> Result | Exception:
        """Block until `item`'s batch has run; its result, or the exception that stands for it."""
        if self._closed:
            raise RuntimeError("the batcher is closed")
        future: Future[Result | Exception] = Future()
        self._queue.put((item, future))
        return future.result()

    def close(self) -> None:
        """Run what was submitted before, then stop the worker."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()

    def _work(self) -> None:
        while not self._stopping:
            batch = self._gather()
            if batch:
                self._run(batch)

    def _gather(self) -> list[tuple[Item, Future[Result | Exception]]]:
        first = self._queue.get()
        if first is None:
            self._stopping = True
            return []
        batch = [first]
        deadline = time.monotonic() + self.window_s
        while len(batch) < self.max_items:
            try:
                entry = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if entry is None:
                self._stopping = True
                break
            batch.append(entry)
        return batch

    def _run(self, batch: list[tuple[Item, Future[Result | Exception]]]) -> None:
        items = [item for item, _ in batch]
        try:
            try:
                results = self._call(items)
            except Exception as exc:
                results = [exc] if len(items) == 1 else [self._alone(item) for item in items]
        except BaseException as exc:  # the worker is going down: no submitter may wait for ever
            self._closed = self._stopping = True
            for _, future in batch:
                future.set_exception(exc)
            raise
        for (_, future), result in zip(batch, results, strict=True):
            future.set_result(result)

    def _call(self, items: list[Item]) -> list[Result | Exception]:
        self.calls += 1
        results = list(self.run(items))
        if len(results) != len(items):
            raise RuntimeError(f"{len(results)} results for {len(items)} items")
        return results

    def _alone(self, item: Item) -> Result | Exception:
        try:
            return self._call([item])[0]
        except Exception as exc:
            return exc
