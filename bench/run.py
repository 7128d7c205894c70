"""Orchestrator: `python -m bench.run [--quick] [--jobs N] [--systems a,b,c] [--out PATH]
[--rtt-ms R]`.

Starts one private redis-server on a free loopback port (no persistence), runs every system's
scenarios in turn (FLUSHALL between), writes the markdown report and prints a rich table.
Each system's client and workers run under that system's own interpreter (bench.peers.VENVS).
With --rtt-ms, every system reaches Redis through bench.latency_proxy (R/2 ms each way) and the
report becomes the section "Redis across a network" of --out (default docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from bench import procs, replica_acks, report, sync_enqueue
from bench.collect import BenchError, percentile
from bench.peers import SYSTEMS, venv_python
from bench.scenarios import STEPS, Result, Sizes, SystemBench, best_bulk

ROOT = Path(__file__).resolve().parent.parent


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.1f}"
    text = str(v)
    return json.dumps(text) if " " in text or not text else text


def log(**fields: object) -> None:
    line = " ".join(f"{k}={_value(v)}" for k, v in fields.items())
    print(f"bench {line}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bin/bench", description=__doc__)
    parser.add_argument("--jobs", type=int, help="jobs per throughput run (default 20000)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--out", type=Path, help="report path (default docs/benchmarks.md)")
    parser.add_argument(
        "--only",
        choices=("django-enqueue", "replica-acks"),
        help="run one scenario alone: django-enqueue (enqueue from sync code, every system), "
        "replica-acks (Jobsite with replica_acks=1 beside its default, on a master with one "
        "replica)",
    )
    parser.add_argument(
        "--rtt-ms",
        type=float,
        help="put a latency proxy adding RTT/2 ms each way between every system and Redis",
    )
    args = parser.parse_args(argv)
    if args.rtt_ms is not None and args.rtt_ms < 0:
        parser.error("--rtt-ms must be 0 or more")
    if args.rtt_ms is not None and args.only == "replica-acks":
        parser.error("--only replica-acks runs on loopback: no --rtt-ms")
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for system in args.systems:
        if system not in SYSTEMS:
            parser.error(f"unknown system {system!r}; choose from {','.join(SYSTEMS)}")
    if args.jobs is not None and args.jobs < 10:
        parser.error("--jobs must be at least 10")
    return args


def sizes_for(args: argparse.Namespace) -> Sizes:
    rtt_ms = args.rtt_ms or 0.0
    if args.quick:
        jobs = args.jobs or 2000
        return Sizes(jobs, min(jobs, 500), samples=100, memory=min(jobs, 2000), rtt_ms=rtt_ms)
    jobs = args.jobs or 20_000
    return Sizes(jobs=jobs, one=min(jobs, 5000), samples=1000, memory=10_000, rtt_ms=rtt_ms)


def ping_rtt_ms(url: str, n: int = 300) -> float:
    """Return the p50 of `n` sequential PINGs' round trips on one connection, in ms."""
    client = redis.Redis.from_url(url)
    try:
        client.ping()
        took = []
        for _ in range(n):
            start = time.perf_counter()
            client.ping()
            took.append((time.perf_counter() - start) * 1000)
    finally:
        client.close()
    return percentile(took, 50)


def cpu_s(pid: int) -> float:
    """Return the CPU time (user + system) process `pid` has used so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def network(
    server: procs.RedisServer, rtt_ms: float | None, run_dir: Path, usage: dict[str, float]
) -> Iterator[str]:
    """Yield the URL the systems use: Redis itself, or a latency proxy in front of it.

    A proxy's CPU time and the wall time it served go into `usage` when it stops.
    """
    if rtt_ms is None:
        yield server.url
        return
    port = procs.free_port()
    argv = [sys.executable, "-m", "bench.latency_proxy", "--listen-port", str(port)]
    argv += ["--target-port", str(server.port), "--delay-ms", str(rtt_ms / 2)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proxy = procs.start_group(argv, env, ROOT, run_dir / "latency-proxy.log")
    url = f"redis://127.0.0.1:{port}/0"
    started = time.monotonic()
    try:
        procs.wait_ping(url, proxy)
        log(event="proxy_started", port=port, rtt_ms=rtt_ms, pid=proxy.pid)
        yield url
    finally:
        with contextlib.suppress(OSError, ValueError, IndexError):
            usage["proxy_cpu_s"] = cpu_s(proxy.pid)
            usage["proxy_wall_s"] = time.monotonic() - started
            log(event="proxy_usage", **usage)
        procs.stop_group(proxy)


def run_system(bench: SystemBench) -> dict[str, Result]:
    out: dict[str, Result] = {}
    for step, keys in STEPS:
        started = time.monotonic()
        try:
            step(bench, out)
        except Exception as exc:  # one failed scenario must not stop the others
            message = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
            for key in keys:
                out.setdefault(key, message)
        for key in keys:
            log(system=bench.system, metric=key, value=out[key])
        log(system=bench.system, step=step.__name__, took_s=time.monotonic() - started)
    out["enqueue_bulk"] = best_bulk(out)
    for note in bench.notes:
        log(system=bench.system, note=note)
    if bench.notes:
        out["notes"] = "; ".join(bench.notes)
    return out


def versions(bench: SystemBench) -> dict[str, str]:
    try:
        return {k: str(v) for k, v in bench.client("versions").items()}
    except Exception as exc:
        return {"error": str(exc)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sizes_for(args)
    run_dir = ROOT / "var" / "bench" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run_dir.mkdir(parents=True)
    out = args.out or (
        run_dir / "benchmarks-quick.md" if args.quick else ROOT / "docs/benchmarks.md"
    )
    if args.only == "replica-acks":
        acked, redis_version, notes = replica_acks.run(ROOT, run_dir, sizes, log)
        shown = " ".join(["bin/bench", *(sys.argv[1:] if argv is None else argv)])
        body = replica_acks.markdown(acked, redis_version, shown, notes)
        report.put_section(out, replica_acks.SECTION, body)
        print(body)
        log(event="done", report=out, run_dir=run_dir)
        return 0
    server = procs.start_redis(run_dir)
    sync_n = 500 if args.quick else 5000
    if args.only == "django-enqueue":
        try:
            with network(server, args.rtt_ms, run_dir, {}) as url:
                rows = sync_enqueue.run_all(ROOT, url, sync_n, redis_pid=server.proc.pid)
        finally:
            procs.stop_group(server.proc)
        body = sync_enqueue.markdown(rows, sync_n, args.rtt_ms)
        name = "django-enqueue-peers" if args.rtt_ms is None else "django-enqueue-peers-rtt"
        report.put_section(out, name, body)
        print(body)
        log(event="done", report=out, run_dir=run_dir)
        return 0
    results: dict[str, dict[str, Result]] = {}
    found: dict[str, dict[str, str]] = {}
    # The orchestrator's own client (FLUSHALL, INFO) always talks to Redis directly.
    client = redis.Redis.from_url(server.url)
    pings: dict[str, float] = {}
    try:
        redis_version = str(client.info("server")["redis_version"])
        log(event="redis_started", port=server.port, run_dir=run_dir)
        with network(server, args.rtt_ms, run_dir, pings) as url:
            if args.rtt_ms is not None:
                pings.update(direct=ping_rtt_ms(server.url), proxied=ping_rtt_ms(url))
                direct_us, proxied_us = pings["direct"] * 1000, pings["proxied"] * 1000
                log(event="ping", direct_p50_us=direct_us, proxied_p50_us=proxied_us)
            for system in args.systems:
                bench = SystemBench(
                    ROOT, system, venv_python(ROOT, system), url, run_dir, sizes, client
                )
                found[system] = versions(bench)
                log(system=system, event="start", python=bench.python)
                results[system] = run_system(bench)
            log(event="start", scenario="django-enqueue")
            sync_rows = sync_enqueue.run_all(ROOT, url, sync_n, redis_pid=server.proc.pid)
    finally:
        client.close()
        procs.stop_group(server.proc)
    (run_dir / "results.json").write_text(
        json.dumps(
            {"sizes": vars(sizes), "results": results, "django_enqueue": sync_rows, "ping": pings}
        )
    )
    shown = list(sys.argv[1:] if argv is None else argv)
    context = report.Context(sizes, args.quick, redis_version, found, shown, pings)
    out.parent.mkdir(parents=True, exist_ok=True)
    sync_body = sync_enqueue.markdown(sync_rows, sync_n, args.rtt_ms)
    if args.rtt_ms is not None:
        body = report.markdown(results, context) + "\n" + sync_body
        report.put_section(out, report.RTT_SECTION, report.demote(body))
    else:
        old = out.read_text() if out.exists() else ""
        out.write_text(report.with_sections(report.markdown(results, context), old))
        report.put_section(out, "django-enqueue-peers", sync_body)
    report.print_rich(results, context)
    log(event="done", report=out, run_dir=run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
