-- The other boards (DESIGN.md "The other boards"): live listeners, the flash sale and the
-- marketplace's popular items. Each has its own topic, incoming table and raw events (0015,
-- 0016, 0017); this file holds what they share.
--
-- The event-time rule of the listen contract (0002), as functions, for the boards' own
-- validation: an RFC 3339 string with an offset, or integer epoch milliseconds.
CREATE FUNCTION IF NOT EXISTS toplist_json_time AS (raw, key) -> multiIf(
    JSONType(raw, key) = 'String' AND match(
        JSONExtractString(raw, key),
        '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$'
    ),
        parseDateTime64BestEffortOrNull(JSONExtractString(raw, key), 3, 'UTC'),
    JSONType(raw, key) IN ('Int64', 'UInt64') AND JSONExtractInt(raw, key) BETWEEN 0 AND 7258118399999,
        fromUnixTimestamp64Milli(JSONExtractInt(raw, key), 'UTC'),
    NULL
);

-- Why a field fails that rule ('' when it holds a valid time).
CREATE FUNCTION IF NOT EXISTS toplist_json_time_problem AS (raw, key) -> multiIf(
    JSONType(raw, key) NOT IN ('String', 'Int64', 'UInt64'),
        concat(key, ': missing, or neither a string nor an integer'),
    toplist_json_time(raw, key) IS NULL AND JSONType(raw, key) = 'String',
        concat(key, ': not an RFC 3339 time with offset'),
    toplist_json_time(raw, key) IS NULL,
        concat(key, ': epoch milliseconds out of range'),
    ''
);

-- Why a field is not a string of min_len..max_len bytes ('' when it is).
CREATE FUNCTION IF NOT EXISTS toplist_json_string_problem AS (raw, key, min_len, max_len) -> multiIf(
    JSONType(raw, key) != 'String', concat(key, ': missing or not a string'),
    length(JSONExtractString(raw, key)) NOT BETWEEN min_len AND max_len,
        concat(key, ': must be ', toString(min_len), ' to ', toString(max_len), ' bytes'),
    ''
);

-- Published snapshots of every other board, as chart_entries/chart_snapshots (0006) are for
-- the charts: entries first, the registry row last, readers follow registry rows only.
-- A board's entries are keyed by scope (e.g. city:sf), metric (e.g. views) and window; score
-- is the metric, and `extra` holds the figures an entry carries beside it (the approximate
-- distinct buyers of a product, say). `stats` holds the board's totals at as_of.
CREATE TABLE IF NOT EXISTS ${database}.board_entries
(
    board LowCardinality(String),
    snapshot_id String,
    scope LowCardinality(String),
    metric LowCardinality(String),
    window_name LowCardinality(String),
    rank UInt32,
    item_id String,
    score Int64,
    extra Map(LowCardinality(String), Float64)
)
ENGINE = MergeTree
ORDER BY (board, snapshot_id, scope, metric, window_name, rank);

CREATE TABLE IF NOT EXISTS ${database}.board_snapshots
(
    board LowCardinality(String),
    snapshot_id String,
    as_of DateTime64(3, 'UTC'),
    policy LowCardinality(String),
    published_at DateTime64(3, 'UTC'),
    entry_count UInt64,
    keep_top UInt32,
    duration_ms UInt32,
    stats Map(LowCardinality(String), Float64)
)
ENGINE = MergeTree
ORDER BY (board, published_at, snapshot_id);

-- The batch counts (0007) of every board share one table; each row says whose batch it is.
ALTER TABLE ${database}.ingest_batches
    ADD COLUMN IF NOT EXISTS board LowCardinality(String) DEFAULT 'charts';
