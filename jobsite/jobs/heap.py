"""The heap of a long-running process: keep the cyclic garbage collector off its start-up objects.

CPython's full collections walk every container object alive. A `runworker` process holds the
objects of Django, the project and its libraries for its whole life, and the mirror's batches
(up to 40,000 events and their jobs at once) make several full collections each: measured at
10 M jobs on PostgreSQL, the collector took 2.1 s of a 9.3 s drain of 300,000 events, 1.15 s of
it in full collections (bench.history_mirror). Frozen, the start-up objects are left out.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the objects alive now (after a collection) for the block; unfreeze them after.

    A heap someone froze already (a server that preloads and forks) is left as it is.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
