-- Times that break the time rule say why (sql/0020's rule, unchanged in what it accepts but
-- for epoch seconds):
-- * a leap second (`23:59:60Z`): RFC 3339 allows second 60, ClickHouse's times (and so
--   Toplist's buckets) have no place for it; the reason says so instead of "not an RFC 3339
--   time";
-- * epoch *seconds* sent where epoch milliseconds are expected: any integer below 10^11
--   (1973-03-03T09:46:40Z in milliseconds) is refused as looking like seconds. Before this, an
--   epoch-seconds time of today was silently counted in January 1970. Integer times from
--   1970 to early 1973 are refused with it; RFC 3339 text still reaches back to 1970.
-- A view keeps the body of each SQL function it calls, so the four parse views are replaced
-- again, with the text of 0020 (MODIFY QUERY swaps a query in one step).

CREATE OR REPLACE FUNCTION toplist_event_time_problem AS (raw, key, received_at, max_future_seconds) -> multiIf(
    JSONType(raw, key) NOT IN ('String', 'Int64', 'UInt64'),
        concat(key, ': missing, or neither a string nor an integer'),
    JSONType(raw, key) = 'String' AND match(
        JSONExtractString(raw, key),
        '^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:60(\\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})$'
    ),
        concat(key, ': a leap second (second 60), which Toplist''s times do not have: send :59.999 instead'),
    JSONType(raw, key) = 'String' AND toplist_json_any_time(raw, key) IS NULL,
        concat(key, ': not an RFC 3339 time with offset'),
    JSONType(raw, key) = 'UInt64'
        OR toplist_json_any_time(raw, key) >= toDateTime64('2106-01-01 00:00:00', 3, 'UTC'),
        concat(key, ': not before 2106-01-01T00:00:00Z, the end of the times Toplist counts'),
    toplist_json_any_time(raw, key) < toDateTime64('1970-01-01 00:00:00', 3, 'UTC'),
        concat(key, ': before 1970-01-01T00:00:00Z, the start of the times Toplist counts'),
    JSONType(raw, key) = 'Int64' AND JSONExtractInt(raw, key) < 100000000000,
        concat(
            key, ': ', toString(JSONExtractInt(raw, key)), ' looks like epoch seconds:',
            ' integer times are epoch milliseconds, from 100000000000 (1973-03-03T09:46:40Z)'
        ),
    toplist_json_any_time(raw, key) > received_at + toIntervalSecond(max_future_seconds),
        concat(
            key, ': more than ', toString(max_future_seconds),
            ' seconds ahead of its arrival (TOPLIST_MAX_FUTURE_SECONDS)'
        ),
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
