"""The heap of a long-running process: keep the cyclic garbage collector's full walks rare.

CPython's full collections walk every container object alive. A `runworker` process holds the
objects of Django, the project and its libraries for its whole life, and the mirror holds up to
a batch of events and their jobs at once (up to 200,000 carried in a burst backlog), so under
the default thresholds it ran about one full collection a batch, the mirror's largest single
cost once its queries were fast (docs/benchmarks.md, "The mirror's throughput: a diary").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Collections of the middle generation between two full ones (CPython's default: 10). Young
# collections still run as often as before; a cycle that reaches the old generation waits
# longer to be freed.
FULL_EVERY = 100
# What the interpreter holds frozen of its own before anyone calls gc.freeze (Python 3.12
# starts with a few hundred objects there; 3.13 with none).
FROZEN_AT_START = gc.get_freeze_count()


@contextmanager
def worker_heap() -> Iterator[None]:
    """Freeze the objects alive now and make full collections rarer, for the block.

    The start-up objects (after a collection) move out of the collector's reach (gc.freeze);
    a heap someone froze already (a server that preloads and forks) is left as it is. The
    thresholds and the freeze are undone after the block.
    """
    thresholds = gc.get_threshold()
    freeze = gc.get_freeze_count() <= FROZEN_AT_START
    if freeze:
        gc.collect()
        gc.freeze()
    gc.set_threshold(thresholds[0], thresholds[1], max(thresholds[2], FULL_EVERY))
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()


def _find_malloc_trim() -> Callable[[int], int] | None:
    """Return glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (AttributeError, OSError, TypeError):
        return None
    return trim


_malloc_trim = _find_malloc_trim()


def give_back() -> None:
    """Free cyclic garbage and give the C allocator's free pages back to the system.

    A process that held a large batch keeps its peak size: the allocators keep what was freed
    for reuse; this gives back what it can (docs/benchmarks.md).
    """
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
