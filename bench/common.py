"""What every benchmark here shares: medians, child processes with their peak memory, tables."""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from toplist.config import Config


def arguments(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's command line, its module docstring as --help."""
    return argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def side_by_side(measured, baseline, runs: int, warmup: int = 0):
    """Time `measured()` and `baseline()` in turn, `warmup + runs` times each (so a noisy
    moment hits both); return the seconds of each over the last `runs`, and the last results
    of both."""
    measured_s, baseline_s = [], []
    result = expected = None
    for _ in range(warmup + runs):
        started = time.perf_counter()
        result = measured()
        measured_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        expected = baseline()
        baseline_s.append(time.perf_counter() - started)
    return measured_s[warmup:], baseline_s[warmup:], result, expected


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def bench_config(directory: Path, **overrides: object) -> Config:
    """A fresh embedded engine in `directory`, ranking with v1 only (as the baselines do)."""
    return Config.from_env(
        {},
        clickhouse_url=f"chdb://{directory}",
        policies=("v1",),
        **overrides,
    )


def scratch(prefix: str) -> Path:
    """A fresh directory, removed when this process exits (a 50M-event engine is ~2.4 GB);
    TOPLIST_BENCH_KEEP=1 keeps them, to look inside afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"toplist-bench-{prefix}-"))
    if os.environ.get("TOPLIST_BENCH_KEEP") != "1":
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def run_child(module: str, *args: str) -> tuple[dict, int]:
    """Run `python -m module args` alone; return the JSON it printed last and its peak RSS in
    bytes: the `peak_rss_bytes` it reported (`own_peak_rss`), else what os.wait4 says, which
    counts the parent's resident memory at the fork too (the kernel keeps the high-water mark
    across exec), so it overstates a child started by a parent that holds much."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args], stdout=subprocess.PIPE, text=True
    )
    out = process.stdout.read() if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed with exit code {process.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    return result, result.pop("peak_rss_bytes", usage.ru_maxrss * 1024)


def own_peak_rss() -> int:
    """This process's peak resident memory in bytes since it started its program (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def table(title: str, header: list[str], rows: list[list[object]]) -> str:
    cells = [header] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [title]
    for n, row in enumerate(cells):
        lines.append(
            "  ".join(
                value.ljust(width) if i == 0 else value.rjust(width)
                for i, (value, width) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


@contextmanager
def with_broker(brokers: str | None) -> Iterator[str]:
    """The given broker, or the development broker started in a scratch directory."""
    if brokers:
        yield brokers
        return
    from ingest.kafka_broker import start_broker

    broker = start_broker(scratch("kafka") / "kafka")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def wait_for_url(url: str, seconds: float = 60) -> bytes:
    """The body of `url` once it answers (a server starting), polled every 0.2 s."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.read()
        except OSError as error:
            if time.monotonic() > deadline:
                raise SystemExit(f"no answer from {url} within {seconds:g} s: {error}") from error
            time.sleep(0.2)


def create_topics(brokers: str, topics: list[str], partitions: int) -> None:
    """Create the topics, each with `partitions` partitions, on the broker."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=brokers)
    try:
        admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1) for topic in topics]
        )
    finally:
        admin.close()
