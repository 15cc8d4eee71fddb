"""The charts' publication benchmark (bench/publication.py) still measures what it says: at a
small size, every scenario's snapshot is the same board as the naive query's, and the size
sweep also publishes in a row past the retention (its prunes included). No timing is asserted."""

from __future__ import annotations

from bench_support import run_bench


def test_the_publication_benchmark_publishes_the_same_board_as_the_naive_query():
    run = run_bench(
        "publication", "--sizes", "10k,20k", "--sweep-at", "5k", "--runs", "1", timeout=600
    )
    rows = [
        line.split()
        for line in run.stdout.splitlines()
        if line.split()[:1] in (["events"], ["songs"], ["hot"])
    ]
    assert len(rows) == 5, run.stdout
    for cells in rows:
        assert float(cells[-5]) > 0 and cells[-1] == "yes", run.stdout
    assert float(rows[0][-4]) > 0 and float(rows[1][-4]) > 0, "the size sweep's, in a row"
