"""The ingest benchmark (bench/ingest.py) still runs and measures what it says: at a tiny size,
every way in (the Kafka consumer, `toplist load`, the chain from stored lines) ends with the same
raw events, the engine's plain JSONEachRow floor is measured beside them, and `toplist load` of
each other board is measured too. No timing is asserted (the figures are the benchmark's to
print)."""

from __future__ import annotations

from bench_support import run_bench

BOARD_MODES = ("load:listeners", "load:sale", "load:popular")


def test_the_ingest_benchmark_runs_every_way_in_to_the_same_raw_events(kafka_bootstrap):
    run = run_bench(
        "ingest", "--events", "3000", "--runs", "1", "--partitions", "2",
        "--brokers", kafka_bootstrap,
    )  # fmt: skip
    rows = {cells[0]: cells for cells in map(str.split, run.stdout.splitlines()) if cells}
    assert "raw rows the same in every chain mode: yes" in run.stdout, run.stdout
    # Every way in for listens, and `toplist load` for each other board (as many events).
    for mode in ("kafka", "load", "insert-select", "jsoneachrow", *BOARD_MODES):
        assert mode in rows, run.stdout
        events_per_second, raw_rows = rows[mode][1], rows[mode][-1]
        assert float(events_per_second.replace(",", "")) > 0, run.stdout
        assert int(raw_rows.replace(",", "")) >= 3000 * 0.5, f"{mode}: {run.stdout}"
