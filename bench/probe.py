"""In-process recorder that every system's no-op task calls: `hit(t_enqueued)`.

Per process (keyed by os.getpid(), so forked or spawned children of Celery, Dramatiq, RQ and
taskiq each get their own record) it counts calls, keeps the wall time of the first and the last
start and of every MARK_EVERY-th (`marks`: what bench.collect reads a steady rate from) and, when
t_enqueued > 0, the enqueue-to-start latency in seconds. A daemon thread, started lazily on the
first hit, writes `{"pid", "count", "first", "last", "marks", "latencies"}` as JSON to
`$BENCH_PROBE_DIR/<pid>.json` every 50 ms (temp file + os.replace); an atexit hook writes the
final state, so a burst-mode worker that exits right after its last job is still counted.
Standard library only: it is imported by every peer's venv.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time

FLUSH_S = 0.05
# Every MARK_EVERY-th start's time is kept (`marks`).
MARK_EVERY = 100


class _Record:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.marks: list[float] = []
        self.latencies: list[float] = []
        self.dirty = False
        self.lock = threading.Lock()

    def snapshot(self) -> bytes:
        with self.lock:
            self.dirty = False
            data = {
                "pid": self.pid,
                "count": self.count,
                "first": self.first,
                "last": self.last,
                "marks": list(self.marks),
                "latencies": list(self.latencies),
            }
        return json.dumps(data).encode()


_record: _Record | None = None
_start_lock = threading.Lock()


def _write(record: _Record) -> None:
    folder = os.environ.get("BENCH_PROBE_DIR")
    if not folder:
        return
    path = os.path.join(folder, f"{record.pid}.json")
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(record.snapshot())
    os.replace(tmp, path)


def _flusher(record: _Record) -> None:
    while True:
        time.sleep(FLUSH_S)
        if record.dirty:
            _write(record)


def _final_flush() -> None:
    record = _record
    if record is not None and record.pid == os.getpid() and record.dirty:
        _write(record)


def _current() -> _Record:
    global _record
    pid = os.getpid()
    record = _record
    if record is not None and record.pid == pid:
        return record
    with _start_lock:
        if _record is None or _record.pid != pid:
            record = _Record(pid)
            threading.Thread(target=_flusher, args=(record,), daemon=True).start()
            _record = record
        return _record


def hit(t_enqueued: float) -> None:
    """Record one task start; t_enqueued > 0 also records the enqueue-to-start latency."""
    now = time.time()
    record = _current()
    with record.lock:
        if record.count == 0:
            record.first = now
        record.count += 1
        record.last = now
        if record.count % MARK_EVERY == 0:
            record.marks.append(now)
        if t_enqueued > 0:
            record.latencies.append(now - t_enqueued)
        record.dirty = True


atexit.register(_final_flush)
