"""Jobsite with writes acknowledged by a replica (`replica_acks=1`) beside its default.

    bin/bench --only replica-acks [--quick] [--jobs N] [--out PATH]

A private master (`--repl-diskless-sync-delay 0`) with one replica, both on loopback; each
variant runs bench.scenarios' own steps against the master: enqueue one at a time (no worker),
bulk enqueue then one worker draining it (throughput, round trips and commands per job), and an
idle worker's latency. The default's writes replicate too; it only does not wait for them. The
variant's settings reach its client and worker through BENCH_JOBSITE_SET (bench/peers/jobsite.py).
Writes the section "replica-acks" of the report.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis

from bench.collect import BenchError
from bench.peers import venv_python
from bench.peers.jobsite import SETTINGS_ENV
from bench.scenarios import Result, Sizes, SystemBench, enqueue_one, latency, throughput_1
from engine.dev.devserver import RedisServer, start_replica

SECTION = "replica-acks"
# (label, the EngineSettings overrides of the variant as `--set` items, its folder of the run).
VARIANTS = (
    ("jobsite", "", "default"),
    ("jobsite (replica_acks=1)", "replica_acks=1", "replica-acks"),
)
STEPS: tuple[Callable[[SystemBench, dict[str, Result]], None], ...] = (
    enqueue_one,
    throughput_1,
    latency,
)
# (result key, row label, decimals) in the report's order.
ROWS = (
    ("enqueue_one", "Enqueue one at a time (jobs/s)", 0),
    ("rt_enqueue_one", "Round trips per enqueue", 2),
    ("bulk_1", "Enqueue bulk (jobs/s)", 0),
    ("throughput_1", "Throughput 1 proc (jobs/s)", 0),
    ("rt_worker", "Round trips per job, worker", 3),
    ("commands_worker", "Commands per job, worker", 2),
    ("latency_p50_ms", "Latency p50 (ms)", 2),
    ("latency_p99_ms", "Latency p99 (ms)", 2),
)


@contextlib.contextmanager
def jobsite_settings(overrides: str) -> Iterator[None]:
    """Give the Jobsite adapter's client and workers `overrides` for the block."""
    old = os.environ.get(SETTINGS_ENV)
    os.environ[SETTINGS_ENV] = overrides
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(SETTINGS_ENV, None)
        else:
            os.environ[SETTINGS_ENV] = old


def run_variant(bench: SystemBench, log: Callable[..., None]) -> dict[str, Result]:
    """Run the steps for one variant; a failed step leaves its error as its figures."""
    out: dict[str, Result] = {}
    for step in STEPS:
        started = time.monotonic()
        try:
            step(bench, out)
        except Exception as exc:  # one failed step must not stop the others
            message = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
            out.setdefault(step.__name__, message)
        log(system=bench.system, step=step.__name__, took_s=time.monotonic() - started)
    return out


def run(
    root: Path, run_dir: Path, sizes: Sizes, log: Callable[..., None]
) -> tuple[dict[str, dict[str, Result]], str, list[str]]:
    """Run both variants on a fresh master and replica; return their results by label, the
    Redis version and the notes of the runs."""
    master = RedisServer(args=("--repl-diskless-sync-delay", "0")).start()
    replica: RedisServer | None = None
    results: dict[str, dict[str, Result]] = {}
    notes: list[str] = []
    try:
        replica = start_replica(master)
        with redis.Redis.from_url(master.url) as client:
            version = str(client.info("server")["redis_version"])
            log(event="replica_ready", master=master.port, replica=replica.port)
            for label, overrides, folder in VARIANTS:
                (run_dir / folder).mkdir()  # the scenarios name their probe folders alike
                with jobsite_settings(overrides):
                    bench = SystemBench(
                        root, "jobsite", venv_python(root, "jobsite"), master.url,
                        run_dir / folder, sizes, client,
                    )  # fmt: skip
                    results[label] = run_variant(bench, log)
                notes += [f"{label}: {note}" for note in bench.notes]
    finally:
        if replica is not None:
            replica.cleanup()
        master.cleanup()
    return results, version, notes


def _figure(value: Result | None, decimals: int) -> str:
    return f"{value:,.{decimals}f}" if isinstance(value, float) else str(value or "n/a")


def markdown(
    results: dict[str, dict[str, Result]], version: str, command: str, notes: list[str]
) -> str:
    """Return the section: the figures of both variants and their ratio."""
    (base_label, *_), (acked_label, *_) = VARIANTS
    base, acked = results[base_label], results[acked_label]
    lines = [
        "## Replica acks",
        "",
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M')}: a private redis-server {version} "
        "master with one replica, both on loopback (no persistence), Jobsite's default beside "
        "`EngineSettings(replica_acks=1)`, which sends `WAIT 1 1000` behind every script call "
        "that writes, on its connection (engine/transport/acks.py). Both run against the same "
        "master and replica: the default's writes replicate too, it does not wait for them. "
        "Ratio: the variant's figure over the default's. Round trips are the reads Redis "
        "counted (`total_reads_processed`), the replica's acknowledgements (`REPLCONF ACK`) "
        "included: the client itself still makes one round trip per enqueue, its call and "
        "WAIT sent together.",
        "",
        f"| measure | {base_label} | {acked_label} | ratio |",
        "|---|---:|---:|---:|",
    ]
    for key, label, decimals in ROWS:
        one, other = base.get(key), acked.get(key)
        ratio = (
            f"{other / one:.2f}x" if isinstance(one, float) and isinstance(other, float) and one
            else "n/a"
        )  # fmt: skip
        lines.append(
            f"| {label} | {_figure(one, decimals)} | {_figure(other, decimals)} | {ratio} |"
        )
    if notes:
        lines += ["", "Notes: " + "; ".join(notes) + "."]
    return "\n".join(lines) + "\n"
