"""The suspect lane: run a job alone in a child process, so a job that kills its process kills
only itself.

A job whose worker died while running it (stalls > 0) is a suspect: it may be what killed the
worker, or it may have been running beside what did. The worker runs suspects one at a time in a
long-lived child process (`CHILD_ARGV`: `main()` below) that it respawns when it dies. If the child
dies under a suspect, the job is to blame: the worker counts a stall (stall-11.lua), and after
`max_stalls` it ends `stalled`. Jobs that merely ran beside a poison job complete in the child.

The protocol is JSON lines: a header (how to load the tasks), then per job one line down and
`beat`, `progress`, `log`, `checkpoint` and finally one `outcome` line up. The child's stdout is the
protocol; what the task prints goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from ..job import Job, JobState
from ..settings import DEFAULT_CHECKPOINT_MAX_BYTES
from ..task import Registry, Task
from .context import JobContext
from .runner import Kind, Outcome, Runner, error_info

log = logging.getLogger("engine.isolate")

# How the worker starts a child. Not `-m engine.running.isolate`: the engine imports this
# module, so runpy would run a second copy of it as __main__ and warn in every worker's log.
CHILD_ARGV = ("-c", "from engine.running.isolate import main; main()")

BEAT_S = 0.2


class IsolationUnavailable(RuntimeError):
    """The child process could not load the tasks: suspects cannot be isolated here."""


@dataclass(frozen=True, slots=True)
class Isolation:
    """How a child process loads the worker's tasks: `loader(*args)` returns them."""

    # Dotted path of a callable returning the tasks, e.g. "engine.cli.load_tasks".
    loader: str
    args: tuple[str, ...] = ()

    @classmethod
    def for_tasks(cls, tasks: Iterable[Task]) -> Isolation | None:
        """Return an isolation that imports the tasks' modules, or None if one cannot be."""
        modules: set[str] = set()
        for t in tasks:
            fn = t.fn
            module = getattr(fn, "__module__", None)
            if not module or module == "__main__" or "<locals>" in fn.__qualname__:  # type: ignore[union-attr]
                return None
            modules.add(module)
        return cls("engine.cli.load_tasks", (",".join(sorted(modules)),))


def _job_line(
    job: Job, parent_results: dict[str, Any] | None, parent_errors: dict[str, Any] | None = None
) -> bytes:
    return orjson.dumps(
        {
            "id": job.id,
            "task": job.task,
            "queue": job.queue,
            "version": job.version,
            "args": job.args,
            "kwargs": job.kwargs,
            "attempt": job.attempt,
            "token": job.token,
            "options": job.options,
            "parents": job.parents,
            "stalls": job.stalls,
            "checkpoint": job.checkpoint,
            "parent_results": parent_results,
            "parent_errors": parent_errors,
        }
    )


class Lanes:
    """Up to `size` child processes, each running one suspect at a time."""

    def __init__(
        self,
        isolation: Isolation,
        worker_id: str,
        line_limit_bytes: int,
        size: int,
        checkpoint_max_bytes: int = DEFAULT_CHECKPOINT_MAX_BYTES,
    ) -> None:
        self.size = size
        self._all = [
            Lane(isolation, worker_id, line_limit_bytes, checkpoint_max_bytes) for _ in range(size)
        ]
        self._warming: list[asyncio.Task[None]] = []
        self._free: asyncio.Queue[Lane] = asyncio.Queue()
        for lane in self._all:
            self._free.put_nowait(lane)

    async def run(
        self,
        job: Job,
        parent_results: dict[str, Any] | None,
        on_beat: Callable[[], None],
        on_progress: Callable[[float, str], Awaitable[None]],
        on_log: Callable[[str], Awaitable[None]] | None = None,
        on_checkpoint: Callable[[bytes], Awaitable[None]] | None = None,
        parent_errors: dict[str, Any] | None = None,
    ) -> Outcome:
        """Run `job` alone in the first free child (see Lane.run)."""
        lane = await self._free.get()
        try:
            return await lane.run(
                job, parent_results, on_beat, on_progress, on_log, on_checkpoint, parent_errors
            )
        finally:
            self._free.put_nowait(lane)

    def warm(self) -> None:
        """Start the children now, in the background, so that the first suspect need not wait."""
        self._warming = [asyncio.create_task(self._start(lane)) for lane in self._all]

    @staticmethod
    async def _start(lane: Lane) -> None:
        with contextlib.suppress(IsolationUnavailable):  # reported when a suspect needs it
            await lane.start()

    async def close(self) -> None:
        """Kill every child."""
        for task in self._warming:
            task.cancel()
        await asyncio.gather(*self._warming, return_exceptions=True)
        for lane in self._all:
            await lane.close()


class Lane:
    """One child process that runs suspects one at a time; respawned after it dies."""

    def __init__(
        self,
        isolation: Isolation,
        worker_id: str,
        line_limit_bytes: int,
        checkpoint_max_bytes: int = DEFAULT_CHECKPOINT_MAX_BYTES,
    ) -> None:
        self.isolation = isolation
        self.worker_id = worker_id
        self.line_limit_bytes = line_limit_bytes
        self.checkpoint_max_bytes = checkpoint_max_bytes
        self.proc: asyncio.subprocess.Process | None = None
        self._starting = asyncio.Lock()

    async def start(self) -> asyncio.subprocess.Process:
        """Start the child unless it runs; return it."""
        async with self._starting:
            if self.proc is None or self.proc.returncode is not None:
                try:
                    await self._spawn()
                except BaseException:  # cancelled while it loads, or it failed to load
                    await asyncio.shield(self.close())
                    raise
            assert self.proc is not None
            return self.proc

    async def _spawn(self) -> None:
        self.proc = proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *CHILD_ARGV,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=self.line_limit_bytes,
        )
        header = {
            "loader": self.isolation.loader,
            "args": self.isolation.args,
            "path": sys.path,
            "worker_id": self.worker_id,
            "checkpoint_max_bytes": self.checkpoint_max_bytes,
        }
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(orjson.dumps(header) + b"\n")
        ready = await proc.stdout.readline()  # after the child loaded the tasks
        if not ready:
            status = await proc.wait()
            self.proc = None
            raise IsolationUnavailable(
                f"the isolation child exited with status {status} while loading the tasks "
                f"with {self.isolation.loader}{self.isolation.args!r}; see its traceback above"
            )
        log.info("isolation child ready pid=%d tasks=%d", proc.pid, orjson.loads(ready)["ready"])

    async def run(
        self,
        job: Job,
        parent_results: dict[str, Any] | None,
        on_beat: Callable[[], None],
        on_progress: Callable[[float, str], Awaitable[None]],
        on_log: Callable[[str], Awaitable[None]] | None = None,
        on_checkpoint: Callable[[bytes], Awaitable[None]] | None = None,
        parent_errors: dict[str, Any] | None = None,
    ) -> Outcome:
        """Run `job` alone in the child; a child that dies under it gives a `stall` outcome."""
        proc = await self.start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(_job_line(job, parent_results, parent_errors) + b"\n")
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
            while True:
                line = await proc.stdout.readline()
                if not line:
                    status = await proc.wait()
                    self.proc = None
                    message = f"killed its process (exit status {status}) while running alone"
                    log.warning("isolation child died job=%s status=%d", job.id, status)
                    return Outcome(job, Kind.STALL, error=error_info(job, None, "Stalled", message))
                msg = orjson.loads(line)
                if "beat" in msg:
                    on_beat()
                elif "progress" in msg:
                    pct, text = msg["progress"]
                    await on_progress(pct, text)
                elif "log" in msg:
                    if on_log is not None:
                        await on_log(msg["log"])
                elif "checkpoint" in msg:  # its JSON text, checked in the child
                    if on_checkpoint is not None:
                        await on_checkpoint(msg["checkpoint"].encode())
                else:
                    out = msg["outcome"]
                    return Outcome(
                        job,
                        Kind(out["kind"]),
                        result=out["result"].encode(),
                        error=out["error"],
                        delay_s=out["delay_s"],
                        result_ttl_s=out["result_ttl_s"],
                    )
        except BaseException:
            # Stopped (cancelled, shutdown) or a broken pipe: the child may be mid-job.
            await self.close()
            raise

    async def close(self) -> None:
        """Kill the child if it runs."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await proc.wait()
        # asyncio closes the process transport once its output pipe is drained too.
        if proc.stdin is not None:
            proc.stdin.close()
        if proc.stdout is not None:
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(proc.stdout.read(), 1.0)


# ---- the child ---------------------------------------------------------------------------


async def _serve(
    registry: Registry,
    worker_id: str,
    reader: asyncio.StreamReader,
    out: Any,
    checkpoint_max_bytes: int = DEFAULT_CHECKPOINT_MAX_BYTES,
) -> None:
    runner = Runner(registry, None)
    loop = asyncio.get_running_loop()

    def send(msg: dict[str, Any]) -> None:
        out.write(orjson.dumps(msg) + b"\n")
        out.flush()

    while line := await reader.readline():
        spec = orjson.loads(line)
        results = spec.pop("parent_results")
        errors = spec.pop("parent_errors", None)
        job = Job(state=JobState.STARTED, **spec)

        async def read_results(_: Job, results: Any = results) -> dict[str, Any]:
            return dict(results or {})

        async def read_errors(_: Job, errors: Any = errors) -> dict[str, Any]:
            return dict(errors or {})

        async def progress(_: Job, pct: float, text: str) -> None:
            send({"progress": [pct, text]})

        async def log_line(_: Job, text: str) -> None:
            send({"log": text})

        async def checkpoint(_: Job, state: bytes) -> None:
            send({"checkpoint": state.decode()})

        ctx = JobContext(
            job,
            worker_id,
            progress,
            loop,
            read_results,
            log_line,
            _checkpoint=checkpoint,
            checkpoint_max_bytes=checkpoint_max_bytes,
            _errors=read_errors,
        )

        async def beat(ctx: JobContext = ctx) -> None:
            while True:
                await asyncio.sleep(BEAT_S)
                if ctx.touched:
                    ctx.touched = False
                    send({"beat": 1})

        beats = asyncio.create_task(beat())
        try:
            outcome = await runner.run(job, ctx)
        finally:
            beats.cancel()
        send(
            {
                "outcome": {
                    "kind": outcome.kind,
                    "result": outcome.result.decode(),
                    "error": outcome.error,
                    "delay_s": outcome.delay_s,
                    "result_ttl_s": outcome.result_ttl_s,
                }
            }
        )


async def _child_main(out: Any) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 30)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    header = orjson.loads(await reader.readline())
    sys.path[:] = header["path"]
    module, _, name = header["loader"].rpartition(".")
    loader = getattr(importlib.import_module(module), name)
    tasks: list[Task] = loader(*header["args"])
    out.write(orjson.dumps({"ready": len(tasks)}) + b"\n")
    out.flush()
    limit = header.get("checkpoint_max_bytes", DEFAULT_CHECKPOINT_MAX_BYTES)
    await _serve(Registry(tasks), header["worker_id"], reader, out, limit)


def main() -> None:
    """Entry point of the isolation child (CHILD_ARGV)."""
    # The protocol keeps the real stdout; fd 1 becomes stderr so a task's print() cannot
    # corrupt it.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(_child_main(out))


if __name__ == "__main__":
    main()
