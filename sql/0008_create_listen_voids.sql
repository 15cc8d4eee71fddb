-- Voided events (fraud, test traffic). The raw rows stay for audit; a void row copies the
-- event's board coordinates so that its materialized view can take the listen back out of
-- the bucket aggregates (-1). `toplist void` inserts only ids that are in `listens` and not
-- voided yet, which makes voiding idempotent.
CREATE TABLE IF NOT EXISTS ${database}.listen_voids
(
    event_id String,
    song_id String,
    country LowCardinality(String),
    event_time DateTime64(3, 'UTC'),
    reason String,
    voided_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY event_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listen_voids_by_10m_mv
TO ${database}.listens_by_10m
(
    bucket_start DateTime('UTC'),
    country LowCardinality(String),
    song_id String,
    listens AggregateFunction(sum, Int64)
)
AS SELECT
    toplist_bucket_start(event_time) AS bucket_start,
    country,
    song_id,
    sumState(toInt64(-1)) AS listens
FROM ${database}.listen_voids
GROUP BY bucket_start, country, song_id;
