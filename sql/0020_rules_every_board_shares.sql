-- The rules every board shares (DESIGN.md "Rules every board shares"), in one place, for
-- every board's way in:
-- * one time rule: event_time, text or epoch milliseconds, from 1970-01-01T00:00:00Z
--   (inclusive) to 2106-01-01T00:00:00Z (exclusive), and no more than max_future_seconds
--   (TOPLIST_MAX_FUTURE_SECONDS, in `settings`) after its arrival. chDB parses and stores
--   years 0001 to 9999 in DateTime64, so the range is checked here, not left to the engine;
--   the DateTime buckets after it (UInt32 seconds) then never wrap.
-- * numbers that cannot overflow: an order's units 1 to 1,000,000 and amount_cents 0 to 10^12;
-- * once per event_id, the first copy wins, on the flash sale and the marketplace as on the
--   charts (0004): a view lets an event into the raw table only when its event_id is new
--   (LIMIT 1 BY within the insert, an anti-join with the ids already accepted), so a later
--   copy, whatever it says, reaches neither the raw table nor anything fed from it (distinct
--   buyers, views), and no merge can bring it back: ReplacingMergeTree keeps the *last* row
--   of a key, so it cannot be what decides.
-- Each parse view is replaced with MODIFY QUERY, which swaps the query in one step.

-- Any time a field holds, before the range rule: RFC 3339 text with an offset (any year the
-- parser takes) or integer epoch milliseconds; NULL when it is neither.
CREATE FUNCTION IF NOT EXISTS toplist_json_any_time AS (raw, key) -> multiIf(
    JSONType(raw, key) = 'String' AND match(
        JSONExtractString(raw, key),
        '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$'
    ),
        parseDateTime64BestEffortOrNull(JSONExtractString(raw, key), 3, 'UTC'),
    JSONType(raw, key) = 'Int64',
        fromUnixTimestamp64Milli(JSONExtractInt(raw, key), 'UTC'),
    NULL
);

-- The event time of a field, NULL outside the range every board counts.
CREATE FUNCTION IF NOT EXISTS toplist_event_time AS (raw, key) -> if(
    toplist_json_any_time(raw, key) >= toDateTime64('1970-01-01 00:00:00', 3, 'UTC')
        AND toplist_json_any_time(raw, key) < toDateTime64('2106-01-01 00:00:00', 3, 'UTC'),
    toplist_json_any_time(raw, key),
    NULL
);

-- Why a field breaks the time rule ('' when it keeps it), for a message received at
-- received_at when times may run max_future_seconds ahead of arrival.
CREATE FUNCTION IF NOT EXISTS toplist_event_time_problem AS (raw, key, received_at, max_future_seconds) -> multiIf(
    JSONType(raw, key) NOT IN ('String', 'Int64', 'UInt64'),
        concat(key, ': missing, or neither a string nor an integer'),
    JSONType(raw, key) = 'String' AND toplist_json_any_time(raw, key) IS NULL,
        concat(key, ': not an RFC 3339 time with offset'),
    JSONType(raw, key) = 'UInt64'
        OR toplist_json_any_time(raw, key) >= toDateTime64('2106-01-01 00:00:00', 3, 'UTC'),
        concat(key, ': not before 2106-01-01T00:00:00Z, the end of the times Toplist counts'),
    toplist_json_any_time(raw, key) < toDateTime64('1970-01-01 00:00:00', 3, 'UTC'),
        concat(key, ': before 1970-01-01T00:00:00Z, the start of the times Toplist counts'),
    toplist_json_any_time(raw, key) > received_at + toIntervalSecond(max_future_seconds),
        concat(
            key, ': more than ', toString(max_future_seconds),
            ' seconds ahead of its arrival (TOPLIST_MAX_FUTURE_SECONDS)'
        ),
    ''
);

-- Why a field is not an integer from min_value to max_value ('' when it is). An integer
-- beyond 64 bits is not an Int64 to the JSON functions, so it is refused too.
CREATE FUNCTION IF NOT EXISTS toplist_json_int_problem AS (raw, key, min_value, max_value) -> if(
    JSONType(raw, key) != 'Int64' OR JSONExtractInt(raw, key) NOT BETWEEN min_value AND max_value,
    concat(key, ': must be an integer from ', toString(min_value), ' to ', toString(max_value)),
    ''
);

-- Listens: the contract of 0002, through the shared functions.
ALTER TABLE ${database}.listens_parsed_mv MODIFY QUERY
WITH isValidJSON(raw_message) AND JSONType(raw_message) = 'Object' AS is_object
SELECT
    if(is_object, JSONExtractString(raw_message, 'event_id'), '') AS event_id,
    if(is_object, JSONExtractString(raw_message, 'song_id'), '') AS song_id,
    if(is_object, JSONExtractString(raw_message, 'user_id'), '') AS user_id,
    if(is_object, JSONExtractString(raw_message, 'country'), '') AS country,
    if(is_object, toplist_event_time(raw_message, 'event_time'), NULL) AS event_time,
    multiIf(
        NOT is_object, 'not a JSON object',
        toplist_json_string_problem(raw_message, 'event_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'event_id', 1, 128),
        toplist_json_string_problem(raw_message, 'song_id', 1, 256) != '',
            toplist_json_string_problem(raw_message, 'song_id', 1, 256),
        JSONType(raw_message, 'user_id') != 'String', 'user_id: missing or not a string',
        JSONExtractString(raw_message, 'user_id') = '', 'user_id: must not be empty',
        JSONType(raw_message, 'country') != 'String', 'country: missing or not a string',
        NOT match(JSONExtractString(raw_message, 'country'), '^[A-Z]{2}$'),
            'country: must be an upper-case ISO 3166-1 alpha-2 code',
        toplist_event_time_problem(raw_message, 'event_time', _received_at, limits.max_future_seconds)
    ) AS reject_reason,
    raw_message,
    _topic,
    _partition,
    _offset,
    _timestamp,
    _source,
    _batch_id,
    _received_at
FROM ${database}.listens_incoming
CROSS JOIN (
    SELECT if(count() = 0, 86400, any(value)) AS max_future_seconds
    FROM ${database}.settings WHERE name = 'max_future_seconds'
) AS limits;

-- Playback reports: the contract of 0015, with the shared time rule.
ALTER TABLE ${database}.playbacks_parsed_mv MODIFY QUERY
WITH
    isValidJSON(raw_message) AND JSONType(raw_message) = 'Object' AS is_object,
    JSONExtractString(raw_message, 'type') AS parsed_type
SELECT
    if(is_object, JSONExtractString(raw_message, 'user_id'), '') AS user_id,
    if(is_object, JSONExtractString(raw_message, 'playback_id'), '') AS playback_id,
    if(is_object, JSONExtractString(raw_message, 'song_id'), '') AS song_id,
    if(is_object, parsed_type, '') AS type,
    if(is_object, JSONExtractUInt(raw_message, 'version'), 0) AS version,
    if(is_object, toplist_event_time(raw_message, 'event_time'), NULL) AS event_time,
    multiIf(
        NOT is_object, 'not a JSON object',
        toplist_json_string_problem(raw_message, 'user_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'user_id', 1, 128),
        toplist_json_string_problem(raw_message, 'playback_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'playback_id', 1, 128),
        parsed_type NOT IN ('START', 'STOP', 'HEARTBEAT'),
            'type: must be START, STOP or HEARTBEAT',
        JSONType(raw_message, 'version') NOT IN ('Int64', 'UInt64')
            OR JSONExtractInt(raw_message, 'version') < 0,
            'version: missing, or not a non-negative integer',
        parsed_type = 'START' AND toplist_json_string_problem(raw_message, 'song_id', 1, 256) != '',
            toplist_json_string_problem(raw_message, 'song_id', 1, 256),
        JSONHas(raw_message, 'song_id')
            AND toplist_json_string_problem(raw_message, 'song_id', 0, 256) != '',
            toplist_json_string_problem(raw_message, 'song_id', 0, 256),
        toplist_event_time_problem(raw_message, 'event_time', _received_at, limits.max_future_seconds)
    ) AS reject_reason,
    raw_message,
    _topic,
    _partition,
    _offset,
    _timestamp,
    _source,
    _batch_id,
    _received_at
FROM ${database}.playbacks_incoming
CROSS JOIN (
    SELECT if(count() = 0, 86400, any(value)) AS max_future_seconds
    FROM ${database}.settings WHERE name = 'max_future_seconds'
) AS limits;

-- Orders: the contract of 0016, with the shared time rule and bounded numbers.
ALTER TABLE ${database}.orders_parsed_mv MODIFY QUERY
WITH isValidJSON(raw_message) AND JSONType(raw_message) = 'Object' AS is_object
SELECT
    if(is_object, JSONExtractString(raw_message, 'event_id'), '') AS event_id,
    if(is_object, JSONExtractString(raw_message, 'order_id'), '') AS order_id,
    if(is_object, JSONExtractString(raw_message, 'product_id'), '') AS product_id,
    if(is_object, JSONExtractString(raw_message, 'buyer_id'), '') AS buyer_id,
    if(is_object, JSONExtractUInt(raw_message, 'units'), 0) AS units,
    if(is_object, JSONExtractUInt(raw_message, 'amount_cents'), 0) AS amount_cents,
    if(is_object, toplist_event_time(raw_message, 'event_time'), NULL) AS event_time,
    multiIf(
        NOT is_object, 'not a JSON object',
        toplist_json_string_problem(raw_message, 'event_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'event_id', 1, 128),
        toplist_json_string_problem(raw_message, 'order_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'order_id', 1, 128),
        toplist_json_string_problem(raw_message, 'product_id', 1, 256) != '',
            toplist_json_string_problem(raw_message, 'product_id', 1, 256),
        toplist_json_string_problem(raw_message, 'buyer_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'buyer_id', 1, 128),
        toplist_json_int_problem(raw_message, 'units', 1, 1000000) != '',
            toplist_json_int_problem(raw_message, 'units', 1, 1000000),
        toplist_json_int_problem(raw_message, 'amount_cents', 0, 1000000000000) != '',
            toplist_json_int_problem(raw_message, 'amount_cents', 0, 1000000000000),
        toplist_event_time_problem(raw_message, 'event_time', _received_at, limits.max_future_seconds)
    ) AS reject_reason,
    raw_message,
    _topic,
    _partition,
    _offset,
    _timestamp,
    _source,
    _batch_id,
    _received_at
FROM ${database}.orders_incoming
CROSS JOIN (
    SELECT if(count() = 0, 86400, any(value)) AS max_future_seconds
    FROM ${database}.settings WHERE name = 'max_future_seconds'
) AS limits;

-- Item events: the contract of 0017, with the shared time rule.
ALTER TABLE ${database}.item_events_parsed_mv MODIFY QUERY
WITH isValidJSON(raw_message) AND JSONType(raw_message) = 'Object' AS is_object
SELECT
    if(is_object, JSONExtractString(raw_message, 'event_id'), '') AS event_id,
    if(is_object, JSONExtractString(raw_message, 'item_id'), '') AS item_id,
    if(is_object, JSONExtractString(raw_message, 'restaurant_id'), '') AS restaurant_id,
    if(is_object, JSONExtractString(raw_message, 'city_id'), '') AS city_id,
    if(is_object, JSONExtractString(raw_message, 'type'), '') AS type,
    if(is_object, JSONExtractString(raw_message, 'user_id'), '') AS user_id,
    if(is_object, toplist_event_time(raw_message, 'event_time'), NULL) AS event_time,
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
        toplist_event_time_problem(raw_message, 'event_time', _received_at, limits.max_future_seconds)
    ) AS reject_reason,
    raw_message,
    _topic,
    _partition,
    _offset,
    _timestamp,
    _source,
    _batch_id,
    _received_at
FROM ${database}.item_events_incoming
CROSS JOIN (
    SELECT if(count() = 0, 86400, any(value)) AS max_future_seconds
    FROM ${database}.settings WHERE name = 'max_future_seconds'
) AS limits;

-- First copy wins on the flash sale: the ids of the orders accepted (as listen_ids, 0004),
-- seeded with the orders already stored.
CREATE TABLE IF NOT EXISTS ${database}.order_ids
(
    event_id String
)
ENGINE = EmbeddedRocksDB
PRIMARY KEY event_id;

INSERT INTO ${database}.order_ids (event_id)
SELECT DISTINCT event_id FROM ${database}.orders;

ALTER TABLE ${database}.orders_mv MODIFY QUERY
SELECT fresh.*
FROM
(
    SELECT * EXCEPT (reject_reason, raw_message)
        REPLACE (assumeNotNull(event_time) AS event_time)
    FROM ${database}.orders_parsed
    WHERE reject_reason = ''
    LIMIT 1 BY event_id
) AS fresh
LEFT ANTI JOIN ${database}.order_ids AS seen ON fresh.event_id = seen.event_id
SETTINGS join_algorithm = 'direct';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.order_ids_mv
TO ${database}.order_ids
AS SELECT event_id FROM ${database}.orders;

-- The same on the marketplace: an item event counts once per event_id, for the item of its
-- first copy.
CREATE TABLE IF NOT EXISTS ${database}.item_event_ids
(
    event_id String
)
ENGINE = EmbeddedRocksDB
PRIMARY KEY event_id;

INSERT INTO ${database}.item_event_ids (event_id)
SELECT DISTINCT event_id FROM ${database}.item_events;

ALTER TABLE ${database}.item_events_mv MODIFY QUERY
SELECT fresh.*
FROM
(
    SELECT * EXCEPT (reject_reason, raw_message)
        REPLACE (assumeNotNull(event_time) AS event_time)
    FROM ${database}.item_events_parsed
    WHERE reject_reason = ''
    LIMIT 1 BY event_id
) AS fresh
LEFT ANTI JOIN ${database}.item_event_ids AS seen ON fresh.event_id = seen.event_id
SETTINGS join_algorithm = 'direct';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_event_ids_mv
TO ${database}.item_event_ids
AS SELECT event_id FROM ${database}.item_events;

-- The batch counts of both: accepted are the new events that reached the raw table, as for
-- listens (0007), so a load reports read = accepted + duplicates + rejected.
ALTER TABLE ${database}.orders_batches_mv MODIFY QUERY
SELECT
    'sale' AS board,
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    count() AS received,
    toUInt64(0) AS accepted,
    countIf(reject_reason != '') AS rejected
FROM ${database}.orders_parsed
GROUP BY _batch_id, _source;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.orders_batches_accepted_mv
TO ${database}.ingest_batches
AS SELECT
    'sale' AS board,
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    toUInt64(0) AS received,
    count() AS accepted,
    toUInt64(0) AS rejected
FROM ${database}.orders
GROUP BY _batch_id, _source;

ALTER TABLE ${database}.item_events_batches_mv MODIFY QUERY
SELECT
    'popular' AS board,
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    count() AS received,
    toUInt64(0) AS accepted,
    countIf(reject_reason != '') AS rejected
FROM ${database}.item_events_parsed
GROUP BY _batch_id, _source;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_events_batches_accepted_mv
TO ${database}.ingest_batches
AS SELECT
    'popular' AS board,
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    toUInt64(0) AS received,
    count() AS accepted,
    toUInt64(0) AS rejected
FROM ${database}.item_events
GROUP BY _batch_id, _source;

-- Sums that cannot overflow: a snapshot's score holds any sum of bounded orders the raw
-- table can keep (Int64 wrapped past 9.2 million orders of 10^12 cents).
ALTER TABLE ${database}.board_entries MODIFY COLUMN score Int128;
