-- The buckets summed per UTC week (Monday to Monday), so that the 30-day window reads one row
-- per country, song and whole week inside it, day sums only for its whole days outside those
-- weeks and 10-minute buckets only at its ragged ends (models/intermediate/
-- int_listens__windowed.sql; macros/windows.sql `window_share`): at 10M events over 30 days and
-- as_of a Monday at 04:00, 0.6M week and 0.7M day rows where the day sums alone gave 3.0M.
-- Fed by a materialized view on listens_by_10m itself, like listens_total (0013) and the days
-- (0030), so every write to the buckets (new events, voids, crash repairs) reaches its week in
-- the same insert; `toplist rebuild` rebuilds it from the rebuilt buckets, and the crash repair
-- recounts the weeks a repaired batch touched (toplist/corrections.py).
CREATE TABLE IF NOT EXISTS ${database}.listens_by_week
(
    week DateTime('UTC'),
    country LowCardinality(String),
    song_id String,
    listens AggregateFunction(sum, Int64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(week)
ORDER BY (week, country, song_id);

-- What the buckets held before this migration (nothing on a new database), once: a retry
-- of this file after a failure below finds the weeks filled and adds nothing. Run it with
-- ingestion paused, like `toplist rebuild`; a bucket written between this and the view
-- below would be missing from its week until the next rebuild.
INSERT INTO ${database}.listens_by_week (week, country, song_id, listens)
SELECT toDateTime(toMonday(bucket_start), 'UTC') AS week, country, song_id, sumMergeState(listens)
FROM ${database}.listens_by_10m
WHERE (SELECT count() FROM ${database}.listens_by_week) = 0
GROUP BY week, country, song_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_by_week_mv
TO ${database}.listens_by_week
(
    week DateTime('UTC'),
    country LowCardinality(String),
    song_id String,
    listens AggregateFunction(sum, Int64)
)
AS SELECT
    toDateTime(toMonday(bucket_start), 'UTC') AS week,
    country,
    song_id,
    sumMergeState(listens) AS listens
FROM ${database}.listens_by_10m
GROUP BY week, country, song_id;
