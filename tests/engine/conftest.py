"""Fixtures of the engine's reliability tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import WorkerProc


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """Return the path of this test's execution ledger."""
    return tmp_path / "ledger.jsonl"


@pytest.fixture
def procs() -> Iterator[list[WorkerProc]]:
    """Collect worker subprocesses; kill whatever still runs after the test."""
    started: list[WorkerProc] = []
    yield started
    for proc in started:
        proc.stop()
