"""The boards' benchmark (bench/boards.py) still measures what it says: at a small size, each
board's publication is non-empty and the same board as its baseline query over the raw events.
No timing is asserted (the figures are the benchmark's to print)."""

from __future__ import annotations

import subprocess
import sys

from toplist.config import PROJECT_ROOT


def test_the_boards_benchmark_publishes_the_same_boards_as_its_baselines():
    run = subprocess.run(
        [sys.executable, "-m", "bench.boards", "--events", "2000", "--runs", "1"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {}
    for line in run.stdout.splitlines():
        cells = line.split()
        if len(cells) > 2 and cells[1] in ("listeners", "sale", "popular"):
            rows[cells[1]] = cells
    assert sorted(rows) == ["listeners", "popular", "sale"], run.stdout
    for board, cells in rows.items():
        entries, same = int(cells[-2].replace(",", "")), cells[-1]
        assert entries > 0 and same == "yes", f"{board}: {run.stdout}"
