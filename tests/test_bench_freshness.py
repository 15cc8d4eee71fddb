"""The freshness benchmark (bench/freshness.py) still runs: at a tiny size, through the real
broker and `toplist serve --ingest`, every board's markers are produced, served and timed. No
timing is asserted (the figures are the benchmark's to print)."""

from __future__ import annotations

import subprocess
import sys

from toplist.config import PROJECT_ROOT


def test_the_freshness_benchmark_sees_every_boards_markers(kafka_bootstrap):
    run = subprocess.run(
        [sys.executable, "-m", "bench.freshness", "--seconds", "3", "--charts-every", "5",
         "--brokers", kafka_bootstrap],  # fmt: skip
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {cells[0]: cells for cells in map(str.split, run.stdout.splitlines()) if cells}
    for board in ("charts", "sale", "listeners", "popular"):
        markers, seen = int(rows[board][1]), int(rows[board][2])
        assert markers >= 5 and seen == markers, f"{board}: {seen} of {markers} markers served"
