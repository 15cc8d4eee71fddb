-- Live listeners (issue 5): START/STOP playback reports, on their own topic and through
-- `toplist load --board listeners`, into the same machinery as listens (0001..0010): an
-- incoming table every source writes, the batch log and done list that make a batch all or
-- nothing, validation in SQL with dead letters, and the batch counts in ingest_batches.
CREATE TABLE IF NOT EXISTS ${database}.playbacks_incoming AS ${database}.listens_incoming;
CREATE TABLE IF NOT EXISTS ${database}.playbacks_incoming_log AS ${database}.listens_incoming_log;
CREATE TABLE IF NOT EXISTS ${database}.playbacks_incoming_done AS ${database}.listens_incoming_done;
CREATE TABLE IF NOT EXISTS ${database}.playbacks_dead_letters AS ${database}.listens_dead_letters;

-- The raw reports, kept for audit and rebuilds. A report is identified by what it says, so a
-- repeated report is one row once the engine merges (the counting below never relies on it).
CREATE TABLE IF NOT EXISTS ${database}.playback_reports
(
    user_id String,
    playback_id String,
    song_id String,
    type LowCardinality(String),
    version UInt64,
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
PARTITION BY toYYYYMM(event_time)
ORDER BY (user_id, playback_id, version, type, event_time);

-- The playback report contract: user_id and playback_id (1-128 bytes), type START, STOP or
-- HEARTBEAT, version a non-negative integer, event_time as for listens, and song_id (1-256
-- bytes) on a START (a STOP or HEARTBEAT may leave it out).
CREATE TABLE IF NOT EXISTS ${database}.playbacks_parsed
(
    user_id String,
    playback_id String,
    song_id String,
    type LowCardinality(String),
    version UInt64,
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

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.playbacks_parsed_mv
TO ${database}.playbacks_parsed
AS
WITH
    isValidJSON(raw_message) AND JSONType(raw_message) = 'Object' AS is_object,
    JSONExtractString(raw_message, 'type') AS parsed_type
SELECT
    if(is_object, JSONExtractString(raw_message, 'user_id'), '') AS user_id,
    if(is_object, JSONExtractString(raw_message, 'playback_id'), '') AS playback_id,
    if(is_object, JSONExtractString(raw_message, 'song_id'), '') AS song_id,
    if(is_object, parsed_type, '') AS type,
    if(is_object, JSONExtractUInt(raw_message, 'version'), 0) AS version,
    if(is_object, toplist_json_time(raw_message, 'event_time'), NULL) AS event_time,
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
FROM ${database}.playbacks_incoming;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.playback_reports_mv
TO ${database}.playback_reports
AS SELECT
    user_id, playback_id, song_id, type, version, assumeNotNull(event_time) AS event_time,
    _topic, _partition, _offset, _timestamp, _source, _batch_id, _received_at
FROM ${database}.playbacks_parsed
WHERE reject_reason = '';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.playbacks_dead_letters_mv
TO ${database}.playbacks_dead_letters
AS SELECT
    raw_message, reject_reason AS reason,
    _topic, _partition, _offset, _timestamp, _source, _batch_id, _received_at
FROM ${database}.playbacks_parsed
WHERE reject_reason != '';

-- Each playback's state, as aggregates that a repeated report cannot change (max, argMax),
-- whatever order the reports arrive in:
-- * state: the (version, is_stop) of its latest START or STOP; at one version a STOP beats
--   a START, so a STOP that arrives before its START keeps the playback closed, and a newer
--   version supersedes an older one;
-- * song_id: the song of its latest START; started_at: when that started;
-- * last_seen: its latest report of any type (for the optional heartbeat expiry).
-- Which playback a user is listening to, and the counts per song, are decided when a board
-- is published (models/listeners/), so each user counts for at most one song.
CREATE TABLE IF NOT EXISTS ${database}.playbacks
(
    user_id String,
    playback_id String,
    state AggregateFunction(max, Tuple(UInt64, UInt8)),
    song_id AggregateFunction(argMax, String, Tuple(UInt8, UInt64, DateTime64(3, 'UTC'), String)),
    started_at AggregateFunction(max, DateTime64(3, 'UTC')),
    last_seen AggregateFunction(max, DateTime64(3, 'UTC'))
)
ENGINE = AggregatingMergeTree
ORDER BY (user_id, playback_id);

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.playbacks_mv
TO ${database}.playbacks
AS SELECT
    user_id,
    playback_id,
    maxState(tuple(if(type = 'HEARTBEAT', toUInt64(0), version), toUInt8(type = 'STOP'))) AS state,
    argMaxState(
        if(type = 'START', song_id, ''),
        tuple(toUInt8(type = 'START'), version, event_time, song_id)
    ) AS song_id,
    maxState(if(type = 'START', event_time, toDateTime64(0, 3, 'UTC'))) AS started_at,
    maxState(event_time) AS last_seen
FROM ${database}.playback_reports
GROUP BY user_id, playback_id;

-- The batch counts (0007) in one view: what the batch received, how much of it is valid (a
-- repeated event is valid too; the board counts it once) and how much was dead-lettered.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.playbacks_batches_mv
TO ${database}.ingest_batches
AS SELECT
    'listeners' AS board,
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    count() AS received,
    countIf(reject_reason = '') AS accepted,
    countIf(reject_reason != '') AS rejected
FROM ${database}.playbacks_parsed
GROUP BY _batch_id, _source;
