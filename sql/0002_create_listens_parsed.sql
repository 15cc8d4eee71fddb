-- The one place where the listen event contract (DESIGN.md) is enforced. Each message gets
-- its fields and a reject_reason: empty for a valid event, else the first rule it breaks.
CREATE TABLE IF NOT EXISTS ${database}.listens_parsed
(
    event_id String,
    song_id String,
    user_id String,
    country LowCardinality(String),
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

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_parsed_mv
TO ${database}.listens_parsed
(
    event_id String,
    song_id String,
    user_id String,
    country LowCardinality(String),
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
AS
WITH
    isValidJSON(raw_message) AND JSONType(raw_message) = 'Object' AS is_object,
    JSONType(raw_message, 'event_id') AS event_id_type,
    JSONType(raw_message, 'song_id') AS song_id_type,
    JSONType(raw_message, 'user_id') AS user_id_type,
    JSONType(raw_message, 'country') AS country_type,
    JSONType(raw_message, 'event_time') AS event_time_type,
    JSONExtractString(raw_message, 'event_id') AS parsed_event_id,
    JSONExtractString(raw_message, 'song_id') AS parsed_song_id,
    JSONExtractString(raw_message, 'user_id') AS parsed_user_id,
    JSONExtractString(raw_message, 'country') AS parsed_country,
    JSONExtractString(raw_message, 'event_time') AS event_time_text,
    JSONExtractInt(raw_message, 'event_time') AS event_time_millis,
    -- RFC 3339 with an explicit offset; the parser alone would accept hour 25 or no offset.
    match(
        event_time_text,
        '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$'
    ) AS event_time_text_ok,
    multiIf(
        event_time_type = 'String' AND event_time_text_ok,
            parseDateTime64BestEffortOrNull(event_time_text, 3, 'UTC'),
        event_time_type = 'Int64' AND event_time_millis BETWEEN 0 AND 7258118399999,
            fromUnixTimestamp64Milli(event_time_millis, 'UTC'),
        NULL
    ) AS parsed_event_time
SELECT
    if(is_object, parsed_event_id, '') AS event_id,
    if(is_object, parsed_song_id, '') AS song_id,
    if(is_object, parsed_user_id, '') AS user_id,
    if(is_object, parsed_country, '') AS country,
    if(is_object, parsed_event_time, NULL) AS event_time,
    multiIf(
        NOT is_object, 'not a JSON object',
        event_id_type != 'String', 'event_id: missing or not a string',
        length(parsed_event_id) NOT BETWEEN 1 AND 128, 'event_id: must be 1 to 128 bytes',
        song_id_type != 'String', 'song_id: missing or not a string',
        length(parsed_song_id) NOT BETWEEN 1 AND 256, 'song_id: must be 1 to 256 bytes',
        user_id_type != 'String', 'user_id: missing or not a string',
        parsed_user_id = '', 'user_id: must not be empty',
        country_type != 'String', 'country: missing or not a string',
        NOT match(parsed_country, '^[A-Z]{2}$'), 'country: must be an upper-case ISO 3166-1 alpha-2 code',
        event_time_type NOT IN ('String', 'Int64', 'UInt64'), 'event_time: missing, or neither a string nor an integer',
        parsed_event_time IS NULL AND event_time_type = 'String', 'event_time: not an RFC 3339 time with offset',
        parsed_event_time IS NULL, 'event_time: epoch milliseconds out of range',
        ''
    ) AS reject_reason,
    raw_message,
    _topic,
    _partition,
    _offset,
    _timestamp,
    _source,
    _batch_id,
    _received_at
FROM ${database}.listens_incoming;
