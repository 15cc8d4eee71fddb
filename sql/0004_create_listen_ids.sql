-- Exactly-once counting. A materialized view fires on every insert, so a redelivered event
-- would reach the aggregates again. listen_ids remembers every event_id ever accepted, in
-- RocksDB on disk (point lookups, memory bounded by RocksDB's caches, not by history).
-- listens_mv lets a valid event into `listens` only when its event_id is new: it drops
-- repeats inside the block (LIMIT 1 BY) and ids already accepted (anti-join, direct lookups).
-- Only rows that reach `listens` are counted, so every event_id counts once.
CREATE TABLE IF NOT EXISTS ${database}.listen_ids
(
    event_id String
)
ENGINE = EmbeddedRocksDB
PRIMARY KEY event_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listen_ids_mv
TO ${database}.listen_ids
(
    event_id String
)
AS SELECT event_id
FROM ${database}.listens;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_mv
TO ${database}.listens
(
    event_id String,
    song_id String,
    user_id String,
    country LowCardinality(String),
    event_time DateTime64(3, 'UTC'),
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC')
)
AS SELECT
    fresh.event_id AS event_id,
    fresh.song_id AS song_id,
    fresh.user_id AS user_id,
    fresh.country AS country,
    fresh.event_time AS event_time,
    fresh._topic AS _topic,
    fresh._partition AS _partition,
    fresh._offset AS _offset,
    fresh._timestamp AS _timestamp,
    fresh._source AS _source,
    fresh._batch_id AS _batch_id,
    fresh._received_at AS _received_at
FROM
(
    SELECT
        event_id,
        song_id,
        user_id,
        country,
        assumeNotNull(event_time) AS event_time,
        _topic,
        _partition,
        _offset,
        _timestamp,
        _source,
        _batch_id,
        _received_at
    FROM ${database}.listens_parsed
    WHERE reject_reason = ''
    LIMIT 1 BY event_id
) AS fresh
LEFT ANTI JOIN ${database}.listen_ids AS seen ON fresh.event_id = seen.event_id
SETTINGS join_algorithm = 'direct';
