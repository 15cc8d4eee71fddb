"""The freshness benchmark (bench/freshness.py) still runs: at a tiny size, through the real
broker and `toplist serve --ingest`, every board's markers are produced, served and timed. No
timing is asserted (the figures are the benchmark's to print)."""

from __future__ import annotations

from bench_support import run_bench


def test_the_freshness_benchmark_sees_every_boards_markers(kafka_bootstrap):
    run = run_bench(
        "freshness", "--seconds", "3", "--charts-every", "5", "--brokers", kafka_bootstrap
    )
    rows = {cells[0]: cells for cells in map(str.split, run.stdout.splitlines()) if cells}
    for board in ("charts", "sale", "listeners", "popular"):
        markers, seen = int(rows[board][1]), int(rows[board][2])
        assert markers >= 5 and seen == markers, f"{board}: {seen} of {markers} markers served"
