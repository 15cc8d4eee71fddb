-- The buckets summed per UTC day, so that the long windows (7d and 30d) read one row per
-- country, song and whole day inside them, and 10-minute buckets only at their ragged ends
-- (models/intermediate/int_listens__windowed.sql; macros/windows.sql `window_share`): at
-- 10M events over 30 days, about 2.1M day rows and 0.7M bucket rows instead of 7.2M buckets.
-- Fed by a materialized view on listens_by_10m itself, like listens_total (0013), so every
-- write to the buckets (new events, voids, crash repairs) reaches its day in the same insert;
-- `toplist rebuild` rebuilds it from the rebuilt buckets, and the crash repair recounts the
-- days a repaired batch touched (toplist/corrections.py).
CREATE TABLE IF NOT EXISTS ${database}.listens_by_day
(
    day DateTime('UTC'),
    country LowCardinality(String),
    song_id String,
    listens AggregateFunction(sum, Int64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, country, song_id);

-- What the buckets held before this migration (nothing on a new database), once: a retry
-- of this file after a failure below finds the days filled and adds nothing. Run it with
-- ingestion paused, like `toplist rebuild`; a bucket written between this and the view
-- below would be missing from its day until the next rebuild.
INSERT INTO ${database}.listens_by_day (day, country, song_id, listens)
SELECT toStartOfDay(bucket_start) AS day, country, song_id, sumMergeState(listens)
FROM ${database}.listens_by_10m
WHERE (SELECT count() FROM ${database}.listens_by_day) = 0
GROUP BY day, country, song_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_by_day_mv
TO ${database}.listens_by_day
(
    day DateTime('UTC'),
    country LowCardinality(String),
    song_id String,
    listens AggregateFunction(sum, Int64)
)
AS SELECT
    toStartOfDay(bucket_start) AS day,
    country,
    song_id,
    sumMergeState(listens) AS listens
FROM ${database}.listens_by_10m
GROUP BY day, country, song_id;
