-- country x song x 10-minute bucket counts, fed only by events that are new to `listens`.
-- A sum rather than a count, so that voiding an event (0008) can take it back out.
-- Windows are multiples of 10 minutes and as_of is aligned to the bucket, so summing whole
-- buckets gives exact window counts. Global is the sum over countries, done in dbt.
-- The bucket rule, in one place: every aggregate, rebuild and as_of alignment calls it.
-- (A function is global to the server, not to a database; every Toplist database shares it.)
CREATE FUNCTION IF NOT EXISTS toplist_bucket_start AS (t) ->
    toDateTime(toStartOfInterval(t, INTERVAL 10 MINUTE), 'UTC');

CREATE TABLE IF NOT EXISTS ${database}.listens_by_10m
(
    bucket_start DateTime('UTC'),
    country LowCardinality(String),
    song_id String,
    listens AggregateFunction(sum, Int64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(bucket_start)
ORDER BY (bucket_start, country, song_id);

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_by_10m_mv
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
    sumState(toInt64(1)) AS listens
FROM ${database}.listens
GROUP BY bucket_start, country, song_id;
