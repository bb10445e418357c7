"""The bounded, ordered parallel map every pool of the package runs its work through (a tree
listed on threads, images on loky processes or Dask).  No shardsmith imports."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def _result(item: Any, future: Any) -> Any:
    return future.result()


def in_order(submit: Callable[[Any], Any], items: Iterable, window: int,
             take: Callable[[Any, Any], Any] = _result) -> Iterator:
    """``submit(item)`` for every item, the results of the futures it returns in item order,
    lazily.  The next item is submitted only once the oldest of ``window`` waiting futures is
    taken, so what the pool holds stays bounded whichever side is slower.  ``take(item,
    future)`` gets a result (by default ``future.result()``: a message may name the item).

    Nothing is cancelled when the consumer stops early or a result raises: cancelling a
    loky future can leave its manager thread dead and the workers running.  The futures left
    run out, and the pool's owner ends them (a thread pool's exit waits, ``WorkerPool`` kills
    its workers)."""
    waiting: collections.deque = collections.deque()
    for item in items:
        waiting.append((item, submit(item)))
        if len(waiting) >= window:
            yield take(*waiting.popleft())
    while waiting:
        yield take(*waiting.popleft())
