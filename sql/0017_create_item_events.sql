-- The marketplace's popular items (issue 5): item views and orders, on their own topic and
-- through `toplist load --board popular`, into the same machinery as listens (see 0015).
CREATE TABLE IF NOT EXISTS ${database}.item_events_incoming AS ${database}.listens_incoming;
CREATE TABLE IF NOT EXISTS ${database}.item_events_incoming_log AS ${database}.listens_incoming_log;
CREATE TABLE IF NOT EXISTS ${database}.item_events_incoming_done AS ${database}.listens_incoming_done;
CREATE TABLE IF NOT EXISTS ${database}.item_events_dead_letters AS ${database}.listens_dead_letters;

CREATE TABLE IF NOT EXISTS ${database}.item_events
(
    event_id String,
    item_id String,
    restaurant_id String,
    city_id String,
    type LowCardinality(String),
    user_id String,
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
PARTITION BY toYYYYMMDD(event_time)
ORDER BY event_id;

-- The item event contract: event_id, restaurant_id, city_id and user_id 1-128 bytes, item_id
-- 1-256 bytes, type view or order, event_time as for listens.
CREATE TABLE IF NOT EXISTS ${database}.item_events_parsed
(
    event_id String,
    item_id String,
    restaurant_id String,
    city_id String,
    type LowCardinality(String),
    user_id String,
    event_time Nullable(DateTime64(3, 'UTC')),
    reject_reason String,
    raw_message String,
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC')
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_events_parsed_mv
TO ${database}.item_events_parsed
AS
WITH isValidJSON(raw_message) AND JSONType(raw_message) = 'Object' AS is_object
SELECT
    if(is_object, JSONExtractString(raw_message, 'event_id'), '') AS event_id,
    if(is_object, JSONExtractString(raw_message, 'item_id'), '') AS item_id,
    if(is_object, JSONExtractString(raw_message, 'restaurant_id'), '') AS restaurant_id,
    if(is_object, JSONExtractString(raw_message, 'city_id'), '') AS city_id,
    if(is_object, JSONExtractString(raw_message, 'type'), '') AS type,
    if(is_object, JSONExtractString(raw_message, 'user_id'), '') AS user_id,
    if(is_object, toplist_json_time(raw_message, 'event_time'), NULL) AS event_time,
    multiIf(
        NOT is_object, 'not a JSON object',
        toplist_json_string_problem(raw_message, 'event_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'event_id', 1, 128),
        toplist_json_string_problem(raw_message, 'item_id', 1, 256) != '',
            toplist_json_string_problem(raw_message, 'item_id', 1, 256),
        toplist_json_string_problem(raw_message, 'restaurant_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'restaurant_id', 1, 128),
        toplist_json_string_problem(raw_message, 'city_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'city_id', 1, 128),
        JSONExtractString(raw_message, 'type') NOT IN ('view', 'order'),
            'type: must be view or order',
        toplist_json_string_problem(raw_message, 'user_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'user_id', 1, 128),
        toplist_json_time_problem(raw_message, 'event_time')
    ) AS reject_reason,
    raw_message,
    _topic,
    _partition,
    _offset,
    _timestamp,
    _source,
    _batch_id,
    _received_at
FROM ${database}.item_events_incoming;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_events_mv
TO ${database}.item_events
AS SELECT
    event_id, item_id, restaurant_id, city_id, type, user_id,
    assumeNotNull(event_time) AS event_time,
    _topic, _partition, _offset, _timestamp, _source, _batch_id, _received_at
FROM ${database}.item_events_parsed
WHERE reject_reason = '';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_events_dead_letters_mv
TO ${database}.item_events_dead_letters
AS SELECT
    raw_message, reject_reason AS reason,
    _topic, _partition, _offset, _timestamp, _source, _batch_id, _received_at
FROM ${database}.item_events_parsed
WHERE reject_reason != '';

-- What each minute counts, per city x restaurant x item and type, as the set of what counts
-- once (uniqExact states, so a repeated event adds nothing and merging minutes never counts
-- anything twice):
-- * a view counts once per user, item and 10-minute bucket (the dedup rule, in one place:
--   the key is the user and the bucket the view falls in);
-- * an order counts once per event_id.
-- A window merges its minutes; the boards are ranked when published (models/popular/).
CREATE TABLE IF NOT EXISTS ${database}.item_activity_by_minute
(
    minute DateTime('UTC'),
    city_id String,
    restaurant_id String,
    item_id String,
    type LowCardinality(String),
    counted AggregateFunction(uniqExact, String)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMMDD(minute)
ORDER BY (minute, city_id, restaurant_id, item_id, type);

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_activity_by_minute_mv
TO ${database}.item_activity_by_minute
AS SELECT
    toDateTime(toStartOfMinute(event_time), 'UTC') AS minute,
    city_id,
    restaurant_id,
    item_id,
    type,
    uniqExactState(
        if(type = 'view', concat(user_id, '/', toString(toplist_bucket_start(event_time))), event_id)
    ) AS counted
FROM ${database}.item_events
GROUP BY minute, city_id, restaurant_id, item_id, type;

-- The catalog the shelves are filtered by when read: an item that is unavailable, deleted or
-- not in the catalog is never shown. The latest row per item wins (`toplist catalog FILE`).
CREATE TABLE IF NOT EXISTS ${database}.catalog_items
(
    item_id String,
    name String,
    price_cents UInt64,
    available Bool,
    deleted Bool,
    updated_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY item_id;

-- The batch counts (0007) in one view: what the batch received, how much of it is valid (a
-- repeated event is valid too; the board counts it once) and how much was dead-lettered.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_events_batches_mv
TO ${database}.ingest_batches
AS SELECT
    'popular' AS board,
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    count() AS received,
    countIf(reject_reason = '') AS accepted,
    countIf(reject_reason != '') AS rejected
FROM ${database}.item_events_parsed
GROUP BY _batch_id, _source;
