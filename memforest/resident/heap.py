"""The heap policy a host may switch on for a large resident memory: what the library does to its
host process's garbage collector and pages, and only when asked (`MemForestConfig.heap_freeze_nodes`,
`MemForestConfig.huge_pages`; both off by default, on in the harness, the benchmarks and the CLI,
which own their process: `memforest.config.with_host_policy`).

A loaded memory of 10^4 sessions is millions of small objects. The cyclic collector would rescan all
of them at every full collection (~100 ms at 10^4 sessions, one write in ten), so a large memory's
objects are moved into the permanent generation (`gc.freeze`) once loaded and after each operation;
the heap is then advised into huge pages in the background (`memforest.resident.hugepages`)."""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Protocol

from memforest.errors import StoreError
from memforest.resident.hugepages import advise_heap_later

log = logging.getLogger(__name__)


class Warmable(Protocol):
    """A source of trees not read yet that can read its large ones ahead (`StoreTreeSource`)."""

    def to_warm(self, min_leaves: int, share: float) -> int: ...

    def warm(self, min_leaves: int, share: float) -> int: ...


def is_large(nodes: int, freeze_nodes: int | None) -> bool:
    """Whether a memory of `nodes` tree nodes is large enough for the policy (off when None or 0)."""
    return bool(freeze_nodes) and nodes >= freeze_nodes  # type: ignore[operator]


def collect_before_load(freeze_nodes: int | None) -> None:
    """Collect the garbage that exists now, so a freeze after the load keeps it out of the permanent
    generation (nothing when the policy is off)."""
    if freeze_nodes:
        gc.collect()


def freeze_if_large(nodes: int, freeze_nodes: int | None) -> bool:
    """After an operation on a large memory, collect what is not frozen yet and freeze what survives:
    the nodes of trees the operation read on demand and of the version it made join the permanent
    generation, so no later full collection rescans them. The collection traverses only what was made
    since the last freeze, so it costs what the operation allocated, not what the memory holds.
    Whether it ran."""
    if not is_large(nodes, freeze_nodes):
        return False
    gc.collect()
    gc.freeze()
    return True


def settle_if_large(user: str, nodes: int, freeze_nodes: int | None, huge_pages: bool,
                    source: Warmable | None, warm_leaves: int, warm_share: float) -> threading.Thread | None:
    """After a load: keep the cyclic collector off a large memory (the collection before the load kept
    the garbage that existed then out of the permanent generation, and the load leaves no cycles, so
    its objects are frozen as they are) and back it with huge pages. A memory whose trees are read on
    demand first has its large entity and scene trees read (`warm_leaves`, `warm_share`), in the same
    background thread, which is returned (None when there is nothing to do in the background)."""
    large = is_large(nodes, freeze_nodes)

    def collapsed(report: object) -> None:
        log.debug("huge pages after loading %s: %s", user, report)
    if source is not None and not source.to_warm(warm_leaves, warm_share):
        source = None
    if large:
        gc.freeze()
    if source is None:
        if large and huge_pages:  # collapsed in the background: the open does not wait for the kernel
            return advise_heap_later(collapsed)
        return None
    warming = source

    def settle() -> None:
        t = time.perf_counter()
        try:
            read = warming.warm(warm_leaves, warm_share)
        except StoreError as e:  # the tree is read, and the damage reported, by the operation reaching it
            log.debug("memforest: trees of %s not read ahead: %s", user, e)
            return
        log.debug("memforest: %d trees of %s read ahead in %.2f s", read, user, time.perf_counter() - t)
        if large:
            gc.freeze()
            if huge_pages:
                collapse = advise_heap_later(collapsed)
                if collapse is not None:
                    collapse.join()
    thread = threading.Thread(target=settle, name="memforest-settle", daemon=True)
    thread.start()
    return thread
