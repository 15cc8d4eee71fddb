-- Corrections on every board that counts events (issue 29): orders and item events are
-- voided as listens are (0008), with `toplist void --board` and POST /internal/corrections.
-- The raw events stay; a voided event stops counting at the next publication.
--
-- A listen's void takes it back out of the bucket sums (-1). The other boards cannot subtract:
-- the sale's sums are taken from the raw orders at each publication, so its staging model
-- leaves the voided ones out; the distinct-buyer (uniqCombined) and item activity (uniqExact)
-- states are sets, from which no member can be taken, so their staging models count again,
-- from the raw events without the voided ones, just the products and the minute x item x type
-- rows that a voided event was counted in (models/staging/toplist/). Nothing is rewritten in
-- place: no mutation, and no moment at which a reader sees a row missing.
CREATE TABLE IF NOT EXISTS ${database}.order_voids
(
    event_id String,
    reason String,
    voided_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY event_id;

CREATE TABLE IF NOT EXISTS ${database}.item_event_voids AS ${database}.order_voids;

-- What an item event counts once, in one place (0017's rule, shared now with the recount):
-- a view once per user, item and 10-minute bucket; an order once per event_id. And the minute
-- its activity row is kept under.
CREATE FUNCTION IF NOT EXISTS toplist_item_counted AS (type, user_id, event_time, event_id) -> if(type = 'view', concat(user_id, '/', toString(toplist_bucket_start(event_time))), event_id);

CREATE FUNCTION IF NOT EXISTS toplist_item_minute AS event_time -> toDateTime(toStartOfMinute(event_time), 'UTC');

-- 0017's view with the shared rule (the same rows as before).
ALTER TABLE ${database}.item_activity_by_minute_mv MODIFY QUERY
SELECT
    toplist_item_minute(event_time) AS minute,
    city_id,
    restaurant_id,
    item_id,
    type,
    uniqExactState(toplist_item_counted(type, user_id, event_time, event_id)) AS counted
FROM ${database}.item_events
GROUP BY minute, city_id, restaurant_id, item_id, type;
