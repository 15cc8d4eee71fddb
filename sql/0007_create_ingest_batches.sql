-- Per-batch bookkeeping, so that a load or a consumer batch can say what became of its
-- messages without scanning the raw table: received = accepted + duplicates + rejected.
CREATE TABLE IF NOT EXISTS ${database}.ingest_batches
(
    _batch_id UUID,
    _source LowCardinality(String),
    received_at SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    received SimpleAggregateFunction(sum, UInt64),
    accepted SimpleAggregateFunction(sum, UInt64),
    rejected SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
ORDER BY (_batch_id, _source);

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.ingest_batches_received_mv
TO ${database}.ingest_batches
(
    _batch_id UUID,
    _source LowCardinality(String),
    received_at DateTime64(3, 'UTC'),
    received UInt64,
    accepted UInt64,
    rejected UInt64
)
AS SELECT
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    count() AS received,
    toUInt64(0) AS accepted,
    toUInt64(0) AS rejected
FROM ${database}.listens_incoming
GROUP BY _batch_id, _source;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.ingest_batches_accepted_mv
TO ${database}.ingest_batches
(
    _batch_id UUID,
    _source LowCardinality(String),
    received_at DateTime64(3, 'UTC'),
    received UInt64,
    accepted UInt64,
    rejected UInt64
)
AS SELECT
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    toUInt64(0) AS received,
    count() AS accepted,
    toUInt64(0) AS rejected
FROM ${database}.listens
GROUP BY _batch_id, _source;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.ingest_batches_rejected_mv
TO ${database}.ingest_batches
(
    _batch_id UUID,
    _source LowCardinality(String),
    received_at DateTime64(3, 'UTC'),
    received UInt64,
    accepted UInt64,
    rejected UInt64
)
AS SELECT
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    toUInt64(0) AS received,
    toUInt64(0) AS accepted,
    count() AS rejected
FROM ${database}.listens_dead_letters
GROUP BY _batch_id, _source;
