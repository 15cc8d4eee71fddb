"""The boards' benchmark (bench/boards.py) still measures what it says: at a small size, each
board's publication is non-empty and the same board as its baseline query over the raw events.
No timing is asserted (the figures are the benchmark's to print)."""

from __future__ import annotations

from bench_support import run_bench


def test_the_boards_benchmark_publishes_the_same_boards_as_its_baselines():
    run = run_bench("boards", "--events", "2000", "--runs", "1", timeout=300)
    rows = {}
    for line in run.stdout.splitlines():
        cells = line.split()
        if len(cells) > 2 and cells[1] in ("listeners", "sale", "popular"):
            rows[cells[1]] = cells
    assert sorted(rows) == ["listeners", "popular", "sale"], run.stdout
    for board, cells in rows.items():
        entries, same = int(cells[-2].replace(",", "")), cells[-1]
        assert entries > 0 and same == "yes", f"{board}: {run.stdout}"
