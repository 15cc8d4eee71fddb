-- The shelves' activity per 10 seconds instead of per minute, so that their 1m and 1h lists
-- lag at most 10–30 s (DESIGN.md; issue 28). A shelf's as_of is aligned down to 10 seconds
-- (models/boards/popular/int_popular__as_of.sql) and every window is a whole number of
-- 10-second buckets, so a window sums whole rows and stays exact. With minute rows, an event
-- waited for its minute to end before any snapshot could count it (p99 65 s from produce to
-- answer at 1,000 events/s). What a row counts is 0017's rule, unchanged
-- (toplist_item_counted: a view once per user, item and 10-minute bucket; an order once per
-- event_id), so the rows of a bucket merge into the same counts as its minute did.
CREATE FUNCTION IF NOT EXISTS toplist_item_bucket AS event_time -> toDateTime(toStartOfInterval(event_time, toIntervalSecond(10)), 'UTC');

CREATE TABLE IF NOT EXISTS ${database}.item_activity_by_10s
(
    bucket DateTime('UTC'),
    city_id String,
    restaurant_id String,
    item_id String,
    type LowCardinality(String),
    counted AggregateFunction(uniqExact, String)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMMDD(bucket)
ORDER BY (bucket, city_id, restaurant_id, item_id, type);

-- What the raw events hold (nothing on a new database), once: a retry of this file after a
-- failure below finds the table filled and adds nothing. Run it with ingestion paused, like
-- `toplist rebuild`; an event stored between this and the view below would be missing from
-- the shelves until `toplist rebuild --board popular`.
INSERT INTO ${database}.item_activity_by_10s
SELECT
    toplist_item_bucket(event_time) AS bucket,
    city_id,
    restaurant_id,
    item_id,
    type,
    uniqExactState(toplist_item_counted(type, user_id, event_time, event_id)) AS counted
FROM ${database}.item_events
WHERE (SELECT count() FROM ${database}.item_activity_by_10s) = 0
GROUP BY bucket, city_id, restaurant_id, item_id, type;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_activity_by_10s_mv
TO ${database}.item_activity_by_10s
AS SELECT
    toplist_item_bucket(event_time) AS bucket,
    city_id,
    restaurant_id,
    item_id,
    type,
    uniqExactState(toplist_item_counted(type, user_id, event_time, event_id)) AS counted
FROM ${database}.item_events
GROUP BY bucket, city_id, restaurant_id, item_id, type;

-- The minute rows are read by nothing now: one table per event fewer to write.
DROP TABLE IF EXISTS ${database}.item_activity_by_minute_mv;

DROP TABLE IF EXISTS ${database}.item_activity_by_minute;

DROP FUNCTION IF EXISTS toplist_item_minute;
