-- Published snapshots. chart_entries holds the rows of every snapshot; chart_snapshots is the
-- registry. The publisher writes all entries first and the registry row last, and readers
-- only follow registry rows, so a snapshot becomes visible whole or not at all.
CREATE TABLE IF NOT EXISTS ${database}.chart_entries
(
    snapshot_id String,
    window_name LowCardinality(String),
    scope LowCardinality(String),
    rank UInt32,
    song_id String,
    listens UInt64
)
ENGINE = MergeTree
ORDER BY (snapshot_id, window_name, scope, rank);

CREATE TABLE IF NOT EXISTS ${database}.chart_snapshots
(
    snapshot_id String,
    as_of DateTime('UTC'),
    policy LowCardinality(String),
    published_at DateTime64(3, 'UTC'),
    entry_count UInt64,
    keep_top UInt32,
    duration_ms UInt32
)
ENGINE = MergeTree
ORDER BY (published_at, snapshot_id);
