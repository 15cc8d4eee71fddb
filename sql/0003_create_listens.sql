-- The raw events: the durable source of truth, kept for audit, correction and replay.
-- ReplacingMergeTree on event_id is the safety net; exact counting does not rely on merges
-- (see listen_ids in 0004 and sql/README.md).
CREATE TABLE IF NOT EXISTS ${database}.listens
(
    event_id String,
    song_id String,
    user_id String,
    country LowCardinality(String),
    event_time DateTime64(3, 'UTC'),
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY event_id;

CREATE TABLE IF NOT EXISTS ${database}.listens_dead_letters
(
    raw_message String,
    reason String,
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC')
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(_received_at)
ORDER BY (_received_at, _batch_id);

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_dead_letters_mv
TO ${database}.listens_dead_letters
(
    raw_message String,
    reason String,
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC')
)
AS SELECT
    raw_message,
    reject_reason AS reason,
    _topic,
    _partition,
    _offset,
    _timestamp,
    _source,
    _batch_id,
    _received_at
FROM ${database}.listens_parsed
WHERE reject_reason != '';
