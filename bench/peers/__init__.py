"""One adapter module per system, all with the same shape.

Each `bench.peers.<system>` module defines:
  LABEL, PACKAGES (distributions whose versions go in the report), BULK (how bulk enqueue is
  done), CONFIG (the worker configuration used), BURST (whether the worker has a burst mode),
  `worker_argv(bindir, url, burst, index) -> list[str]` (one worker process; pure, no imports of
  the peer's library), and `async def open_sender(url) -> Sender` (imports the library lazily; runs
  only inside that system's own venv, via bench.client).
A Sender has `async one(t_enqueued)`, `async bulk(n)` and `async close()`, and may have
`async settle()`: what the system's own housekeeping does to Redis once the jobs finished, before
its memory is read (Jobsite: the history mirror catches up and the stream is trimmed by it).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Protocol

SYSTEMS = ("jobsite", "minimal", "arq", "saq", "rq", "celery", "dramatiq", "taskiq")

# Which venv runs each system's processes (client and workers). arq needs redis<6.
VENVS = {"jobsite": ".venv", "minimal": ".venv", "arq": ".venv-bench-arq"}
DEFAULT_VENV = ".venv-bench"

# The queue name every adapter uses.
QUEUE = "bench"


class Sender(Protocol):
    async def one(self, t_enqueued: float) -> None: ...

    async def bulk(self, n: int) -> None: ...

    async def close(self) -> None: ...


def load(system: str) -> ModuleType:
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")
    return importlib.import_module(f"bench.peers.{system}")


def venv_python(root: Path, system: str) -> Path:
    return root / VENVS.get(system, DEFAULT_VENV) / "bin" / "python"


def chunks(n: int, size: int) -> list[int]:
    """Split n into batch sizes of at most `size`."""
    return [min(size, n - start) for start in range(0, n, size)]
