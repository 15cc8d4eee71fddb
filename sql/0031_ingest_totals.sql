-- /metrics read every batch ever recorded: its ingest counters summed the whole of
-- ingest_batches (a row per batch and view, kept forever) on every scrape, 13 ms with a day of
-- batches behind them, 319 ms with a month. Now the totals come from a projection of the
-- table grouped by board and source (a few rows a part, kept by the engine through inserts,
-- merges and the crash repair's DELETE of a batch), and the last minute's rate from the
-- granules whose batches arrived in it (a min-max index on received_at: batches are written
-- in the order they arrive). api/health.py runs both; tests/test_monitoring.py keeps them
-- from reading the history again.

-- Both are built for the batches already recorded while this runs (a table of a few rows per
-- batch: seconds for a month of them).

-- AggregatingMergeTree collapses rows in merges, and a DELETE rewrites parts: the projection
-- is rebuilt for the parts either touches (its rows are sums, so rebuilt equals kept).
ALTER TABLE ${database}.ingest_batches
    MODIFY SETTING deduplicate_merge_projection_mode = 'rebuild',
        lightweight_mutation_projection_mode = 'rebuild';

ALTER TABLE ${database}.ingest_batches
    ADD INDEX IF NOT EXISTS received_at_range received_at TYPE minmax GRANULARITY 1;

ALTER TABLE ${database}.ingest_batches MATERIALIZE INDEX received_at_range
    SETTINGS mutations_sync = 1;

ALTER TABLE ${database}.ingest_batches
    ADD PROJECTION IF NOT EXISTS totals_by_board
    (
        SELECT
            board,
            _source,
            sum(received),
            sum(accepted),
            sum(rejected),
            sum(beyond_horizon),
            sum(conflicts)
        GROUP BY board, _source
    );

ALTER TABLE ${database}.ingest_batches MATERIALIZE PROJECTION totals_by_board
    SETTINGS mutations_sync = 1;
