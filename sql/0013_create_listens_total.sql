-- The all-time total per country x song, so that the `all` window reads one row per song
-- instead of every 10-minute bucket ever counted: `all` at as_of is this total less the
-- buckets at or after as_of (models/intermediate/int_listens__windowed.sql).
-- Fed by a materialized view on listens_by_10m itself, so every write to the buckets (new
-- events, voids, crash repairs, the tests' own inserts) reaches the total in the same insert.
-- `toplist rebuild` rebuilds it from the rebuilt buckets, and the crash repair recounts it
-- for the songs a repaired batch touched (toplist/corrections.py).
CREATE TABLE IF NOT EXISTS ${database}.listens_total
(
    country LowCardinality(String),
    song_id String,
    listens AggregateFunction(sum, Int64)
)
ENGINE = AggregatingMergeTree
ORDER BY (country, song_id);

-- What the buckets held before this migration (nothing on a new database), once: a retry
-- of this file after a failure below finds the total filled and adds nothing. Run it with
-- ingestion paused, like `toplist rebuild`; a bucket written between this and the view
-- below would be missing from the total until the next rebuild.
INSERT INTO ${database}.listens_total (country, song_id, listens)
SELECT country, song_id, sumMergeState(listens)
FROM ${database}.listens_by_10m
WHERE (SELECT count() FROM ${database}.listens_total) = 0
GROUP BY country, song_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_total_mv
TO ${database}.listens_total
(
    country LowCardinality(String),
    song_id String,
    listens AggregateFunction(sum, Int64)
)
AS SELECT
    country,
    song_id,
    sumMergeState(listens) AS listens
FROM ${database}.listens_by_10m
GROUP BY country, song_id;
